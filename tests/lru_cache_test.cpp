// LruCache's list: adjacent runs of unit numbers are merged, so its memory follows the gaps
// between live units, not the units reclaim rotated; the order of eviction is unchanged. The
// rotations are counted (rotated(), the rotate callback), and a callback that returns false
// stops them (a caller's work budget).
#include "memcg/alloc/lru_cache.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "memcg/core/tree/controller.hpp"

namespace memcg {
namespace {

Options one_shard() {
  Options o;
  o.nr_shards = 1;
  return o;
}

TEST(LruCache, RotatingEverythingKeepsOneOrTwoRuns) {
  Controller ctl(one_shard());
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  LruCache cache(*g, "c", 100);
  ASSERT_EQ(cache.grow(10000), 10000);
  EXPECT_EQ(cache.nr_runs(), 1u);
  for (int i = 0; i < 50; ++i) {
    const ReclaimResult r = cache.reclaim(3333, 0);
    EXPECT_EQ(r.scanned, 3333);
    EXPECT_EQ(r.reclaimed, 0);  // every scanned unit was referenced: rotated
    EXPECT_LE(cache.nr_runs(), 2u) << "after " << i + 1 << " scans";
  }
  EXPECT_EQ(cache.size(), 10000);
}

TEST(LruCache, RunsNeverExceedLiveUnitsAndEvictionKeepsLruOrder) {
  Controller ctl(one_shard());
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  LruCache cache(*g, "c", 50);
  std::vector<std::pair<uint64_t, int64_t>> evicted;
  cache.set_evict_callback([&](uint64_t first, int64_t n) { evicted.emplace_back(first, n); });
  ASSERT_EQ(cache.grow(8), 8);
  // Scans alternate: free 0, rotate 1, free 2, rotate 3, ...
  const ReclaimResult r = cache.reclaim(8, 0);
  EXPECT_EQ(r.reclaimed, 4);
  EXPECT_EQ(cache.size(), 4);
  EXPECT_LE(cache.nr_runs(), static_cast<size_t>(cache.size()));
  std::vector<uint64_t> freed;
  for (const auto& [first, n] : evicted)
    for (int64_t k = 0; k < n; ++k) freed.push_back(first + static_cast<uint64_t>(k));
  EXPECT_EQ(freed, (std::vector<uint64_t>{0, 2, 4, 6}));
  // What is left goes oldest first: the rotated units in the order they were rotated.
  evicted.clear();
  EXPECT_EQ(cache.shrink(4), 4);
  freed.clear();
  for (const auto& [first, n] : evicted)
    for (int64_t k = 0; k < n; ++k) freed.push_back(first + static_cast<uint64_t>(k));
  EXPECT_EQ(freed, (std::vector<uint64_t>{1, 3, 5, 7}));
  EXPECT_EQ(cache.nr_runs(), 0u);
}

TEST(LruCache, GrowAfterRotationMergesWithTheYoungEnd) {
  Controller ctl(one_shard());
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  LruCache cache(*g, "c", 100);
  ASSERT_EQ(cache.grow(4), 4);         // 0..3
  (void)cache.reclaim(4, 0);           // rotated whole: still 0..3 in order
  EXPECT_EQ(cache.nr_runs(), 1u);
  ASSERT_EQ(cache.grow(4), 4);         // 4..7 follow 3
  EXPECT_EQ(cache.nr_runs(), 1u);
}

TEST(LruCache, RotationsAreCountedAndACallbackStopsThem) {
  Controller ctl(one_shard());
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  LruCache cache(*g, "c", 50);
  ASSERT_EQ(cache.grow(1000), 1000);
  std::vector<int64_t> told;
  int64_t budget = 150;
  cache.set_rotate_callback([&](int64_t n) {
    told.push_back(n);
    budget -= n;
    return budget > 0;
  });
  ReclaimResult r = cache.reclaim(100, 0);
  EXPECT_EQ(r.scanned, 100);
  EXPECT_EQ(r.reclaimed, 50);
  EXPECT_EQ(cache.rotated(), 50u);
  r = cache.reclaim(200, 0);
  EXPECT_EQ(r.reclaimed, 100);
  EXPECT_EQ(cache.rotated(), 150u);
  EXPECT_EQ(told, (std::vector<int64_t>{50, 100}));
  // The budget is spent: referenced units are freed like the others, and nobody is told.
  r = cache.reclaim(100, 0);
  EXPECT_EQ(r.scanned, 100);
  EXPECT_EQ(r.reclaimed, 100);
  EXPECT_EQ(cache.rotated(), 150u);
  EXPECT_EQ(told.size(), 2u);
  // A new callback (here none) lets it rotate again.
  cache.set_rotate_callback(nullptr);
  r = cache.reclaim(100, 0);
  EXPECT_EQ(r.reclaimed, 50);
  EXPECT_EQ(cache.rotated(), 200u);
  EXPECT_EQ(cache.evicted(), 300u);
  // Without referenced units nothing rotates.
  LruCache plain(*g, "p");
  ASSERT_EQ(plain.grow(10), 10);
  EXPECT_EQ(plain.reclaim(10, 0).reclaimed, 10);
  EXPECT_EQ(plain.rotated(), 0u);
}

}  // namespace
}  // namespace memcg
