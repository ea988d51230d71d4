// Waiting charges: the defects found in review, each reproduced on a ManualClock (or by the
// state the counters are left in), step by step.
#include "memcg/core/charge_wait.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "charge_wait_support.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/controller.hpp"
#include "memcg/core/limits.hpp"
#include "memcg/percpu/internal/stock.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;
using namespace testing_wait;

// Nested limits: L (max 10) with children C (max 4) and D. A waiter of D queued on L has aged;
// then ten 1-unit waiters of C queue on C's own limit. Every unit freed under C must go to the
// aged waiter of L until it is whole, not to the younger waiters of C's queue (which an uncharge
// under C used to serve first).
TEST(ChargeWaitRegression, AgedOuterWaiterGetsUnitsFreedUnderANestedLimit) {
  testing::Watchdog dog("AgedOuterWaiterGetsUnitsFreedUnderANestedLimit");
  ManualClock clock(1'000'000);
  Controller ctl(on_clock(&clock));
  set_wait_aging(ctl, 30ms);
  GroupRef l, c, d;
  ASSERT_EQ(ctl.create("l", &l), 0);
  ASSERT_EQ(ctl.create("l/c", &c), 0);
  ASSERT_EQ(ctl.create("l/d", &d), 0);
  l->set_max(10 * kUnit);
  c->set_max(4 * kUnit);
  ASSERT_EQ(try_charge(*c, 4), ChargeStatus::kOk);
  ASSERT_EQ(try_charge(*d, 6), ChargeStatus::kOk);

  AsyncCall aged([&](std::stop_token st) { return try_charge_wait_for(*d, 3, 10s, st); });
  ASSERT_TRUE(eventually([&] { return wait_stats(*l).waiters == 1; }));
  clock.advance(50'000'000);  // past the aging bound
  std::vector<std::unique_ptr<AsyncCall>> young;
  for (int i = 0; i < 10; ++i)
    young.push_back(std::make_unique<AsyncCall>(
        [&](std::stop_token st) { return try_charge_wait_for(*c, 1, 10s, st); }));
  ASSERT_TRUE(eventually([&] { return wait_stats(*c).waiters == 10; }));
  // A waiter is counted once it is linked, then runs its own dispatch of the path before it
  // blocks. Let every young waiter finish that look, so that the units freed below meet blocked
  // waiters only: under ThreadSanitizer one unit once went to a young waiter, most likely
  // through a look that was still running.
  std::this_thread::sleep_for(100ms);

  uncharge_direct(*c, 1);  // each freed unit is reserved for the aged waiter, synchronously
  EXPECT_EQ(wait_stats(*l).reserved_bytes, kUnit);
  EXPECT_EQ(used(*c), 3);
  uncharge_direct(*c, 1);
  EXPECT_EQ(wait_stats(*l).reserved_bytes, 2 * kUnit);
  uncharge_direct(*c, 1);  // whole: granted
  EXPECT_EQ(used(*d), 9);
  EXPECT_EQ(used(*c), 1);
  EXPECT_EQ(aged.status(), WaitStatus::kOk);
  EXPECT_EQ(wait_stats(*c).waiters, 10u);
  // From here C's waiters are served as units are freed.
  uncharge_direct(*d, 2);
  ASSERT_TRUE(eventually([&] { return wait_stats(*c).granted == 2; }));
  EXPECT_EQ(used(*c), 3);
  for (auto& y : young) y->th.request_stop();
  int ok = 0, cancelled = 0;
  for (auto& y : young) (y->status() == WaitStatus::kOk ? ok : cancelled)++;
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(cancelled, 8);
  uncharge_direct(*c, 3);
  uncharge_direct(*d, 7);
  EXPECT_EQ(used(*l), 0);
}

// A Clock on virtual time that runs `hook` once, from inside now_ns() on whatever thread reads
// it, as soon as `armed()` says so: a deterministic point inside the library.
class HookClock final : public Clock {
 public:
  std::function<bool()> armed;
  std::function<void()> hook;
  uint64_t now_ns() const noexcept override {
    if (!fired_.load() && !in_hook_ && armed && armed()) {
      fired_.store(true);
      in_hook_ = true;
      hook();
      in_hook_ = false;
    }
    return now_.load();
  }
  void sleep_ns(uint64_t ns) noexcept override { now_.fetch_add(ns); }
  void advance(uint64_t ns) noexcept { now_.fetch_add(ns); }
  bool fired() const { return fired_.load(); }

 private:
  std::atomic<uint64_t> now_{1'000'000};
  mutable std::atomic<bool> fired_{false};
  static thread_local bool in_hook_;
};
thread_local bool HookClock::in_hook_ = false;

// The group removed after the waiter's online check but before it queued: the waiter must see
// the removal (kRemoved at once), not wait out its deadline. The clock removes the group at the
// first clock read after the `wait` event, which the library raises between the two.
TEST(ChargeWaitRegression, RemovalBetweenTheOnlineCheckAndTheEnqueue) {
  testing::Watchdog dog("RemovalBetweenTheOnlineCheckAndTheEnqueue");
  HookClock clock;
  Controller ctl(on_clock(&clock));
  GroupRef g;
  ASSERT_EQ(ctl.create("a", &g), 0);
  g->set_max(2 * kUnit);
  ASSERT_EQ(try_charge(*g, 2), ChargeStatus::kOk);
  clock.armed = [&] { return g->events_local().get(Event::kWait) == 1; };
  clock.hook = [&] { EXPECT_EQ(ctl.remove(*g), 0); };
  AsyncCall w([&](std::stop_token st) { return try_charge_wait_for(*g, 1, 1s, st); });
  // Real time only bounds the test: a waiter that missed the removal is let out by its deadline.
  if (!eventually([&] { return w.done(); })) clock.advance(2'000'000'000);
  EXPECT_TRUE(clock.fired());
  EXPECT_EQ(w.status(), WaitStatus::kRemoved);
  EXPECT_EQ(wait_stats(*g).removed, 1u);
  EXPECT_EQ(wait_stats(*g).waiters, 0u);
  EXPECT_EQ(used(*g), 2);
  uncharge_direct(*g, 2);
}

// A granted waiting charge reaches the counters like any other charge: over memory.high it
// raises `high`, and the thread is throttled (on the controller's clock) before it returns.
TEST(ChargeWaitRegression, GrantedWaitHonoursMemoryHigh) {
  testing::Watchdog dog("GrantedWaitHonoursMemoryHigh");
  ManualClock clock(1'000'000);
  Controller ctl(on_clock(&clock));
  GroupRef g;
  ASSERT_EQ(ctl.create("a", &g), 0);
  g->set_max(4096 * kUnit);
  ASSERT_EQ(try_charge(*g, 4096), ChargeStatus::kOk);
  g->set_high(1024 * kUnit);  // no event, no reclaim: set, not written
  ASSERT_EQ(g->events_local().get(Event::kHigh), 0u);
  AsyncCall w([&](std::stop_token st) { return try_charge_wait_for(*g, 2048, 10s, st); });
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  const uint64_t granted_at = clock.now_ns();
  uncharge_direct(*g, 2048);
  EXPECT_EQ(w.status(), WaitStatus::kOk);
  EXPECT_EQ(used(*g), 4096);
  EXPECT_GE(g->events_local().get(Event::kHigh), 1u);
  EXPECT_GT(clock.now_ns(), granted_at);  // the memory.high penalty slept on the clock
  uncharge_direct(*g, 4096);
}

// One waiter costs only its own path: an uncharge under a group that has no waiter on its path
// (in another controller, or a sibling in the same one) takes its usual slow path into the
// per-CPU stock instead of going to the counters to serve queues.
TEST(ChargeWaitRegression, WaiterElsewhereLeavesTheUnchargePathAlone) {
  testing::Watchdog dog("WaiterElsewhereLeavesTheUnchargePathAlone");
  ManualClock clock;
  Options o = on_clock(&clock);
  o.batch = 8;
  Controller ctl(o), other(o);
  GroupRef a, b, x;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_EQ(ctl.create("b", &b), 0);
  ASSERT_EQ(other.create("x", &x), 0);
  a->set_max(kUnit);
  ASSERT_EQ(try_charge(*a, 1), ChargeStatus::kOk);
  AsyncCall w([&](std::stop_token st) { return try_charge_wait_for(*a, 1, 10s, st); });
  ASSERT_TRUE(eventually([&] { return wait_stats(*a).waiters == 1; }));

  // The sibling and the other controller's group: 2 units charged exactly, 1 uncharged through
  // the slow path. It goes to the stock (usage stays), as with no waiter anywhere.
  for (Group* g : {b.get(), x.get()}) {
    ASSERT_EQ(g->memory().try_charge(2), nullptr);
    internal::uncharge_slow(*g, 1, kDefaultKind);
    EXPECT_EQ(used(*g), 2) << g->path();
  }
  // Under the waiter's own group it goes to the counters and serves the waiter.
  internal::uncharge_slow(*a, 1, kDefaultKind);
  EXPECT_EQ(w.status(), WaitStatus::kOk);
  EXPECT_EQ(used(*a), 1);
  uncharge_direct(*a, 1);
  ctl.stock().drain_all(&ctl.root());
  other.stock().drain_all(&other.root());
  uncharge_direct(*b, 1);
  uncharge_direct(*x, 1);
  EXPECT_EQ(used(*b), 0);
  EXPECT_EQ(used(*x), 0);
}

}  // namespace
}  // namespace memcg
