// At memory.max: a cache configured at 8x the limit, random reads. No read fails, nothing is
// OOM-killed, and the group's peak stays within memory.max plus the stated overshoot.
#include "rocksdb/rocksdb_fixture.hpp"
#include "watchdog.hpp"

namespace memcg::rocksdb::testing {
namespace {

constexpr int kKeys = 40'000;        // ~9 MB of data in 4 KiB blocks
constexpr std::size_t kValue = 200;
constexpr int kReaders = 2;

// The overshoot docs/rocksdb.md states for reads: one block in flight per reading thread (the
// block is allocated before RocksDB inserts it and evicts for it), with its header, plus what
// readers pin; these readers pin nothing beyond the block they read.
constexpr uint64_t kOvershoot = kReaders * (2 * 4096 + ByteAllocator::kHeaderBytes + 4096);

TEST(RocksdbEnforcement, CacheAtEightTimesMaxHoldsTheLimitWithoutFailedReads) {
  memcg::testing::Watchdog dog("enforcement", std::chrono::seconds(90));
  ScratchDir dir;
  Controller ctl;
  GroupRef g = make_group(ctl, "/t");
  const uint64_t max = 4 * kMiB;
  g->set_max(max);
  TenantOptions to;
  to.cache.capacity_bytes = 8 * max;
  Tenant tenant(*g, to);
  {
    auto db = open(small_options(tenant), dir.sub("db"));
    tenant.add(db.get());
    load(*db, kKeys, kValue);
    tenant.safe_point();
    const ReadResult r = random_reads(*db, kKeys, kValue, kReaders, 15'000);
    const uint64_t seen = g->peak();  // the load included
    const BlockAllocator& a = tenant.cache().allocator();
    std::printf("peak %llu (max %llu), reads %llu, forced blocks %llu (%llu bytes), "
                "cache capacity %llu, governor reclaims %llu\n",
                (unsigned long long)seen, (unsigned long long)max, (unsigned long long)r.reads,
                (unsigned long long)a.forced(), (unsigned long long)a.forced_bytes(),
                (unsigned long long)tenant.cache().governor().capacity(),
                (unsigned long long)tenant.cache().governor().stats().reclaims);
    EXPECT_EQ(r.failed, 0u);
    EXPECT_EQ(r.reads, uint64_t{kReaders} * 15'000);
    EXPECT_LE(seen, max + kOvershoot);
    EXPECT_EQ(g->events().get(Event::kOomKill), 0u);
    EXPECT_EQ(g->events().get(Event::kOom), 0u);
    // The cache was really squeezed: far below its configured size, near the limit.
    EXPECT_LT(a.live_bytes(), max);
    EXPECT_GT(a.live_bytes(), max / 2);
    tenant.remove(db.get());
  }
}

// memory.high below max: the tenant's cache shrinks to hold it near high; max is never reached.
TEST(RocksdbEnforcement, HighHoldsTheTenantNearHighByShrinkingItsCache) {
  memcg::testing::Watchdog dog("high", std::chrono::seconds(90));
  ScratchDir dir;
  Controller ctl;
  GroupRef g = make_group(ctl, "/t");
  g->set_max(8 * kMiB);
  g->set_high(4 * kMiB);
  TenantOptions to;
  to.cache.capacity_bytes = 32 * kMiB;
  Tenant tenant(*g, to);
  {
    auto db = open(small_options(tenant), dir.sub("db"));
    tenant.add(db.get());
    load(*db, kKeys, kValue);
    const ReadResult r = random_reads(*db, kKeys, kValue, kReaders, 15'000);
    EXPECT_EQ(r.failed, 0u);
    // memory.high is not a wall: a charge passes it by its stock batch (64 units) per CPU before
    // the reclaim it triggers brings the group back.
    EXPECT_LE(g->peak(), 4 * kMiB + kOvershoot + 2 * 64 * 4096);
    EXPECT_EQ(g->events().get(Event::kMax), 0u);
    EXPECT_LE(tenant.cache().governor().capacity(), 4 * kMiB);
    tenant.remove(db.get());
  }
}

}  // namespace
}  // namespace memcg::rocksdb::testing
