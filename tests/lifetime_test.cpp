// Lifetimes that outlast a call: the memory.high record a thread keeps between charges, and
// the units given back to a group after it was removed.
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "memcg/core/charge/charge.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"

namespace memcg {
namespace {

constexpr int64_t kUnit = 4096;

Options one_shard(Clock* clock = nullptr) {
  Options o;
  o.nr_shards = 1;
  o.clock = clock;
  return o;
}

GroupRef make(Controller& ctl, const char* path) {
  GroupRef g;
  EXPECT_EQ(ctl.create(path, &g), 0) << path;
  return g;
}

// A charge that may not block leaves memory.high work pending on its thread, with a reference
// to the group. A thread that exits before anything handled it must let go of that reference,
// or the removed group stays dying for ever.
TEST(PendingHigh, ThreadExitReleasesTheGroup) {
  ManualClock clock;
  Controller ctl(one_shard(&clock));
  GroupRef g = make(ctl, "a");
  g->set_high(0);
  std::thread([&] { ASSERT_EQ(try_charge(*g, 1, /*flags=*/0), ChargeStatus::kOk); }).join();
  uncharge(*g, 1);
  ASSERT_EQ(ctl.remove(*g), 0);
  g = GroupRef();
  EXPECT_EQ(ctl.nr_dying(), 0u) << "the exited thread's memory.high record kept the group";
  EXPECT_EQ(ctl.root().current(), 0u);
}

// The record may name a group of a controller destroyed since: the thread's next charge over
// high in another controller must not touch it (ASan: heap-use-after-free before the fix), and
// the new record is released at thread exit.
TEST(PendingHigh, OutlivesItsController) {
  ManualClock clock;
  Controller other(one_shard(&clock));
  GroupRef b = make(other, "b");
  b->set_high(0);

  auto first = std::make_unique<Controller>(one_shard(&clock));
  GroupRef a = make(*first, "a");
  a->set_high(0);

  std::atomic<int> step{0};
  std::thread t([&] {
    EXPECT_EQ(try_charge(*a, 1, /*flags=*/0), ChargeStatus::kOk);  // pending on `a`
    step.store(1);
    while (step.load() != 2) std::this_thread::yield();
    EXPECT_EQ(try_charge(*b, 1), ChargeStatus::kOk);  // blocking, over high: handles it now
    uncharge(*b, 1);
  });
  while (step.load() != 1) std::this_thread::yield();
  uncharge(*a, 1);
  a = GroupRef();
  first.reset();  // the thread's record still names a group of it
  step.store(2);
  t.join();

  EXPECT_GT(b->events().get(Event::kHigh), 0u);
  ASSERT_EQ(other.remove(*b), 0);
  b = GroupRef();
  EXPECT_EQ(other.nr_dying(), 0u);
}

// Units given back to a removed group go straight to the counters: the parent's memory.current
// drops at once and no stock slot keeps the dead group alive (the kernel uncharges a dead
// cgroup's pages directly).
TEST(RemovedGroup, UnchargeBypassesTheStock) {
  Controller ctl(one_shard());
  GroupRef p = make(ctl, "p");
  GroupRef c = make(ctl, "p/c");
  ASSERT_EQ(try_charge(*c, 10), ChargeStatus::kOk);
  ASSERT_EQ(ctl.remove(*c), 0);
  EXPECT_EQ(p->current(), 10u * kUnit) << "remove drains the child's stock";
  uncharge(*c, 10);
  EXPECT_EQ(p->current(), 0u);
  EXPECT_EQ(ctl.stock().stocked(c.get()), 0);
  c = GroupRef();
  EXPECT_EQ(ctl.nr_dying(), 0u);
}

// Uncharges racing with the removal: whichever side wins a shard, no slot of the removed group
// is left behind (the drain sees it, or the refill sees the group offline).
TEST(RemovedGroup, UnchargesRacingTheRemovalLeaveNoSlot) {
  Controller ctl;  // one shard per CPU: restartable sequences where the host has them
  GroupRef p = make(ctl, "p");
  for (int round = 0; round < 50; ++round) {
    GroupRef c = make(ctl, "p/c");
    constexpr int kPerThread = 200;
    ASSERT_EQ(try_charge(*c, 2 * kPerThread, kDefaultCharge | kNoSpin), ChargeStatus::kOk);
    std::atomic<int> go{0};
    auto give_back = [&] {
      go.fetch_add(1);
      while (go.load() < 3) std::this_thread::yield();
      for (int i = 0; i < kPerThread; ++i) uncharge(*c, 1);
    };
    std::thread t1(give_back), t2(give_back);
    go.fetch_add(1);
    while (go.load() < 3) std::this_thread::yield();
    ASSERT_EQ(ctl.remove(*c), 0);
    t1.join();
    t2.join();
    EXPECT_EQ(ctl.stock().stocked(c.get()), 0) << "round " << round;
    EXPECT_EQ(p->current(), 0u) << "round " << round;
    c = GroupRef();
    ASSERT_EQ(ctl.nr_dying(), 0u) << "round " << round;
  }
}

// A charge to a removed group charges exactly what it asks: no batch surplus into a stock.
TEST(RemovedGroup, ChargeKeepsNoSurplus) {
  Controller ctl(one_shard());
  GroupRef p = make(ctl, "p");
  GroupRef c = make(ctl, "p/c");
  ASSERT_EQ(ctl.remove(*c), 0);
  ASSERT_EQ(try_charge(*c, 3), ChargeStatus::kOk);
  EXPECT_EQ(p->current(), 3u * kUnit);
  uncharge(*c, 3);
  EXPECT_EQ(p->current(), 0u);
  c = GroupRef();
  EXPECT_EQ(ctl.nr_dying(), 0u);
}

// memory.high throttling gives back what the per-CPU stocks hold before it decides to sleep:
// here the group is over high only by its stock's surplus.
TEST(HighThrottle, DrainsStocksBeforeSleeping) {
  ManualClock clock;
  Controller ctl(one_shard(&clock));
  GroupRef g = make(ctl, "g");
  ASSERT_EQ(try_charge(*g, 1), ChargeStatus::kOk);  // 1 used, 63 in the stock
  ASSERT_EQ(ctl.stock().stocked(g.get()), 63);
  g->set_high(100 * kUnit);
  // Bigger than a batch: charged exactly, over high only by the stock's 63.
  ASSERT_EQ(try_charge(*g, 99), ChargeStatus::kOk);
  EXPECT_EQ(g->current(), 100u * kUnit);
  EXPECT_EQ(clock.total_slept_ns(), 0u) << "throttled for units that sat in a stock";
  EXPECT_GT(g->events().get(Event::kHigh), 0u);
  uncharge(*g, 100);
}

}  // namespace
}  // namespace memcg
