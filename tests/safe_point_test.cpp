// The safe point (memcg/core/charge/safe_point.hpp) without an allocator: charges made inside an
// AllocHookScope (core/internal/alloc_hook.hpp) take the counters only, and the ladder they
// leave runs at safe_point(), one bounded pass per group, paused after a pass that could not
// bring the group back. Built in every preset (the jemalloc tests are not built under
// sanitizers): this is where ASan and TSan see the deferred ladder.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "memcg/base/clock.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/charge/internal/alloc_hook.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/charge/safe_point.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using internal::AllocHookScope;
using memcg::testing::Watchdog;

// Reports one unit to reclaim and frees nothing, as a cache whose entry is pinned would: asked
// once per reclaim pass (at its last priority), it counts the passes.
class Pinned final : public Reclaimer {
 public:
  int64_t reclaimable() const noexcept override { return 1; }
  ReclaimResult reclaim(int64_t nr, int) override {
    calls.fetch_add(1);
    return {nr, 0};
  }
  std::atomic<int> calls{0};
};

ChargeStatus charge_in_hook(Group& g, int64_t units, uint32_t flags) {
  AllocHookScope hook;
  return try_charge(g, units, flags);
}

struct Fixture {
  explicit Fixture(Clock* clock) : ctl(options(clock)) {
    EXPECT_EQ(ctl.create("t", &g), 0);
    g->set_max(64 * ctl.unit_size());
    ctl.set_oom_hook([this](Group&, int64_t) {
      oom_calls.fetch_add(1);
      return false;  // nothing to kill
    });
  }
  static Options options(Clock* clock) {
    Options o;
    o.clock = clock;
    o.batch = 1;  // no stock: the counters show every unit
    return o;
  }
  Controller ctl;
  GroupRef g;
  std::atomic<int> oom_calls{0};
};

// Forced in a hook: nothing of the ladder runs there; the safe point runs one bounded pass
// (reclaim that frees nothing is not retried), then pauses the group's ladder
// for kStalledLadderBackoffNs of the controller's clock while the forced units are still charged.
TEST(SafePoint, AForcedChargeRunsOneBoundedPassThenPauses) {
  ManualClock clock(uint64_t{1} << 40);
  Fixture f(&clock);
  Group& g = *f.g;
  Pinned pinned;
  ReclaimerRegistration reg(g, pinned);
  ASSERT_EQ(try_charge(g, 64, kDefaultCharge), ChargeStatus::kOk);
  ASSERT_EQ(charge_in_hook(g, 8, kNoFail), ChargeStatus::kForced);
  EXPECT_EQ(g.events().get(Event::kMax), 0u);  // nothing ran inside the hook
  EXPECT_EQ(pinned.calls.load(), 0);
  EXPECT_EQ(f.oom_calls.load(), 0);
  EXPECT_TRUE(safe_point());
  EXPECT_FALSE(safe_point());  // nothing left
  EXPECT_EQ(g.events().get(Event::kMax), 1u);
  EXPECT_EQ(f.oom_calls.load(), 1);
  const int first_pass = pinned.calls.load();
  EXPECT_GE(first_pass, 1);
  EXPECT_LE(first_pass, 4);  // before: one call per retry, 18 of them
  // Paused: forced and counted, no ladder.
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(charge_in_hook(g, 1, kNoFail), ChargeStatus::kForced);
    EXPECT_TRUE(safe_point());
  }
  EXPECT_EQ(g.events().get(Event::kMax), 1u);
  EXPECT_EQ(f.oom_calls.load(), 1);
  EXPECT_EQ(pinned.calls.load(), first_pass);
  EXPECT_EQ(g.current(), (64 + 8 + 10) * f.ctl.unit_size());
  // After the pause the next pass runs in full, the OOM policy included.
  clock.advance(kStalledLadderBackoffNs);
  ASSERT_EQ(charge_in_hook(g, 1, kNoFail), ChargeStatus::kForced);
  EXPECT_TRUE(safe_point());
  EXPECT_EQ(g.events().get(Event::kMax), 2u);
  EXPECT_EQ(f.oom_calls.load(), 2);
  EXPECT_GT(pinned.calls.load(), first_pass);
  uncharge_direct(g, 64 + 8 + 11);
  EXPECT_EQ(g.current(), 0u);
}

// The pause is the group's: after one thread's forced pass stalled, another thread of the same
// group that forces charges runs no pass either until the pause is over (the ladder acts on the
// group: two threads would otherwise run two passes and two OOM decisions for one overshoot).
TEST(SafePoint, AStalledPassPausesTheGroupsLadderOnEveryThread) {
  ManualClock clock(uint64_t{1} << 40);
  Fixture f(&clock);
  Group& g = *f.g;
  Pinned pinned;
  ReclaimerRegistration reg(g, pinned);
  ASSERT_EQ(try_charge(g, 64, kDefaultCharge), ChargeStatus::kOk);
  ASSERT_EQ(charge_in_hook(g, 8, kNoFail), ChargeStatus::kForced);
  EXPECT_TRUE(safe_point());  // stalls: nothing can be reclaimed or killed
  EXPECT_EQ(f.oom_calls.load(), 1);
  EXPECT_EQ(g.events().get(Event::kMax), 1u);
  const int first_pass = pinned.calls.load();
  auto other_thread = [&] {
    std::thread t([&] {
      ASSERT_EQ(charge_in_hook(g, 1, kNoFail), ChargeStatus::kForced);
      EXPECT_TRUE(safe_point());
    });
    t.join();
  };
  other_thread();
  EXPECT_EQ(f.oom_calls.load(), 1);  // per-thread pauses: 2
  EXPECT_EQ(g.events().get(Event::kMax), 1u);
  EXPECT_EQ(pinned.calls.load(), first_pass);
  clock.advance(kStalledLadderBackoffNs);
  other_thread();  // the pause is over: a full pass, the OOM policy included
  EXPECT_EQ(f.oom_calls.load(), 2);
  EXPECT_EQ(g.events().get(Event::kMax), 2u);
  uncharge_direct(g, 64 + 8 + 2);
  EXPECT_EQ(g.current(), 0u);
}

// A pass that brings the group back leaves no pause: the next forced charge runs its ladder.
TEST(SafePoint, APassThatBringsTheGroupBackLeavesNoPause) {
  ManualClock clock(uint64_t{1} << 40);
  Fixture f(&clock);
  Group& g = *f.g;
  ASSERT_EQ(try_charge(g, 64, kDefaultCharge), ChargeStatus::kOk);
  ASSERT_EQ(charge_in_hook(g, 4, kNoFail), ChargeStatus::kForced);
  EXPECT_TRUE(safe_point());  // stalls: nothing to reclaim
  EXPECT_EQ(f.oom_calls.load(), 1);
  uncharge_direct(g, 64 + 4);
  ASSERT_EQ(charge_in_hook(g, 1, kNoFail), ChargeStatus::kOk);  // fits: no record of a ladder
  safe_point();
  // The group was back under its limit: a stall afterwards runs its ladder at once.
  ASSERT_EQ(try_charge(g, 63, kDefaultCharge), ChargeStatus::kOk);
  clock.advance(kStalledLadderBackoffNs);
  ASSERT_EQ(charge_in_hook(g, 2, kNoFail), ChargeStatus::kForced);
  EXPECT_TRUE(safe_point());
  EXPECT_EQ(f.oom_calls.load(), 2);
  uncharge_direct(g, 64 + 2);
  EXPECT_EQ(g.current(), 0u);
}

// Refused in a hook (an allocator retrying underneath asks three times): one failure, one `max`
// event and one OOM decision, at the safe point; a refusal is never paused.
TEST(SafePoint, ARefusalCountsOnceAndRunsOneLadder) {
  ManualClock clock(uint64_t{1} << 40);
  Fixture f(&clock);
  Group& g = *f.g;
  ASSERT_EQ(try_charge(g, 64, kDefaultCharge), ChargeStatus::kOk);
  const uint64_t failed_before = charge_stats(f.ctl).failed;
  for (int i = 0; i < 2; ++i) {
    {
      AllocHookScope hook;
      for (int retry = 0; retry < 3; ++retry)
        EXPECT_EQ(try_charge(g, 4, kDefaultCharge), ChargeStatus::kNoMem);
    }
    EXPECT_EQ(f.oom_calls.load(), i);
    EXPECT_TRUE(safe_point());
    EXPECT_EQ(charge_stats(f.ctl).failed - failed_before, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(g.events().get(Event::kMax), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(f.oom_calls.load(), i + 1);  // the same clock time: refusals are not paused
  }
  EXPECT_EQ(g.current(), 64 * f.ctl.unit_size());
  uncharge_direct(g, 64);
}

// Threads forcing in hooks and running safe points while another moves memory.max: the
// counters end where they started (ThreadSanitizer sees the deferred records and the pauses).
TEST(SafePoint, ThreadsForcingAndRunningSafePointsAgainstMaxWrites) {
  Watchdog dog("safe points against memory.max writes", std::chrono::seconds(60));
  Fixture f(nullptr);
  Group& g = *f.g;
  Pinned pinned;
  ReclaimerRegistration reg(g, pinned);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (uint64_t i = 0; !stop.load(); ++i) {
      g.set_max((16 + i % 64) * f.ctl.unit_size());
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t)
    workers.emplace_back([&] {
      for (int i = 0; i < 3000; ++i) {
        const ChargeStatus s = charge_in_hook(g, 2, kNoFail);
        EXPECT_NE(s, ChargeStatus::kNoMem);
        safe_point();
        uncharge_direct(g, 2);
      }
    });
  for (std::thread& w : workers) w.join();
  stop.store(true);
  writer.join();
  EXPECT_FALSE(safe_point());
  EXPECT_EQ(g.current(), 0u);
}

}  // namespace
}  // namespace memcg
