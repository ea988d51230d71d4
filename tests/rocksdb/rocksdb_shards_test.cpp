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

// RocksDB's rule (shards of at least 512 KiB) applied to what a protected cache runs at under
// pressure: its group's protection, not the parent's limit.
TEST(RocksdbShards, ProtectedGroupIsShardedForItsProtection) {
  memcg::Controller ctl;
  memcg::GroupRef parent, g, plain;
  ASSERT_EQ(ctl.create("/svc", &parent), 0);
  ASSERT_EQ(ctl.create("/svc/quiet", &g), 0);
  ASSERT_EQ(ctl.create("/svc/noisy", &plain), 0);
  parent->set_max(96 * kMiB);
  g->set_min(16 * kMiB);
  memcg::rocksdb::BlockCache cache(*g);
  EXPECT_NE(cache.cache()->GetPrintableOptions().find("num_shard_bits : 5"), std::string::npos)
      << cache.cache()->GetPrintableOptions();
  memcg::rocksdb::BlockCache unprotected(*plain);  // 96 MiB: 64 shards of 1.5 MiB
  EXPECT_NE(unprotected.cache()->GetPrintableOptions().find("num_shard_bits : 6"),
            std::string::npos)
      << unprotected.cache()->GetPrintableOptions();
  g->set_min(0);
  g->set_low(5 * kMiB);  // 10 shards' worth: 8 shards of 640 KiB
  memcg::rocksdb::BlockCache low(*g);
  EXPECT_NE(low.cache()->GetPrintableOptions().find("num_shard_bits : 3"), std::string::npos)
      << low.cache()->GetPrintableOptions();
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
