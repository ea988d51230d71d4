// Waiting charges: the defects found in review, each reproduced on a ManualClock (or by the
// state the counters are left in), step by step.
#include "memcg/core/wait/charge_wait.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "charge_wait_support.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/charge/limits.hpp"
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
  // Waiters block until woken (no look every millisecond of real time, as on a ManualClock), so
  // the only looks at the queues below are the uncharges' own: the order is exact.
  ParkingClock clock;
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
  ASSERT_TRUE(eventually([&] { return clock.parks.load() == 1; }));
  // Past the aging bound; the aged waiter's poll looks once more and parks again.
  ASSERT_TRUE(clock.advance_and_settle(50'000'000, 1));
  std::vector<std::unique_ptr<AsyncCall>> young;
  for (int i = 0; i < 10; ++i)
    young.push_back(std::make_unique<AsyncCall>(
        [&](std::stop_token st) { return try_charge_wait_for(*c, 1, 10s, st); }));
  // Every young waiter has queued and finished its own look (it parks after it).
  ASSERT_TRUE(eventually([&] { return clock.parks.load() == 12; }));
  EXPECT_EQ(wait_stats(*c).waiters, 10u);

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
  // From here C's waiters are served as units are freed: units freed under D (not on C's path)
  // reach them at their poll (within 10 ms).
  uncharge_direct(*d, 2);
  clock.advance(11'000'000);
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

// The same starvation through a race: units freed under the outer limit while a look at the
// queues runs, after its first round left the aged waiter short, went to a younger waiter in its
// second round. T (max 12) holds L (max 10; C and D under it) and E. An aged waiter of D waits on
// L; a young high waiter of E waits on T, a young normal waiter of C on L. A unit of E is freed
// without a look, then the aged waiter's poll looks: round 1 finds L full (the aged waiter gets
// nothing), round 2 grants E's waiter the unit of T, and its wake (the clock's hook) frees a unit
// of C on the counters, as an uncharge on another thread would. That unit must stay for the aged
// waiter, not go to C's young waiter, which round 2 offers room to next.
TEST(ChargeWaitRegression, UnitFreedDuringALookGoesToTheAgedWaiter) {
  testing::Watchdog dog("UnitFreedDuringALookGoesToTheAgedWaiter");
  ParkingClock clock;
  Controller ctl(on_clock(&clock));
  set_wait_aging(ctl, 30ms);
  GroupRef t, l, c, d, e;
  ASSERT_EQ(ctl.create("t", &t), 0);
  ASSERT_EQ(ctl.create("t/l", &l), 0);
  ASSERT_EQ(ctl.create("t/l/c", &c), 0);
  ASSERT_EQ(ctl.create("t/l/d", &d), 0);
  ASSERT_EQ(ctl.create("t/e", &e), 0);
  t->set_max(12 * kUnit);
  l->set_max(10 * kUnit);
  ASSERT_EQ(try_charge(*c, 3), ChargeStatus::kOk);
  ASSERT_EQ(try_charge(*d, 7), ChargeStatus::kOk);
  ASSERT_EQ(try_charge(*e, 2), ChargeStatus::kOk);

  // t = 1 ms: the aged-to-be waiter (poll at 11 ms).
  AsyncCall aged([&](std::stop_token st) { return try_charge_wait_for(*d, 3, 10s, st); });
  ASSERT_TRUE(eventually([&] { return clock.parks.load() == 1; }));
  ASSERT_TRUE(clock.advance_and_settle(44'000'000, 1));  // t = 45 ms: aged; next poll at 55 ms
  clock.advance(2'000'000);                              // t = 47 ms
  AsyncCall high([&](std::stop_token st) {
    return try_charge_wait_for(*e, 1, 10s, st, WaitOptions{WaitPriority::kHigh, kDefaultKind});
  });
  ASSERT_TRUE(eventually([&] { return clock.parks.load() == 3; }));
  AsyncCall young([&](std::stop_token st) { return try_charge_wait_for(*c, 1, 10s, st); });
  ASSERT_TRUE(eventually([&] { return clock.parks.load() == 4; }));
  EXPECT_EQ(wait_stats(*t).waiters, 1u);
  EXPECT_EQ(wait_stats(*l).waiters, 2u);

  ASSERT_TRUE(e->memory().uncharge(1));  // room in T, no look
  bool freed = false;
  clock.on_wake = [&] {
    if (!freed) freed = c->memory().uncharge(1);  // room in L, during the look
  };
  // t = 56 ms: only the aged waiter polls (the young ones at 57 ms).
  ASSERT_TRUE(clock.advance_and_settle(9'000'000, 1));
  EXPECT_EQ(high.status(), WaitStatus::kOk);
  EXPECT_TRUE(freed);
  EXPECT_EQ(used(*c), 2) << "the unit freed during the look went to the young waiter of C";
  EXPECT_EQ(wait_stats(*l).granted, 0u);
  // The next look (here a new aging bound's) gives it to the aged waiter, as a reserve.
  clock.on_wake = nullptr;
  set_wait_aging(ctl, 30ms);
  EXPECT_EQ(wait_stats(*l).reserved_bytes, kUnit);
  EXPECT_EQ(used(*c), 2);
  young.th.request_stop();
  EXPECT_EQ(young.status(), WaitStatus::kCancelled);
  aged.th.request_stop();
  EXPECT_EQ(aged.status(), WaitStatus::kCancelled);
  EXPECT_EQ(used(*d), 7);  // the reserve went back
  uncharge_direct(*c, 2);
  uncharge_direct(*d, 7);
  uncharge_direct(*e, 2);
  EXPECT_EQ(used(*t), 0);
}

// Classes and arrival order through the same race, with no aged waiter: a unit freed while a look
// runs went to the next waiter round 2 offered room to, after the level had refused an earlier,
// higher-class waiter asking as much. T (max 12) holds P (max 10, full) and E. A high waiter of P
// (K2), then a high waiter of E, then a normal waiter of P (K1). A unit of E is freed without a
// look; K2's poll looks: K2 is refused by P, E's waiter gets T's unit, and its wake frees a unit
// of P on the counters, as an uncharge on another thread would. That unit is K2's (higher class),
// not K1's, which round 2 offers room to next.
TEST(ChargeWaitRegression, UnitFreedDuringALookKeepsTheClassOrder) {
  testing::Watchdog dog("UnitFreedDuringALookKeepsTheClassOrder");
  ParkingClock clock;
  Controller ctl(on_clock(&clock));
  set_wait_aging(ctl, 100s);  // no aging within the test
  GroupRef t, p, filler, k1, k2, e;
  ASSERT_EQ(ctl.create("t", &t), 0);
  ASSERT_EQ(ctl.create("t/p", &p), 0);
  ASSERT_EQ(ctl.create("t/p/filler", &filler), 0);
  ASSERT_EQ(ctl.create("t/p/k1", &k1), 0);
  ASSERT_EQ(ctl.create("t/p/k2", &k2), 0);
  ASSERT_EQ(ctl.create("t/e", &e), 0);
  t->set_max(12 * kUnit);
  p->set_max(10 * kUnit);
  ASSERT_EQ(try_charge(*filler, 10), ChargeStatus::kOk);
  ASSERT_EQ(try_charge(*e, 2), ChargeStatus::kOk);
  const WaitOptions high{WaitPriority::kHigh, kDefaultKind};

  // t = 1, 2, 3 ms: K2, E's waiter, K1; their polls at 11, 12 and 13 ms.
  AsyncCall first([&](std::stop_token st) { return try_charge_wait_for(*k2, 1, 10s, st, high); });
  ASSERT_TRUE(eventually([&] { return clock.parks.load() == 1; }));
  clock.advance(1'000'000);
  AsyncCall other([&](std::stop_token st) { return try_charge_wait_for(*e, 1, 10s, st, high); });
  ASSERT_TRUE(eventually([&] { return clock.parks.load() == 2; }));
  clock.advance(1'000'000);
  AsyncCall normal([&](std::stop_token st) { return try_charge_wait_for(*k1, 1, 10s, st); });
  ASSERT_TRUE(eventually([&] { return clock.parks.load() == 3; }));
  EXPECT_EQ(wait_stats(*p).waiters, 2u);
  EXPECT_EQ(wait_stats(*t).waiters, 1u);

  ASSERT_TRUE(e->memory().uncharge(1));  // room in T, no look
  bool freed = false;
  clock.on_wake = [&] {
    if (!freed) freed = filler->memory().uncharge(1);  // room in P, during the look
  };
  ASSERT_TRUE(clock.advance_and_settle(8'000'000, 1));  // t = 11 ms: only K2 polls
  EXPECT_EQ(other.status(), WaitStatus::kOk);
  EXPECT_TRUE(freed);
  EXPECT_EQ(used(*k1), 0) << "the unit freed during the look went to the normal waiter";
  EXPECT_EQ(used(*k2), 0);
  // The next look (a new aging bound's) gives it to K2.
  clock.on_wake = nullptr;
  set_wait_aging(ctl, 100s);
  EXPECT_EQ(first.status(), WaitStatus::kOk);
  EXPECT_EQ(used(*k2), 1);
  EXPECT_EQ(used(*k1), 0);
  normal.th.request_stop();
  EXPECT_EQ(normal.status(), WaitStatus::kCancelled);
  uncharge_direct(*k2, 1);
  uncharge_direct(*filler, 9);
  uncharge_direct(*e, 2);
  EXPECT_EQ(used(*t), 0);
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
// waiter's arrival time, the second clock read after the `wait` event (raised between the two).
// The first read is PSI's, under its lock, where a removal (which tells PSI triggers) cannot run.
TEST(ChargeWaitRegression, RemovalBetweenTheOnlineCheckAndTheEnqueue) {
  testing::Watchdog dog("RemovalBetweenTheOnlineCheckAndTheEnqueue");
  HookClock clock;
  Controller ctl(on_clock(&clock));
  GroupRef g;
  ASSERT_EQ(ctl.create("a", &g), 0);
  g->set_max(2 * kUnit);
  ASSERT_EQ(try_charge(*g, 2), ChargeStatus::kOk);
  int reads_after_event = 0;  // only the waiter reads the clock once the event is raised
  clock.armed = [&] {
    return g->events_local().get(Event::kWait) == 1 && ++reads_after_event == 2;
  };
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
