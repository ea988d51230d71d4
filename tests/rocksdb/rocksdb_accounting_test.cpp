// Byte mode: the group is charged exactly RocksDB's cached blocks plus the mirrored memtables.
#include "rocksdb/rocksdb_fixture.hpp"
#include "watchdog.hpp"

namespace memcg::rocksdb::testing {
namespace {

TEST(RocksdbByteAllocator, ChargesEveryBlockWithItsHeaderAndUnchargesIt) {
  Controller ctl;
  GroupRef g = make_group(ctl, "/t");
  auto alloc = std::make_shared<ByteAllocator>(*g);
  std::vector<void*> blocks;
  for (std::size_t size : {1u, 15u, 4096u, 70000u}) blocks.push_back(alloc->Allocate(size));
  for (void* p : blocks) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u);
  const uint64_t expect = 1 + 15 + 4096 + 70000 + 4 * ByteAllocator::kHeaderBytes;
  EXPECT_EQ(alloc->live_bytes(), expect);
  EXPECT_EQ(alloc->UsableSize(blocks[2], 4096), 4096u);
  drain(ctl);
  EXPECT_EQ(g->current(), (expect + 4095) / 4096 * 4096);
  for (void* p : blocks) alloc->Deallocate(p);
  alloc->Deallocate(nullptr);
  drain(ctl);
  EXPECT_EQ(alloc->live_bytes(), 0u);
  EXPECT_EQ(g->current(), 0u);
}

TEST(RocksdbByteAllocator, NeverFailsAtTheLimitAndCountsWhatItForced) {
  Controller ctl;
  GroupRef g = make_group(ctl, "/t");
  g->set_max(64 * 1024);
  ByteAllocator alloc(*g);
  std::vector<void*> blocks;
  for (int i = 0; i < 32; ++i) {
    void* p = alloc.Allocate(4096);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0xab, 4096);
    blocks.push_back(p);
  }
  // Nothing to reclaim: past 64 KiB every block was forced, and counted.
  EXPECT_GT(alloc.forced(), 10u);
  EXPECT_EQ(alloc.forced_bytes(), alloc.forced() * (4096 + ByteAllocator::kHeaderBytes));
  EXPECT_EQ(g->events().get(Event::kOomKill), 0u);
  for (void* p : blocks) alloc.Deallocate(p);
  drain(ctl);
  EXPECT_EQ(g->current(), 0u);
}

TEST(RocksdbAccounting, CurrentIsCachedBlocksPlusMirroredMemtables) {
  memcg::testing::Watchdog dog("accounting", std::chrono::seconds(60));
  ScratchDir dir;
  Controller ctl;
  GroupRef g = make_group(ctl, "/t");
  TenantOptions to;
  to.cache.capacity_bytes = 64 * kMiB;
  to.tick = std::chrono::milliseconds(0);  // updates by hand: nothing moves while we compare
  Tenant tenant(*g, to);
  {
    auto db = open(small_options(tenant), dir.sub("db"));
    tenant.add(db.get());
    load(*db, 20'000, 200);
    load(*db, 2'000, 200, /*flush=*/false);  // some memtable left
    const ReadResult r = random_reads(*db, 20'000, 200, 2, 5'000);
    EXPECT_EQ(r.failed, 0u);
    tenant.safe_point();  // the mirror reports the memtables now
    drain(ctl);
    const BlockAllocator& a = tenant.cache().allocator();
    const WriteBufferGovernor& wb = tenant.write_buffers();
    const uint64_t unit = 4096;
    ASSERT_GT(a.live_bytes(), 2 * kMiB);
    ASSERT_GT(wb.mirror().reported(), 100'000u);
    // memory.current: the blocks' bytes rounded up to a unit, plus the mirror's whole units.
    const uint64_t blocks = (a.live_bytes() + unit - 1) / unit * unit;
    EXPECT_EQ(g->current(), blocks + wb.mirror().charged_bytes());
    EXPECT_EQ(wb.mirror().reported(), wb.manager()->memory_usage());
    EXPECT_LT(wb.mirror().charged_bytes() - wb.mirror().reported(), unit);
    // And the blocks are RocksDB's cache usage: RocksDB adds its handle metadata to each block's
    // charge, the allocator its 16-byte header; nothing else differs.
    const uint64_t usage = tenant.cache().cache()->GetUsage();
    const uint64_t n = a.live_blocks();
    EXPECT_GE(usage + n * ByteAllocator::kHeaderBytes, a.live_bytes());
    EXPECT_LE(usage, a.live_bytes() + n * 256);
    std::printf("cache usage %llu, allocator %llu in %llu blocks, mirror %llu\n",
                (unsigned long long)usage, (unsigned long long)a.live_bytes(),
                (unsigned long long)n, (unsigned long long)wb.mirror().reported());
    tenant.remove(db.get());
  }
}

}  // namespace
}  // namespace memcg::rocksdb::testing
