// Admission by learned peak (admission.hpp): the learning rule (history, decay, bounds, no
// history), admission by expected peak, never-fits at every entry point. Growth past admission
// (reservation.hpp) is in admission_growth_test.cpp.
#include "memcg/core/admission/admission.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <algorithm>
#include <cmath>

#include "admission_support.hpp"
#include "charge_wait_support.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/admission/reservation.hpp"
#include "memcg/files/files.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;
using testing_admit::AdmitTest;
using testing_admit::run_one;
using testing_wait::eventually;
using testing_wait::file;
using testing_wait::kUnit;
using testing_wait::on_clock;

TEST_F(AdmitTest, NoHistoryIsFactorOneAndPlainAdmission) {
  EXPECT_EQ(admit_growth(*g), 1000u);
  EXPECT_EQ(file(*g, "memory.admit.growth"), "auto 1.000\n");
  EXPECT_EQ(wait_line("admit_growth_permille"), "1000");
  // Two ratios are not yet a history (kAdmitMinWeight): still the prior.
  run_one(*g, 10, 20);
  run_one(*g, 10, 20);
  EXPECT_EQ(admit_stats(*g).samples, 2u);
  EXPECT_EQ(admit_growth(*g), 1000u);
  // A non-waiting reserve() teaches nothing.
  {
    Reservation r(*g);
    ASSERT_EQ(r.reserve(10 * kUnit), ReserveStatus::kOk);
    ASSERT_EQ(r.grow(30 * kUnit), ReserveStatus::kOk);
  }
  EXPECT_EQ(admit_stats(*g).samples, 2u);
  EXPECT_EQ(g->memory().usage(), 0);
  EXPECT_EQ(admit_stats(*g).promised_units, 0);
}

// The documented rule, computed here from the ratios in the order they were learned: the
// decayed mean (each new ratio ages the earlier ones by kAdmitDecay), to the nearest thousandth.
uint32_t decayed_mean_permille(const std::vector<double>& ratios) {
  double sum = 0, total = 0;
  for (const double r : ratios) {
    sum = sum * kAdmitDecay + std::min(r, kAdmitMaxGrowthPermille / 1000.0);
    total = total * kAdmitDecay + 1;
  }
  return static_cast<uint32_t>(std::lround(1000.0 * sum / total));
}

TEST_F(AdmitTest, LearnsTheDecayedMeanOfPeakOverAdmitted) {
  std::vector<double> seen;
  for (int i = 0; i < 10; ++i) {
    run_one(*g, 10, 12);  // 1.2
    seen.push_back(1.2);
  }
  EXPECT_EQ(admit_growth(*g), 1200u);
  EXPECT_EQ(file(*g, "memory.admit.growth"), "auto 1.200\n");
  for (int i = 0; i < 2; ++i) {
    run_one(*g, 10, 30);  // 3.0: the newest weigh most
    seen.push_back(3.0);
  }
  const uint32_t with_outliers = decayed_mean_permille(seen);
  EXPECT_EQ(admit_growth(*g), with_outliers);
  EXPECT_GT(with_outliers, 1400u);  // two of twelve at 3.0 move the mean, not to 3.0
  EXPECT_LT(with_outliers, 1600u);
  for (int i = 0; i < 10; ++i) {
    run_one(*g, 10, 12);
    seen.push_back(1.2);
  }
  EXPECT_EQ(admit_growth(*g), decayed_mean_permille(seen));
  EXPECT_LT(admit_growth(*g), with_outliers);  // the outliers age
  EXPECT_EQ(wait_line("admit_samples"), "22");
}

TEST_F(AdmitTest, DecayForgetsOldGrowth) {
  std::vector<double> seen;
  for (int i = 0; i < 20; ++i) {
    run_one(*g, 10, 15);
    seen.push_back(1.5);
  }
  EXPECT_EQ(admit_growth(*g), 1500u);
  for (int i = 0; i < 40; ++i) {
    run_one(*g, 10, 10);
    seen.push_back(1.0);
  }
  EXPECT_EQ(admit_growth(*g), decayed_mean_permille(seen));
  EXPECT_GT(admit_growth(*g), 1050u);  // 20 ratios at 1.5 still weigh about 15 % after 40
  for (int i = 0; i < 300; ++i) run_one(*g, 10, 10);
  EXPECT_EQ(admit_growth(*g), 1000u);  // ... and nothing after 340
  const AdmitStats s = admit_stats(*g);
  EXPECT_EQ(s.samples, 360u);
  EXPECT_LT(s.weight, 32.0);  // bounded by 1 / (1 - kAdmitDecay)
}

// Work cut short (its member OOM-killed, or its growth refused) teaches nothing: a runaway
// stopped at a limit would otherwise teach the group the limit over its estimate.
TEST_F(AdmitTest, WorkCutShortTeachesNothing) {
  for (int i = 0; i < 5; ++i) run_one(*g, 10, 12);
  ASSERT_EQ(admit_growth(*g), 1200u);
  {  // a runaway: admitted at 10, grown to 40, then OOM-killed
    Member m(*g, "runaway", nullptr);
    Reservation r(m);
    ASSERT_EQ(r.reserve_for(10 * kUnit, 1s), ReserveStatus::kOk);
    ASSERT_EQ(r.grow(30 * kUnit), ReserveStatus::kOk);
    ASSERT_TRUE(OomKiller::kill(*g, 1000));  // no room for 1000 units: it is the victim
    ASSERT_TRUE(m.killed());
    EXPECT_EQ(r.grow(kUnit), ReserveStatus::kKilled);
  }
  EXPECT_EQ(admit_stats(*g).samples, 5u);
  EXPECT_EQ(admit_stats(*g).skipped, 1u);
  {  // grown to 3x, then a growth past the limit: refused (never-fits), the work unwinds
    Reservation r(*g);
    ASSERT_EQ(r.reserve_for(10 * kUnit, 1s), ReserveStatus::kOk);
    ASSERT_EQ(r.grow(20 * kUnit), ReserveStatus::kOk);
    EXPECT_EQ(r.grow(2000 * kUnit), ReserveStatus::kNeverFits);
  }
  EXPECT_EQ(admit_stats(*g).skipped, 2u);
  EXPECT_EQ(admit_growth(*g), 1200u);  // neither 4.0 nor 3.0 was learned
  {  // the next admission of the same reservation starts clean: it teaches again
    Reservation r(*g);
    ASSERT_EQ(r.reserve_for(10 * kUnit, 1s), ReserveStatus::kOk);
    EXPECT_EQ(r.grow(2000 * kUnit), ReserveStatus::kNeverFits);
    ASSERT_EQ(r.reserve_for(10 * kUnit, 1s), ReserveStatus::kOk);  // ends the refused one
    ASSERT_EQ(r.grow(2 * kUnit), ReserveStatus::kOk);
  }
  EXPECT_EQ(admit_stats(*g).skipped, 3u);
  EXPECT_EQ(wait_line("admit_skipped"), "3");
  EXPECT_EQ(admit_stats(*g).samples, 6u);
  EXPECT_EQ(g->memory().usage(), 0);
  EXPECT_EQ(admit_stats(*g).promised_units, 0);
}

TEST_F(AdmitTest, FactorIsClampedAndSettable) {
  for (int i = 0; i < 10; ++i) run_one(*g, 10, 200);  // 20x: clamped
  EXPECT_EQ(admit_growth(*g), kAdmitMaxGrowthPermille);
  EXPECT_EQ(set_admit_growth(*g, 999), EINVAL);
  EXPECT_EQ(set_admit_growth(*g, kAdmitMaxGrowthPermille + 1), EINVAL);
  EXPECT_EQ(set_admit_growth(ctl.root(), 1500), ENOENT);
  EXPECT_EQ(admit_growth_setting(*g), 0u);  // the refusals changed nothing
  EXPECT_EQ(write_file(*g, "memory.admit.growth", "1.25\n"), 0);
  EXPECT_EQ(file(*g, "memory.admit.growth"), "1.250\n");
  EXPECT_EQ(admit_growth(*g), 1250u);
  EXPECT_TRUE(admit_stats(*g).fixed);
  for (const char* bad : {"0.5", "4.001", "abc", "1.", "", "1.2345", "-1"})
    EXPECT_EQ(write_file(*g, "memory.admit.growth", bad), EINVAL) << bad;
  EXPECT_EQ(admit_growth(*g), 1250u);
  EXPECT_EQ(write_file(*g, "memory.admit.growth", "auto"), 0);
  EXPECT_EQ(file(*g, "memory.admit.growth"), "auto 4.000\n");  // the history was kept
  EXPECT_EQ(write_file(*g, "memory.admit.growth", "2"), 0);
  EXPECT_EQ(admit_growth(*g), 2000u);
}

// A waiting admission on its own thread.
struct AsyncReserve {
  std::atomic<int> result{-1};
  Reservation r;
  std::jthread th;
  AsyncReserve(Group& g, int64_t units, std::chrono::nanoseconds timeout) : r(g) {
    th = std::jthread([this, units, timeout] {
      result.store(static_cast<int>(r.reserve_for(units * kUnit, timeout)));
    });
  }
  bool done() const { return result.load() >= 0; }
  ReserveStatus status() {
    th.join();
    return static_cast<ReserveStatus>(result.load());
  }
};

TEST_F(AdmitTest, AdmitsByExpectedPeakAndPromisesTheHeadroom) {
  testing::Watchdog dog("AdmitsByExpectedPeakAndPromisesTheHeadroom");
  g->set_max(100 * kUnit);
  ASSERT_EQ(set_admit_growth(*g, 2000), 0);
  Reservation a(*g);
  ASSERT_EQ(a.reserve_for(30 * kUnit, 1s), ReserveStatus::kOk);
  EXPECT_EQ(admit_stats(*g).promised_units, 30);  // expected 60, 30 held
  EXPECT_EQ(wait_line("admit_promised_bytes"), std::to_string(30 * kUnit));
  // 30 used + 30 promised + 60 expected > 100: waits although 30 units would fit now.
  AsyncReserve b(*g, 30, 10s);
  ASSERT_TRUE(eventually([&] { return admit_stats(*g).admit_waits == 1; }));
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(b.done());
  ASSERT_EQ(a.grow(20 * kUnit), ReserveStatus::kOk);  // within its promise: no wait, no kill
  EXPECT_EQ(admit_stats(*g).promised_units, 10);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(b.done());  // 50 used + 10 promised + 60 > 100
  a.release();             // the promise and the memory come back: b is admitted
  EXPECT_EQ(b.status(), ReserveStatus::kOk);
  EXPECT_EQ(b.r.admitted_units(), 30);
  EXPECT_EQ(admit_stats(*g).promised_units, 30);
  EXPECT_EQ(admit_stats(*g).samples, 1u);  // a taught its 50 / 30
  b.r.release();
  EXPECT_EQ(admit_stats(*g).promised_units, 0);
  EXPECT_EQ(g->memory().usage(), 0);
}

// A clock whose waits end only when woken (or stopped): time stands still and nothing polls, so
// a waiter that is not woken stays blocked.
class WakeOnlyClock final : public Clock {
 public:
  uint64_t now_ns() const noexcept override { return 1'000'000; }
  void sleep_ns(uint64_t) noexcept override {}
  bool wait_until(ClockWaiter& w, std::unique_lock<std::mutex>& lock, uint64_t,
                  const std::stop_token& stop) override {
    w.cv.wait(lock, stop, [&] { return w.woken; });
    const bool woken = w.woken;
    w.woken = false;
    return woken;
  }
};

// A reservation that gives memory back wakes the waiting admissions at once, also when it had
// no promise left (it grew to its expected peak): they do not depend on the poll.
TEST(AdmitWakeUp, ReleaseWithoutPromiseWakesTheWaitingAdmission) {
  testing::Watchdog dog("ReleaseWithoutPromiseWakesTheWaitingAdmission");
  WakeOnlyClock clock;
  Controller ctl{on_clock(&clock)};
  GroupRef g;
  ASSERT_EQ(ctl.create("pool", &g), 0);
  g->set_max(100 * kUnit);
  ASSERT_EQ(set_admit_growth(*g, 2000), 0);
  Reservation a(*g);
  ASSERT_EQ(a.reserve_for(30 * kUnit, 1s), ReserveStatus::kOk);
  ASSERT_EQ(a.grow(30 * kUnit), ReserveStatus::kOk);  // at its expected peak: promise 0
  EXPECT_EQ(admit_stats(*g).promised_units, 0);
  std::stop_source stop;  // ends b's wait if the wake-up never comes (the test then fails)
  Reservation b(*g, {}, stop.get_token());
  std::atomic<int> res{-1};
  std::jthread th([&] { res = static_cast<int>(b.reserve_for(50 * kUnit, 10s)); });
  ASSERT_TRUE(eventually([&] { return admit_stats(*g).admit_waits == 1; }));  // expects 100
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(res.load(), -1);
  a.release();
  const bool admitted = eventually([&] { return res.load() >= 0; });
  if (!admitted) stop.request_stop();
  th.join();
  EXPECT_TRUE(admitted);
  EXPECT_EQ(static_cast<ReserveStatus>(res.load()), ReserveStatus::kOk);
  EXPECT_EQ(g->memory().usage(), 50);
}
TEST_F(AdmitTest, ExpectedPeakWaitTimesOutOnTheControllersClockAndIsCancellable) {
  testing::Watchdog dog("ExpectedPeakWaitTimesOutOnTheControllersClockAndIsCancellable");
  g->set_max(100 * kUnit);
  ASSERT_EQ(set_admit_growth(*g, 3000), 0);
  Reservation a(*g);
  ASSERT_EQ(a.reserve_for(30 * kUnit, 1s), ReserveStatus::kOk);  // expects 90
  {
    AsyncReserve b(*g, 5, 1s);
    ASSERT_TRUE(eventually([&] { return admit_stats(*g).admit_waits == 1; }));
    std::this_thread::sleep_for(20ms);
    EXPECT_FALSE(b.done());  // real time does not end it
    clock.advance(1'000'000'000);
    EXPECT_EQ(b.status(), ReserveStatus::kTimedOut);
    EXPECT_EQ(b.r.units(), 0);
  }
  {
    std::stop_source stop;
    Reservation c(*g, {}, stop.get_token());
    std::atomic<int> res{-1};
    std::jthread th([&] { res = static_cast<int>(c.reserve_for(5 * kUnit, 10s)); });
    ASSERT_TRUE(eventually([&] { return admit_stats(*g).admit_waits == 2; }));
    stop.request_stop();
    th.join();
    EXPECT_EQ(static_cast<ReserveStatus>(res.load()), ReserveStatus::kCancelled);
  }
  EXPECT_EQ(admit_stats(*g).promised_units, 60);  // only a's
  EXPECT_EQ(g->memory().usage(), 30);
}

TEST_F(AdmitTest, ExpectedPeakIsCheckedOnEveryLimitedLevel) {
  testing::Watchdog dog("ExpectedPeakIsCheckedOnEveryLimitedLevel");
  g->set_max(100 * kUnit);
  GroupRef x, y;
  ASSERT_EQ(ctl.create("pool/x", &x), 0);
  ASSERT_EQ(ctl.create("pool/y", &y), 0);
  ASSERT_EQ(set_admit_growth(*x, 2000), 0);
  Reservation a(*x);
  ASSERT_EQ(a.reserve_for(40 * kUnit, 1s), ReserveStatus::kOk);  // promises 40 on x and pool
  EXPECT_EQ(admit_stats(*g).promised_units, 40);
  // y has no history (factor 1), but the parent's promise still counts: 40 + 40 + 30 > 100.
  AsyncReserve b(*y, 30, 10s);
  ASSERT_TRUE(eventually([&] { return admit_stats(*g).admit_waits == 1; }));
  EXPECT_FALSE(b.done());
  // A request that fits beside the promise goes in at once.
  Reservation c(*y);
  ASSERT_EQ(c.reserve_for(10 * kUnit, 0s), ReserveStatus::kOk);
  a.release();
  EXPECT_EQ(b.status(), ReserveStatus::kOk);
}
TEST(NeverFits, EveryEntryPointRefusesAtOnceAndNamesTheGroup) {
  Controller ctl(testing_wait::with_batch(1));
  GroupRef t, q;
  ASSERT_EQ(ctl.create("t", &t), 0);
  ASSERT_EQ(ctl.create("t/q", &q), 0);
  t->set_max(80 * kUnit);
  q->set_max(200 * kUnit);
  Member m(*q, "m", nullptr);
  const auto check = [&](Reservation& r, ReserveStatus s, uint64_t n) {
    EXPECT_EQ(s, ReserveStatus::kNeverFits);
    EXPECT_EQ(r.limiting_group(), t.get());
    EXPECT_EQ(r.units(), 0);
    EXPECT_EQ(wait_stats(*t).never_fits, n);
  };
  Reservation r(m);
  check(r, r.reserve(100 * kUnit), 1);
  check(r, r.reserve_for(100 * kUnit, 10s), 2);
  check(r, r.reserve_until(100 * kUnit, Clock::kMaxNs), 3);
  check(r, r.grow(100 * kUnit), 4);
  check(r, r.grow_for(100 * kUnit, 10s), 5);
  EXPECT_EQ(try_charge_wait_for(*q, 100, 10s), WaitStatus::kNeverFits);
  EXPECT_EQ(m.charge_wait(100, 10s), WaitStatus::kNeverFits);
  EXPECT_EQ(wait_stats(*t).never_fits, 7u);
  EXPECT_EQ(never_fits(*q, 100), t.get());
  EXPECT_STREQ(reserve_status_name(ReserveStatus::kNeverFits), "never-fits");
  EXPECT_STREQ(wait_status_name(WaitStatus::kNeverFits), "never-fits");
  // A learned factor never turns a request that fits into a never-fits one: the expected peak
  // is clamped to the smallest limit.
  ASSERT_EQ(set_admit_growth(*q, 4000), 0);
  EXPECT_EQ(r.reserve_for(80 * kUnit, 1s), ReserveStatus::kOk);
  EXPECT_EQ(wait_stats(*t).never_fits, 7u);
  EXPECT_EQ(q->memory().usage(), 80);
}

}  // namespace
}  // namespace memcg
