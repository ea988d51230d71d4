// The admission queue (admission_queue.hpp): priorities within a group, a deadline over several
// tries, cancellation (ticket and stop token), a worker never held by a blocked group, the
// bounded queue, destruction with queued items, callables that throw, and the
// memory.admit.weight / memory.admit.queue files (fairness across groups:
// admission_queue_fairness_test.cpp). On a ManualClock, so that the polls and the deadlines move
// only when the test advances time.
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
