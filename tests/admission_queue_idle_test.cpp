// The admission queue keeps what its queued work needs, not every group it has seen
// (admission_queue.hpp): a group with nothing queued has no entry and no reference held (a
// removed group is freed), only a virtual time ahead of the others' is remembered until they
// pass it; the starved groups are counted apart. On a ManualClock with one worker.
#include "memcg/core/admission/admission_queue.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "admission_queue_support.hpp"
#include "charge_wait_support.hpp"
#include "memcg/core/admission/internal/admission_queue_state.hpp"
#include "memcg/core/tree/controller.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using testing_queue::Blocker;
using testing_queue::Outcome;
using testing_queue::QueueTest;
using testing_wait::eventually;
using testing_wait::kUnit;
using Shape = internal::AdmissionQueueAccess;

TEST_F(QueueTest, IdleGroupsAreForgottenAndRemovedGroupsFreed) {
  testing::Watchdog dog("idle groups");
  GroupRef z = make("z"), a = make("a"), b = make("b");
  AdmissionQueue q(ctl, one_worker());
  Blocker blocker;
  ASSERT_EQ(q.submit(*z, blocker.item()), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return blocker.running.load(); }));
  // a: one large item; b: three small ones. a goes first (ties by first submission) and ends
  // ahead of b in virtual time by far.
  Outcome big, small[3];
  ASSERT_EQ(q.submit(*a, big.item(64 * kUnit)), SubmitStatus::kOk);
  for (Outcome& o : small) ASSERT_EQ(q.submit(*b, o.item()), SubmitStatus::kOk);
  EXPECT_EQ(Shape::shape(q).groups, 2u);  // z's item runs: z has no entry
  blocker.release();
  ASSERT_TRUE(eventually([&] {
    return big.ran.load() == 1 && small[0].ran + small[1].ran + small[2].ran == 3 &&
           q.running() == 0;
  }));
  internal::AdmissionQueueShape s = Shape::shape(q);
  EXPECT_EQ(s.groups, 0u);  // nothing queued: no group is held
  // Ahead of where a group would re-enter (the last admission's virtual time): a by its large
  // item, b by its last item. z is not (the others passed it).
  EXPECT_EQ(s.leads, 2u);
  // Not pinned by the queue: a removed group is freed although its lead is remembered.
  ASSERT_EQ(ctl.remove(*a), 0);
  ASSERT_EQ(ctl.remove(*b), 0);
  const size_t dying = ctl.nr_dying();
  a.reset();
  b.reset();
  EXPECT_EQ(ctl.nr_dying(), dying - 2);
  // The others passing them drop the leads: c's items move the queue's virtual time past a's.
  GroupRef c = make("c");
  std::vector<Outcome> many(70);
  for (Outcome& o : many) ASSERT_EQ(q.submit(*c, o.item()), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return q.queued() == 0 && q.running() == 0; }));
  s = Shape::shape(q);
  EXPECT_EQ(s.groups, 0u);
  EXPECT_EQ(s.leads, 1u);  // c's own last item: a's and b's are gone
}

TEST_F(QueueTest, AGroupRemovedWithItemsQueuedIsNotPinned) {
  testing::Watchdog dog("removed group");
  GroupRef z = make("z"), r = make("r");
  AdmissionQueue q(ctl, one_worker());
  Blocker blocker;
  ASSERT_EQ(q.submit(*z, blocker.item()), SubmitStatus::kOk);
  ASSERT_TRUE(eventually([&] { return blocker.running.load(); }));
  Outcome out;
  ASSERT_EQ(q.submit(*r, out.item()), SubmitStatus::kOk);
  ASSERT_EQ(ctl.remove(*r), 0);
  r.reset();
  EXPECT_EQ(ctl.nr_dying(), 1u);  // its queued item holds it
  blocker.release();
  ASSERT_TRUE(eventually([&] { return out.status.load() != -1 || out.ran.load() == 1; }));
  ASSERT_TRUE(eventually([&] { return q.running() == 0 && q.queued() == 0; }));
  EXPECT_EQ(Shape::shape(q).groups, 0u);
  EXPECT_EQ(ctl.nr_dying(), 0u);  // freed while the queue lives on
}

// A group of large items under a shared limit is starved there and holds the other group back
// (admission_queue_fairness_test.cpp has the shares): it is on the starved list while it waits,
// and once everything ran nothing is left of either, listed, held or referenced.
TEST_F(QueueTest, TheStarvedListEmptiesWhenItsGroupsAreServed) {
  testing::Watchdog dog("starved list");
  GroupRef p = make("p", 100);
  GroupRef big, small;
  ASSERT_EQ(ctl.create(*p, "big", &big), 0);
  ASSERT_EQ(ctl.create(*p, "small", &small), 0);
  AdmissionQueueOptions o;
  o.workers = 12;
  AdmissionQueue q(ctl, o);
  std::atomic<int> ran{0};
  auto item = [&](int64_t units) {
    WorkItem w;
    w.bytes = static_cast<uint64_t>(units) * kUnit;
    w.run = [&ran](Reservation&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ++ran;
    };
    return w;
  };
  for (int i = 0; i < 40; ++i) {
    ASSERT_EQ(q.submit(*big, item(60)), SubmitStatus::kOk);
    ASSERT_EQ(q.submit(*small, item(10)), SubmitStatus::kOk);
  }
  size_t most_starved = 0;
  ASSERT_TRUE(eventually([&] {
    most_starved = std::max(most_starved, Shape::shape(q).starved);
    return ran.load() == 80;
  }));
  EXPECT_GE(most_starved, 1u);  // seen while it ran (big's heads wait for room in p)
  EXPECT_LE(most_starved, 2u);
  ASSERT_TRUE(eventually([&] { return q.running() == 0; }));
  const internal::AdmissionQueueShape s = Shape::shape(q);
  EXPECT_EQ(s.starved, 0u);
  EXPECT_EQ(s.groups, 0u);
  EXPECT_EQ(p->memory().usage(), 0);
}

}  // namespace
}  // namespace memcg
