// Reservation: byte totals over unit charges, the status of each refusal, the OOM policy for
// large requests, cancellation by a stop token or an OOM kill, waiting with a deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "memcg/memcg.hpp"
#include "memcg/core/admission/reservation.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kUnit = 4096;

Options one_shard() {
  Options o;
  o.nr_shards = 1;
  return o;
}

// Usage without what sits pre-charged in the per-CPU stock.
int64_t used(Group& g) {
  g.controller().stock().drain_all(&g);
  return g.memory().usage();
}

TEST(Reservation, BytesRoundToUnitsWithoutDrift) {
  Controller ctl(one_shard());
  GroupRef g;
  ASSERT_EQ(ctl.create("q", &g), 0);
  {
    Reservation r(*g);
    EXPECT_EQ(r.reserve(1), ReserveStatus::kOk);
    EXPECT_EQ(r.units(), 1);
    EXPECT_EQ(r.grow(kUnit - 1), ReserveStatus::kOk);  // still within the first unit
    EXPECT_EQ(r.units(), 1);
    EXPECT_EQ(r.grow(1), ReserveStatus::kOk);
    EXPECT_EQ(r.units(), 2);
    EXPECT_EQ(r.bytes(), kUnit + 1);
    // Many small steps charge no more than their sum rounded up.
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(r.grow(10), ReserveStatus::kOk);
    EXPECT_EQ(r.bytes(), kUnit + 1 + 10000);
    EXPECT_EQ(r.units(), static_cast<int64_t>((kUnit + 1 + 10000 + kUnit - 1) / kUnit));
    r.shrink(10000);
    EXPECT_EQ(r.units(), 2);
    EXPECT_EQ(r.reserve(3 * kUnit), ReserveStatus::kOk);
    EXPECT_EQ(r.units(), 3);
    EXPECT_EQ(r.reserve(kUnit), ReserveStatus::kOk);  // a smaller total shrinks
    EXPECT_EQ(r.units(), 1);
    r.shrink(UINT64_MAX);  // at most what is held
    EXPECT_EQ(r.units(), 0);
    EXPECT_EQ(r.bytes(), 0u);
    EXPECT_EQ(r.reserve(8 * kUnit), ReserveStatus::kOk);
    EXPECT_GE(used(*g), 8);
  }
  EXPECT_EQ(used(*g), 0);  // released by the destructor, straight from the counters
}

TEST(Reservation, InvalidRequestsChangeNothing) {
  Controller ctl(one_shard());
  GroupRef g;
  ASSERT_EQ(ctl.create("q", &g), 0);
  Reservation empty;
  EXPECT_EQ(empty.reserve(1), ReserveStatus::kInvalid);
  EXPECT_EQ(empty.reserve_for(1, 1s), ReserveStatus::kInvalid);
  empty.release();
  Reservation r(*g);
  EXPECT_EQ(r.reserve(kUnit), ReserveStatus::kOk);
  EXPECT_EQ(r.reserve(UINT64_MAX), ReserveStatus::kInvalid);
  EXPECT_EQ(r.grow(UINT64_MAX), ReserveStatus::kInvalid);  // the total overflows
  EXPECT_EQ(r.bytes(), kUnit);
  EXPECT_EQ(r.units(), 1);
}

TEST(Reservation, StatusNamesAreDistinct) {
  std::set<std::string> names;
  for (int s = 0; s <= static_cast<int>(ReserveStatus::kInvalid); ++s)
    names.insert(reserve_status_name(static_cast<ReserveStatus>(s)));
  EXPECT_EQ(names.size(), static_cast<size_t>(ReserveStatus::kInvalid) + 1);
  EXPECT_EQ(names.count("unknown"), 0u);
  EXPECT_STREQ(reserve_status_name(ReserveStatus::kNoMemCostly), "nomem-costly");
  EXPECT_TRUE(held(ReserveStatus::kForced));
  EXPECT_FALSE(held(ReserveStatus::kNoMem));
}

// A pool of 16 units, 12 of them held by a member that can be killed.
struct Pool {
  Controller ctl{one_shard()};
  GroupRef pool;
  std::unique_ptr<Member> hog;
  bool hog_killed = false;
  Pool() {
    EXPECT_EQ(ctl.create("pool", &pool), 0);
    pool->set_max(16 * kUnit);
    hog = std::make_unique<Member>(*pool, "hog", [this](Member& m) {
      hog_killed = true;
      m.uncharge(m.charged());
    });
    EXPECT_EQ(hog->charge(12, kDefaultCharge | kNoSpin), ChargeStatus::kOk);
  }
  uint64_t ooms() const { return pool->events().get(Event::kOom); }
  uint64_t kills() const { return pool->events().get(Event::kOomKill); }
};

// The kernel's rule: a request above 8 pages does not run the OOM killer; the status says so.
TEST(Reservation, KernelPolicyLargeRequestFailsWithoutOomKill) {
  Pool p;
  Member q(*p.pool, "q", nullptr);
  Reservation r(q);  // OomPolicy::kKernel
  EXPECT_EQ(r.reserve(9 * kUnit), ReserveStatus::kNoMemCostly);
  EXPECT_EQ(r.units(), 0);
  EXPECT_EQ(q.charged(), 0);
  EXPECT_EQ(p.ooms(), 0u);
  EXPECT_FALSE(p.hog_killed);
  EXPECT_EQ(used(*p.pool), 12);
}

// A small request under the same policy may OOM-kill: the hog goes, the request fits.
TEST(Reservation, KernelPolicySmallRequestMayOomKill) {
  Pool p;
  Member q(*p.pool, "q", nullptr);
  Reservation r(q);
  EXPECT_EQ(r.reserve(6 * kUnit), ReserveStatus::kOk);
  EXPECT_TRUE(p.hog_killed);
  EXPECT_EQ(p.kills(), 1u);
  EXPECT_EQ(q.charged(), 6);
}

// kPieces makes the large request OOM-eligible: the hog (the highest badness) is killed.
TEST(Reservation, PiecesPolicyLargeRequestOomKillsTheHog) {
  Pool p;
  Member q(*p.pool, "q", nullptr);
  Reservation r(q, {.oom = OomPolicy::kPieces});
  EXPECT_EQ(r.reserve(12 * kUnit), ReserveStatus::kOk);
  EXPECT_TRUE(p.hog_killed);
  EXPECT_GE(p.ooms(), 1u);
  EXPECT_EQ(p.kills(), 1u);
  EXPECT_EQ(r.units(), 12);
  EXPECT_EQ(q.charged(), 12);
}

// kNever: not even a small request runs the OOM killer.
TEST(Reservation, NeverPolicyDoesNotOomKill) {
  Pool p;
  Member q(*p.pool, "q", nullptr);
  Reservation r(q, {.oom = OomPolicy::kNever});
  EXPECT_EQ(r.reserve(6 * kUnit), ReserveStatus::kNoMem);
  EXPECT_FALSE(p.hog_killed);
  EXPECT_EQ(p.ooms(), 0u);
  EXPECT_EQ(q.charged(), 0);
}

// The reservation's own member is the biggest: it is the victim, the growth fails with kKilled,
// the pieces it charged in that call are given back, and it never grows again.
TEST(Reservation, OwnMemberKilledFailsAndGivesThePiecesBack) {
  Controller ctl(one_shard());
  GroupRef pool;
  ASSERT_EQ(ctl.create("pool", &pool), 0);
  pool->set_max(24 * kUnit);
  Member other(*pool, "other", nullptr);
  ASSERT_EQ(other.charge(4), ChargeStatus::kOk);  // smaller than q: not the victim
  std::stop_source stop;
  Member q(*pool, "q", [&](Member&) { stop.request_stop(); });
  Reservation r(q, {.oom = OomPolicy::kPieces}, stop.get_token());
  ASSERT_EQ(r.reserve(10 * kUnit), ReserveStatus::kOk);
  const ReserveStatus s = r.grow(12 * kUnit);  // 22 fits the limit, not beside `other`
  EXPECT_TRUE(s == ReserveStatus::kKilled || s == ReserveStatus::kCancelled)
      << reserve_status_name(s);
  EXPECT_TRUE(q.killed());
  EXPECT_EQ(r.units(), 10);
  EXPECT_EQ(r.bytes(), 10 * kUnit);
  EXPECT_EQ(q.charged(), 10);
  EXPECT_EQ(r.grow(1), ReserveStatus::kCancelled);  // the stop token comes first
  r.shrink(5 * kUnit);                              // a shrink still works
  EXPECT_EQ(q.charged(), 5);
}

TEST(Reservation, KilledMemberWithoutStopTokenIsKilled) {
  Pool p;
  Member q(*p.pool, "q", nullptr);
  Reservation r(q, {.oom = OomPolicy::kPieces});
  ASSERT_EQ(r.reserve(2 * kUnit), ReserveStatus::kOk);
  Reservation big(*p.hog, {.oom = OomPolicy::kPieces});
  // The hog asks for more: it is the biggest, so it kills itself.
  EXPECT_EQ(big.grow(8 * kUnit), ReserveStatus::kKilled);
  EXPECT_TRUE(p.hog->killed());
  EXPECT_EQ(big.grow(kUnit), ReserveStatus::kKilled);
  EXPECT_EQ(big.units(), 0);
}

TEST(Reservation, StopTokenCancelsBeforeCharging) {
  Controller ctl(one_shard());
  GroupRef g;
  ASSERT_EQ(ctl.create("q", &g), 0);
  std::stop_source stop;
  Reservation r(*g, {}, stop.get_token());
  ASSERT_EQ(r.reserve(kUnit), ReserveStatus::kOk);
  stop.request_stop();
  EXPECT_EQ(r.grow(kUnit), ReserveStatus::kCancelled);
  EXPECT_EQ(r.grow_for(kUnit, 1s), ReserveStatus::kCancelled);
  EXPECT_EQ(r.units(), 1);
}

// "Every later request returns kCancelled": those that would shrink too, and nothing changes;
// shrink() and release() still give back.
TEST(Reservation, StopTokenCancelsShrinkingRequestsToo) {
  Controller ctl(one_shard());
  GroupRef g;
  ASSERT_EQ(ctl.create("q", &g), 0);
  std::stop_source stop;
  Reservation r(*g, {}, stop.get_token());
  ASSERT_EQ(r.reserve(4 * kUnit), ReserveStatus::kOk);
  stop.request_stop();
  EXPECT_EQ(r.reserve(2 * kUnit), ReserveStatus::kCancelled);
  EXPECT_EQ(r.reserve_for(kUnit, 1s), ReserveStatus::kCancelled);
  EXPECT_EQ(r.reserve_until(0, ctl.clock().now_ns()), ReserveStatus::kCancelled);
  EXPECT_EQ(r.grow(0), ReserveStatus::kCancelled);
  EXPECT_EQ(r.units(), 4);
  EXPECT_EQ(r.bytes(), 4 * kUnit);
  r.shrink(kUnit);
  EXPECT_EQ(r.units(), 3);
  r.release();
  EXPECT_EQ(used(*g), 0);
}

// A member alone in its group whose reservation grows past memory.max is OOM-killed, as the
// kernel kills a task that grows past its limit: its kill callback runs and the growth fails
// with kKilled. Only a single growth larger than the limit is never-fits.
TEST(Reservation, MemberAloneGrowingPastTheLimitIsKilled) {
  for (OomPolicy policy : {OomPolicy::kKernel, OomPolicy::kPieces}) {
    Controller ctl(one_shard());
    GroupRef g;
    ASSERT_EQ(ctl.create("q", &g), 0);
    g->set_max(16 * kUnit);
    int kills = 0;
    Member m(*g, "runaway", [&](Member&) { ++kills; });
    Reservation r(m, {.oom = policy});
    EXPECT_EQ(r.grow(17 * kUnit), ReserveStatus::kNeverFits);  // one request over the limit
    ASSERT_EQ(r.reserve(4 * kUnit), ReserveStatus::kOk);
    ReserveStatus s = ReserveStatus::kOk;
    for (int i = 0; i < 32 && held(s); ++i) s = r.grow(2 * kUnit);  // a runaway, 8 KiB a step
    EXPECT_EQ(s, ReserveStatus::kKilled) << reserve_status_name(s);
    EXPECT_EQ(kills, 1);
    EXPECT_TRUE(m.killed());
    EXPECT_EQ(r.units(), 16);  // it grew up to the limit, then the growth past it killed it
    EXPECT_EQ(g->events().get(Event::kOomKill), 1u);
    EXPECT_EQ(wait_stats(*g).never_fits, 1u);
  }
}

// Waiting: a timeout on the controller's clock, and a grant by another reservation's release.
TEST(Reservation, WaitTimesOutOnTheControllersClock) {
  testing::Watchdog dog("WaitTimesOutOnTheControllersClock");
  ManualClock clock(1'000'000);
  Options o = one_shard();
  o.clock = &clock;
  Controller ctl(o);
  GroupRef g;
  ASSERT_EQ(ctl.create("q", &g), 0);
  g->set_max(4 * kUnit);
  Reservation first(*g);
  ASSERT_EQ(first.reserve(4 * kUnit), ReserveStatus::kOk);
  Reservation second(*g);
  EXPECT_EQ(second.reserve_for(kUnit, 0s), ReserveStatus::kTimedOut);  // a try, no wait
  auto w = std::async(std::launch::async,
                      [&] { return second.reserve_until(kUnit, clock.now_ns() + 500'000'000); });
  while (wait_stats(*g).waiters != 1) std::this_thread::sleep_for(1ms);
  clock.advance(500'000'000);
  EXPECT_EQ(w.get(), ReserveStatus::kTimedOut);
  EXPECT_EQ(second.units(), 0);
  EXPECT_EQ(used(*g), 4);
}

TEST(Reservation, WaitIsGrantedByAnotherReservationsRelease) {
  testing::Watchdog dog("WaitIsGrantedByAnotherReservationsRelease");
  Controller ctl(one_shard());
  GroupRef g;
  ASSERT_EQ(ctl.create("q", &g), 0);
  g->set_max(4 * kUnit);
  Reservation first(*g);
  ASSERT_EQ(first.reserve(3 * kUnit), ReserveStatus::kOk);
  Reservation second(*g);
  auto w = std::async(std::launch::async, [&] { return second.reserve_for(2 * kUnit, 20s); });
  while (wait_stats(*g).waiters != 1) std::this_thread::sleep_for(1ms);
  first.shrink(kUnit);  // straight from the counters: the waiter sees it at once
  EXPECT_EQ(w.get(), ReserveStatus::kOk);
  EXPECT_EQ(second.units(), 2);
  EXPECT_EQ(used(*g), 4);
}

// The priority of ReserveOptions reaches the waiting charge: in a full pool, a low reservation
// (a group's) queues first, then one of the group's default class (normal) and a high one (a
// member's); units freed one at a time go high, normal, low. On a ManualClock with an aging
// bound far away, so the order is the classes' alone and every grant is made by the freeing call.
TEST(Reservation, HighPriorityReservationIsServedFirst) {
  testing::Watchdog dog("HighPriorityReservationIsServedFirst");
  ManualClock clock(1'000'000);
  Options o = one_shard();
  o.batch = 1;  // nothing hides in the stock: usage is exact
  o.clock = &clock;
  Controller ctl(o);
  set_wait_aging(ctl, 100s);
  GroupRef pool, filler, lo, mid, hi;
  ASSERT_EQ(ctl.create("pool", &pool), 0);
  ASSERT_EQ(ctl.create("pool/filler", &filler), 0);
  ASSERT_EQ(ctl.create("pool/lo", &lo), 0);
  ASSERT_EQ(ctl.create("pool/mid", &mid), 0);
  ASSERT_EQ(ctl.create("pool/hi", &hi), 0);
  pool->set_max(4 * kUnit);
  ASSERT_EQ(try_charge(*filler, 4), ChargeStatus::kOk);
  Member query(*hi, "query", nullptr);
  Reservation rlo(*lo, {.priority = WaitPriority::kLow});
  Reservation rmid(*mid);  // kDefault: the group's class, kNormal
  Reservation rhi(query, {.priority = WaitPriority::kHigh});
  std::vector<std::future<ReserveStatus>> waits;
  for (Reservation* r : {&rlo, &rmid, &rhi}) {
    const uint64_t before = wait_stats(*pool).waiters;
    waits.push_back(std::async(std::launch::async, [r] { return r->reserve_for(kUnit, 100s); }));
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (wait_stats(*pool).waiters != before + 1 && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(1ms);
    ASSERT_EQ(wait_stats(*pool).waiters, before + 1);
  }
  const WaitStats queued = wait_stats(*pool);
  EXPECT_EQ(queued.by_priority[0].waiters, 1u);
  EXPECT_EQ(queued.by_priority[1].waiters, 1u);
  EXPECT_EQ(queued.by_priority[2].waiters, 1u);
  const auto holders = [&] {
    std::string s;
    if (hi->memory().usage() > 0) s += "h";
    if (mid->memory().usage() > 0) s += "m";
    if (lo->memory().usage() > 0) s += "l";
    return s;
  };
  for (const char* expected : {"h", "hm", "hml"}) {
    uncharge_direct(*filler, 1);
    EXPECT_EQ(holders(), expected);
  }
  EXPECT_EQ(waits[2].get(), ReserveStatus::kOk);
  EXPECT_EQ(waits[1].get(), ReserveStatus::kOk);
  EXPECT_EQ(waits[0].get(), ReserveStatus::kOk);
  EXPECT_EQ(query.charged(), 1);  // the member form counts the grant towards its badness
  EXPECT_EQ(rhi.units(), 1);
  EXPECT_EQ(wait_stats(*pool).by_priority[2].granted, 1u);
  EXPECT_EQ(wait_stats(*pool).by_priority[0].granted, 1u);
}

// A priority out of range refuses every request that would charge, and changes nothing.
TEST(Reservation, PriorityOutOfRangeIsInvalid) {
  Controller ctl(one_shard());
  GroupRef g;
  ASSERT_EQ(ctl.create("q", &g), 0);
  Reservation r(*g, {.priority = static_cast<WaitPriority>(7)});
  EXPECT_EQ(r.reserve(kUnit), ReserveStatus::kInvalid);
  EXPECT_EQ(r.reserve_for(kUnit, 1s), ReserveStatus::kInvalid);
  EXPECT_EQ(r.units(), 0);
  EXPECT_EQ(used(*g), 0);
}

TEST(Reservation, MoveKeepsTheChargeAndReleasesOnce) {
  Controller ctl(one_shard());
  GroupRef g;
  ASSERT_EQ(ctl.create("q", &g), 0);
  Reservation a(*g);
  ASSERT_EQ(a.reserve(2 * kUnit), ReserveStatus::kOk);
  Reservation b(std::move(a));
  EXPECT_EQ(a.units(), 0);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(b.units(), 2);
  Reservation c(*g);
  ASSERT_EQ(c.reserve(kUnit), ReserveStatus::kOk);
  c = std::move(b);  // c's own unit goes back first
  EXPECT_EQ(c.units(), 2);
  c.release();
  EXPECT_EQ(used(*g), 0);
}

}  // namespace
}  // namespace memcg
