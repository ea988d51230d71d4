// Reclaim under protection, memory.high, memory.reclaim and the OOM killer (protection.md,
// events_oom.md, charge_path.md).
#include "memcg/core/reclaim/reclaim.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <stdexcept>

#include "memcg/core/tree/controller.hpp"
#include "memcg/files/files.hpp"
#include "memcg/core/charge/limits.hpp"
#include "memcg/alloc/lru_cache.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/counter/protection.hpp"
#include "memcg/percpu/internal/stock.hpp"

namespace memcg {
namespace {

constexpr int64_t kMiB = 256;  // units of 4 KiB per MiB
constexpr int64_t kGiB = 1024 * kMiB;

// ---- effective protection: the worked examples of protection.md ---------------------------------

TEST(Protection, E1UndercommitNonRecursive) {
  const int64_t a_eff = 10 * kGiB, a_usage = 12 * kGiB, siblings = 9 * kGiB;
  EXPECT_EQ(effective_protection(8 * kGiB, a_usage, 6 * kGiB, a_eff, siblings, false), 6 * kGiB);
  EXPECT_EQ(effective_protection(3 * kGiB, a_usage, 6 * kGiB, a_eff, siblings, false), 3 * kGiB);
  EXPECT_EQ(effective_protection(1 * kGiB, a_usage, 0, a_eff, siblings, false), 0);
}

TEST(Protection, E1UndercommitRecursiveHandsOutTheRemainder) {
  const int64_t a_eff = 10 * kGiB, a_usage = 12 * kGiB, siblings = 9 * kGiB;
  const int64_t b = effective_protection(8 * kGiB, a_usage, 6 * kGiB, a_eff, siblings, true);
  const int64_t c = effective_protection(3 * kGiB, a_usage, 6 * kGiB, a_eff, siblings, true);
  const int64_t d = effective_protection(1 * kGiB, a_usage, 0, a_eff, siblings, true);
  EXPECT_EQ(b, 6 * kGiB + 2 * kGiB / 3);  // 6 + 1 x 2/3
  EXPECT_EQ(c, 3 * kGiB);                 // no unprotected usage
  EXPECT_EQ(d, kGiB / 3);
  EXPECT_LE(b + c + d, a_eff);
}

TEST(Protection, E2OvercommitSharesInProportionToUse) {
  const int64_t a_eff = 10 * kGiB, siblings = 12 * kGiB;
  EXPECT_EQ(effective_protection(8 * kGiB, 12 * kGiB, 8 * kGiB, a_eff, siblings, false),
            8 * kGiB * 10 / 12);
  EXPECT_EQ(effective_protection(4 * kGiB, 12 * kGiB, 8 * kGiB, a_eff, siblings, false),
            4 * kGiB * 10 / 12);
}

TEST(Protection, E3DelegationIsCappedByTheParent) {
  EXPECT_EQ(effective_protection(5 * kGiB, 5 * kGiB, 10 * kGiB, 2 * kGiB, 5 * kGiB, false),
            2 * kGiB);
}

TEST(Protection, MaxSettingDoesNotOverflowInRecursiveMode) {
  const int64_t max = PageCounter::sentinel(12);
  const int64_t usage = 1'000'000;  // far past the 2^13 units where 64 bits would wrap
  const int64_t ep = effective_protection(usage, 3 * usage, 0, max, usage, true);
  EXPECT_GE(ep, 0);
  EXPECT_LE(ep, max);
  EXPECT_EQ(effective_protection(usage, 3 * usage, max, max, usage, true), usage);
}

// ---- the walk: protection seen through reclaim --------------------------------------------------

struct Sim {
  explicit Sim(Options o = {}) : ctl(with_one_shard(o)) {}
  static Options with_one_shard(Options o) {
    o.nr_shards = 1;
    return o;
  }
  GroupRef make(const char* path) {
    GroupRef g;
    if (ctl.create(path, &g) != 0) throw std::runtime_error(path);
    return g;
  }
  int64_t usage(const GroupRef& g) { return g->memory().usage(); }
  Controller ctl;
};

TEST(Reclaim, E4ReclaimRootIgnoresItsOwnProtectionAndChildrenGetRawValues) {
  Sim s;
  GroupRef a = s.make("A"), b = s.make("A/B"), c = s.make("A/C"), d = s.make("A/D");
  a->set_low(uint64_t{10} << 30);
  b->set_low(uint64_t{6} << 30);
  c->set_low(uint64_t{6} << 30);
  LruCache cb(*b, "b"), cc(*c, "c"), cd(*d, "d");
  ASSERT_EQ(cb.grow(8 * kMiB), 8 * kMiB);
  ASSERT_EQ(cc.grow(3 * kMiB), 3 * kMiB);
  ASSERT_EQ(cd.grow(1 * kMiB), 1 * kMiB);
  s.ctl.stock().drain_all(&s.ctl.root());
  // Rooted at A: B and C are below their raw low (6 GiB each), only D is reclaimable.
  ReclaimStats st;
  reclaim(*a, 1 * kMiB, ReclaimReason::kProactive, &st);
  EXPECT_EQ(cb.size(), 8 * kMiB);
  EXPECT_EQ(cc.size(), 3 * kMiB);
  EXPECT_LT(cd.size(), 1 * kMiB);
  EXPECT_FALSE(st.low_breached);
  EXPECT_EQ(a->events().get(Event::kLow), 0u);
}

TEST(Reclaim, BelowMinIsNeverReclaimedAndLowOnlyWhenNothingElseIs) {
  Sim s;
  GroupRef p = s.make("P"), m = s.make("P/min"), l = s.make("P/low"), u = s.make("P/open");
  m->set_min(uint64_t{4} << 20);
  l->set_low(uint64_t{4} << 20);
  LruCache cm(*m, "m"), cl(*l, "l"), cu(*u, "u");
  cm.grow(2 * kMiB);
  cl.grow(2 * kMiB);
  cu.grow(2 * kMiB);
  s.ctl.stock().drain_all(&s.ctl.root());
  // Plenty unprotected: only the open group gives.
  ReclaimStats st;
  EXPECT_GT(reclaim(*p, kMiB, ReclaimReason::kProactive, &st), 0);
  EXPECT_EQ(cm.size(), 2 * kMiB);
  EXPECT_EQ(cl.size(), 2 * kMiB);
  EXPECT_FALSE(st.low_breached);
  // Nothing unprotected left: a pass that frees nothing breaches low, with a `low` event.
  cu.drop();
  EXPECT_GT(reclaim(*p, kMiB, ReclaimReason::kProactive, &st), 0);
  EXPECT_TRUE(st.low_breached);
  EXPECT_LT(cl.size(), 2 * kMiB);
  EXPECT_EQ(cm.size(), 2 * kMiB);  // min holds even then
  EXPECT_GE(l->events_local().get(Event::kLow), 1u);
  EXPECT_GE(p->events().get(Event::kLow), 1u);  // hierarchical
  EXPECT_EQ(m->events_local().get(Event::kLow), 0u);
  // Only min-protected memory left: nothing at all.
  cl.drop();
  EXPECT_EQ(reclaim(*p, kMiB, ReclaimReason::kProactive, &st), 0);
  EXPECT_EQ(cm.size(), 2 * kMiB);
}

TEST(Reclaim, ProportionalScanFollowsTheUnprotectedShare) {
  Sim s;
  GroupRef p = s.make("P"), a = s.make("P/a"), b = s.make("P/b");
  a->set_low(uint64_t{40} << 20);  // 40 of its 50 MiB: about a fifth of normal pressure
  LruCache ca(*a, "a"), cb(*b, "b");
  ca.grow(50 * kMiB);
  cb.grow(50 * kMiB);
  s.ctl.stock().drain_all(&s.ctl.root());
  for (int i = 0; i < 200; ++i) reclaim(*p, 32, ReclaimReason::kProactive);
  const double taken_a = 50 * kMiB - ca.size(), taken_b = 50 * kMiB - cb.size();
  ASSERT_GT(taken_b, 0);
  EXPECT_NEAR(taken_a / taken_b, 0.2, 0.08) << taken_a << " vs " << taken_b;
}

TEST(Reclaim, ThrowingOrLyingReclaimersFreeNothingAndCorruptNothing) {
  struct Thrower : Reclaimer {
    int64_t reclaimable() const noexcept override { return 100; }
    ReclaimResult reclaim(int64_t, int) override { throw std::runtime_error("boom"); }
  };
  struct Liar : Reclaimer {
    int64_t reclaimable() const noexcept override { return 100; }
    ReclaimResult reclaim(int64_t n, int) override { return {n, 10 * n}; }
  };
  Sim s;
  GroupRef g = s.make("g");
  Thrower t;
  Liar l;
  ReclaimerRegistration rt(*g, t), rl(*g, l);
  EXPECT_EQ(reclaim(*g, 64, ReclaimReason::kProactive), 0);
  EXPECT_EQ(g->memory().usage(), 0);
}

TEST(Reclaim, ReclaimerMayUnregisterItselfAndOthers) {
  struct SelfRemover : Reclaimer {
    ReclaimerRegistration* mine = nullptr;
    ReclaimerRegistration* other = nullptr;
    int calls = 0;
    int64_t reclaimable() const noexcept override { return 64; }
    ReclaimResult reclaim(int64_t n, int) override {
      ++calls;
      mine->reset();
      other->reset();
      return {n, 0};
    }
  };
  Sim s;
  GroupRef g = s.make("g");
  SelfRemover a, b;
  ReclaimerRegistration ra(*g, a), rb(*g, b);
  a.mine = &ra;
  a.other = &rb;
  b.mine = &rb;
  b.other = &ra;
  reclaim(*g, 64, ReclaimReason::kProactive);
  EXPECT_EQ(a.calls + b.calls, 1);
  EXPECT_FALSE(ra);
  EXPECT_FALSE(rb);
  EXPECT_EQ(reclaim(*g, 64, ReclaimReason::kProactive), 0);
}

TEST(Reclaim, ChargesFromInsideAReclaimerAreForcedNotRecursive) {
  struct Allocating : Reclaimer {
    Group* g = nullptr;
    int64_t reclaimable() const noexcept override { return 64; }
    ReclaimResult reclaim(int64_t n, int) override {
      EXPECT_EQ(try_charge(*g, 1), ChargeStatus::kForced);  // at max: forced, no recursion
      uncharge_direct(*g, 1);
      return {n, 0};
    }
  };
  Sim s;
  GroupRef g = s.make("g");
  g->set_max(4096);
  ASSERT_EQ(try_charge(*g, 1), ChargeStatus::kOk);
  Allocating r;
  r.g = g.get();
  ReclaimerRegistration reg(*g, r);
  reclaim(*g, 1, ReclaimReason::kProactive);
  EXPECT_EQ(g->memory().usage(), 1);
}

// ---- the kernel selftest of memory.min / memory.low, in the library ----------------------------

struct ProtectionSetup {
  explicit ProtectionSetup(bool use_low) {
    a = s.make("A");
    b = s.make("A/B");
    for (const char* leaf : {"A/B/C", "A/B/D", "A/B/E", "A/B/F"}) leaves.push_back(s.make(leaf));
    g = s.make("A/G");
    a->set_max(uint64_t{200} << 20);
    for (int i = 0; i < 3; ++i) {
      caches.push_back(std::make_unique<LruCache>(*leaves[i], "f" + std::to_string(i)));
      EXPECT_EQ(caches.back()->grow(50 * kMiB), 50 * kMiB);
    }
    auto set = [&](Group& grp, uint64_t mib) {
      use_low ? grp.set_low(mib << 20) : grp.set_min(mib << 20);
    };
    set(*b, 50);
    set(*leaves[0], 75);
    set(*leaves[1], 25);
    set(*leaves[3], 500);
  }
  Sim s;
  GroupRef a, b, g;
  std::vector<GroupRef> leaves;
  std::vector<std::unique_ptr<LruCache>> caches;
};

// The kernel selftests' values_close(): |a - b| <= (a + b) / 100 * err, the rule scenario files
// use too (so a 3 % error allows about 6 % of either value).
bool values_close(uint64_t a, uint64_t b, uint64_t err) {
  const uint64_t diff = a > b ? a - b : b - a;
  return diff <= (a + b) / 100 * err;
}
constexpr uint64_t MiB(uint64_t n) {
  return n << 20;
}

double mib(const GroupRef& g) {
  return static_cast<double>(g->current()) / (1 << 20);
}

// memory.current includes units parked in per-CPU stocks (up to a batch per group); the
// selftest's tolerances are about reclaim, so read the counters with the stocks drained.
void settle(Sim& s) {
  s.ctl.stock().drain_all(&s.ctl.root());
}

TEST(ProtectionSelftest, MinIsSharedInProportionToUsage) {
  ProtectionSetup p(/*use_low=*/false);
  bool g_killed = false;
  {
    Member g(*p.g, "g", [&](Member& m) { g_killed = true, m.uncharge(m.charged()); });
    for (int64_t i = 0; i < 148 * kMiB; ++i) ASSERT_TRUE(charged(g.charge(1))) << i;
  }
  settle(p.s);
  std::printf("memory.min: B=%.1f C=%.1f D=%.1f E=%.1f F=%.1f MiB\n", mib(p.b), mib(p.leaves[0]),
              mib(p.leaves[1]), mib(p.leaves[2]), mib(p.leaves[3]));
  EXPECT_FALSE(g_killed);
  // The kernel's figures and tolerances. B ends near 52 MiB here (200 - 148, the pin being all
  // that G holds); in the kernel the pinning process's own page tables and stack are charged to G
  // too, which pushes B to about 50 MiB. C and D keep protection in proportion to what they use
  // (75:25 claims overcommitting B's 50 MiB); E, unprotected, gives nearly everything.
  EXPECT_TRUE(values_close(p.b->current(), MiB(50), 3)) << mib(p.b);
  EXPECT_TRUE(values_close(p.leaves[0]->current(), MiB(29), 15)) << mib(p.leaves[0]);
  EXPECT_TRUE(values_close(p.leaves[1]->current(), MiB(21), 20)) << mib(p.leaves[1]);
  EXPECT_LT(mib(p.leaves[2]), 2);
  EXPECT_EQ(p.leaves[3]->current(), 0u);

  // A 170 MiB pin cannot be satisfied without breaking min: the pinning member is killed.
  bool killed = false;
  Member g2(*p.g, "g2", [&](Member& m) {
    killed = true;
    m.uncharge(m.charged());
  });
  int64_t i = 0;
  for (; i < 170 * kMiB; ++i)
    if (!charged(g2.charge(1))) break;
  EXPECT_TRUE(killed);
  EXPECT_LT(i, 170 * kMiB);
  EXPECT_GE(p.g->events_local().get(Event::kOomKill), 1u);
  EXPECT_GE(p.a->events_local().get(Event::kOom), 1u);
  settle(p.s);
  EXPECT_TRUE(values_close(p.b->current(), MiB(50), 3)) << mib(p.b);
  EXPECT_EQ(OomKiller::last_report(p.s.ctl).victim, "g2");
}

TEST(ProtectionSelftest, LowIsBreachedOnlyWhenNothingElseIsLeft) {
  ProtectionSetup p(/*use_low=*/true);
  {
    Member g(*p.g, "g", [](Member& m) { m.uncharge(m.charged()); });
    for (int64_t i = 0; i < 148 * kMiB; ++i) ASSERT_TRUE(charged(g.charge(1)));
  }
  settle(p.s);
  std::printf("memory.low: B=%.1f C=%.1f D=%.1f E=%.1f MiB\n", mib(p.b), mib(p.leaves[0]),
              mib(p.leaves[1]), mib(p.leaves[2]));
  EXPECT_TRUE(values_close(p.b->current(), MiB(50), 3)) << mib(p.b);
  EXPECT_TRUE(values_close(p.leaves[0]->current(), MiB(29), 15)) << mib(p.leaves[0]);
  EXPECT_TRUE(values_close(p.leaves[1]->current(), MiB(21), 20)) << mib(p.leaves[1]);
  for (const auto& leaf : p.leaves) EXPECT_EQ(leaf->events_local().get(Event::kLow), 0u);

  // 170 MiB succeeds by breaching low: `low` events only where there was protection.
  Member g2(*p.g, "g2", [](Member& m) { m.uncharge(m.charged()); });
  for (int64_t i = 0; i < 170 * kMiB; ++i) ASSERT_TRUE(charged(g2.charge(1))) << i;
  EXPECT_FALSE(g2.killed());
  EXPECT_GE(p.leaves[0]->events_local().get(Event::kLow), 1u);
  EXPECT_GE(p.leaves[1]->events_local().get(Event::kLow), 1u);
  EXPECT_EQ(p.leaves[2]->events_local().get(Event::kLow), 0u);
  EXPECT_EQ(p.leaves[3]->events_local().get(Event::kLow), 0u);
}

// ---- memory.high ------------------------------------------------------------------------------

TEST(High, DelayTableMatchesTheFormula) {
  const int64_t high = 100 * kMiB;
  const std::pair<int64_t, uint64_t> table[] = {{101, 6},   {102, 25},  {103, 57},   {104, 102},
                                                {105, 159}, {110, 639}, {115, 1439}, {117, 1849}};
  for (auto [usage_mib, ms] : table)
    EXPECT_EQ(high_penalty_ms(high_overage(usage_mib * kMiB, high), 64), ms) << usage_mib;
  EXPECT_GE(high_penalty_ms(high_overage(118 * kMiB, high), 64), kMaxHighDelayMs);
  EXPECT_EQ(high_overage(high, high), 0u);
}

TEST(High, CacheStaysNearHighAndCountsEvents) {
  ManualClock clock;
  Options o;
  o.clock = &clock;
  Sim s(o);
  GroupRef g = s.make("g");
  ASSERT_EQ(write_file(*g, "memory.high", "30M"), 0);
  LruCache cache(*g, "cache");
  EXPECT_EQ(cache.grow(50 * kMiB), 50 * kMiB);
  std::printf("memory.high: current=%.1f MiB, high events=%llu, slept=%llu ms\n", mib(g),
              static_cast<unsigned long long>(g->events_local().get(Event::kHigh)),
              static_cast<unsigned long long>(clock.total_slept_ns() / 1000000));
  EXPECT_NEAR(mib(g), 30, 30 * 0.05);
  EXPECT_GT(g->events_local().get(Event::kHigh), 0u);
  EXPECT_EQ(g->events_local().get(Event::kMax), 0u);
  EXPECT_EQ(g->events_local().get(Event::kOom), 0u);
}

TEST(High, UnreclaimableOverageThrottlesWithTheCappedPenalty) {
  ManualClock clock;
  Options o;
  o.clock = &clock;
  Sim s(o);
  GroupRef g = s.make("g");
  g->set_high(uint64_t{10} << 20);
  Member m(*g, "m", nullptr);
  for (int i = 0; i < 9 * kMiB; ++i) ASSERT_TRUE(charged(m.charge(1)));
  EXPECT_EQ(clock.total_slept_ns(), 0u);  // below high: no throttling
  // 20 MiB against a 10 MiB high, nothing reclaimable: every slow-path charge sleeps 2 s.
  for (int i = 0; i < 11 * kMiB; ++i) ASSERT_TRUE(charged(m.charge(1)));
  EXPECT_GT(clock.total_slept_ns(), 0u);
  const uint64_t before = clock.total_slept_ns();
  ASSERT_TRUE(charged(m.charge(64)));  // a slow-path charge well over high
  EXPECT_EQ(clock.total_slept_ns() - before, kMaxHighDelayMs * 1'000'000);
  EXPECT_EQ(g->events_local().get(Event::kOom), 0u);  // high never OOMs
}

// ---- memory.reclaim ---------------------------------------------------------------------------

TEST(ReclaimFile, ReclaimsOrReportsEagain) {
  Sim s;
  GroupRef g = s.make("g");
  LruCache cache(*g, "c");
  cache.grow(10 * kMiB);
  EXPECT_EQ(write_file(*g, "memory.reclaim", "4M"), 0);
  EXPECT_LE(cache.size(), 6 * kMiB);
  EXPECT_EQ(write_file(*g, "memory.reclaim", "0"), 0);
  EXPECT_EQ(write_file(*g, "memory.reclaim", "1M swappiness=201"), EINVAL);
  EXPECT_EQ(write_file(*g, "memory.reclaim", "100M"), EAGAIN);
  EXPECT_EQ(cache.size(), 0);
  Member m(*g, "pinned", nullptr);
  ASSERT_EQ(m.charge(kMiB), ChargeStatus::kOk);
  EXPECT_EQ(write_file(*g, "memory.reclaim", "1M"), EAGAIN);  // pinned memory is not reclaimable
}

// ---- OOM --------------------------------------------------------------------------------------

TEST(Oom, PicksTheLargestAndRespectsImmunity) {
  Sim s;
  GroupRef d = s.make("d"), x = s.make("d/x"), y = s.make("d/y");
  d->set_max(uint64_t{10} << 20);
  std::vector<std::string> killed;
  auto on_kill = [&](Member& m) {
    killed.push_back(m.name());
    m.uncharge(m.charged());
  };
  Member big(*x, "big", on_kill, Member::kImmune), small(*y, "small", on_kill),
      mid(*y, "mid", on_kill);
  ASSERT_TRUE(charged(big.charge(5 * kMiB)));
  ASSERT_TRUE(charged(small.charge(1 * kMiB)));
  ASSERT_TRUE(charged(mid.charge(3 * kMiB)));
  // Page-sized charges (a costly one would fail without OOM): the OOM kills mid, whose 3 MiB beat
  // small's 2 MiB (big is immune), and small's charges then fit.
  for (int i = 0; i < 2 * kMiB; ++i) ASSERT_TRUE(charged(small.charge(1))) << i;
  ASSERT_EQ(killed, std::vector<std::string>{"mid"});
  EXPECT_EQ(y->events_local().get(Event::kOomKill), 1u);
  EXPECT_EQ(d->events_local().get(Event::kOom), 1u);
  EXPECT_EQ(d->events().get(Event::kOomKill), 1u);
  const OomReport r = OomKiller::last_report(s.ctl);
  EXPECT_EQ(r.victim, "mid");
  EXPECT_EQ(r.domain, "d");
  EXPECT_NE(r.format().find("killed mid"), std::string::npos);
}

TEST(Oom, NoVictimFailsTheChargeCleanly) {
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(uint64_t{1} << 20);
  Member imm(*d, "imm", nullptr, Member::kImmune);
  ASSERT_TRUE(charged(imm.charge(kMiB)));
  EXPECT_EQ(imm.charge(1), ChargeStatus::kNoMem);
  EXPECT_EQ(d->events_local().get(Event::kOom), 1u);
  EXPECT_EQ(d->events_local().get(Event::kOomKill), 0u);
  EXPECT_EQ(d->memory().usage(), kMiB);
}

TEST(Oom, GroupKillTakesTheHighestOomGroupInsideTheDomain) {
  Sim s;
  GroupRef top = s.make("top"), p = s.make("top/p"), a = s.make("top/p/a"), b = s.make("top/p/b");
  top->set_oom_group(true);  // above the domain: ignored
  p->set_oom_group(true);
  a->set_oom_group(true);  // lower than p: p wins
  p->set_max(uint64_t{7} << 20);
  int kills = 0;
  auto on_kill = [&](Member& m) { ++kills, m.uncharge(m.charged()); };
  Member m1(*a, "m1", on_kill), m2(*b, "m2", on_kill), m3(*b, "m3", on_kill),
      keep(*b, "keep", on_kill, Member::kImmune);
  ASSERT_TRUE(charged(m1.charge(4 * kMiB)));
  ASSERT_TRUE(charged(m2.charge(1 * kMiB)));
  ASSERT_TRUE(charged(keep.charge(1 * kMiB)));
  ASSERT_TRUE(charged(m3.charge(1 * kMiB)));
  EXPECT_EQ(m3.charge(16), ChargeStatus::kNoMem);  // costly (> 8 pages): no OOM
  EXPECT_EQ(kills, 0);
  // Small: the OOM picks m1 (the largest) and kills the whole of p, the charging m3 included, so
  // its own charge fails (a dying member's charge does not retry).
  EXPECT_EQ(m3.charge(8), ChargeStatus::kNoMem);
  EXPECT_TRUE(m3.killed());
  EXPECT_EQ(p->events_local().get(Event::kOomGroupKill), 1u);
  EXPECT_EQ(top->events_local().get(Event::kOomGroupKill), 0u);
  EXPECT_EQ(kills, 3);
  EXPECT_TRUE(m1.killed() && m2.killed());
  EXPECT_FALSE(keep.killed());
  EXPECT_EQ(p->events().get(Event::kOomKill), 3u);
}

TEST(Oom, WriteMaxBelowUsageKillsDownToIt) {
  Sim s;
  GroupRef g = s.make("g");
  auto on_kill = [](Member& m) { m.uncharge(m.charged()); };
  Member a(*g, "a", on_kill), b(*g, "b", on_kill);
  ASSERT_TRUE(charged(a.charge(3 * kMiB)));
  ASSERT_TRUE(charged(b.charge(1 * kMiB)));
  ASSERT_EQ(write_file(*g, "memory.max", "2M"), 0);
  EXPECT_TRUE(a.killed());
  EXPECT_FALSE(b.killed());
  EXPECT_LE(g->current(), uint64_t{2} << 20);
  EXPECT_EQ(g->events_local().get(Event::kOom), 1u);
}

}  // namespace
}  // namespace memcg
