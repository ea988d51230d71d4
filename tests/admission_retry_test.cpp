// A waiting admission (admission.hpp, Reservation::reserve_for/reserve_until) looks at its
// deadline and its stop token on every retry: reclaim that frees memory which is taken again
// before the admission looks (caches refilled by their users meanwhile) does not keep it going
// past its deadline or its stop. The refills are made by a reclaim hook at the next level's
// reclaim, so that they come between a reclaim and the admission's look every time.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stop_token>
#include <thread>

#include "charge_wait_support.hpp"
#include "memcg/core/admission/admission.hpp"
#include "memcg/core/admission/reservation.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/tree/controller.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;
using testing_wait::kUnit;
using testing_wait::with_batch;
using Clk = std::chrono::steady_clock;

// Units charged to a group, with a reclaimer that only states their size (so that admission
// counts them as reclaimable); the reclaim itself is the controller's hook below.
class Pool final : public Reclaimer {
 public:
  explicit Pool(Group& g) : g_(g) {}
  ~Pool() override {
    reg_.reset();
    uncharge_direct(g_, held_.exchange(0));
  }
  void add(int64_t units) {
    if (units <= 0) return;
    ASSERT_EQ(try_charge(g_, units, kNoSpin | kRetryMayFail), ChargeStatus::kOk);
    held_ += units;
  }
  void take(int64_t units) {
    units = std::min(units, held_.load());
    held_ -= units;
    uncharge_direct(g_, units);
  }
  void enable() { reg_ = ReclaimerRegistration(g_, *this); }
  int64_t held() const { return held_.load(); }
  int64_t reclaimable() const noexcept override { return held_.load(); }
  ReclaimResult reclaim(int64_t, int) override { return {0, 0}; }

 private:
  Group& g_;
  std::atomic<int64_t> held_{0};
  ReclaimerRegistration reg_;
};

// top (215 units) holds svc (100 units: cache 80, work) and other (100). work admits 30 units
// with a growth factor of 1.5 (45 expected): svc lacks 25, top 10. Reclaim at svc frees 25 of
// the cache, and other's users take that room (top still lacks); reclaim at top frees 26 of
// other, and the cache's users take 25 back. Each round frees memory on both levels, and svc
// is full again when the admission looks. For 3 s; then the cache's room stays free.
struct AdmitRetryTest : ::testing::Test {
  Controller ctl{with_batch(1)};
  GroupRef top, svc, cache_group, other_group, work;
  std::unique_ptr<Pool> cache, other;
  Clk::time_point refill_until;
  std::atomic<int64_t> rounds{0};
  void SetUp() override {
    ASSERT_EQ(ctl.create("top", &top), 0);
    ASSERT_EQ(ctl.create("top/svc", &svc), 0);
    ASSERT_EQ(ctl.create("top/svc/cache", &cache_group), 0);
    ASSERT_EQ(ctl.create("top/svc/work", &work), 0);
    ASSERT_EQ(ctl.create("top/other", &other_group), 0);
    top->set_max(215 * kUnit);
    svc->set_max(100 * kUnit);
    ASSERT_EQ(set_admit_growth(*work, 1500), 0);
    cache = std::make_unique<Pool>(*cache_group);
    other = std::make_unique<Pool>(*other_group);
    cache->add(80);
    other->add(100);
    cache->enable();
    other->enable();
    refill_until = Clk::now() + 3s;
    ctl.set_reclaim_hook([this](Group& target, int64_t) -> int64_t {
      const bool refill = Clk::now() < refill_until;
      if (&target == svc.get()) {
        ++rounds;
        cache->take(25);
        if (refill) other->add(125 - other->held());
        return 25;
      }
      if (&target == top.get()) {
        const int64_t k = refill ? 80 - cache->held() : 0;
        other->take(k + 1);
        cache->add(k);
        return 1;
      }
      return 0;
    });
  }
  void TearDown() override {
    cache.reset();
    other.reset();
  }
};

TEST_F(AdmitRetryTest, TheDeadlineEndsRetriesThatFreeMemoryTakenAgain) {
  testing::Watchdog dog("deadline on retry");
  Reservation r(*work);
  const auto t0 = Clk::now();
  EXPECT_EQ(r.reserve_for(30 * kUnit, 50ms), ReserveStatus::kTimedOut);
  EXPECT_LT(Clk::now() - t0, 1000ms);
  EXPECT_GT(rounds.load(), 1);  // it did retry: each time the room was taken again
  EXPECT_EQ(r.bytes(), 0u);
}

TEST_F(AdmitRetryTest, TheStopTokenEndsRetriesThatFreeMemoryTakenAgain) {
  testing::Watchdog dog("stop on retry");
  std::stop_source stop;
  Reservation r(*work, {}, stop.get_token());
  std::thread stopper([&] {
    while (rounds.load() < 3) std::this_thread::sleep_for(100us);
    stop.request_stop();
  });
  const auto t0 = Clk::now();
  EXPECT_EQ(r.reserve_for(30 * kUnit, 60s), ReserveStatus::kCancelled);
  EXPECT_LT(Clk::now() - t0, 1000ms);
  stopper.join();
  EXPECT_EQ(r.bytes(), 0u);
}

}  // namespace
}  // namespace memcg
