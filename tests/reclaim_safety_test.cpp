// Reclaimers that lie or that unregister each other must not hang the library: a charge, the
// memory.high path and the memory.max/reclaim writes judge progress by the counters, reports are
// clamped, and unregistration from inside reclaimers never waits for ever. Every scenario runs
// under a watchdog: a hang fails the test (the process aborts, since the stuck thread still uses
// the test's objects) instead of blocking the suite.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/files/files.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/percpu/stat_registry.hpp"

namespace memcg {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr auto kWatchdog = std::chrono::seconds(20);

// Runs `body` on its own thread and waits up to `limit` for it. On a timeout the thread is
// stuck for good and still uses the caller's objects: report and abort.
void run_with_watchdog(const char* what, std::function<void()> body,
                       std::chrono::seconds limit = kWatchdog) {
  std::atomic<bool> done{false};
  std::thread t([&] {
    body();
    done.store(true, std::memory_order_release);
  });
  const auto end = steady_clock::now() + limit;
  while (!done.load(std::memory_order_acquire) && steady_clock::now() < end)
    std::this_thread::sleep_for(milliseconds(2));
  if (!done.load(std::memory_order_acquire)) {
    std::fprintf(stderr, "watchdog: %s did not return within %lld s\n", what,
                 static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::abort();
  }
  t.join();
}

Options one_shard(Clock* clock) {
  Options o;
  o.nr_shards = 1;
  o.clock = clock;
  return o;
}

// ---- reclaimers that over-report ---------------------------------------------------------------

enum class Lie { kAsked, kThousand, kMax, kNegative, kScannedHuge };

const char* name(Lie lie) {
  switch (lie) {
    case Lie::kAsked: return "{nr, nr}";
    case Lie::kThousand: return "{1000, 1000}";
    case Lie::kMax: return "{INT64_MAX, INT64_MAX}";
    case Lie::kNegative: return "{-1, -1}";
    case Lie::kScannedHuge: return "{INT64_MAX, nr}";
  }
  return "?";
}

void PrintTo(Lie lie, std::ostream* os) {
  *os << name(lie);
}

// Frees nothing, claims to.
struct Liar : Reclaimer {
  explicit Liar(Lie l) : lie(l) {}
  int64_t reclaimable() const noexcept override { return 4096; }
  ReclaimResult reclaim(int64_t nr, int) override {
    calls.fetch_add(1, std::memory_order_relaxed);
    switch (lie) {
      case Lie::kAsked: return {nr, nr};
      case Lie::kThousand: return {1000, 1000};
      case Lie::kMax: return {INT64_MAX, INT64_MAX};
      case Lie::kNegative: return {-1, -1};
      case Lie::kScannedHuge: return {INT64_MAX, nr};
    }
    return {};
  }
  const Lie lie;
  std::atomic<int64_t> calls{0};
};


// The scan and steal statistics stay sane (no wrap from summing lies).
void expect_sane_stats(Controller& ctl, Group& g, Lie lie) {
  ctl.flush_stats();
  for (int item : {StatRegistry::kPgscanDirect, StatRegistry::kPgstealDirect,
                   StatRegistry::kPgscanProactive, StatRegistry::kPgstealProactive}) {
    EXPECT_GE(g.stat(item), 0) << name(lie) << " item " << item;
    EXPECT_LT(g.stat(item), int64_t{1} << 40) << name(lie) << " item " << item;
  }
}

class ReclaimSafetyLies : public ::testing::TestWithParam<Lie> {};

TEST_P(ReclaimSafetyLies, CannotMakeAChargeSpin) {
  {
    const Lie lie = GetParam();
    Controller ctl(one_shard(nullptr));
    GroupRef g;
    ASSERT_EQ(ctl.create("g", &g), 0);
    g->set_max(64 << ctl.unit_shift());
    ASSERT_EQ(try_charge(*g, 64, kMayBlock | kNoSpin), ChargeStatus::kOk);
    Liar liar(lie);
    ReclaimerRegistration reg(*g, liar);
    ChargeStatus status = ChargeStatus::kOk;
    run_with_watchdog(name(lie), [&] { status = try_charge(*g, 1); });
    // Nothing was freed and there is no OOM victim: the charge fails, after bounded work.
    EXPECT_EQ(status, ChargeStatus::kNoMem) << name(lie);
    EXPECT_EQ(g->memory().usage(), 64) << name(lie);
    EXPECT_LE(liar.calls.load(), 1000) << name(lie);
    EXPECT_LE(g->events_local().get(Event::kMax), 18u) << name(lie);
    EXPECT_EQ(charge_stats(ctl).failed, 1u) << name(lie);
    expect_sane_stats(ctl, *g, lie);
    // The driver itself returns only what the counters show freed.
    EXPECT_EQ(reclaim(*g, 64, ReclaimReason::kProactive), 0) << name(lie);
    uncharge_direct(*g, 64);
  }
}

TEST(ReclaimSafety, OverReportingReclaimHookCannotMakeAChargeSpin) {
  Controller ctl(one_shard(nullptr));
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  g->set_max(64 << ctl.unit_shift());
  ASSERT_EQ(try_charge(*g, 64, kMayBlock | kNoSpin), ChargeStatus::kOk);
  int64_t calls = 0;
  ctl.set_reclaim_hook([&](Group&, int64_t units) { return ++calls, units; });
  ChargeStatus status = ChargeStatus::kOk;
  run_with_watchdog("hook claiming {units}", [&] { status = try_charge(*g, 1); });
  EXPECT_EQ(status, ChargeStatus::kNoMem);
  EXPECT_EQ(calls, 18);  // first, after the drain, then 16 retries: no free retry on a claim
  EXPECT_EQ(g->memory().usage(), 64);
  uncharge_direct(*g, 64);
}

TEST_P(ReclaimSafetyLies, CannotMakeTheHighPathSpin) {
  {
    const Lie lie = GetParam();
    ManualClock clock(1'000'000'000);
    Controller ctl(one_shard(&clock));
    GroupRef g;
    ASSERT_EQ(ctl.create("g", &g), 0);
    g->set_high(1 << ctl.unit_shift());
    Liar liar(lie);
    ReclaimerRegistration reg(*g, liar);
    ChargeStatus status = ChargeStatus::kNoMem;
    // Far over high: the penalty is large, so the path reclaims until it sees no progress.
    run_with_watchdog(name(lie), [&] { status = try_charge(*g, 256, kMayBlock | kNoSpin); });
    EXPECT_EQ(status, ChargeStatus::kOk) << name(lie);
    EXPECT_EQ(g->memory().usage(), 256) << name(lie);
    EXPECT_GT(clock.total_slept_ns(), 0u) << name(lie) << ": no throttle after fruitless reclaim";
    EXPECT_LE(liar.calls.load(), 1000) << name(lie);
    expect_sane_stats(ctl, *g, lie);
    uncharge_direct(*g, 256);
  }
}

TEST_P(ReclaimSafetyLies, CannotHangLimitWrites) {
  {
    const Lie lie = GetParam();
    Controller ctl(one_shard(nullptr));
    GroupRef g;
    ASSERT_EQ(ctl.create("g", &g), 0);
    ASSERT_EQ(try_charge(*g, 64, kMayBlock | kNoSpin), ChargeStatus::kOk);
    Liar liar(lie);
    ReclaimerRegistration reg(*g, liar);
    int high = -1, max = -1, rec = -1;
    run_with_watchdog(name(lie), [&] {
      high = write_file(*g, "memory.high", "4096");
      max = write_file(*g, "memory.max", "4096");
      rec = write_file(*g, "memory.reclaim", "1M");
    });
    EXPECT_EQ(high, 0) << name(lie);
    EXPECT_EQ(max, 0) << name(lie);
    // Nothing can be freed: memory.reclaim says so instead of believing the reports.
    EXPECT_EQ(rec, EAGAIN) << name(lie);
    EXPECT_EQ(g->memory().usage(), 64) << name(lie);
    expect_sane_stats(ctl, *g, lie);
    reg.reset();
    uncharge_direct(*g, 64);
  }
}

INSTANTIATE_TEST_SUITE_P(Lies, ReclaimSafetyLies,
                         ::testing::Values(Lie::kAsked, Lie::kThousand, Lie::kMax, Lie::kNegative,
                                           Lie::kScannedHuge),
                         [](const ::testing::TestParamInfo<Lie>& info) {
                           switch (info.param) {
                             case Lie::kAsked: return std::string("Asked");
                             case Lie::kThousand: return std::string("Thousand");
                             case Lie::kMax: return std::string("Int64Max");
                             case Lie::kNegative: return std::string("Negative");
                             case Lie::kScannedHuge: return std::string("ScannedHuge");
                           }
                           return std::string("Unknown");
                         });

// An honest reclaimer still makes the charge succeed through reclaim alone.
TEST(ReclaimSafety, HonestReclaimerStillLetsTheChargeSucceed) {
  struct Honest : Reclaimer {
    Group* g = nullptr;
    std::atomic<int64_t> held{64};
    int64_t reclaimable() const noexcept override { return held.load(); }
    ReclaimResult reclaim(int64_t nr, int) override {
      const int64_t n = std::min(nr, held.load());
      held -= n;
      uncharge_direct(*g, n);
      return {n, n};
    }
  };
  Controller ctl(one_shard(nullptr));
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  g->set_max(64 << ctl.unit_shift());
  ASSERT_EQ(try_charge(*g, 64, kMayBlock | kNoSpin), ChargeStatus::kOk);
  Honest h;
  h.g = g.get();
  ReclaimerRegistration reg(*g, h);
  EXPECT_EQ(try_charge(*g, 1, kMayBlock | kNoSpin), ChargeStatus::kOk);
  EXPECT_EQ(g->memory().usage(), h.held.load() + 1);
  EXPECT_EQ(charge_stats(ctl).failed, 0u);
  reg.reset();
  uncharge_direct(*g, g->memory().usage());
}

// ---- reclaimers that unregister each other -----------------------------------------------------

// Waits up to 5 s for `flag`; false on timeout.
bool wait_flag(const std::atomic<bool>& flag) {
  const auto end = steady_clock::now() + std::chrono::seconds(5);
  while (!flag.load(std::memory_order_acquire)) {
    if (steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

// On its first call, says it arrived, waits until every reclaimer of the ring is in flight, then
// unregisters the next one of the ring.
struct RingRemover : Reclaimer {
  std::atomic<bool> arrived{false};
  std::vector<RingRemover*>* ring = nullptr;
  ReclaimerRegistration* next = nullptr;
  std::atomic<int> calls{0};
  std::atomic<bool> rendezvous_ok{true};
  int64_t reclaimable() const noexcept override { return 64; }
  ReclaimResult reclaim(int64_t nr, int) override {
    if (calls.fetch_add(1) != 0) return {nr, 0};
    arrived.store(true, std::memory_order_release);
    for (RingRemover* r : *ring)
      if (!wait_flag(r->arrived)) rendezvous_ok.store(false);
    next->reset();
    return {nr, 0};
  }
};

// `n` reclaimers on `n` groups, reclaimed by `n` threads at once; reclaimer i unregisters
// reclaimer i+1 (mod n) while all are in flight: a cycle of waits.
void unregister_in_a_ring(int n) {
  Controller ctl(one_shard(nullptr));
  std::vector<GroupRef> groups(n);
  std::vector<RingRemover> removers(n);
  std::vector<RingRemover*> ring;
  std::vector<ReclaimerRegistration> regs;
  regs.reserve(n);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(ctl.create("g" + std::to_string(i), &groups[i]), 0);
    regs.emplace_back(*groups[i], removers[i]);
    ring.push_back(&removers[i]);
  }
  for (int i = 0; i < n; ++i) {
    removers[i].ring = &ring;
    removers[i].next = &regs[(i + 1) % n];
  }
  run_with_watchdog("reclaimers unregistering each other", [&] {
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i)
      threads.emplace_back([&, i] { reclaim(*groups[i], 32, ReclaimReason::kProactive); });
    for (auto& t : threads) t.join();
  });
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(removers[i].rendezvous_ok.load()) << i << ": not all calls were in flight";
    EXPECT_EQ(removers[i].calls.load(), 1) << i;
    EXPECT_FALSE(regs[i]) << i;
    EXPECT_EQ(reclaim(*groups[i], 32, ReclaimReason::kProactive), 0);
  }
  EXPECT_EQ(removers[0].calls.load(), 1);
}

TEST(ReclaimSafety, TwoReclaimersUnregisteringEachOtherInFlightDoNotDeadlock) {
  unregister_in_a_ring(2);
}

TEST(ReclaimSafety, ThreeReclaimersUnregisteringInARingDoNotDeadlock) {
  unregister_in_a_ring(3);
}

// A reclaimer whose reclaim() runs a nested reclaim, in which another reclaimer unregisters the
// outer one: the call to wait for runs on this very thread, below.
TEST(ReclaimSafety, UnregisteringAnOuterCallFromANestedReclaimDoesNotDeadlock) {
  Controller ctl(one_shard(nullptr));
  GroupRef outer_g, inner_g;
  ASSERT_EQ(ctl.create("outer", &outer_g), 0);
  ASSERT_EQ(ctl.create("inner", &inner_g), 0);
  struct Outer : Reclaimer {
    Group* inner = nullptr;
    int calls = 0;
    int64_t reclaimable() const noexcept override { return 64; }
    ReclaimResult reclaim(int64_t nr, int) override {
      if (calls++ == 0) memcg::reclaim(*inner, 32, ReclaimReason::kProactive);
      return {nr, 0};
    }
  } outer;
  struct Inner : Reclaimer {
    ReclaimerRegistration* victim = nullptr;
    int64_t reclaimable() const noexcept override { return 64; }
    ReclaimResult reclaim(int64_t nr, int) override {
      victim->reset();
      return {nr, 0};
    }
  } inner;
  outer.inner = inner_g.get();
  ReclaimerRegistration outer_reg(*outer_g, outer), inner_reg(*inner_g, inner);
  inner.victim = &outer_reg;
  run_with_watchdog("nested unregistration of the outer reclaimer",
                    [&] { reclaim(*outer_g, 32, ReclaimReason::kProactive); });
  EXPECT_FALSE(outer_reg);
  EXPECT_EQ(outer.calls, 1);
}

// Outside a cycle the guarantee holds: unregistering, from inside a reclaimer, another one whose
// call is in flight on another thread waits for that call to end.
TEST(ReclaimSafety, UnregisteringFromAReclaimerStillWaitsForACallInFlightElsewhere) {
  Controller ctl(one_shard(nullptr));
  GroupRef ga, gb;
  ASSERT_EQ(ctl.create("a", &ga), 0);
  ASSERT_EQ(ctl.create("b", &gb), 0);
  struct Slow : Reclaimer {
    std::atomic<bool> in{false}, release{false}, out{false};
    int64_t reclaimable() const noexcept override { return 64; }
    ReclaimResult reclaim(int64_t nr, int) override {
      if (in.exchange(true)) return {nr, 0};
      wait_flag(release);
      std::this_thread::sleep_for(milliseconds(50));
      out.store(true);
      return {nr, 0};
    }
  } slow;
  struct Remover : Reclaimer {
    ReclaimerRegistration* victim = nullptr;
    Slow* slow = nullptr;
    bool saw_out = false;
    int64_t reclaimable() const noexcept override { return 64; }
    ReclaimResult reclaim(int64_t nr, int) override {
      if (!victim || !*victim) return {nr, 0};
      slow->release.store(true);
      victim->reset();
      saw_out = slow->out.load();
      return {nr, 0};
    }
  } remover;
  ReclaimerRegistration slow_reg(*gb, slow), remover_reg(*ga, remover);
  remover.victim = &slow_reg;
  remover.slow = &slow;
  run_with_watchdog("unregistration waiting for a call elsewhere", [&] {
    std::thread tb([&] { reclaim(*gb, 32, ReclaimReason::kProactive); });
    EXPECT_TRUE(wait_flag(slow.in));
    reclaim(*ga, 32, ReclaimReason::kProactive);
    tb.join();
  });
  EXPECT_FALSE(slow_reg);
  EXPECT_TRUE(remover.saw_out) << "reset() returned while the call was still running";
}

}  // namespace
}  // namespace memcg
