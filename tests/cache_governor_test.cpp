// CacheGovernor: a cache's capacity set from the group's room, lowered by reclaim.
#include <gtest/gtest.h>

#include <stdexcept>

#include "memcg/memcg.hpp"
#include "memcg/core/reclaim/cache_governor.hpp"

namespace memcg {
namespace {

constexpr uint64_t kUnit = 4096;

// memcg::LruCache behind the governor's interface: the application fills it up to the capacity.
class GovernedLru final : public GovernedCache {
 public:
  explicit GovernedLru(LruCache& lru) : lru_(lru) {}
  uint64_t usage_bytes() const noexcept override {
    return static_cast<uint64_t>(lru_.size()) * kUnit;
  }
  bool set_capacity_bytes(uint64_t bytes) noexcept override {
    capacity_ = bytes;
    const int64_t cap_units = static_cast<int64_t>(bytes / kUnit);
    if (lru_.size() > cap_units) lru_.shrink(lru_.size() - cap_units);
    ++calls_;
    return true;
  }
  // Adds units up to the capacity (a cache filling as it misses).
  void fill() {
    const int64_t cap_units = static_cast<int64_t>(capacity_ / kUnit);
    if (lru_.size() < cap_units) lru_.grow(cap_units - lru_.size());
  }
  LruCache& lru_;
  uint64_t capacity_ = 0;
  int calls_ = 0;
};

// A cache whose memory is charged to the group and freed only by its own evictions (no reclaimer
// of its own), and that can defer a capacity as a cache does whose locks reclaim may hold
// (memcg::rocksdb's BlockCache): it keeps the capacity and applies it from its own thread.
class DeferringCache final : public GovernedCache {
 public:
  explicit DeferringCache(Group& g) : g_(g) {}
  ~DeferringCache() override { uncharge_direct(g_, units_); }
  uint64_t usage_bytes() const noexcept override { return static_cast<uint64_t>(units_) * kUnit; }
  bool set_capacity_bytes(uint64_t bytes) noexcept override {
    if (defer_) {
      pending_ = bytes;
      return false;
    }
    evict_to(bytes);
    return true;
  }
  void evict_to(uint64_t bytes) noexcept {
    capacity_ = bytes;
    const int64_t cap = static_cast<int64_t>(bytes / kUnit);
    if (units_ > cap) {
      uncharge_direct(g_, units_ - cap);
      units_ = cap;
    }
  }
  void fill() {
    const int64_t cap = static_cast<int64_t>(capacity_ / kUnit);
    if (units_ < cap && try_charge(g_, cap - units_, kDefaultCharge | kNoSpin) == ChargeStatus::kOk)
      units_ = cap;
  }
  // The cache's own thread applies what it kept and tells the governor.
  void apply_pending(CacheGovernor& gov) {
    if (pending_ == UINT64_MAX) return;
    evict_to(pending_);
    gov.applied(pending_);
    pending_ = UINT64_MAX;
  }
  Group& g_;
  int64_t units_ = 0;
  uint64_t capacity_ = 0;
  bool defer_ = false;
  uint64_t pending_ = UINT64_MAX;
};

struct Fixture : ::testing::Test {
  ManualClock clock{1'000'000'000};
  Controller ctl{[this] {
    Options o;
    o.clock = &clock;
    return o;
  }()};
  GroupRef make(const char* path) {
    GroupRef g;
    EXPECT_EQ(ctl.create(path, &g), 0);
    return g;
  }
};

using CacheGovernorTest = Fixture;

TEST_F(CacheGovernorTest, CapacityIsTheRoomLeftByOtherMemory) {
  GroupRef g = make("/t");
  g->set_max(1024 * kUnit);  // 4 MiB
  ASSERT_EQ(try_charge(*g, 256, kDefaultCharge | kNoSpin), ChargeStatus::kOk);  // other memory
  LruCache lru(*g, "c");
  GovernedLru cache(lru);
  CacheGovernorOptions o;
  o.headroom_bytes = 32 * kUnit;
  CacheGovernor gov(*g, cache, o);
  EXPECT_EQ(gov.capacity(), (1024 - 256 - 32) * kUnit);
  cache.fill();
  EXPECT_EQ(lru.size(), 1024 - 256 - 32);
  // The cache's own usage does not shrink its room: the target stays, but for the units the
  // cache's charges left in this CPU's stock (other memory as far as the counters tell).
  const double stock = 64.0 * kUnit;
  EXPECT_NEAR(static_cast<double>(gov.update()), (1024 - 256 - 32) * kUnit, stock);
  // memory.high below max: the cache follows the lower limit, at once.
  g->set_high(800 * kUnit);
  EXPECT_NEAR(static_cast<double>(gov.update()), (800 - 256 - 32) * kUnit, stock);
  EXPECT_LE(static_cast<uint64_t>(lru.size()) * kUnit, gov.capacity());
  uncharge_direct(*g, 256);
}

TEST_F(CacheGovernorTest, GrowsOnlyPastTheHysteresisAndNotRightAfterReclaim) {
  GroupRef g = make("/t");
  g->set_max(1024 * kUnit);
  ASSERT_EQ(try_charge(*g, 512, kDefaultCharge | kNoSpin), ChargeStatus::kOk);
  LruCache lru(*g, "c");
  GovernedLru cache(lru);
  CacheGovernorOptions o;
  o.headroom_bytes = kUnit;
  o.hysteresis_bytes = 64 * kUnit;
  o.grow_delay_ns = 5'000'000'000;
  CacheGovernor gov(*g, cache, o);
  ASSERT_EQ(gov.capacity(), 511 * kUnit);
  uncharge_direct(*g, 32);  // 32 units of room more: within the hysteresis
  EXPECT_EQ(gov.update(), 511 * kUnit);
  uncharge_direct(*g, 64);  // 96 units more: past it
  EXPECT_EQ(gov.update(), 607 * kUnit);
  EXPECT_EQ(gov.stats().raised, 1u);
  cache.fill();
  // Proactive reclaim lowers the capacity by what was asked; the cache evicts itself.
  const int64_t freed = reclaim(*g, 100, ReclaimReason::kProactive);
  EXPECT_GE(freed, 100);
  EXPECT_LE(gov.capacity(), 507 * kUnit);
  EXPECT_GE(gov.stats().reclaims, 1u);
  EXPECT_EQ(static_cast<uint64_t>(lru.size()) * kUnit, gov.capacity());
  // Room came back but the grow delay holds the capacity down...
  const uint64_t lowered = gov.capacity();
  EXPECT_EQ(gov.update(), lowered);
  // ...until it has passed.
  clock.advance(6'000'000'000);
  EXPECT_EQ(gov.update(), 607 * kUnit);
  uncharge_direct(*g, 416);
}

// A cache that defers the cut: each reclaim asks again for memory that is not freed yet. The
// governor records the cut when the cache applies it, once, not at every ask: capacity() stays
// the capacity in force, and no update() counts a raise that never happened.
TEST_F(CacheGovernorTest, ADeferredCutIsRecordedWhenItIsApplied) {
  GroupRef g = make("/t");
  g->set_max(1024 * kUnit);
  DeferringCache cache(*g);
  CacheGovernorOptions o;
  o.headroom_bytes = kUnit;
  o.hysteresis_bytes = 8 * kUnit;
  CacheGovernor gov(*g, cache, o);
  cache.fill();
  const uint64_t full = gov.capacity();
  ASSERT_EQ(full, 1023 * kUnit);
  ASSERT_EQ(cache.usage_bytes(), full);
  cache.defer_ = true;
  // Three asks for 100 units before the cache's thread runs: nothing freed, nothing in force.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(reclaim(*g, 100, ReclaimReason::kProactive), 0);
  EXPECT_EQ(gov.capacity(), full);
  EXPECT_EQ(gov.stats().reclaims, 0u);
  EXPECT_GE(gov.stats().deferred, 3u);
  // Each ask is from the capacity in force (the driver asks in bites of at most 100 units).
  const uint64_t cut = cache.pending_;
  EXPECT_GE(cut, full - 100 * kUnit);
  EXPECT_LT(cut, full);
  // An update meanwhile sees the capacity in force: nothing to lower or raise.
  EXPECT_EQ(gov.update(), full);
  // The cache applies the cut: recorded now, once.
  cache.defer_ = false;
  cache.apply_pending(gov);
  EXPECT_EQ(gov.capacity(), cut);
  EXPECT_EQ(cache.usage_bytes(), cut);
  EXPECT_EQ(gov.stats().reclaims, 1u);
  // The grow delay runs from the cut: the room that came back is not taken at once...
  EXPECT_EQ(gov.update(), cut);
  EXPECT_EQ(gov.stats().raised, 0u);
  EXPECT_EQ(gov.stats().lowered, 0u);
  // ...but after it.
  clock.advance(2'000'000'000);
  EXPECT_EQ(gov.update(), full);
  EXPECT_EQ(gov.stats().raised, 1u);
  EXPECT_EQ(gov.stats().lowered, 0u);
}

TEST_F(CacheGovernorTest, ChargeAtMaxShrinksTheCacheInsteadOfFailing) {
  GroupRef g = make("/t");
  g->set_max(1024 * kUnit);
  LruCache lru(*g, "c");
  GovernedLru cache(lru);
  CacheGovernor gov(*g, cache);
  cache.fill();
  ASSERT_GT(lru.size(), 900);
  // Other memory grows past the room the cache left: reclaim lowers the capacity.
  ASSERT_EQ(try_charge(*g, 300, kDefaultCharge | kNoSpin), ChargeStatus::kOk);
  EXPECT_LE(g->current(), 1024 * kUnit);
  EXPECT_LE(gov.capacity(), (1024 - 300) * kUnit);
  EXPECT_EQ(g->events().get(Event::kOom), 0u);
  uncharge_direct(*g, 300);
}

TEST_F(CacheGovernorTest, AncestorPressureStopsAtTheGroupsLow) {
  GroupRef parent = make("/p");
  GroupRef a = make("/p/a");
  GroupRef b = make("/p/b");
  parent->set_max(2048 * kUnit);
  a->set_low(1024 * kUnit);
  LruCache lru(*a, "c");
  GovernedLru cache(lru);
  CacheGovernorOptions o;
  o.headroom_bytes = kUnit;
  o.grow_delay_ns = 0;
  CacheGovernor gov(*a, cache, o);
  cache.fill();
  ASSERT_GE(lru.size(), 1900);
  // A noisy sibling with a cache of its own grows it far past the parent's limit.
  LruCache noisy(*b, "noisy");
  for (int round = 0; round < 8; ++round) {
    noisy.grow(512);
    gov.update();
    cache.fill();  // the protected tenant keeps reading
  }
  // memory.low, less the units a stock batch holds (other memory to the governor).
  EXPECT_GE(lru.size(), 1024 - 64);
  EXPECT_GE(gov.capacity(), (1024 - 64) * kUnit);
  EXPECT_LE(parent->current(), 2048 * kUnit);
  EXPECT_GT(noisy.size(), 512);
  EXPECT_EQ(a->events().get(Event::kLow), 0u);
}

// A group below its memory.min is never reclaimed: under an ancestor's pressure the governor
// keeps all of its cache (and lets it fill up to the protection).
TEST_F(CacheGovernorTest, BelowItsMinTheCacheIsNotShrunk) {
  GroupRef parent = make("/p");
  GroupRef a = make("/p/a");
  GroupRef b = make("/p/b");
  parent->set_max(2048 * kUnit);
  a->set_min(1024 * kUnit);
  LruCache lru(*a, "c");
  GovernedLru cache(lru);
  CacheGovernorOptions o;
  o.headroom_bytes = kUnit;
  o.grow_delay_ns = 0;
  CacheGovernor gov(*a, cache, o);
  cache.fill();
  lru.shrink(lru.size() - 700);  // a working set of 700 units, below the 1024 of memory.min
  LruCache noisy(*b, "noisy");
  for (int round = 0; round < 8; ++round) {
    noisy.grow(512);
    gov.update();
    EXPECT_EQ(lru.size(), 700) << "round " << round;
  }
  EXPECT_GE(gov.capacity(), (1024 - 64) * kUnit);  // the protection, less a stock batch
  EXPECT_EQ(gov.stats().reclaims, 0u);
  EXPECT_LE(parent->current(), 2048 * kUnit);
}

// The protection that counts is the effective one, shared out down the tree from the level whose
// limit presses (protection.hpp), as reclaim computes it. With recursive protection a group
// without a memory.min of its own is protected by its parent's: its cache stays.
TEST(CacheGovernorEffective, RecursiveProtectionOfTheParentKeepsTheCache) {
  ManualClock clock{1'000'000'000};
  Options opts;
  opts.clock = &clock;
  opts.recursive_protection = true;
  Controller ctl(opts);
  GroupRef parent, t, a, b;
  ASSERT_EQ(ctl.create("/p", &parent), 0);
  ASSERT_EQ(ctl.create("/p/t", &t), 0);
  ASSERT_EQ(ctl.create("/p/t/a", &a), 0);
  ASSERT_EQ(ctl.create("/p/b", &b), 0);
  parent->set_max(2048 * kUnit);
  t->set_min(1024 * kUnit);  // a's only through recursive protection
  LruCache lru(*a, "c");
  GovernedLru cache(lru);
  CacheGovernorOptions o;
  o.headroom_bytes = kUnit;
  o.grow_delay_ns = 0;
  CacheGovernor gov(*a, cache, o);
  cache.fill();
  lru.shrink(lru.size() - 700);
  LruCache noisy(*b, "noisy");
  for (int round = 0; round < 8; ++round) {
    noisy.grow(512);
    gov.update();
    EXPECT_EQ(lru.size(), 700) << "round " << round;
  }
  EXPECT_GE(gov.capacity(), (1024 - 64) * kUnit);
  EXPECT_LE(parent->current(), 2048 * kUnit);
}

// And a memory.min that the parent does not hand out (its own is 0) protects nothing against
// the grandparent's limit: the governor does not keep the cache for it.
TEST(CacheGovernorEffective, MinNotHandedOutByTheParentDoesNotKeepTheCache) {
  ManualClock clock{1'000'000'000};
  Options opts;
  opts.clock = &clock;
  Controller ctl(opts);
  GroupRef parent, t, a, b;
  ASSERT_EQ(ctl.create("/p", &parent), 0);
  ASSERT_EQ(ctl.create("/p/t", &t), 0);
  ASSERT_EQ(ctl.create("/p/t/a", &a), 0);
  ASSERT_EQ(ctl.create("/p/b", &b), 0);
  parent->set_max(2048 * kUnit);
  a->set_min(1024 * kUnit);  // t has none: a's effective min under /p is 0
  LruCache lru(*a, "c");
  GovernedLru cache(lru);
  CacheGovernorOptions o;
  o.headroom_bytes = kUnit;
  o.grow_delay_ns = 0;
  CacheGovernor gov(*a, cache, o);
  cache.fill();
  ASSERT_GE(lru.size(), 1900);
  ASSERT_EQ(try_charge(*b, 1536, kDefaultCharge | kNoSpin), ChargeStatus::kOk);
  // Reclaim took from a's cache (the driver gives a no protection); update() does not bring the
  // capacity back up to a's memory.min: the room /p leaves, 2048 - 1536 - headroom.
  gov.update();
  EXPECT_LE(gov.capacity(), (2048 - 1536) * kUnit);
  cache.fill();
  EXPECT_LE(static_cast<uint64_t>(lru.size()), 512u);
  EXPECT_LE(parent->current(), 2048 * kUnit);
  uncharge_direct(*b, 1536);
}

TEST_F(CacheGovernorTest, InvalidOptionsAreRefused) {
  GroupRef g = make("/t");
  LruCache lru(*g, "c");
  GovernedLru cache(lru);
  CacheGovernorOptions o;
  o.min_bytes = 10 * kUnit;
  o.max_bytes = 5 * kUnit;
  EXPECT_THROW(CacheGovernor(*g, cache, o), std::invalid_argument);
  EXPECT_EQ(cache.calls_, 0);
}

}  // namespace
}  // namespace memcg
