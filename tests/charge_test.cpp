// The charge path: stock behaviour seen through the counters, the failure ladder, forced
// charges, thread attachment and charge handles (charge_path.md, "Test ideas").
#include "memcg/core/charge/charge.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <new>
#include <thread>

#include "memcg/core/charge/attach.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/charge/limits.hpp"
#include "memcg/percpu/internal/stock.hpp"

namespace memcg {
namespace {

constexpr uint64_t kUnit = 4096;

// Pins the calling thread to one CPU for the scope (the stock shard follows the CPU).
class PinTo {
 public:
  explicit PinTo(int cpu) {
    pthread_getaffinity_np(pthread_self(), sizeof(old_), &old_);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    ok_ = pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
  }
  ~PinTo() { pthread_setaffinity_np(pthread_self(), sizeof(old_), &old_); }
  bool ok() const { return ok_; }

 private:
  cpu_set_t old_;
  bool ok_;
};

struct Tree {
  explicit Tree(Options o = one_shard()) : ctl(o) {
    EXPECT_EQ(ctl.create("a", &a), 0);
    EXPECT_EQ(ctl.create("a/b", &b), 0);
    EXPECT_EQ(ctl.create("a/b/c", &c), 0);
  }
  static Options one_shard() {
    Options o;
    o.nr_shards = 1;
    return o;
  }
  Controller ctl;
  GroupRef a, b, c;
};

TEST(Charge, FirstChargePrechargesABatchAtEveryLevel) {
  Tree t;
  ASSERT_EQ(try_charge(*t.c, 1), ChargeStatus::kOk);
  for (Group* g : {t.a.get(), t.b.get(), t.c.get()}) EXPECT_EQ(g->memory().usage(), 64);
  EXPECT_EQ(t.ctl.stock().stocked(t.c.get()), 63);
  for (int i = 0; i < 63; ++i) ASSERT_EQ(try_charge(*t.c, 1), ChargeStatus::kOk);
  EXPECT_EQ(t.c->memory().usage(), 64);  // all 63 came from the stock
  EXPECT_EQ(charge_stats(t.ctl).slow_path, 1u);
  ASSERT_EQ(try_charge(*t.c, 1), ChargeStatus::kOk);
  EXPECT_EQ(t.c->memory().usage(), 128);
  EXPECT_EQ(t.a->memory().usage(), 128);
  EXPECT_EQ(charge_stats(t.ctl).slow_path, 2u);
  uncharge(*t.c, 65);
  t.ctl.stock().drain_all(&t.ctl.root());
  EXPECT_EQ(t.a->memory().usage(), 0);
}

TEST(Charge, LargeChargeBypassesTheStock) {
  Tree t;
  ASSERT_EQ(try_charge(*t.c, 100), ChargeStatus::kOk);
  EXPECT_EQ(t.c->memory().usage(), 100);
  EXPECT_EQ(t.ctl.stock().stocked(t.c.get()), 0);
  uncharge(*t.c, 100);  // more than a batch: straight back to the counters
  EXPECT_EQ(t.c->memory().usage(), 0);
}

TEST(Charge, UnchargeRefillsTheStock) {
  Tree t;
  ASSERT_EQ(try_charge(*t.c, 3), ChargeStatus::kOk);
  const int64_t usage = t.c->memory().usage();
  uncharge(*t.c, 3);
  EXPECT_EQ(t.c->memory().usage(), usage);  // units went to the stock, still charged
  EXPECT_EQ(t.ctl.stock().stocked(t.c.get()), 64);
  t.ctl.stock().drain_all(t.c.get());
  EXPECT_EQ(t.c->memory().usage(), 0);
}

TEST(Charge, BatchFailureFallsBackToTheExactAmount) {
  Tree t;
  t.a->set_max(10 * kUnit);
  ASSERT_EQ(try_charge(*t.c, 1), ChargeStatus::kOk);
  EXPECT_EQ(t.a->memory().usage(), 1);  // the batch of 64 did not fit; exactly 1 was charged
  EXPECT_EQ(t.ctl.stock().stocked(t.c.get()), 0);
  EXPECT_EQ(t.a->events_local().get(Event::kMax), 0u);  // no reclaim pass, no event
  uncharge(*t.c, 1);
}

TEST(Charge, NoFailAndHighPrioForcePastMaxWithOneMaxEvent) {
  Tree t;
  t.a->set_max(4 * kUnit);
  ASSERT_EQ(try_charge(*t.c, 4), ChargeStatus::kOk);
  for (uint32_t flags : {uint32_t{kNoFail}, uint32_t{kHighPrio}}) {
    const uint64_t before = t.a->events_local().get(Event::kMax);
    EXPECT_EQ(try_charge(*t.c, 2, flags), ChargeStatus::kForced);  // !kMayBlock: no reclaim
    EXPECT_EQ(t.a->events_local().get(Event::kMax), before + 1);
  }
  EXPECT_EQ(t.a->memory().usage(), 8);
  EXPECT_EQ(charge_stats(t.ctl).forced, 2u);
  uncharge(*t.c, 8);
}

TEST(Charge, NonBlockingWithoutNoFailFailsWithoutReclaimOrEvent) {
  Tree t;
  int reclaims = 0;
  t.ctl.set_reclaim_hook([&](Group&, int64_t) {
    ++reclaims;
    return int64_t{0};
  });
  t.a->set_max(4 * kUnit);
  ASSERT_EQ(try_charge(*t.c, 4), ChargeStatus::kOk);
  EXPECT_EQ(try_charge(*t.c, 1, 0), ChargeStatus::kNoMem);
  EXPECT_EQ(reclaims, 0);
  EXPECT_EQ(t.a->events_local().get(Event::kMax), 0u);
  EXPECT_EQ(t.a->memory().usage(), 4);
  uncharge(*t.c, 4);
}

TEST(Charge, NothingReclaimableNoVictimGivesEighteenPassesThenNoMem) {
  Tree t;
  int reclaims = 0, ooms = 0;
  t.ctl.set_reclaim_hook([&](Group& target, int64_t units) {
    EXPECT_EQ(&target, t.b.get());  // the level that hit its limit
    EXPECT_GE(units, 32);           // at least SWAP_CLUSTER_MAX
    ++reclaims;
    return int64_t{0};
  });
  t.ctl.set_oom_hook([&](Group& domain, int64_t) {
    EXPECT_EQ(&domain, t.b.get());
    ++ooms;
    return false;
  });
  t.b->set_max(8 * kUnit);
  ASSERT_EQ(try_charge(*t.c, 8), ChargeStatus::kOk);
  EXPECT_EQ(try_charge(*t.c, 1), ChargeStatus::kNoMem);
  EXPECT_EQ(reclaims, 18);  // first, after the drain, then 16 retries
  EXPECT_EQ(ooms, 1);
  EXPECT_EQ(t.b->events_local().get(Event::kMax), 18u);
  EXPECT_EQ(t.b->events_local().get(Event::kOom), 1u);
  // Hierarchical events: b and a, never c (below the failing level) or the root.
  EXPECT_EQ(t.a->events().get(Event::kMax), 18u);
  EXPECT_EQ(t.a->events_local().get(Event::kMax), 0u);
  EXPECT_EQ(t.c->events().get(Event::kMax), 0u);
  EXPECT_EQ(t.ctl.root().events().get(Event::kMax), 0u);
  EXPECT_EQ(charge_stats(t.ctl).failed, 1u);
  uncharge(*t.c, 8);
}

TEST(Charge, CostlyChargeNeverInvokesOom) {
  Tree t;
  int ooms = 0;
  t.ctl.set_oom_hook([&](Group&, int64_t) { return ++ooms, true; });
  t.b->set_max(8 * kUnit);
  EXPECT_EQ(try_charge(*t.c, 16), ChargeStatus::kNoMem);
  EXPECT_EQ(ooms, 0);
  EXPECT_EQ(t.b->events_local().get(Event::kOom), 0u);
  EXPECT_EQ(t.b->events_local().get(Event::kMax), 18u);
}

TEST(Charge, NoRetryGivesUpAfterTheDrainPass) {
  Tree t;
  t.b->set_max(8 * kUnit);
  ASSERT_EQ(try_charge(*t.c, 8), ChargeStatus::kOk);
  EXPECT_EQ(try_charge(*t.c, 1, kMayBlock | kNoRetry), ChargeStatus::kNoMem);
  EXPECT_EQ(t.b->events_local().get(Event::kMax), 2u);  // first pass, post-drain pass
  uncharge(*t.c, 8);
}

TEST(Charge, ReclaimProgressLetsTheChargeSucceed) {
  Tree t;
  t.b->set_max(8 * kUnit);
  ASSERT_EQ(try_charge(*t.c, 8), ChargeStatus::kOk);
  int64_t held = 8;
  t.ctl.set_reclaim_hook([&](Group&, int64_t) {
    // A cache in c gives back two units.
    t.c->memory().uncharge(2);
    held -= 2;
    return int64_t{2};
  });
  EXPECT_EQ(try_charge(*t.c, 1), ChargeStatus::kOk);
  EXPECT_EQ(t.b->events_local().get(Event::kMax), 1u);
  EXPECT_EQ(t.b->memory().usage(), held + 1);
}

TEST(Charge, OomKillRetriesTheCharge) {
  Tree t;
  t.b->set_max(8 * kUnit);
  ASSERT_EQ(try_charge(*t.c, 8), ChargeStatus::kOk);
  int kills = 0;
  t.ctl.set_oom_hook([&](Group&, int64_t) {
    ++kills;
    t.c->memory().uncharge(8);  // the victim's memory goes away
    return true;
  });
  EXPECT_EQ(try_charge(*t.c, 1), ChargeStatus::kOk);
  EXPECT_EQ(kills, 1);
  EXPECT_EQ(t.b->events_local().get(Event::kOom), 1u);
  EXPECT_EQ(t.b->memory().usage(), 1);
}

TEST(Charge, InReclaimForcesImmediately) {
  Tree t;
  int reclaims = 0;
  t.ctl.set_reclaim_hook([&](Group&, int64_t) { return ++reclaims, int64_t{0}; });
  t.b->set_max(1 * kUnit);
  EXPECT_EQ(try_charge(*t.c, 2, kMayBlock | kInReclaim), ChargeStatus::kForced);
  EXPECT_EQ(reclaims, 0);
  EXPECT_EQ(t.b->memory().usage(), 2);
}

TEST(Charge, RootChargesAreNotRecorded) {
  Controller ctl;
  EXPECT_EQ(try_charge(ctl.root(), 10), ChargeStatus::kOk);
  EXPECT_EQ(ctl.root().memory().usage(), 0);
  uncharge(ctl.root(), 10);
  EXPECT_EQ(ctl.root().memory().usage(), 0);
}

TEST(Charge, EvictionWhenMoreGroupsThanSlots) {
  Options o;
  o.nr_shards = 1;
  Controller ctl(o);
  std::vector<GroupRef> groups(Stock::kSlots + 1);
  for (size_t i = 0; i < groups.size(); ++i)
    ASSERT_EQ(ctl.create("g" + std::to_string(i), &groups[i]), 0);
  for (size_t i = 0; i < Stock::kSlots; ++i)
    ASSERT_EQ(try_charge(*groups[i], 1), ChargeStatus::kOk);
  int64_t stocked = 0;
  for (auto& g : groups) stocked += ctl.stock().stocked(g.get());
  EXPECT_EQ(stocked, 63 * Stock::kSlots);
  ASSERT_EQ(try_charge(*groups.back(), 1), ChargeStatus::kOk);
  // One slot was drained to make room: its group's usage fell back to what is really charged.
  int drained = 0;
  for (size_t i = 0; i < Stock::kSlots; ++i)
    if (groups[i]->memory().usage() == 1) ++drained;
  EXPECT_EQ(drained, 1);
  EXPECT_LE(ctl.stock().slack_bound(), int64_t{1} * Stock::kSlots * 64);
  for (auto& g : groups) uncharge(*g, 1);
}

TEST(Charge, DrainFreesRoomHiddenInAnotherCpusStock) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs two CPUs";
  Options o;
  o.nr_shards = 2;
  Tree t(o);
  t.b->set_max(64 * kUnit);
  {
    PinTo pin(0);
    ASSERT_TRUE(pin.ok());
    ASSERT_EQ(try_charge(*t.c, 1), ChargeStatus::kOk);  // 63 units now sit in CPU 0's stock
  }
  int reclaims = 0;
  t.ctl.set_reclaim_hook([&](Group&, int64_t) { return ++reclaims, int64_t{0}; });
  {
    PinTo pin(1);
    ASSERT_TRUE(pin.ok());
    // The only room left is in CPU 0's stock: one reclaim pass (nothing), then the drain.
    ASSERT_EQ(try_charge(*t.c, 63), ChargeStatus::kOk);
  }
  EXPECT_EQ(reclaims, 1);
  EXPECT_EQ(t.b->events_local().get(Event::kMax), 1u);
  EXPECT_EQ(t.b->events_local().get(Event::kOom), 0u);
  EXPECT_EQ(t.b->memory().usage(), 64);
  EXPECT_EQ(charge_stats(t.ctl).drains, 1u);
  uncharge(*t.c, 64);
}

TEST(Charge, BytesRoundUpToUnits) {
  Tree t;
  ASSERT_EQ(try_charge_bytes(*t.c, 1, kMayBlock | kNoSpin), ChargeStatus::kOk);
  EXPECT_EQ(t.c->current(), kUnit);
  uncharge_bytes(*t.c, 1);
  t.ctl.stock().drain_all(t.c.get());
  EXPECT_EQ(t.c->current(), 0u);
  t.c->set_max(kUnit);
  EXPECT_THROW(charge_or_throw(*t.c, kUnit + 1), std::bad_alloc);
  EXPECT_EQ(t.c->current(), 0u);
}

TEST(Attach, ChargesGoToTheAttachedGroupAndHandlesRemember) {
  Tree t;
  EXPECT_EQ(&current_group(t.ctl), &t.ctl.root());
  ChargeHandle h1;
  {
    ScopedAttach in_c(*t.c);
    ASSERT_TRUE(in_c.ok());
    EXPECT_EQ(&current_group(t.ctl), t.c.get());
    EXPECT_EQ(t.c->nr_attached(), 1);
    EXPECT_EQ(t.ctl.remove(*t.c), EBUSY);  // a group with attached threads stays
    h1 = charge_current(t.ctl, 10 * kUnit, kMayBlock | kNoSpin);
    ASSERT_TRUE(h1.ok());
    {
      ScopedAttach in_b(*t.b);
      EXPECT_EQ(&current_group(t.ctl), t.b.get());
    }
    EXPECT_EQ(&current_group(t.ctl), t.c.get());
  }
  EXPECT_EQ(t.c->nr_attached(), 0);
  ScopedAttach in_a(*t.a);
  EXPECT_EQ(t.c->current(), 10 * kUnit);
  h1.release();  // uncharged from c, where it was charged, though the thread is in a now
  t.ctl.stock().drain_all(&t.ctl.root());
  EXPECT_EQ(t.c->current(), 0u);
  EXPECT_EQ(t.a->current(), 0u);
}

TEST(Attach, HandleOutlivesTheRemovedGroup) {
  Tree t;
  ChargeHandle h(*t.c, 5 * kUnit);
  ASSERT_TRUE(h.ok());
  Group* c = t.c.get();
  t.c.reset();
  ASSERT_EQ(t.ctl.remove("a/b/c"), 0);
  EXPECT_EQ(t.ctl.nr_dying(), 1u);
  EXPECT_EQ(t.ctl.stock().stocked(c), 0);  // removal drained it from every stock
  EXPECT_EQ(t.b->current(), 5 * kUnit);    // its charge is still counted above it
  h.release();
  t.ctl.stock().drain_all(&t.ctl.root());
  EXPECT_EQ(t.b->current(), 0u);
  EXPECT_EQ(t.ctl.nr_dying(), 0u);  // the handle held the last reference
}

TEST(Attach, AttachToRemovedGroupFails) {
  Tree t;
  GroupRef c = t.c;
  ASSERT_EQ(t.ctl.remove("a/b/c"), 0);
  EXPECT_EQ(attach_current_thread(*c), ENOENT);
  EXPECT_EQ(attached_group(), nullptr);
}

TEST(Limits, WriteMaxBelowUsageDrainsThenOoms) {
  Tree t;
  ASSERT_EQ(try_charge(*t.c, 10), ChargeStatus::kOk);  // 64 charged, 54 in the stock
  int ooms = 0;
  t.ctl.set_oom_hook([&](Group& domain, int64_t units) {
    EXPECT_EQ(&domain, t.b.get());
    EXPECT_EQ(units, 1);
    ++ooms;
    return false;
  });
  write_max(*t.b, 20 * kUnit);  // the drain alone brings usage to 10
  EXPECT_EQ(t.b->memory().usage(), 10);
  EXPECT_EQ(ooms, 0);
  write_max(*t.b, 5 * kUnit, /*nonblocking=*/true);
  EXPECT_EQ(ooms, 0);
  write_max(*t.b, 5 * kUnit);
  EXPECT_EQ(ooms, 1);
  EXPECT_EQ(t.b->events_local().get(Event::kOom), 1u);
  EXPECT_EQ(t.b->memory().max(), 5);
  uncharge(*t.c, 10);
}

TEST(Limits, WriteHighGivesUpAfterSixteenFruitlessReclaims) {
  Tree t;
  ASSERT_EQ(try_charge(*t.c, 100), ChargeStatus::kOk);
  int reclaims = 0;
  t.ctl.set_reclaim_hook([&](Group&, int64_t) { return ++reclaims, int64_t{0}; });
  write_high(*t.b, 50 * kUnit);
  EXPECT_EQ(reclaims, 16);
  EXPECT_EQ(t.b->memory().usage(), 100);
  EXPECT_EQ(t.b->events_local().get(Event::kHigh), 0u);  // the write raises no events
  uncharge(*t.c, 100);
}

}  // namespace
}  // namespace memcg
