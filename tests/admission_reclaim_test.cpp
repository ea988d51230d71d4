// Reclaim for admission (admission.hpp): a waiting admission counts as room what reclaim can
// take at once on each level that lacks it (caches beyond their effective protection) and
// reclaims it, then admits; memory protected by memory.min or memory.low is not room, and
// caches are not emptied when reclaim could not admit the request anyway.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "charge_wait_support.hpp"
#include "memcg/core/admission/admission.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/admission/reservation.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;
using testing_wait::file;
using testing_wait::kUnit;
using testing_wait::with_batch;

// A cache of whole units charged to its group, freed oldest first on reclaim.
class Cache final : public Reclaimer {
 public:
  explicit Cache(Group& g) : g_(g) {}
  ~Cache() override { clear(); }
  void fill(int64_t units) {
    ASSERT_EQ(try_charge(g_, units, kMayBlock | kNoSpin), ChargeStatus::kOk);
    held_ += units;
  }
  // A fill that may fail (the ladder without the OOM killer), as a cache's insert would.
  bool try_fill(int64_t units) {
    if (try_charge(g_, units, kMayBlock | kNoSpin | kRetryMayFail) != ChargeStatus::kOk)
      return false;
    held_ += units;
    return true;
  }
  void clear() {
    reg_.reset();
    uncharge_direct(g_, held_.exchange(0));
  }
  void enable() { reg_ = ReclaimerRegistration(g_, *this); }
  int64_t held() const { return held_.load(); }
  int calls() const { return calls_.load(); }

  int64_t reclaimable() const noexcept override { return held_.load(); }
  ReclaimResult reclaim(int64_t nr, int) override {
    ++calls_;
    const int64_t n = std::min(nr, held_.load());
    held_ -= n;
    uncharge_direct(g_, n);
    return {n, n};
  }

 private:
  Group& g_;
  std::atomic<int64_t> held_{0};
  std::atomic<int> calls_{0};
  ReclaimerRegistration reg_;  // last: unregisters before the rest goes (reclaim.hpp)
};

// svc (max 100 units) over `cache` (a full result cache) and `work` (admissions with a fixed
// growth factor of 1.5, so that every one goes through the expected-peak check).
struct AdmitReclaimTest : ::testing::Test {
  Controller ctl{with_batch(1)};  // nothing hides in the stocks: usage is exact at every step
  GroupRef svc, cache_group, work;
  void SetUp() override {
    ASSERT_EQ(ctl.create("svc", &svc), 0);
    ASSERT_EQ(ctl.create("svc/cache", &cache_group), 0);
    ASSERT_EQ(ctl.create("svc/work", &work), 0);
    svc->set_max(100 * kUnit);
    ASSERT_EQ(set_admit_growth(*work, 1500), 0);
  }
  std::string wait_line(Group& g, const char* key) {
    const std::string f = "\n" + file(g, "memory.wait");
    const std::string k = "\n" + std::string(key) + " ";
    const size_t at = f.find(k);
    if (at == std::string::npos) return "";
    return f.substr(at + k.size(), f.find('\n', at + 1) - at - k.size());
  }
};

TEST_F(AdmitReclaimTest, NextToAFullUnprotectedCacheAdmitsAtOnceAndReclaims) {
  Cache cache(*cache_group);
  cache.fill(80);
  cache.enable();
  Reservation r(*work);
  // 30 units, expected peak 45: svc lacks 100 - 80 - 45 = 25 units, all in the cache. Before,
  // the admission polled until its deadline while the cache sat on the room.
  const auto t0 = WaitClock::now();
  ASSERT_EQ(r.reserve_for(30 * kUnit, 5s), ReserveStatus::kOk);
  EXPECT_LT(WaitClock::now() - t0, 2s);  // not a wait that ended by chance
  EXPECT_LE(cache.held(), 80 - 25);
  EXPECT_GT(cache.calls(), 0);
  EXPECT_EQ(svc->memory().usage(), 30 + cache.held());
  EXPECT_LE(svc->memory().usage() + admit_stats(*svc).promised_units, 100);
  const AdmitStats a = admit_stats(*svc);
  EXPECT_EQ(a.admit_reclaims, 1u);
  EXPECT_EQ(a.admit_reclaimed_units, static_cast<uint64_t>(80 - cache.held()));
  EXPECT_EQ(a.admit_waits, 0u);  // it never slept
  EXPECT_EQ(wait_line(*svc, "admit_reclaims"), "1");
  EXPECT_EQ(wait_line(*svc, "admit_reclaimed_bytes"),
            std::to_string((80 - cache.held()) * kUnit));
  r.release();
}

TEST_F(AdmitReclaimTest, NextToACacheWithinMemoryMinWaits) {
  cache_group->set_min(80 * kUnit);
  Cache cache(*cache_group);
  cache.fill(80);
  cache.enable();
  Reservation r(*work);
  EXPECT_EQ(r.reserve_for(30 * kUnit, 50ms), ReserveStatus::kTimedOut);
  EXPECT_EQ(cache.held(), 80);  // protected: not room, not touched
  EXPECT_EQ(cache.calls(), 0);
  EXPECT_EQ(admit_stats(*svc).admit_reclaims, 0u);
  EXPECT_EQ(admit_stats(*svc).admit_waits, 1u);
  EXPECT_EQ(svc->memory().usage(), 80);
}

TEST_F(AdmitReclaimTest, MemoryLowIsHonouredToo) {
  cache_group->set_low(80 * kUnit);
  Cache cache(*cache_group);
  cache.fill(80);
  cache.enable();
  Reservation r(*work);
  // A charge would breach low only when nothing else can be freed; an admission that can wait
  // does not count protected memory as room at all.
  EXPECT_EQ(r.reserve_for(30 * kUnit, 50ms), ReserveStatus::kTimedOut);
  EXPECT_EQ(cache.held(), 80);
  EXPECT_EQ(cache.calls(), 0);
}

TEST_F(AdmitReclaimTest, OnlyTheUnprotectedPartIsTaken) {
  // Ten times the sizes above, so that the reclaim driver's smallest bite (32 units of 4 KiB,
  // which may take a group that far below its protection, as the kernel's may) is small beside
  // them.
  svc->set_max(1000 * kUnit);
  cache_group->set_min(400 * kUnit);
  Cache cache(*cache_group);
  cache.fill(800);
  cache.enable();
  Reservation r(*work);
  ASSERT_EQ(r.reserve_for(300 * kUnit, 5s), ReserveStatus::kOk);  // lacks 250 of 400 unprotected
  EXPECT_LE(cache.held(), 800 - 250);
  EXPECT_GE(cache.held(), 400 - 32);  // memory.min kept, but for at most one bite
  EXPECT_EQ(admit_stats(*svc).admit_reclaims, 1u);
  r.release();
}

TEST_F(AdmitReclaimTest, CachesAreNotEmptiedWhenReclaimCouldNotAdmit) {
  GroupRef other;
  ASSERT_EQ(ctl.create("svc/other", &other), 0);
  ASSERT_EQ(try_charge(*other, 70, kMayBlock | kNoSpin), ChargeStatus::kOk);  // not reclaimable
  Cache cache(*cache_group);
  cache.fill(20);
  cache.enable();
  Reservation r(*work);
  // Expected peak 45: svc lacks 70 + 20 + 45 - 100 = 35 units, and only 20 could be reclaimed.
  EXPECT_EQ(r.reserve_for(30 * kUnit, 50ms), ReserveStatus::kTimedOut);
  EXPECT_EQ(cache.held(), 20);
  EXPECT_EQ(cache.calls(), 0);
  // Once the other work is gone, the same admission fits with the cache's help.
  uncharge_direct(*other, 70);
  ASSERT_EQ(r.reserve_for(30 * kUnit, 5s), ReserveStatus::kOk);
  EXPECT_EQ(cache.calls(), 0);  // 100 - 20 - 45 leaves room: nothing to reclaim
  r.release();
}

TEST_F(AdmitReclaimTest, PromisesOfRunningWorkCountOnEveryLevel) {
  // A running admission's promise is headroom on svc: a second admission must find room beside
  // it, reclaiming the cache for both (usage + promised + need <= max after the reclaim).
  Cache cache(*cache_group);
  cache.fill(60);
  cache.enable();
  Reservation first(*work);
  ASSERT_EQ(first.reserve_for(20 * kUnit, 5s), ReserveStatus::kOk);  // expects 30: promises 10
  EXPECT_EQ(admit_stats(*svc).promised_units, 10);
  EXPECT_EQ(admit_stats(*work).promised_units, 10);  // the same units, on each level
  EXPECT_EQ(cache.calls(), 0);                        // 60 + 20 + 10 fit in 100
  Reservation second(*work);
  // Expected 30: 60 + 20 + 10 + 30 - 100 = 20 units lacking, taken from the cache.
  ASSERT_EQ(second.reserve_for(20 * kUnit, 5s), ReserveStatus::kOk);
  EXPECT_LE(cache.held(), 40);
  EXPECT_LE(svc->memory().usage() + admit_stats(*svc).promised_units, 100);
  second.release();
  first.release();
  EXPECT_EQ(admit_stats(*svc).promised_units, 0);
}

TEST_F(AdmitReclaimTest, TheAdmittingLevelIsTheReclaimRoot) {
  // work has its own limit and its own cache under a memory.min: the reclaim root's own
  // protection does not count against itself (as a charge at work's limit would reclaim it).
  svc->set_max(1000 * kUnit);
  work->set_max(100 * kUnit);
  work->set_min(100 * kUnit);
  Cache cache(*work);
  cache.fill(80);
  cache.enable();
  Reservation r(*work);
  ASSERT_EQ(r.reserve_for(30 * kUnit, 5s), ReserveStatus::kOk);
  EXPECT_LE(cache.held(), 80 - 25);
  EXPECT_EQ(admit_stats(*work).admit_reclaims, 1u);
  EXPECT_EQ(admit_stats(*svc).admit_reclaims, 0u);
  r.release();
}

TEST_F(AdmitReclaimTest, ConcurrentAdmissionsBesideARefillingCache) {
  // Four workers admit, grow a little and release, while a fifth thread keeps refilling the
  // cache: every admission ends admitted or timed out, the limit holds, and everything but the
  // cache is given back (promises included).
  svc->set_max(400 * kUnit);
  Cache cache(*cache_group);
  cache.fill(380);  // even one admission (expected 60) lacks room
  cache.enable();
  std::atomic<bool> stop{false};
  std::atomic<int> admitted{0}, timed_out{0}, other{0};
  std::thread filler([&] {
    while (!stop.load()) {
      if (cache.held() < 380) cache.try_fill(8);  // may reclaim (this cache too), never kills
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        Reservation r(*work);
        switch (r.reserve_for(40 * kUnit, 200ms)) {
          case ReserveStatus::kOk:
            ++admitted;
            (void)r.grow(5 * kUnit);
            break;
          case ReserveStatus::kTimedOut: ++timed_out; break;
          default: ++other;
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  stop = true;
  filler.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(admitted.load(), 0);
  EXPECT_EQ(admitted.load() + timed_out.load(), 800);
  EXPECT_LE(svc->memory().watermark(), 400);  // the limit held (no forced charge)
  EXPECT_EQ(admit_stats(*svc).promised_units, 0);
  EXPECT_EQ(work->memory().usage(), 0);
  EXPECT_EQ(svc->memory().usage(), cache.held());
  EXPECT_GT(admit_stats(*svc).admit_reclaims, 0u);
}

}  // namespace
}  // namespace memcg
