// The admission queue (admission_queue.hpp): weighted fair admissions across groups, priorities
// within a group, the hold-back for a group of large items and its bound, a deadline over
// several tries, cancellation (ticket and stop token), a worker never held by a blocked group,
// the bounded queue, destruction with queued items, callables that throw, and the
// memory.admit.weight / memory.admit.queue files. On a ManualClock, so that the polls, the
// deadlines and the hold-back's bound move only when the test advances time.
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
using testing_wait::eventually;
using testing_wait::kUnit;
using testing_wait::on_clock;

constexpr uint64_t kMs = 1'000'000;

struct QueueTest : ::testing::Test {
  ManualClock clock{kMs};
  Controller ctl{on_clock(&clock)};
  GroupRef make(const char* name, int64_t max_units = -1) {
    GroupRef g;
    if (ctl.create(name, &g) != 0) throw std::runtime_error(name);
    if (max_units >= 0) g->set_max(static_cast<uint64_t>(max_units) * kUnit);
    return g;
  }
  static AdmissionQueueOptions one_worker() {
    AdmissionQueueOptions o;
    o.workers = 1;
    return o;
  }
};

// Holds the single worker in a run until release(): everything submitted meanwhile is queued.
struct Blocker {
  std::atomic<bool> running{false}, go{false};
  WorkItem item() {
    WorkItem w;
    w.run = [this](Reservation&) {
      running = true;
      while (!go.load()) std::this_thread::sleep_for(100us);
    };
    return w;
  }
  void release() { go = true; }
};

// A done callable that records the status (and the thread it ran on).
struct Outcome {
  std::atomic<int> status{-1};
  std::atomic<int> ran{0};
  std::thread::id thread;
  WorkItem item(uint64_t bytes = kUnit) {
    WorkItem w;
    w.bytes = bytes;
    w.run = [this](Reservation&) { ++ran; };
    w.done = [this](ReserveStatus s) {
      thread = std::this_thread::get_id();
      status = static_cast<int>(s);
    };
    return w;
  }
  bool is(ReserveStatus s) const { return status.load() == static_cast<int>(s); }
};

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

TEST_F(QueueTest, PrioritiesWithinAGroupThenFifo) {
  testing::Watchdog dog("priorities");
  GroupRef z = make("z"), a = make("a");
  std::mutex mu;
  std::vector<int> order;
  AdmissionQueue q(ctl, one_worker());
  Blocker blocker;
  ASSERT_EQ(q.submit(*z, blocker.item()), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return blocker.running.load(); }));
  const int prio[6] = {0, 5, 0, 5, 10, -3};
  for (int i = 0; i < 6; ++i) {
    WorkItem w;
    w.priority = prio[i];
    w.run = [&mu, &order, i](Reservation&) {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
    };
    ASSERT_EQ(q.submit(*a, std::move(w)), SubmitStatus::kOk);
  }
  blocker.release();
  ASSERT_TRUE(eventually([&] { return admit_queue_stats(*a).admitted == 6; }));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<int>{4, 1, 3, 0, 2, 5}));
}

TEST_F(QueueTest, DeadlineOverSeveralTries) {
  testing::Watchdog dog("deadline");
  GroupRef g = make("g", 256);
  Reservation hog(*g);
  ASSERT_EQ(hog.reserve(256 * kUnit), ReserveStatus::kOk);  // full, nothing to reclaim
  Outcome out;
  AdmissionQueue q(ctl, one_worker());
  WorkItem w = out.item(128 * kUnit);  // fits memory.max: not never-fits
  w.deadline_ns = clock.now_ns() + 10 * kMs;
  ASSERT_EQ(q.submit(*g, std::move(w)), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return admit_queue_stats(*g).tries >= 1; }));
  // Each millisecond of the controller's clock is one more try, until the deadline.
  for (uint64_t t = 2; t <= 6; ++t) {
    clock.advance(kMs);
    ASSERT_TRUE(eventually([&] { return admit_queue_stats(*g).tries >= t; })) << t;
  }
  EXPECT_EQ(out.status.load(), -1);
  EXPECT_EQ(q.queued(), 1u);
  clock.advance(10 * kMs);
  ASSERT_TRUE(eventually([&] { return out.status.load() != -1; }));
  EXPECT_TRUE(out.is(ReserveStatus::kTimedOut)) << out.status.load();
  EXPECT_EQ(out.ran.load(), 0);
  const AdmitQueueStats s = admit_queue_stats(*g);
  EXPECT_GE(s.tries, 6u);
  EXPECT_EQ(s.timed_out, 1u);
  EXPECT_EQ(s.admitted, 0u);
  EXPECT_EQ(q.queued(), 0u);
  EXPECT_EQ(g->memory().usage(), 256);  // the tries held nothing
}

TEST_F(QueueTest, NeverFitsIsCompletedAtItsFirstTry) {
  testing::Watchdog dog("never fits");
  GroupRef g = make("g", 256);
  Outcome out;
  AdmissionQueue q(ctl, one_worker());
  ASSERT_EQ(q.submit(*g, out.item(257 * kUnit)), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return out.status.load() != -1; }));
  EXPECT_TRUE(out.is(ReserveStatus::kNeverFits));
  EXPECT_EQ(admit_queue_stats(*g).never_fits, 1u);
}

TEST_F(QueueTest, CancelAQueuedItem) {
  testing::Watchdog dog("cancel");
  GroupRef z = make("z"), a = make("a");
  AdmissionQueue q(ctl, one_worker());
  Blocker blocker;
  AdmissionQueue::Ticket running;
  ASSERT_EQ(q.submit(*z, blocker.item(), &running), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return blocker.running.load(); }));
  EXPECT_FALSE(running.cancel());  // it runs already
  Outcome x, y, kept;
  AdmissionQueue::Ticket tx;
  ASSERT_EQ(q.submit(*a, x.item(), &tx), SubmitStatus::kOk);
  std::stop_source stop;
  WorkItem wy = y.item();
  wy.stop = stop.get_token();
  ASSERT_EQ(q.submit(*a, std::move(wy)), SubmitStatus::kOk);
  ASSERT_EQ(q.submit(*a, kept.item()), SubmitStatus::kOk);
  EXPECT_TRUE(tx.cancel());
  EXPECT_TRUE(x.is(ReserveStatus::kCancelled));  // done ran before cancel() returned
  EXPECT_EQ(x.thread, std::this_thread::get_id());
  EXPECT_FALSE(tx.cancel());  // once
  EXPECT_FALSE(AdmissionQueue::Ticket().cancel());
  stop.request_stop();
  blocker.release();
  ASSERT_TRUE(eventually([&] { return kept.ran.load() == 1 && y.status.load() != -1; }));
  EXPECT_TRUE(y.is(ReserveStatus::kCancelled));
  EXPECT_EQ(x.ran.load() + y.ran.load(), 0);
  EXPECT_EQ(admit_queue_stats(*a).cancelled, 2u);
  EXPECT_EQ(admit_queue_stats(*a).admitted, 1u);
}

TEST_F(QueueTest, AWorkerIsNotHeldByABlockedGroup) {
  testing::Watchdog dog("blocked group");
  GroupRef full = make("full", 256), free = make("free");
  Reservation hog(*full);
  ASSERT_EQ(hog.reserve(256 * kUnit), ReserveStatus::kOk);
  Outcome blocked, other;
  {
    AdmissionQueue q(ctl, one_worker());
    ASSERT_EQ(q.submit(*full, blocked.item(64 * kUnit)), SubmitStatus::kOk);
    ASSERT_TRUE(eventually([&] { return admit_queue_stats(*full).tries >= 1; }));
    // The clock does not move: the other group's item runs on the one worker all the same.
    ASSERT_EQ(q.submit(*free, other.item(64 * kUnit)), SubmitStatus::kOk);
    ASSERT_TRUE(eventually([&] { return other.ran.load() == 1; }));
    EXPECT_EQ(blocked.ran.load(), 0);
    EXPECT_EQ(q.queued(), 1u);
    // Memory given back outside the queue is seen at the next poll of the controller's clock.
    hog.release();
    clock.advance(kMs);
    ASSERT_TRUE(eventually([&] { return blocked.ran.load() == 1; }));
  }
  EXPECT_EQ(blocked.status.load(), -1);
}

TEST_F(QueueTest, FullQueueAndInvalidItemsAreRefused) {
  testing::Watchdog dog("full");
  GroupRef z = make("z"), a = make("a");
  AdmissionQueueOptions o = one_worker();
  o.max_queued = 2;
  AdmissionQueue q(ctl, o);
  Blocker blocker;
  ASSERT_EQ(q.submit(*z, blocker.item()), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return blocker.running.load(); }));
  Outcome o1, o2, o3;
  ASSERT_EQ(q.submit(*a, o1.item()), SubmitStatus::kOk);
  ASSERT_EQ(q.submit(*a, o2.item()), SubmitStatus::kOk);
  AdmissionQueue::Ticket t;
  EXPECT_EQ(q.submit(*a, o3.item(), &t), SubmitStatus::kFull);
  EXPECT_FALSE(t.cancel());  // left empty
  EXPECT_EQ(q.submit(*a, WorkItem{}), SubmitStatus::kInvalid);  // no run callable
  ManualClock other_clock{kMs};
  Controller other(on_clock(&other_clock));
  {
    GroupRef elsewhere;
    ASSERT_EQ(other.create("x", &elsewhere), 0);
    EXPECT_EQ(q.submit(*elsewhere, o3.item()), SubmitStatus::kInvalid);
  }
  EXPECT_STREQ(submit_status_name(SubmitStatus::kFull), "full");
  EXPECT_EQ(admit_queue_stats(*a).submitted, 2u);
  blocker.release();
  ASSERT_TRUE(eventually([&] { return o1.ran.load() + o2.ran.load() == 2; }));
  EXPECT_EQ(o3.ran.load() + (o3.status.load() != -1), 0);
  EXPECT_THROW(AdmissionQueue(ctl, AdmissionQueueOptions{.workers = 0}), std::invalid_argument);
  EXPECT_THROW(AdmissionQueue(ctl, AdmissionQueueOptions{.workers = 1, .max_queued = 0}),
               std::invalid_argument);
}

TEST_F(QueueTest, DestructionCancelsQueuedItemsOnTheDestroyingThread) {
  testing::Watchdog dog("destruction");
  GroupRef g = make("g", 256);
  Reservation hog(*g);
  ASSERT_EQ(hog.reserve(256 * kUnit), ReserveStatus::kOk);
  Outcome out[3];
  {
    AdmissionQueueOptions o;
    o.workers = 3;
    AdmissionQueue q(ctl, o);
    for (Outcome& x : out) ASSERT_EQ(q.submit(*g, x.item(8 * kUnit)), SubmitStatus::kOk);
    ASSERT_TRUE(eventually([&] { return admit_queue_stats(*g).tries >= 1; }));
  }
  for (Outcome& x : out) {
    EXPECT_TRUE(x.is(ReserveStatus::kCancelled));
    EXPECT_EQ(x.thread, std::this_thread::get_id());
    EXPECT_EQ(x.ran.load(), 0);
  }
  EXPECT_EQ(admit_queue_stats(*g).queued, 0u);
  EXPECT_EQ(g->memory().usage(), 256);
}

TEST_F(QueueTest, CallablesThatThrowAreCountedAndTheWorkerGoesOn) {
  testing::Watchdog dog("throw");
  GroupRef a = make("a", 256);
  AdmissionQueue q(ctl, one_worker());
  WorkItem bad;
  bad.bytes = 16 * kUnit;
  bad.run = [](Reservation&) { throw std::runtime_error("query failed"); };
  ASSERT_EQ(q.submit(*a, std::move(bad)), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return q.callback_errors() == 1; }));
  Outcome next;
  ASSERT_EQ(q.submit(*a, next.item(16 * kUnit)), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return next.ran.load() == 1; }));
  // A done that throws.
  Reservation hog(*a);
  ASSERT_EQ(hog.reserve(256 * kUnit), ReserveStatus::kOk);
  WorkItem w;
  w.bytes = 8 * kUnit;
  w.run = [](Reservation&) {};
  w.done = [](ReserveStatus) { throw std::logic_error("done failed"); };
  AdmissionQueue::Ticket t;
  ASSERT_EQ(q.submit(*a, std::move(w), &t), SubmitStatus::kOk);
  EXPECT_TRUE(t.cancel());  // done runs here, or on the worker trying the item at this moment
  ASSERT_TRUE(eventually([&] { return q.callback_errors() == 2; }));
  EXPECT_EQ(admit_queue_stats(*a).errors, 2u);
  hog.release();
  ASSERT_TRUE(eventually([&] { return q.running() == 0; }));
  EXPECT_EQ(a->memory().usage(), 0);  // the throwing run's reservation was given back
}

// The queue's destructor waits for the running items: called from one of them it would wait for
// itself. It is refused with a message instead.
TEST_F(QueueTest, DestructionFromItsOwnCallableAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  GroupRef a = make("a");
  EXPECT_DEATH(
      {
        auto* q = new AdmissionQueue(ctl, one_worker());
        WorkItem w;
        w.run = [q](Reservation&) { delete q; };
        if (q->submit(*a, std::move(w)) != SubmitStatus::kOk) std::abort();
        std::this_thread::sleep_for(10s);
      },
      "destroyed from its own run or done callable");
}

TEST_F(QueueTest, MemberItemsRunWithTheMembersReservation) {
  testing::Watchdog dog("member");
  GroupRef a = make("a", 256);
  Member m(*a, "q", nullptr);
  std::atomic<bool> ok{false};
  AdmissionQueue q(ctl, one_worker());
  WorkItem w;
  w.bytes = 32 * kUnit;
  w.run = [&](Reservation& r) { ok = r.member() == &m && m.charged() == 32; };
  ASSERT_EQ(q.submit(m, std::move(w)), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return ok.load(); }));
  ASSERT_TRUE(eventually([&] { return q.running() == 0 && m.charged() == 0; }));
}

TEST_F(QueueTest, WeightAndQueueFiles) {
  GroupRef a = make("a");
  std::string s;
  ASSERT_EQ(read_file(*a, "memory.admit.weight", &s), 0);
  EXPECT_EQ(s, "100\n");
  EXPECT_EQ(write_file(*a, "memory.admit.weight", "300\n"), 0);
  ASSERT_EQ(read_file(*a, "memory.admit.weight", &s), 0);
  EXPECT_EQ(s, "300\n");
  for (const char* bad : {"0", "10001", "abc", "", "1.5", "-1", "99999999"})
    EXPECT_EQ(write_file(*a, "memory.admit.weight", bad), EINVAL) << bad;
  EXPECT_EQ(admit_weight(*a), 300u);
  EXPECT_EQ(write_file(*a, "memory.admit.weight", "10000"), 0);
  EXPECT_EQ(set_admit_weight(*a, 0), EINVAL);
  EXPECT_EQ(set_admit_weight(ctl.root(), 100), ENOENT);
  EXPECT_NE(read_file(ctl.root(), "memory.admit.weight", &s), 0);
  EXPECT_EQ(admit_weight(*a), 10000u);
  {
    AdmissionQueue q(ctl, one_worker());
    Outcome x;
    ASSERT_EQ(q.submit(*a, x.item()), SubmitStatus::kOk);
    ASSERT_TRUE(eventually([&] { return x.ran.load() == 1 && q.running() == 0; }));
  }
  ASSERT_EQ(read_file(*a, "memory.admit.queue", &s), 0);
  EXPECT_NE(s.find("submitted 1\n"), std::string::npos) << s;
  EXPECT_NE(s.find("admitted 1\n"), std::string::npos) << s;
  EXPECT_NE(s.find("tries 1\n"), std::string::npos) << s;
  EXPECT_NE(s.find("mean_wait_usec "), std::string::npos) << s;
  EXPECT_NE(write_file(*a, "memory.admit.queue", "1"), 0);  // read-only
}

}  // namespace
}  // namespace memcg
