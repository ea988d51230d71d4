// Waiting charges with priorities (charge_wait.hpp, WaitOptions): the order of grants across
// classes, aging across classes, the per-group default and its file, the per-class figures and
// the wait times of memory.wait. All on a ManualClock: every grant is made synchronously by the
// uncharging thread, so the order is checked exactly, one freed unit at a time.
#include "memcg/core/wait/charge_wait.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "charge_wait_support.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/files/files.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;
using namespace testing_wait;

// A pool P (max 10, full) and one child per waiter, so that who was granted shows in the
// children's usage at once.
struct Pool {
  ManualClock clock{1'000'000};
  Controller ctl{on_clock(&clock)};
  GroupRef p, filler;
  std::vector<GroupRef> kids;
  std::vector<std::unique_ptr<AsyncCall>> calls;
  explicit Pool(int n, std::chrono::nanoseconds aging) {
    set_wait_aging(ctl, aging);
    EXPECT_EQ(ctl.create("p", &p), 0);
    EXPECT_EQ(ctl.create("p/filler", &filler), 0);
    p->set_max(10 * kUnit);
    EXPECT_EQ(try_charge(*filler, 10), ChargeStatus::kOk);
    for (int i = 0; i < n; ++i) {
      GroupRef k;
      EXPECT_EQ(ctl.create("p/k" + std::to_string(i), &k), 0);
      kids.push_back(k);
    }
  }
  // Kid i waits for `units` in class `prio`; returns once it is queued.
  void wait(int i, int64_t units, WaitPriority prio) {
    const uint64_t before = wait_stats(*p).waiters;
    Group& g = *kids[i];
    calls.push_back(std::make_unique<AsyncCall>([&g, units, prio](std::stop_token st) {
      return try_charge_wait_for(g, units, 100s, st, WaitOptions{prio, kDefaultKind});
    }));
    EXPECT_TRUE(eventually([&] { return wait_stats(*p).waiters == before + 1; }));
  }
  // The kids holding memory now, as a string of their indices ("" if none).
  std::string holders() {
    std::string s;
    for (size_t i = 0; i < kids.size(); ++i)
      if (used(*kids[i]) > 0) s += std::to_string(i);
    return s;
  }
  ~Pool() {
    for (auto& c : calls) c->th.request_stop();
    calls.clear();
  }
};

// Higher classes first; arrival order within a class. Arrivals: low, normal, high, high.
TEST(ChargeWaitPriority, HigherClassesFirstArrivalOrderWithin) {
  testing::Watchdog dog("HigherClassesFirstArrivalOrderWithin");
  Pool pool(4, 100s);  // no aging within the test
  pool.wait(0, 1, WaitPriority::kLow);
  pool.wait(1, 1, WaitPriority::kNormal);
  pool.wait(2, 1, WaitPriority::kHigh);
  pool.wait(3, 1, WaitPriority::kHigh);
  const char* expected[] = {"2", "23", "123", "0123"};
  for (const char* e : expected) {
    uncharge_direct(*pool.filler, 1);
    EXPECT_EQ(pool.holders(), e);
  }
  for (auto& c : pool.calls) EXPECT_EQ(c->status(), WaitStatus::kOk);
  const WaitStats s = wait_stats(*pool.p);
  EXPECT_EQ(s.by_priority[0].granted, 1u);
  EXPECT_EQ(s.by_priority[1].granted, 1u);
  EXPECT_EQ(s.by_priority[2].granted, 2u);
  EXPECT_EQ(s.granted, 4u);
}

// The bypass holds across classes: a high request that does not fit does not hold back a low
// one that does.
TEST(ChargeWaitPriority, ALargeHighRequestDoesNotBlockASmallLowOne) {
  testing::Watchdog dog("ALargeHighRequestDoesNotBlockASmallLowOne");
  Pool pool(2, 100s);
  pool.wait(0, 5, WaitPriority::kHigh);
  pool.wait(1, 1, WaitPriority::kLow);
  uncharge_direct(*pool.filler, 2);
  EXPECT_EQ(pool.holders(), "1");
  uncharge_direct(*pool.filler, 4);  // 1 + 4 = 5 free
  EXPECT_EQ(pool.holders(), "01");
}

// Aging across classes: the bound is half for high, twice for low (aging A = 100 ms here). A low
// waiter that came at t=0 is aged at 200 ms; a high one that came at 160 ms is aged at 210 ms: at
// 250 ms the low one is served first, and what is freed is reserved for it (it asks 3).
// Before 200 ms the high one goes first.
TEST(ChargeWaitPriority, LowerClassAgesAndIsNotStarved) {
  testing::Watchdog dog("LowerClassAgesAndIsNotStarved");
  {
    Pool pool(2, 100ms);
    pool.wait(0, 3, WaitPriority::kLow);
    pool.clock.advance(160'000'000);
    pool.wait(1, 1, WaitPriority::kHigh);
    pool.clock.advance(90'000'000);  // t = 250 ms
    uncharge_direct(*pool.filler, 1);
    EXPECT_EQ(pool.holders(), "0");  // a reserve of 1 for the low waiter
    EXPECT_EQ(wait_stats(*pool.p).reserved_bytes, kUnit);
    uncharge_direct(*pool.filler, 2);
    EXPECT_EQ(pool.calls[0]->status(), WaitStatus::kOk);
    EXPECT_EQ(used(*pool.kids[0]), 3);
    EXPECT_EQ(used(*pool.kids[1]), 0);
    uncharge_direct(*pool.filler, 1);
    EXPECT_EQ(pool.holders(), "01");
  }
  {
    Pool pool(2, 100ms);
    pool.wait(0, 1, WaitPriority::kLow);
    pool.clock.advance(100'000'000);
    pool.wait(1, 1, WaitPriority::kHigh);
    pool.clock.advance(50'000'000);  // t = 150 ms: the high one is aged, the low one not yet
    uncharge_direct(*pool.filler, 1);
    EXPECT_EQ(pool.holders(), "1");
  }
}

// Aging 0 is strict arrival order: no bypass and no classes.
TEST(ChargeWaitPriority, AgingZeroIsStrictArrivalOrder) {
  testing::Watchdog dog("AgingZeroIsStrictArrivalOrder");
  Pool pool(3, 0ns);
  pool.wait(0, 2, WaitPriority::kLow);
  pool.wait(1, 1, WaitPriority::kHigh);
  pool.wait(2, 1, WaitPriority::kNormal);
  uncharge_direct(*pool.filler, 1);
  EXPECT_EQ(pool.holders(), "0");  // reserved for the first
  uncharge_direct(*pool.filler, 1);
  EXPECT_EQ(pool.calls[0]->status(), WaitStatus::kOk);
  uncharge_direct(*pool.filler, 1);
  EXPECT_EQ(pool.holders(), "01");
  uncharge_direct(*pool.filler, 1);
  EXPECT_EQ(pool.holders(), "012");
}

// The group's default class, set by the call or its file; requests with kDefault take it.
TEST(ChargeWaitPriority, GroupDefaultAndItsFile) {
  testing::Watchdog dog("GroupDefaultAndItsFile");
  Pool pool(2, 100s);
  Group& k0 = *pool.kids[0];
  EXPECT_EQ(wait_priority(k0), WaitPriority::kNormal);
  EXPECT_EQ(file(k0, "memory.wait.priority"), "normal\n");
  EXPECT_EQ(write_file(k0, "memory.wait.priority", "high\n"), 0);
  EXPECT_EQ(wait_priority(k0), WaitPriority::kHigh);
  EXPECT_EQ(file(k0, "memory.wait.priority"), "high\n");
  // Bad input changes nothing.
  EXPECT_EQ(write_file(k0, "memory.wait.priority", "urgent"), EINVAL);
  EXPECT_EQ(write_file(k0, "memory.wait.priority", ""), EINVAL);
  EXPECT_EQ(set_wait_priority(k0, WaitPriority::kDefault), EINVAL);
  EXPECT_EQ(set_wait_priority(k0, static_cast<WaitPriority>(7)), EINVAL);
  EXPECT_EQ(set_wait_priority(pool.ctl.root(), WaitPriority::kLow), ENOENT);
  EXPECT_EQ(wait_priority(k0), WaitPriority::kHigh);
  std::string out;
  EXPECT_EQ(read_file(pool.ctl.root(), "memory.wait.priority", &out), ENOENT);
  // A request out of range is refused before anything happens.
  EXPECT_EQ(try_charge_wait_for(k0, 1, 1s, {}, WaitOptions{static_cast<WaitPriority>(3)}),
            WaitStatus::kInvalid);
  EXPECT_EQ(wait_stats(*pool.p).waits, 0u);

  // kids[1] (normal) comes first, kids[0] (its default: high) second; kids[0] is served first.
  pool.wait(1, 1, WaitPriority::kDefault);
  pool.wait(0, 1, WaitPriority::kDefault);
  EXPECT_EQ(wait_stats(*pool.p).by_priority[2].waiters, 1u);
  uncharge_direct(*pool.filler, 1);
  EXPECT_EQ(pool.holders(), "0");
  // A request's own class wins over the default.
  EXPECT_EQ(set_wait_priority(k0, WaitPriority::kLow), 0);
  EXPECT_EQ(wait_priority(k0), WaitPriority::kLow);
}

// memory.wait: the totals first (as before), then the wait times and the per-class lines.
TEST(ChargeWaitPriority, MemoryWaitShowsClassesAndWaitTimes) {
  testing::Watchdog dog("MemoryWaitShowsClassesAndWaitTimes");
  Pool pool(2, 100s);
  pool.wait(0, 1, WaitPriority::kHigh);
  pool.wait(1, 2, WaitPriority::kLow);
  pool.clock.advance(30'000'000);
  uncharge_direct(*pool.filler, 1);
  EXPECT_EQ(pool.calls[0]->status(), WaitStatus::kOk);
  pool.clock.advance(2'000'000'000);
  uncharge_direct(*pool.filler, 2);
  EXPECT_EQ(pool.calls[1]->status(), WaitStatus::kOk);
  EXPECT_EQ(file(*pool.p, "memory.wait"),
            "waiters 0\nqueued_bytes 0\nreserved_bytes 0\nwaits 2\ngranted 2\ntimed_out 0\n"
            "cancelled 0\nremoved 0\n"
            "last_wait_usec 2030000\nmax_wait_usec 2030000\n"
            "high_waiters 0\nhigh_queued_bytes 0\nhigh_waits 1\nhigh_granted 1\n"
            "high_timed_out 0\nhigh_cancelled 0\nhigh_removed 0\n"
            "normal_waiters 0\nnormal_queued_bytes 0\nnormal_waits 0\nnormal_granted 0\n"
            "normal_timed_out 0\nnormal_cancelled 0\nnormal_removed 0\n"
            "low_waiters 0\nlow_queued_bytes 0\nlow_waits 1\nlow_granted 1\n"
            "low_timed_out 0\nlow_cancelled 0\nlow_removed 0\nnever_fits 0\n"
            "admit_growth_permille 1000\nadmit_samples 0\nadmit_promised_bytes 0\nadmit_waits 0\n"
            "growth_waits 0\ngrowth_granted 0\ngrowth_bound_usec 20000\n"
            "admit_tolerance_permille 4000\nadmit_skipped 0\nadmit_reclaims 0\n"
                "admit_reclaimed_bytes 0\n");
  const WaitStats s = wait_stats(*pool.p);
  EXPECT_EQ(s.wait_ns_sum, 30'000'000u + 2'030'000'000u);
  // Cumulative buckets: 30 ms is in <= 100 ms and above; 2.03 s in <= 10 s and above.
  const uint64_t expected[WaitStats::kBuckets] = {0, 0, 1, 1, 2, 2};
  for (int i = 0; i < WaitStats::kBuckets; ++i) EXPECT_EQ(s.wait_buckets[i], expected[i]) << i;
}

// A Member passes its options through.
TEST(ChargeWaitPriority, MemberChargeWaitTakesOptions) {
  testing::Watchdog dog("MemberChargeWaitTakesOptions");
  Pool pool(1, 100s);
  Member m(*pool.kids[0], "q", nullptr);
  pool.wait(0, 1, WaitPriority::kLow);  // another waiter of kids[0], low, first
  AsyncCall w([&](std::stop_token st) {
    return m.charge_wait(1, 100s, st, WaitOptions{WaitPriority::kHigh, kDefaultKind});
  });
  ASSERT_TRUE(eventually([&] { return wait_stats(*pool.p).waiters == 2; }));
  uncharge_direct(*pool.filler, 1);
  EXPECT_EQ(w.status(), WaitStatus::kOk);
  EXPECT_EQ(m.charged(), 1);
  EXPECT_EQ(wait_stats(*pool.p).by_priority[0].waiters, 1u);
  m.uncharge(1);
}

}  // namespace
}  // namespace memcg
