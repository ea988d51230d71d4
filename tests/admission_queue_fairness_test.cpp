// The admission queue's fairness (admission_queue.hpp): weighted fair sharing of the memory
// admitted across backlogged groups, a group back from idle, the hold-back for a group of large
// items starved on a shared limit, its bound, and a group full at its own limit that holds nobody
// back. On a ManualClock, so that the polls and the hold-back's bound move only when the test
// advances time.
#include "memcg/core/admission/admission_queue.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "admission_queue_support.hpp"
#include "charge_wait_support.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/admission/reservation.hpp"
#include "memcg/files/files.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;
using testing_queue::Blocker;
using testing_queue::kMs;
using testing_queue::Outcome;
using testing_queue::QueueTest;
using testing_wait::eventually;
using testing_wait::kUnit;
using testing_wait::on_clock;

TEST_F(QueueTest, WeightsShareAdmissionsWhileAllAreBacklogged) {
  testing::Watchdog dog("weights");
  GroupRef z = make("z"), a = make("a"), b = make("b"), c = make("c");
  ASSERT_EQ(set_admit_weight(*a, 100), 0);
  ASSERT_EQ(set_admit_weight(*b, 200), 0);
  ASSERT_EQ(set_admit_weight(*c, 300), 0);
  std::mutex mu;
  std::vector<int> order;
  {
    AdmissionQueueOptions o = one_worker();
    o.max_queued = 4000;
    AdmissionQueue q(ctl, o);
    Blocker blocker;
    ASSERT_EQ(q.submit(*z, blocker.item()), SubmitStatus::kOk);
    ASSERT_TRUE(eventually([&] { return blocker.running.load(); }));
    Group* groups[3] = {a.get(), b.get(), c.get()};
    for (int i = 0; i < 600; ++i)
      for (int gi = 0; gi < 3; ++gi) {
        WorkItem w;
        w.bytes = kUnit;
        w.run = [&mu, &order, gi](Reservation& r) {
          EXPECT_EQ(r.units(), 1);  // admitted before it runs
          std::lock_guard<std::mutex> lock(mu);
          order.push_back(gi);
        };
        ASSERT_EQ(q.submit(*groups[gi], std::move(w)), SubmitStatus::kOk);
      }
    EXPECT_EQ(q.queued(), 1800u);
    blocker.release();
    ASSERT_TRUE(eventually([&] {
      std::lock_guard<std::mutex> lock(mu);
      return order.size() >= 600;
    }));
  }  // the rest is cancelled
  int count[3] = {0, 0, 0};
  for (size_t i = 0; i < 600; ++i) ++count[order[i]];
  // 1/6, 2/6, 3/6 of the first 600 admissions, within 10 %.
  EXPECT_NEAR(count[0], 100, 10);
  EXPECT_NEAR(count[1], 200, 20);
  EXPECT_NEAR(count[2], 300, 30);
  const AdmitQueueStats sa = admit_queue_stats(*a);
  EXPECT_EQ(sa.submitted, 600u);
  EXPECT_EQ(sa.admitted + sa.cancelled, 600u);
  EXPECT_EQ(sa.queued, 0u);
  EXPECT_EQ(sa.running, 0u);
}

// The weights share the memory admitted: with equal weights, a group of items twice as large
// is admitted half as often.
TEST_F(QueueTest, WeightsShareBytesNotAdmissions) {
  testing::Watchdog dog("bytes");
  GroupRef z = make("z"), a = make("a"), b = make("b");
  std::mutex mu;
  std::vector<int> order;
  {
    AdmissionQueueOptions o = one_worker();
    o.max_queued = 1000;
    AdmissionQueue q(ctl, o);
    Blocker blocker;
    ASSERT_EQ(q.submit(*z, blocker.item()), SubmitStatus::kOk);
    ASSERT_TRUE(eventually([&] { return blocker.running.load(); }));
    for (int i = 0; i < 300; ++i)
      for (int gi = 0; gi < 2; ++gi) {
        WorkItem w;
        w.bytes = (gi == 0 ? 2 : 1) * kUnit;
        w.run = [&mu, &order, gi](Reservation&) {
          std::lock_guard<std::mutex> lock(mu);
          order.push_back(gi);
        };
        ASSERT_EQ(q.submit(gi == 0 ? *a : *b, std::move(w)), SubmitStatus::kOk);
      }
    blocker.release();
    ASSERT_TRUE(eventually([&] {
      std::lock_guard<std::mutex> lock(mu);
      return order.size() >= 300;
    }));
  }
  int as = 0;
  for (size_t i = 0; i < 300; ++i) as += order[i] == 0;
  EXPECT_NEAR(as, 100, 5);  // a third of the admissions, half of the memory
}

TEST_F(QueueTest, AGroupBackFromIdleStartsAtTheOthersVirtualTime) {
  testing::Watchdog dog("no banked credit");
  GroupRef z = make("z"), a = make("a"), b = make("b");
  std::mutex mu;
  std::vector<int> order;
  AdmissionQueue q(ctl, one_worker());
  auto item = [&](int gi) {
    WorkItem w;
    w.run = [&mu, &order, gi](Reservation&) {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(gi);
    };
    return w;
  };
  // a alone for 50 admissions: its virtual time moves on while b is idle.
  for (int i = 0; i < 50; ++i) ASSERT_EQ(q.submit(*a, item(0)), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return admit_queue_stats(*a).admitted == 50; }));
  Blocker blocker;
  ASSERT_EQ(q.submit(*z, blocker.item()), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return blocker.running.load(); }));
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(q.submit(*a, item(0)), SubmitStatus::kOk);
    ASSERT_EQ(q.submit(*b, item(1)), SubmitStatus::kOk);
  }
  blocker.release();
  ASSERT_TRUE(eventually([&] { return q.queued() == 0 && q.running() == 0; }));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(order.size(), 90u);
  // b, idle before, does not get its 50 missed admissions now: the two alternate.
  int b_first20 = 0;
  for (size_t i = 50; i < 70; ++i) b_first20 += order[i];
  EXPECT_NEAR(b_first20, 10, 1);
}

// Two groups under one limited parent: big's items need 60 of its 100 units, small's 10, and
// 12 workers keep it full. Each run holds its memory for a millisecond of real time. Without
// the hold-back the room that the small items give back is taken by the next small item before
// it gathers to 60 units, and big is starved although its virtual time is the smallest; with
// it, big gets its share (equal weights, equal memory: a seventh of the admissions).
TEST_F(QueueTest, AStarvedGroupOfLargeItemsGetsItsShare) {
  testing::Watchdog dog("large items");
  GroupRef p = make("p", 100);
  GroupRef big, small;
  ASSERT_EQ(ctl.create(*p, "big", &big), 0);
  ASSERT_EQ(ctl.create(*p, "small", &small), 0);
  std::mutex mu;
  std::vector<int> order;
  {
    AdmissionQueueOptions o;
    o.workers = 12;
    AdmissionQueue q(ctl, o);
    auto item = [&](int gi, int64_t units) {
      WorkItem w;
      w.bytes = static_cast<uint64_t>(units) * kUnit;
      w.run = [&mu, &order, gi](Reservation&) {
        {
          std::lock_guard<std::mutex> lock(mu);
          order.push_back(gi);
        }
        std::this_thread::sleep_for(1ms);
      };
      return w;
    };
    for (int i = 0; i < 400; ++i) {
      ASSERT_EQ(q.submit(*big, item(0, 60)), SubmitStatus::kOk);
      ASSERT_EQ(q.submit(*small, item(1, 10)), SubmitStatus::kOk);
    }
    ASSERT_TRUE(eventually([&] {
      std::lock_guard<std::mutex> lock(mu);
      return order.size() >= 350;
    }));
  }  // the rest is cancelled
  int bigs = 0;
  for (size_t i = 0; i < 350; ++i) bigs += order[i] == 0;
  EXPECT_GE(bigs, 35) << "of 350 admissions";
  EXPECT_LE(bigs, 70) << "of 350 admissions";
  EXPECT_EQ(p->memory().usage(), 0);
}

// big's head can never fit beside what a reservation outside the queue holds in their shared
// parent: small (under the same parent) is held back once it is 4 admissions ahead, for
// hold_ns of the controller's clock at most each time; other (under no shared limited level)
// is never held back; hold_ns 0 turns the hold-back off.
TEST_F(QueueTest, TheHoldBackIsBounded) {
  testing::Watchdog dog("bounded hold");
  GroupRef p = make("p", 100);
  GroupRef big, small, hog_group, other = make("other");
  ASSERT_EQ(ctl.create(*p, "big", &big), 0);
  ASSERT_EQ(ctl.create(*p, "small", &small), 0);
  ASSERT_EQ(ctl.create(*p, "hog", &hog_group), 0);
  Reservation hog(*hog_group);
  ASSERT_EQ(hog.reserve(50 * kUnit), ReserveStatus::kOk);
  std::atomic<int> smalls{0}, others{0};
  auto count = [](std::atomic<int>& n) {
    WorkItem w;
    w.bytes = 10 * kUnit;
    w.run = [&n](Reservation&) { ++n; };
    return w;
  };
  Outcome starved;
  {
    AdmissionQueueOptions o = one_worker();
    o.hold_ns = 20 * kMs;
    AdmissionQueue q(ctl, o);
    ASSERT_EQ(q.submit(*big, starved.item(60 * kUnit)), SubmitStatus::kOk);
    ASSERT_TRUE(eventually([&] { return admit_queue_stats(*big).tries >= 1; }));
    for (int i = 0; i < 40; ++i) ASSERT_EQ(q.submit(*small, count(smalls)), SubmitStatus::kOk);
    for (int i = 0; i < 10; ++i) ASSERT_EQ(q.submit(*other, count(others)), SubmitStatus::kOk);
    // small runs 4 items, then waits for big's head; other runs all of its items meanwhile.
    ASSERT_TRUE(eventually([&] { return others.load() == 10 && smalls.load() >= 4; }));
    std::this_thread::sleep_for(50ms);  // the clock stands still: the hold lasts
    EXPECT_EQ(smalls.load(), 4);
    // Each hold ends hold_ns after it began: small runs 4 more, and is held back again.
    for (int round = 2; round <= 4; ++round) {
      clock.advance(10 * kMs);
      std::this_thread::sleep_for(20ms);
      EXPECT_EQ(smalls.load(), 4 * (round - 1)) << round;  // half the bound: still held
      clock.advance(10 * kMs);
      ASSERT_TRUE(eventually([&] { return smalls.load() == 4 * round; })) << round;
      std::this_thread::sleep_for(20ms);
      EXPECT_EQ(smalls.load(), 4 * round) << round;
    }
    EXPECT_EQ(starved.ran.load(), 0);
    EXPECT_EQ(q.queued(), 1u + 40 - 16);
    hog.release();  // room for big's head (seen at the next poll): it runs, small goes on
    clock.advance(kMs);
    ASSERT_TRUE(eventually([&] { return starved.ran.load() == 1 && smalls.load() == 40; }));
  }
  // Without the hold-back (hold_ns 0) small is never held back.
  ASSERT_EQ(hog.reserve(50 * kUnit), ReserveStatus::kOk);
  Outcome starved2;
  {
    AdmissionQueueOptions o = one_worker();
    o.hold_ns = 0;
    AdmissionQueue q(ctl, o);
    ASSERT_EQ(q.submit(*big, starved2.item(60 * kUnit)), SubmitStatus::kOk);
    ASSERT_TRUE(eventually([&] { return admit_queue_stats(*big).tries >= 1; }));
    for (int i = 0; i < 20; ++i) ASSERT_EQ(q.submit(*small, count(smalls)), SubmitStatus::kOk);
    ASSERT_TRUE(eventually([&] { return smalls.load() == 60; }));
    EXPECT_EQ(starved2.ran.load(), 0);
  }
  EXPECT_TRUE(starved2.is(ReserveStatus::kCancelled));
  EXPECT_THROW(AdmissionQueue(ctl, AdmissionQueueOptions{.workers = 1,
                                                         .hold_ns = 10'000'000'001}),
               std::invalid_argument);
}

// big's head does not fit its own memory.max (its own reservation holds the room): only big can
// make room there, so nobody is held back, and the virtual time big could not use is not
// credit: once its head fits, the two alternate.
TEST_F(QueueTest, AGroupFullAtItsOwnLimitHoldsNobodyBack) {
  testing::Watchdog dog("own limit");
  GroupRef p = make("p", 100), z = make("z");
  GroupRef big, small;
  ASSERT_EQ(ctl.create(*p, "big", &big), 0);
  ASSERT_EQ(ctl.create(*p, "small", &small), 0);
  big->set_max(70 * kUnit);
  Reservation own(*big);
  ASSERT_EQ(own.reserve(65 * kUnit), ReserveStatus::kOk);
  std::mutex mu;
  std::vector<int> order;
  auto item = [&](int gi, int64_t units) {
    WorkItem w;
    w.bytes = static_cast<uint64_t>(units) * kUnit;
    w.run = [&mu, &order, gi](Reservation&) {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(gi);
    };
    return w;
  };
  AdmissionQueue q(ctl, one_worker());
  ASSERT_EQ(q.submit(*big, item(0, 10)), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return admit_queue_stats(*big).tries >= 1; }));
  for (int i = 0; i < 20; ++i) ASSERT_EQ(q.submit(*small, item(1, 10)), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return admit_queue_stats(*small).admitted == 20; }));
  Blocker blocker;  // the worker waits while the next items are queued
  ASSERT_EQ(q.submit(*z, blocker.item()), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return blocker.running.load(); }));
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(q.submit(*big, item(0, 10)), SubmitStatus::kOk);
    ASSERT_EQ(q.submit(*small, item(1, 10)), SubmitStatus::kOk);
  }
  own.release();
  blocker.release();
  ASSERT_TRUE(eventually([&] { return q.queued() == 0 && q.running() == 0; }));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(order.size(), 41u);
  // The first 20 are small's; then the two groups alternate, not big's 11 items first for the
  // 20 admissions it missed.
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(order[i], 1) << i;
  int big_first10 = 0;
  for (size_t i = 20; i < 30; ++i) big_first10 += order[i] == 0;
  EXPECT_NEAR(big_first10, 5, 1);
}

}  // namespace
}  // namespace memcg
