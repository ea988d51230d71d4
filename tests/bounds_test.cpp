// Counts, sizes and times at the edge of what the library can represent: every public entry point
// refuses (or saturates) what does not fit instead of wrapping a counter, and PSI catches up over
// any jump of the clock in bounded time. Run under UBSan (asan preset) the old code reports the
// signed overflows these tests provoke.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "watchdog.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/files/files.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/counter/page_counter.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/percpu/internal/stock.hpp"

#include "manual_controller.hpp"

namespace memcg {
namespace {

using testing::Watchdog;

constexpr uint64_t kSec = 1'000'000'000;
constexpr uint64_t kFull = 100 * internal::PsiAverages::kFixed1;  // 100.00 %
constexpr uint64_t kEndOfTime = INT64_MAX;                        // Clock::kMaxNs
constexpr uint64_t kMaxObjectBytes = uint64_t{1} << 60;           // ObjStock::kMaxBytes


struct Tree : testing::ManualController {
  Tree() : ManualController(0) {
    a = make("a");
    a->set_max(1 << 20);
  }
  int64_t sentinel() const { return ctl.max_units(); }
  GroupRef a;
};

// ---- unit counts --------------------------------------------------------------------------------

TEST(Bounds, ForcedChargeOfInt64MaxIsRefused) {
  Tree t;
  Group& a = *t.a;
  ASSERT_EQ(try_charge(a, 1), ChargeStatus::kOk);  // a batch of 64 is now charged
  const int64_t before = a.memory().usage();
  // The old code forced this past max: 64 + INT64_MAX wrapped the counter.
  EXPECT_EQ(try_charge(a, INT64_MAX, kNoFail), ChargeStatus::kNoMem);
  EXPECT_EQ(try_charge(a, INT64_MAX, kNoFail | kHighPrio | kInReclaim | kMayBlock),
            ChargeStatus::kNoMem);
  EXPECT_EQ(a.memory().usage(), before);
  EXPECT_EQ(t.ctl.root().memory().usage(), before);
  // memory.max still holds.
  EXPECT_EQ(try_charge(a, (1 << 20) / 4096, 0), ChargeStatus::kNoMem);
  EXPECT_LE(a.current(), uint64_t{1} << 20);
  uncharge(a, 1);
}

TEST(Bounds, ForcedChargesNeverTakeUsageAboveTheSentinel) {
  Tree t;
  Group& a = *t.a;
  const int64_t s = t.sentinel();
  EXPECT_EQ(try_charge(a, s, kNoFail), ChargeStatus::kForced);
  EXPECT_EQ(a.memory().usage(), s);
  // A second one cannot be counted in bytes any more: refused, nothing changes.
  EXPECT_EQ(try_charge(a, s, kNoFail), ChargeStatus::kNoMem);
  EXPECT_EQ(try_charge(a, 1, kNoFail | kNoSpin), ChargeStatus::kNoMem);
  EXPECT_EQ(a.memory().usage(), s);
  EXPECT_EQ(t.ctl.root().memory().usage(), s);
  uncharge_direct(a, s);
  EXPECT_EQ(a.memory().usage(), 0);
  EXPECT_EQ(a.memory().underflows(), 0u);
}

TEST(Bounds, CountsOutOfRangeAreRefusedOrIgnored) {
  Tree t;
  Group& a = *t.a;
  EXPECT_EQ(try_charge(a, -5), ChargeStatus::kNoMem);
  EXPECT_EQ(try_charge(a, INT64_MIN, kNoFail), ChargeStatus::kNoMem);
  EXPECT_EQ(try_charge(a, t.sentinel() + 1, kNoFail), ChargeStatus::kNoMem);
  EXPECT_EQ(try_charge(a, 0), ChargeStatus::kOk);
  EXPECT_EQ(a.memory().usage(), 0);

  ASSERT_EQ(try_charge(a, 10, kDefaultCharge | kNoSpin), ChargeStatus::kOk);
  const uint64_t underflows = a.memory().underflows();
  // Nothing could have been charged this large: ignored, seen as underflows.
  uncharge(a, INT64_MAX);
  uncharge(a, -5);
  uncharge_direct(a, INT64_MAX);
  uncharge_direct(a, INT64_MIN);
  EXPECT_EQ(a.memory().usage(), 10);
  EXPECT_EQ(t.ctl.root().memory().usage(), 10);
  EXPECT_EQ(a.memory().underflows(), underflows + 4);
  uncharge_direct(a, 10);
  EXPECT_EQ(a.memory().usage(), 0);
  EXPECT_EQ(charge_stats(t.ctl).forced, 0u);
}

TEST(Bounds, MemberRefusesNegativeCharges) {
  Tree t;
  Member m(*t.a, "m", [](Member&) {});
  EXPECT_EQ(m.charge(-5), ChargeStatus::kNoMem);
  EXPECT_EQ(m.charge(INT64_MAX, kNoFail), ChargeStatus::kNoMem);
  EXPECT_EQ(m.charged(), 0);
  EXPECT_EQ(m.charge(3), ChargeStatus::kOk);
  EXPECT_EQ(m.uncharge(-1), 0);
  EXPECT_EQ(m.uncharge(INT64_MAX), 3);
  EXPECT_EQ(m.charged(), 0);
}

TEST(Bounds, ByteChargesBeyondTheSentinelAreRefused) {
  Tree t;
  Group& a = *t.a;
  const uint64_t max_bytes = static_cast<uint64_t>(t.sentinel()) << t.ctl.unit_shift();
  // The old code clamped to the sentinel and forced that: a charge of less than was asked.
  EXPECT_EQ(try_charge_bytes(a, UINT64_MAX, kNoFail), ChargeStatus::kNoMem);
  EXPECT_EQ(try_charge_bytes(a, max_bytes + 1, kNoFail), ChargeStatus::kNoMem);
  EXPECT_THROW(charge_or_throw(a, UINT64_MAX, kNoFail), std::bad_alloc);
  {
    ChargeHandle h(a, UINT64_MAX, kNoFail);
    EXPECT_FALSE(h.ok());
  }
  EXPECT_EQ(a.memory().usage(), 0);
  // Exactly the sentinel's worth is representable: forced, then given back.
  EXPECT_EQ(try_charge_bytes(a, max_bytes, kNoFail), ChargeStatus::kForced);
  EXPECT_EQ(a.memory().usage(), t.sentinel());
  uncharge_bytes(a, UINT64_MAX);  // ignored
  EXPECT_EQ(a.memory().usage(), t.sentinel());
  uncharge_bytes(a, max_bytes);
  t.ctl.stock().drain_all(nullptr);
  EXPECT_EQ(a.memory().usage(), 0);
  EXPECT_EQ(t.ctl.root().memory().usage(), 0);
}

TEST(Bounds, ObjectLayerRefusesSizesBeyondItsRange) {
  Tree t;
  Group& a = *t.a;
  EXPECT_EQ(try_charge_object(a, UINT64_MAX, kNoFail), ChargeStatus::kNoMem);
  EXPECT_EQ(try_charge_object(a, kMaxObjectBytes + 1, kNoFail), ChargeStatus::kNoMem);
  ASSERT_EQ(try_charge_object(a, 100), ChargeStatus::kOk);
  const uint64_t current = a.current();
  // The old code took UINT64_MAX as -1 bytes and corrupted the reserve.
  uncharge_object(a, UINT64_MAX);
  uncharge_object(a, kMaxObjectBytes + 1);
  EXPECT_EQ(a.current(), current);
  uncharge_object(a, 100);
  t.ctl.obj_stock().drain_all(nullptr);
  t.ctl.stock().drain_all(nullptr);
  EXPECT_EQ(a.current(), 0u);
  EXPECT_EQ(ObjStock::pooled(a), 0);
  EXPECT_EQ(a.memory().underflows(), 0u);
}

TEST(Bounds, PageCounterRefusesCountsOutOfRangeAndSettersSaturate) {
  const int64_t s = PageCounter::sentinel(12);
  PageCounter root(nullptr, s);
  PageCounter c(&root, s);
  EXPECT_EQ(c.try_charge(-1), &c);
  EXPECT_EQ(c.try_charge(s + 1), &c);
  EXPECT_EQ(c.try_charge(INT64_MAX), &c);
  EXPECT_FALSE(c.charge(-1));
  EXPECT_FALSE(c.charge(INT64_MAX));
  EXPECT_EQ(c.failcnt(), 0u);  // an argument error is no failure at a limit
  EXPECT_EQ(c.usage(), 0);
  EXPECT_EQ(root.usage(), 0);
  EXPECT_FALSE(c.uncharge(INT64_MIN));
  EXPECT_FALSE(c.uncharge(s + 1));
  EXPECT_EQ(c.underflows(), 2u);
  EXPECT_EQ(root.underflows(), 0u);

  // Forced charges stop at the sentinel at every level, whichever level would pass it.
  EXPECT_TRUE(c.charge(s - 1));
  EXPECT_TRUE(root.charge(1));
  EXPECT_FALSE(c.charge(1));  // root is full
  EXPECT_EQ(c.usage(), s - 1);
  EXPECT_EQ(root.usage(), s);
  EXPECT_TRUE(c.uncharge(s - 1));
  EXPECT_TRUE(root.uncharge(1));

  c.set_high(-5);
  EXPECT_EQ(c.high(), 0);
  c.set_min(INT64_MIN);
  EXPECT_EQ(c.min(), 0);
  c.set_low(-1);
  EXPECT_EQ(c.low(), 0);
  EXPECT_EQ(c.set_max_checked(-1), 0);  // 0, not below a usage of 0
  EXPECT_EQ(c.max(), 0);
  c.exchange_max(INT64_MAX);
  EXPECT_EQ(c.max(), s);
  c.set_high(INT64_MAX);
  EXPECT_EQ(c.high(), s);
}

TEST(Bounds, KnobsSaturateToMax) {
  Tree t;
  Group& a = *t.a;
  for (const char* file : {"memory.max", "memory.high", "memory.low", "memory.min"}) {
    // Past 64 bits: refused, the knob unchanged (a wrapped or saturated limit must not turn
    // memory.max off).
    EXPECT_EQ(write_file(a, file, "1M"), 0) << file;
    for (const char* huge : {"99999999999999999999999", "18446744073709551616", "16E"}) {
      EXPECT_EQ(write_file(a, file, huge), ERANGE) << file << " " << huge;
      std::string v;
      EXPECT_EQ(read_file(a, file, &v), 0);
      EXPECT_EQ(v, "1048576\n") << file << " " << huge;
    }
    // Within 64 bits, above the largest limit: `max`.
    EXPECT_EQ(write_file(a, file, "18446744073709551615"), 0) << file;
    std::string v;
    EXPECT_EQ(read_file(a, file, &v), 0);
    EXPECT_EQ(v, "max\n") << file;
  }
  a.set_max(UINT64_MAX);
  EXPECT_EQ(a.max(), kUnlimited);
  a.set_min(UINT64_MAX - 1);
  EXPECT_EQ(a.memory().min(), t.sentinel());
}

// Huge forced charges racing with small ones: each is refused or undone as a whole, the counter
// never wraps, and everything charged comes back.
TEST(Bounds, RacingHugeChargesNeverWrapTheCounter) {
  Tree t;
  Group& a = *t.a;
  a.set_max(kUnlimited);
  const int64_t s = t.sentinel();
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 2000; ++k) {
        if (i % 2 == 0) {
          if (charged(try_charge(a, s - 1, kNoFail | kNoSpin))) uncharge_direct(a, s - 1);
        } else if (charged(try_charge(a, 3, kNoSpin))) {
          EXPECT_GE(a.memory().usage(), 0);
          uncharge_direct(a, 3);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(a.memory().usage(), 0);
  EXPECT_EQ(t.ctl.root().memory().usage(), 0);
  EXPECT_EQ(a.memory().underflows(), 0u);
  EXPECT_LE(a.memory().watermark(), s);
}

// ---- time ---------------------------------------------------------------------------------------

TEST(Bounds, ManualClockSaturatesInsteadOfWrapping) {
  ManualClock clock(UINT64_MAX);
  EXPECT_EQ(clock.now_ns(), Clock::kMaxNs);
  ManualClock c2;
  c2.advance(UINT64_MAX);
  c2.advance(UINT64_MAX);
  EXPECT_EQ(c2.now_ns(), Clock::kMaxNs);
  c2.sleep_ns(5);
  EXPECT_EQ(c2.now_ns(), Clock::kMaxNs);
}

// A stall in progress while the clock jumps by ~2^63 ns: the old code folded the 4.6e9 periods
// one at a time.
TEST(Bounds, PsiCatchesUpOverAHugeJumpWhileStalled) {
  Watchdog dog("a PSI read after a 2^63 ns jump", std::chrono::seconds(60));
  Tree t;
  Group& a = *t.a;
  t.clock.advance(kSec);
  PsiStats st;
  {
    MemStall stall(a);  // the test thread is not attached: one task, fully stalled
    t.clock.advance(kEndOfTime - kSec - 123);
    st = psi_stats(a);
  }
  const uint64_t stalled_us = (kEndOfTime - kSec - 123) / 1000;
  EXPECT_EQ(st.total_us[0], stalled_us);
  EXPECT_EQ(st.total_us[1], stalled_us);
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 3; ++w) EXPECT_EQ(st.avg[s][w], kFull) << s << w;
  // At the end of time nothing moves any more, but reads still work.
  t.clock.advance(UINT64_MAX);
  st = psi_stats(a);
  EXPECT_EQ(st.total_us[0], stalled_us);
  std::string text;
  EXPECT_EQ(read_file(a, "memory.pressure", &text), 0);
}

// A clock that reads whatever the test sets, even past Clock::kMaxNs.
class SetClock final : public Clock {
 public:
  uint64_t now_ns() const noexcept override { return now.load(std::memory_order_relaxed); }
  void sleep_ns(uint64_t) noexcept override {}
  std::atomic<uint64_t> now{0};
};

// An idle group and a clock at its very end: the old code wrapped the averaging grid there and
// never left its loop (with a ManualClock advanced to UINT64_MAX, or any clock that reads it).
TEST(Bounds, PsiReadAtTheEndOfTimeReturns) {
  Watchdog dog("a PSI read at the end of time", std::chrono::seconds(60));
  Tree t;
  Group& a = *t.a;
  {
    MemStall stall(a);
    t.clock.advance(3 * kSec);
  }
  t.clock.advance(UINT64_MAX - t.clock.now_ns());
  PsiStats st = psi_stats(a);
  EXPECT_EQ(st.total_us[0], 3'000'000u);
  EXPECT_EQ(st.total_us[1], 3'000'000u);
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 3; ++w) EXPECT_EQ(st.avg[s][w], 0u) << s << w;  // decayed long ago

  SetClock clock;
  Options o = testing::ManualController::options(&clock);
  Controller ctl(o);
  GroupRef b;
  ASSERT_EQ(ctl.create("b", &b), 0);
  clock.now = UINT64_MAX;
  st = psi_stats(*b);
  EXPECT_EQ(st.total_us[0], 0u);
  {
    MemStall stall(*b);  // at the end of time a stall takes no time
  }
  st = psi_stats(*b);
  EXPECT_EQ(st.total_us[0], 0u);
  EXPECT_EQ(st.avg[0][0], 0u);
}

// The skip over converged periods gives exactly what period-by-period folding gives: one
// controller is read at every grid point, the other once at the end, with the same stall.
TEST(Bounds, PsiSkipMatchesPeriodByPeriod) {
  Watchdog dog("PSI period-by-period comparison", std::chrono::seconds(120));
  Tree stepped, jumped;
  constexpr uint64_t kPeriods = 3000;  // past the ~1800 the 300 s average needs to converge
  std::mutex mu;
  std::condition_variable cv;
  int phase = 0;  // 1: both stalls open; 2: close them
  auto staller = [&](Group& g) {
    MemStall stall(g);
    std::unique_lock lock(mu);
    ++phase;
    cv.notify_all();
    cv.wait(lock, [&] { return phase >= 3; });
  };
  // A stall that starts off the grid, so that the first period is a partial one.
  stepped.clock.advance(kSec / 3);
  jumped.clock.advance(kSec / 3);
  std::thread t1(staller, std::ref(*stepped.a));
  std::thread t2(staller, std::ref(*jumped.a));
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return phase == 2; });
  }
  for (uint64_t i = 0; i < kPeriods; ++i) {
    stepped.clock.advance(2 * kSec);
    psi_stats(*stepped.a);
  }
  jumped.clock.advance(kPeriods * 2 * kSec);
  PsiStats x = psi_stats(*stepped.a), y = psi_stats(*jumped.a);
  EXPECT_EQ(x.total_us[0], y.total_us[0]);
  EXPECT_EQ(x.total_us[1], y.total_us[1]);
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 3; ++w) {
      EXPECT_EQ(x.avg[s][w], y.avg[s][w]) << s << w;
      EXPECT_EQ(x.avg[s][w], kFull) << s << w;
    }
  {
    std::lock_guard lock(mu);
    phase = 3;
  }
  cv.notify_all();
  t1.join();
  t2.join();
  // Both idle from the same moment: they decay alike.
  stepped.clock.advance(kSec / 2);
  jumped.clock.advance(kSec / 2);
  for (int i = 0; i < 30; ++i) {
    stepped.clock.advance(2 * kSec);
    psi_stats(*stepped.a);
  }
  jumped.clock.advance(30 * 2 * kSec);
  x = psi_stats(*stepped.a);
  y = psi_stats(*jumped.a);
  EXPECT_EQ(x.total_us[0], y.total_us[0]);
  EXPECT_EQ(x.total_us[1], y.total_us[1]);
  // (Idle periods are decayed in one step with a rounded power, so the two may differ in the
  // last bits; both have left 100 %.)
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 3; ++w) {
      EXPECT_LT(x.avg[s][w], kFull) << s << w;
      EXPECT_LT(y.avg[s][w], kFull) << s << w;
    }
}

TEST(Bounds, PsiAveragesSkipOnlyAtTheirFixedPoint) {
  internal::PsiAverages avg;
  avg.reset(0);
  const bool stalled[2] = {true, false};
  uint64_t tot[2] = {2 * kSec, 0};
  // Not converged yet: refused, nothing changes.
  EXPECT_FALSE(avg.skip_steady(100 * kSec, stalled, tot));
  EXPECT_EQ(avg.next_update_ns(), 2 * kSec);
  uint64_t t = 2 * kSec;
  for (; avg.avg(0, 2) != kFull; t += 2 * kSec) {
    tot[0] = t;
    avg.update(t, tot);
    ASSERT_LT(t, 5000 * kSec) << "the 300 s average does not converge";
  }
  tot[0] = t;
  EXPECT_TRUE(avg.skip_steady(t + 1000 * kSec + 1, stalled, tot));
  EXPECT_EQ(avg.last_update_ns(), t + 1000 * kSec);
  EXPECT_EQ(avg.next_update_ns(), t + 1002 * kSec);
  EXPECT_EQ(avg.reported(0), t + 1000 * kSec);
  EXPECT_EQ(avg.avg(0, 0), kFull);
  EXPECT_EQ(avg.avg(1, 0), 0u);
}

}  // namespace
}  // namespace memcg
