// Memtables held to the group: memory.max below RocksDB's write buffer size. The load finishes,
// RocksDB flushed, and the limit held within the stated overshoot.
#include <rocksdb/write_buffer_manager.h>

#include "rocksdb/rocksdb_fixture.hpp"
#include "watchdog.hpp"

namespace memcg::rocksdb::testing {
namespace {

TEST(RocksdbMemtables, LoadBeyondMaxFinishesFlushedAndHeld) {
  memcg::testing::Watchdog dog("memtables", std::chrono::seconds(90));
  ScratchDir dir;
  Controller ctl;
  GroupRef g = make_group(ctl, "/t");
  const uint64_t max = 2 * kMiB;
  g->set_max(max);
  TenantOptions to;
  to.cache.capacity_bytes = 16 * kMiB;
  to.write_buffer.max_bytes = 8 * kMiB;  // what the tenant would like; the group allows 1/4 of max
  to.write_buffer.min_bytes = 256 << 10;
  Tenant tenant(*g, to);
  {
    // Each memtable may grow to 4 MiB, twice memory.max.
    auto db = open(small_options(tenant, 4 * kMiB), dir.sub("db"));
    tenant.add(db.get());
    EXPECT_EQ(tenant.write_buffers().buffer_size(), max / 4);
    load(*db, 40'000, 200, /*flush=*/false);
    tenant.safe_point();
    uint64_t sst = 0;
    ASSERT_TRUE(db->GetIntProperty("rocksdb.total-sst-files-size", &sst));
    const WriteBufferGovernor& wb = tenant.write_buffers();
    std::printf("peak %llu (max %llu), sst %llu bytes, memtables %llu, "
                "governor flushes %llu, mirror forced %llu bytes\n",
                (unsigned long long)g->peak(), (unsigned long long)max,
                (unsigned long long)sst,
                (unsigned long long)wb.manager()->memory_usage(),
                (unsigned long long)wb.flushes(), (unsigned long long)wb.mirror().forced_bytes());
    // RocksDB flushed: most of the ~9 MB written is in table files, not in memtables.
    EXPECT_GT(sst, 4 * kMiB);
    EXPECT_LT(wb.manager()->memory_usage(), max);
    // The stated overshoot for memtables: max_write_buffer_number memtables of the buffer size
    // and one arena block each (the immutable ones whose flush is under way while the next one
    // fills), as far as the cache could not make room for them.
    const ::rocksdb::Options o = small_options(tenant, 4 * kMiB);
    EXPECT_EQ(o.arena_block_size, wb.buffer_size() / 8);
    const uint64_t overshoot =
        static_cast<uint64_t>(o.max_write_buffer_number) * (wb.buffer_size() + o.arena_block_size);
    EXPECT_LE(g->peak(), max + overshoot);
    EXPECT_EQ(g->events().get(Event::kOomKill), 0u);
    // Every key is there.
    const ReadResult r = random_reads(*db, 40'000, 200, 1, 5'000);
    EXPECT_EQ(r.failed, 0u);
    tenant.remove(db.get());
  }
}

// Reclaim of the group asks for a flush; the governor thread makes it, outside the charge.
TEST(RocksdbMemtables, ReclaimMakesTheGovernorFlush) {
  memcg::testing::Watchdog dog("memtable reclaim", std::chrono::seconds(60));
  ScratchDir dir;
  Controller ctl;
  GroupRef g = make_group(ctl, "/t");
  TenantOptions to;
  to.write_buffer.max_bytes = 32 * kMiB;
  Tenant tenant(*g, to);
  {
    auto db = open(small_options(tenant, 16 * kMiB), dir.sub("db"));
    tenant.add(db.get());
    load(*db, 10'000, 200, /*flush=*/false);  // ~2.5 MB, below every flush threshold
    tenant.safe_point();
    const uint64_t before = tenant.write_buffers().mirror().reported();
    ASSERT_GT(before, 2 * kMiB);
    // memory.reclaim: the mirrored memtables are what can be freed.
    reclaim(*g, static_cast<int64_t>(kMiB / 4096), ReclaimReason::kProactive);
    EXPECT_GE(tenant.write_buffers().flush_requests(), 1u);
    for (int i = 0; i < 500 && tenant.write_buffers().mirror().reported() >= before / 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_LT(tenant.write_buffers().mirror().reported(), before / 2);
    EXPECT_GE(tenant.write_buffers().flushes(), 1u);
    tenant.remove(db.get());
  }
}

}  // namespace
}  // namespace memcg::rocksdb::testing
