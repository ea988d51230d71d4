// The block cache's shard count follows the group's room, not the configured capacity: an entry
// of half a MiB (a large index block) must stay cached in a 16 MiB room configured at 128 MiB.
#include <gtest/gtest.h>
#include <rocksdb/cache.h>

#include "memcg/memcg.hpp"
#include "memcg/rocksdb/block_cache.hpp"

namespace {

constexpr uint64_t kMiB = 1 << 20;

void drop(const ::rocksdb::Slice& /*key*/, void* /*value*/) {}

TEST(RocksdbShards, LargeEntryStaysCachedWhenTheRoomIsFarBelowTheConfiguration) {
  memcg::Controller ctl;
  memcg::GroupRef g;
  ASSERT_EQ(ctl.create("/t", &g), 0);
  g->set_max(16 * kMiB);
  memcg::rocksdb::BlockCacheOptions o;
  o.capacity_bytes = 128 * kMiB;
  memcg::rocksdb::BlockCache cache(*g, o);
  ASSERT_GT(cache.cache()->GetCapacity(), 8 * kMiB);
  static char payload;
  ASSERT_TRUE(cache.cache()->Insert("index", &payload, 384 << 10, &drop).ok());
  ::rocksdb::Cache::Handle* h = cache.cache()->Lookup("index");
  EXPECT_NE(h, nullptr) << "a 384 KiB entry was dropped: shards smaller than it\n"
                        << cache.cache()->GetPrintableOptions();
  if (h != nullptr) cache.cache()->Release(h);
  cache.cache()->Erase("index");
}

TEST(RocksdbShards, ExplicitShardBitsAreKept) {
  memcg::Controller ctl;
  memcg::GroupRef g;
  ASSERT_EQ(ctl.create("/t", &g), 0);
  memcg::rocksdb::BlockCacheOptions o;
  o.num_shard_bits = 3;
  memcg::rocksdb::BlockCache cache(*g, o);
  EXPECT_NE(cache.cache()->GetPrintableOptions().find("num_shard_bits : 3"), std::string::npos)
      << cache.cache()->GetPrintableOptions();
}

}  // namespace
