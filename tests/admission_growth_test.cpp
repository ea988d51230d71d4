// Growth past admission (reservation.hpp): the growth wait (ends when memory arrives, bounded
// when none is coming), growth past the expected or tolerated peak (may not take what is promised
// to others; the excess order chooses the victim). Admission itself is in admission_test.cpp.
#include "memcg/core/admission/reservation.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "admission_support.hpp"
#include "charge_wait_support.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/admission/admission.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"
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

// ReserveOptions::growth_wait = false: growth past admission does not wait for memory on its
// way; it goes to the OOM policy at once (the behaviour before that step).
TEST(GrowthPastAdmission, GrowthWaitOffGoesStraightToThePolicy) {
  testing::Watchdog dog("GrowthWaitOffGoesStraightToThePolicy");
  Controller ctl(testing_wait::with_batch(1));
  GroupRef g;
  ASSERT_EQ(ctl.create("pool", &g), 0);
  g->set_max(100 * kUnit);
  std::atomic<bool> victim_killed{false};
  Member victim(*g, "victim", [&](Member&) { victim_killed = true; });
  Reservation vm(victim, {.oom = OomPolicy::kPieces});
  ASSERT_EQ(vm.reserve(60 * kUnit), ReserveStatus::kOk);
  Member q(*g, "q", nullptr);
  Reservation off(q, {.oom = OomPolicy::kPieces, .growth_wait = false});
  ASSERT_EQ(off.reserve_for(30 * kUnit, 1s), ReserveStatus::kOk);
  ASSERT_TRUE(OomKiller::kill(*g, 20));  // the victim is killed and unwinds 50 ms later
  ASSERT_TRUE(victim_killed.load());
  std::jthread unwind([&] {
    std::this_thread::sleep_for(50ms);
    vm.release();
  });
  // Memory is on its way: with the wait off, the growth does not wait for it as growth past
  // admission (growth_waits stays 0); the policy (the OOM killer, which waits for its victim)
  // decides, and the victim's memory serves it.
  EXPECT_EQ(off.grow(20 * kUnit), ReserveStatus::kOk);
  EXPECT_EQ(admit_stats(*g).growth_waits, 0u);
  EXPECT_FALSE(q.killed());
}
// A query whose member's kill callback only records the kill: the memory stays charged until
// the test unwinds it, as a real query's does until its next step.
struct SlowQuery {
  std::atomic<bool> killed{false};
  Member member;
  Reservation mem;
  SlowQuery(Group& g, const char* name, OomPolicy oom)
      : member(g, name, [this](Member&) { killed = true; }), mem(member, {.oom = oom}) {}
};

TEST(GrowthPastAdmission, WaitsForAKilledMembersMemoryAndTakesIt) {
  testing::Watchdog dog("WaitsForAKilledMembersMemoryAndTakesIt");
  ManualClock clock(1'000'000);  // the bound is virtual time: no real-time race with the unwind
  Controller ctl(on_clock(&clock));
  GroupRef g;
  ASSERT_EQ(ctl.create("pool", &g), 0);
  g->set_max(100 * kUnit);
  SlowQuery victim(*g, "victim", OomPolicy::kPieces);
  SlowQuery q(*g, "q", OomPolicy::kPieces);
  ASSERT_EQ(victim.mem.reserve(60 * kUnit), ReserveStatus::kOk);
  ASSERT_EQ(q.mem.reserve_for(30 * kUnit, 1s), ReserveStatus::kOk);
  ASSERT_TRUE(OomKiller::kill(*g, 20));  // the victim is killed but has not unwound
  ASSERT_TRUE(victim.killed.load());
  ASSERT_EQ(victim.member.charged(), 60);
  std::jthread unwind([&] {
    ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
    clock.advance(3'000'000);  // 3 ms of unwinding, within the bound
    victim.mem.release();      // the victim's next step: it unwinds
  });
  // Past admission, no free memory: the growth waits for the victim's memory, not the killer.
  EXPECT_EQ(q.mem.grow(20 * kUnit), ReserveStatus::kOk);
  EXPECT_FALSE(q.member.killed());
  const AdmitStats s = admit_stats(*g);
  EXPECT_EQ(s.growth_waits, 1u);
  EXPECT_EQ(s.growth_granted, 1u);
  // The bound learns from it: 2 x (10 ms - 10/8 + 3/8 ms) = 18.25 ms.
  EXPECT_EQ(s.growth_bound_ns, 2 * (kGrowthWaitPriorNs - kGrowthWaitPriorNs / 8 + 3'000'000 / 8));
}

TEST(GrowthPastAdmission, NothingComingGoesToTheKillerAtOnce) {
  testing::Watchdog dog("NothingComingGoesToTheKillerAtOnce");
  Controller ctl(testing_wait::with_batch(1));
  GroupRef g;
  ASSERT_EQ(ctl.create("pool", &g), 0);
  g->set_max(100 * kUnit);
  SlowQuery big(*g, "big", OomPolicy::kPieces);
  SlowQuery q(*g, "q", OomPolicy::kPieces);
  ASSERT_EQ(big.mem.reserve_for(60 * kUnit, 1s), ReserveStatus::kOk);
  ASSERT_EQ(q.mem.reserve_for(30 * kUnit, 1s), ReserveStatus::kOk);
  // q grows past its admission; nobody is unwinding: no wait, the killer chooses q itself (the
  // one past its admitted size), which then holds what it had.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(q.mem.grow(20 * kUnit), ReserveStatus::kKilled);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_TRUE(q.killed.load());
  EXPECT_FALSE(big.killed.load());
  EXPECT_EQ(admit_stats(*g).growth_waits, 0u);
}

// Growth past the reservation's own tolerated peak (here its expected peak: no spread) may take only memory that is not promised to other admitted reservations
// (usage + their promise + need <= max on every limited level); otherwise the OOM killer is
// asked for that room, and the excess order chooses the member furthest past its admitted size.
// Before this rule, such growth took the promised headroom.
TEST(GrowthPastExpectedPeak, MayNotTakeOthersPromisesAndGoesToTheKiller) {
  testing::Watchdog dog("MayNotTakeOthersPromisesAndGoesToTheKiller");
  Controller ctl(testing_wait::with_batch(1));
  GroupRef g;
  ASSERT_EQ(ctl.create("pool", &g), 0);
  g->set_max(100 * kUnit);
  for (int i = 0; i < 12; ++i) run_one(*g, 10, 20);  // factor 2, tolerance 2 (no spread)
  ASSERT_EQ(admit_stats(*g).tolerance_permille, 2000u);
  SlowQuery other(*g, "other", OomPolicy::kPieces);
  SlowQuery q(*g, "q", OomPolicy::kPieces);
  SlowQuery never(*g, "never", OomPolicy::kNever);
  ASSERT_EQ(other.mem.reserve_for(20 * kUnit, 1s), ReserveStatus::kOk);  // expects 40
  ASSERT_EQ(q.mem.reserve_for(10 * kUnit, 1s), ReserveStatus::kOk);      // expects 20
  EXPECT_EQ(q.member.tolerated_peak(), 20);  // no spread: its expected peak
  EXPECT_EQ(admit_stats(*g).promised_units, 30);
  ASSERT_EQ(q.mem.grow(40 * kUnit), ReserveStatus::kOk);  // to 50: 70 used + 20 promised fits
  EXPECT_EQ(admit_stats(*g).promised_units, 20);          // other's alone
  // kNever: past its expected peak, 5 more would take other's promise: refused, nobody killed.
  ASSERT_EQ(never.mem.reserve_for(1 * kUnit, 1s), ReserveStatus::kOk);  // expects 2
  ASSERT_EQ(never.mem.grow(1 * kUnit), ReserveStatus::kOk);             // within it
  EXPECT_EQ(never.mem.grow(10 * kUnit), ReserveStatus::kNoMem);         // 72 + 20 + 10 > 100
  EXPECT_FALSE(never.killed.load());
  // 20 more for q are free (92 <= 100) but promised to other: the killer, not the memory; q is
  // the one past its admitted size, and is killed.
  EXPECT_EQ(q.mem.grow(20 * kUnit), ReserveStatus::kKilled);
  EXPECT_TRUE(q.killed.load());
  EXPECT_FALSE(other.killed.load());
  EXPECT_EQ(q.mem.units(), 50);  // nothing charged for the refused growth
  EXPECT_EQ(g->memory().usage(), 72);
  // other grows within its promise at once.
  EXPECT_EQ(other.mem.grow(20 * kUnit), ReserveStatus::kOk);
  EXPECT_FALSE(other.killed.load());
}

// The killer asked for room beside the promises chooses by excess: a member further past its
// admitted size than the grower is killed, and once it has given its memory back the growth is
// served. With no promise on the path, growth past the expected peak takes what is free.
TEST(GrowthPastExpectedPeak, TheLargestExcessIsKilledAndTheGrowthServed) {
  testing::Watchdog dog("TheLargestExcessIsKilledAndTheGrowthServed");
  Controller ctl(testing_wait::with_batch(1));
  GroupRef g;
  ASSERT_EQ(ctl.create("pool", &g), 0);
  g->set_max(100 * kUnit);
  for (int i = 0; i < 12; ++i) run_one(*g, 10, 20);  // factor 2, tolerance 2 (no spread)
  std::atomic<bool> run_killed{false};
  Member run(*g, "runaway", [&](Member& self) {
    run_killed = true;
    self.uncharge(self.charged());  // unwinds in its callback
  });
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(charged(run.charge(1)));
  run.add_admitted(5);  // 35 past its admitted size
  SlowQuery other(*g, "other", OomPolicy::kPieces);
  SlowQuery q(*g, "q", OomPolicy::kPieces);
  ASSERT_EQ(other.mem.reserve_for(20 * kUnit, 1s), ReserveStatus::kOk);  // expects 40
  ASSERT_EQ(q.mem.reserve_for(10 * kUnit, 1s), ReserveStatus::kOk);      // 60 + 20 + 20 fits
  ASSERT_EQ(q.mem.grow(10 * kUnit), ReserveStatus::kOk);                 // to its peak, 20
  // 5 more: 85 used <= 100, but 85 + other's 20 > 100.
  EXPECT_EQ(q.mem.grow(5 * kUnit), ReserveStatus::kOk);
  EXPECT_TRUE(run_killed.load());
  EXPECT_FALSE(q.killed.load());
  EXPECT_FALSE(other.killed.load());
  EXPECT_EQ(g->memory().usage(), 45);
  // No promise left on the path: q may grow past its expected peak into what is free.
  other.mem.release();
  EXPECT_EQ(admit_stats(*g).promised_units, 0);
  EXPECT_EQ(q.mem.grow(70 * kUnit), ReserveStatus::kOk);
  EXPECT_EQ(g->memory().usage(), 95);
  EXPECT_FALSE(q.killed.load());
}

// The tolerance is the decayed mean plus two decayed standard deviations of the ratios learned;
// growth up to the tolerated peak may take promised memory (as before), growth past it may not.
TEST_F(AdmitTest, LearnsTheToleranceAndGrowthPastItRespectsPromises) {
  testing::Watchdog dog("LearnsTheToleranceAndGrowthPastItRespectsPromises");
  EXPECT_EQ(admit_stats(*g).tolerance_permille, kAdmitMaxGrowthPermille);  // no history
  double sum = 0, sum2 = 0, total = 0;
  for (int i = 0; i < 20; ++i) {
    const int64_t peak = i % 2 == 0 ? 10 : 15;  // 1.0 and 1.5
    run_one(*g, 10, peak);
    const double r = static_cast<double>(peak) / 10.0;
    sum = sum * kAdmitDecay + r;
    sum2 = sum2 * kAdmitDecay + r * r;
    total = total * kAdmitDecay + 1;
  }
  const double mean = sum / total;
  const double sd = std::sqrt(sum2 / total - mean * mean);
  const uint32_t want = static_cast<uint32_t>(std::lround(1000.0 * (mean + 2 * sd)));
  const AdmitStats st = admit_stats(*g);
  EXPECT_EQ(st.tolerance_permille, want);
  EXPECT_EQ(wait_line("admit_tolerance_permille"), std::to_string(want));
  EXPECT_GT(want, 1700u);  // mean about 1.25, sd about 0.25
  EXPECT_LT(want, 1800u);
  EXPECT_EQ(st.growth_permille, static_cast<uint32_t>(std::lround(1000.0 * mean)));
  // 100 units: a query admitted with 40 expects 50 (factor about 1.25) and tolerates 70.
  g->set_max(100 * kUnit);
  std::atomic<bool> q_killed{false};
  Member qm(*g, "q", [&](Member&) { q_killed = true; });
  Reservation q(qm, {.oom = OomPolicy::kPieces});
  ASSERT_EQ(q.reserve_for(40 * kUnit, 1s), ReserveStatus::kOk);
  const int64_t expected = (40 * static_cast<int64_t>(st.growth_permille) + 999) / 1000;
  const int64_t tolerated = (40 * static_cast<int64_t>(want) + 999) / 1000;
  EXPECT_EQ(qm.tolerated_peak(), tolerated);
  Member om(*g, "other", nullptr);
  Reservation other(om, {.oom = OomPolicy::kPieces});
  ASSERT_EQ(other.reserve_for(8 * kUnit, 1s), ReserveStatus::kOk);  // promises 2 more
  const int64_t others = admit_stats(*g).promised_units - (expected - 40);
  ASSERT_GT(others, 0);
  // Up to its tolerated peak q takes what is free, promised or not.
  ASSERT_EQ(q.grow(static_cast<uint64_t>(tolerated - 40) * kUnit), ReserveStatus::kOk);
  // Past it, only the free memory beside others' promise: all that is free is asked for, of
  // which `others` units are promised to other: refused to the killer, which chooses q (the
  // only member past its admitted size). Before the rule, q took it.
  const int64_t free_units = 100 - g->memory().usage();
  ASSERT_GT(free_units, others);
  EXPECT_EQ(q.grow(static_cast<uint64_t>(free_units) * kUnit), ReserveStatus::kKilled);
  EXPECT_TRUE(q_killed.load());
  EXPECT_EQ(q.units(), tolerated);
}

// The excess order chooses a member past its tolerated peak before one within it, even one with
// a larger excess: growth past what the group's work reaches is the runaway's signature.
TEST_F(AdmitTest, ExcessOrderChoosesThePastTheToleratedPeakFirst) {
  testing::Watchdog dog("ExcessOrderChoosesThePastTheToleratedPeakFirst");
  for (int i = 0; i < 12; ++i) run_one(*g, 10, 15);  // factor 1.5, tolerance 1.5
  ASSERT_EQ(admit_stats(*g).tolerance_permille, 1500u);
  g->set_max(200 * kUnit);
  SlowQuery big(*g, "big", OomPolicy::kPieces);
  SlowQuery run(*g, "runaway", OomPolicy::kPieces);
  ASSERT_EQ(big.mem.reserve_for(60 * kUnit, 1s), ReserveStatus::kOk);  // tolerates 90
  ASSERT_EQ(big.mem.grow(28 * kUnit), ReserveStatus::kOk);             // excess 28, within
  ASSERT_EQ(run.mem.reserve_for(10 * kUnit, 1s), ReserveStatus::kOk);  // tolerates 15
  ASSERT_EQ(run.mem.grow(20 * kUnit), ReserveStatus::kOk);             // excess 20, 15 past
  EXPECT_EQ(big.member.tolerated_peak(), 90);
  EXPECT_EQ(run.member.tolerated_peak(), 15);
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*g, 200, &r));
  EXPECT_EQ(r.victim, "runaway");
  EXPECT_TRUE(run.killed.load());
  EXPECT_FALSE(big.killed.load());
}

TEST(GrowthPastAdmission, WaitIsBoundedWhenTheMemoryDoesNotCome) {
  testing::Watchdog dog("WaitIsBoundedWhenTheMemoryDoesNotCome");
  ManualClock clock(1'000'000);
  Controller ctl(on_clock(&clock));
  GroupRef g;
  ASSERT_EQ(ctl.create("pool", &g), 0);
  g->set_max(100 * kUnit);
  SlowQuery victim(*g, "victim", OomPolicy::kPieces);
  SlowQuery q(*g, "q", OomPolicy::kNever);
  ASSERT_EQ(victim.mem.reserve(60 * kUnit), ReserveStatus::kOk);
  ASSERT_EQ(q.mem.reserve_for(30 * kUnit, 1s), ReserveStatus::kOk);
  ASSERT_TRUE(OomKiller::kill(*g, 20));
  ASSERT_TRUE(victim.killed.load());
  // kNever has no killer and no growth wait: it fails at once.
  EXPECT_EQ(q.mem.grow(20 * kUnit), ReserveStatus::kNoMem);
  EXPECT_EQ(admit_stats(*g).growth_waits, 0u);
  // kPieces waits for the unwinding victim, up to the derived bound of the controller's clock.
  SlowQuery p(*g, "p", OomPolicy::kPieces);
  ASSERT_EQ(q.mem.reserve_for(5 * kUnit, 1s), ReserveStatus::kOk);  // make room for p
  ASSERT_EQ(p.mem.reserve_for(20 * kUnit, 1s), ReserveStatus::kOk);
  std::atomic<int> res{-1};
  std::jthread th([&] { res = static_cast<int>(p.mem.grow(20 * kUnit)); });
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  const uint64_t bound = admit_stats(*g).growth_bound_ns;
  EXPECT_EQ(bound, 2 * kGrowthWaitPriorNs);  // the prior, before any wait got memory
  clock.advance(bound - 1);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(res.load(), -1);  // still within the bound
  clock.advance(1);
  // Then the killer: the victim still holds its memory, so the outcome is the killer's
  // (a kill of p past its admission, or no room); it is no longer the wait.
  th.join();
  EXPECT_FALSE(held(static_cast<ReserveStatus>(res.load())));
  EXPECT_EQ(admit_stats(*g).growth_waits, 1u);
  EXPECT_EQ(admit_stats(*g).growth_granted, 0u);
  victim.mem.release();
}
}  // namespace
}  // namespace memcg
