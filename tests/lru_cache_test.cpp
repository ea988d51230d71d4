// LruCache's list: adjacent runs of unit numbers are merged, so its memory follows the gaps
// between live units, not the units reclaim rotated; the order of eviction is unchanged.
#include "memcg/alloc/lru_cache.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "memcg/core/controller.hpp"

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

}  // namespace
}  // namespace memcg
