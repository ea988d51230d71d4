// Writes charged as they happen: a memtable's growth reaches the group on the writing thread,
// whatever the batch size and without waiting for the governor; Tenant::write() refuses a batch
// larger than memory.max at once and, with no room, fails or stalls as the options say.
#include <chrono>

#include "memcg/core/charge/charge.hpp"
#include "rocksdb/rocksdb_fixture.hpp"

namespace memcg::rocksdb::testing {
namespace {

using Clock = std::chrono::steady_clock;

// `mib` MiB in 64 KiB values.
::rocksdb::WriteBatch big_batch(uint64_t mib) {
  ::rocksdb::WriteBatch batch;
  const std::string v = value(7, 64 << 10);
  for (uint64_t i = 0; i < mib * 16; ++i)
    EXPECT_TRUE(batch.Put(key(static_cast<int>(i)), v).ok());
  return batch;
}

TenantOptions with_tick(int ms) {
  TenantOptions o;
  o.tick = std::chrono::milliseconds(ms);
  return o;
}

::rocksdb::WriteOptions no_wal() {
  ::rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  return wo;
}

// The regression: one 64 MiB batch from a writer limited to 48 MiB, written with DB::Write
// directly and no governor thread at all (tick 0): the group sees the memtable as it grows,
// forced past memory.max and counted, never invisible.
TEST(RocksdbWriteCharge, BurstChargedOnTheWritingThread) {
  ScratchDir dir;
  Controller ctl;
  GroupRef g = make_group(ctl, "writer");
  g->set_max(48 * kMiB);
  {
    Tenant tenant(*g, with_tick(0));
    auto db = open(small_options(tenant, 4 * kMiB), dir.sub("db"));
    tenant.add(db.get());
    ::rocksdb::WriteBatch batch = big_batch(64);
    const auto& wb = tenant.write_buffers();
    ASSERT_TRUE(db->Write(no_wal(), &batch).ok());
    const uint64_t peak = g->peak();
    std::printf("memtables %llu KiB, group peak %llu KiB (max %llu KiB), forced %llu KiB, "
                "write charges %llu\n",
                (unsigned long long)wb.manager()->memory_usage() >> 10,
                (unsigned long long)peak >> 10, (unsigned long long)g->max() >> 10,
                (unsigned long long)wb.mirror().forced_bytes() >> 10,
                (unsigned long long)wb.write_charges());
    // The whole memtable is counted within one reservation step (256 KiB) and a unit.
    EXPECT_GE(wb.manager()->memory_usage(), 64 * kMiB);
    EXPECT_GE(g->current() + (256 << 10) + ctl.unit_size(), wb.manager()->memory_usage());
    EXPECT_GE(peak, 64 * kMiB);
    // Past memory.max: forced, and counted as such.
    EXPECT_GE(wb.mirror().forced_bytes(), 64 * kMiB - g->max());
    EXPECT_GT(wb.write_charges(), 64u);  // step by step, not once at the end
    tenant.remove(db.get());
    db.reset();
  }
  drain(ctl);
  EXPECT_EQ(g->current(), 0u);
}

// The same batch through Tenant::write(): larger than memory.max, refused at once with a
// MemoryLimit status, nothing written and nothing charged.
TEST(RocksdbWriteCharge, BatchLargerThanTheGroupFailsAtOnce) {
  ScratchDir dir;
  Controller ctl;
  GroupRef g = make_group(ctl, "writer");
  g->set_max(48 * kMiB);
  {
    Tenant tenant(*g, with_tick(0));
    auto db = open(small_options(tenant), dir.sub("db"));
    tenant.add(db.get());
    ::rocksdb::WriteBatch batch = big_batch(64);
    const auto t0 = Clock::now();
    ::rocksdb::Status s = tenant.write(db.get(), no_wal(), &batch);
    const auto took = Clock::now() - t0;
    EXPECT_TRUE(s.IsMemoryLimit()) << s.ToString();
    EXPECT_LT(took, std::chrono::milliseconds(500));
    EXPECT_EQ(tenant.write_buffers().oversized_writes(), 1u);
    std::string v;
    EXPECT_TRUE(db->Get({}, key(0), &v).IsNotFound());
    EXPECT_LT(tenant.write_buffers().manager()->memory_usage(), kMiB);
    // Null arguments: InvalidArgument, nothing done.
    EXPECT_TRUE(tenant.write(nullptr, no_wal(), &batch).IsInvalidArgument());
    EXPECT_TRUE(tenant.write(db.get(), no_wal(), nullptr).IsInvalidArgument());
    // A batch that fits is written.
    ::rocksdb::WriteBatch small = big_batch(2);
    EXPECT_TRUE(tenant.write(db.get(), no_wal(), &small).ok());
    EXPECT_TRUE(db->Get({}, key(0), &v).ok());
    tenant.remove(db.get());
    db.reset();
  }
  drain(ctl);
  EXPECT_EQ(g->current(), 0u);
}

// No room (the group's memory held by a charge nothing can reclaim): kFail refuses at once,
// kStall waits until the deadline, and a stalled write goes through once room is made.
TEST(RocksdbWriteCharge, NoRoomFailsOrStallsAsChosen) {
  ScratchDir dir;
  Controller ctl;
  GroupRef g = make_group(ctl, "writer");
  g->set_max(16 * kMiB);
  const int64_t held = static_cast<int64_t>((14 * kMiB) >> ctl.unit_shift());
  ASSERT_NE(try_charge(*g, held, kNoFail | kNoSpin), ChargeStatus::kNoMem);
  auto attempt = [&](WriteAdmission admission, uint64_t timeout_ns, auto&& during) {
    TenantOptions o;
    o.tick = std::chrono::milliseconds(0);
    o.write_buffer.admission = admission;
    o.write_buffer.admit_timeout_ns = timeout_ns;
    Tenant tenant(*g, o);
    auto db = open(small_options(tenant), dir.sub(admission == WriteAdmission::kFail ? "f" : "s"));
    tenant.add(db.get());
    ::rocksdb::WriteBatch batch = big_batch(4);
    const auto t0 = Clock::now();
    during();
    ::rocksdb::Status s = tenant.write(db.get(), no_wal(), &batch);
    const auto took = Clock::now() - t0;
    const uint64_t refused = tenant.write_buffers().refused_writes();
    tenant.remove(db.get());
    db.reset();
    return std::make_tuple(s, took, refused);
  };
  {
    auto [s, took, refused] = attempt(WriteAdmission::kFail, 0, [] {});
    EXPECT_TRUE(s.IsMemoryLimit()) << s.ToString();
    EXPECT_LT(took, std::chrono::milliseconds(500));
    EXPECT_EQ(refused, 1u);
  }
  {
    auto [s, took, refused] = attempt(WriteAdmission::kStall, 300'000'000, [] {});
    EXPECT_TRUE(s.IsTimedOut()) << s.ToString();
    EXPECT_GE(took, std::chrono::milliseconds(290));
    EXPECT_LT(took, std::chrono::seconds(3));
    EXPECT_EQ(refused, 1u);
  }
  {
    std::thread releaser;
    auto [s, took, refused] = attempt(WriteAdmission::kStall, 10'000'000'000, [&] {
      releaser = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        uncharge(*g, held);
      });
    });
    releaser.join();
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_GE(took, std::chrono::milliseconds(90));
    EXPECT_LT(took, std::chrono::seconds(5));
    EXPECT_EQ(refused, 0u);
  }
  drain(ctl);
  EXPECT_EQ(g->current(), 0u);
}

// The governor thread does not wait behind a large write: the flush it asks for waits on the
// governor's flush thread, and its ticks go on meanwhile.
TEST(RocksdbWriteCharge, GovernorTicksDuringALargeWrite) {
  ScratchDir dir;
  Controller ctl;
  GroupRef g = make_group(ctl, "writer");
  g->set_max(48 * kMiB);
  {
    Tenant tenant(*g, with_tick(5));
    auto db = open(small_options(tenant, 4 * kMiB), dir.sub("db"));
    tenant.add(db.get());
    ::rocksdb::WriteBatch batch = big_batch(64);
    const uint64_t before = tenant.ticks();
    const auto t0 = Clock::now();
    ASSERT_TRUE(db->Write(no_wal(), &batch).ok());
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
    const uint64_t ticks = tenant.ticks() - before;
    std::printf("write %lld ms, governor ticks meanwhile %llu, flushes %llu\n",
                (long long)took.count(), (unsigned long long)ticks,
                (unsigned long long)tenant.write_buffers().flushes());
    // A tick every 5 ms; a noisy machine still gives a few in every 100 ms.
    if (took >= std::chrono::milliseconds(100)) {
      EXPECT_GE(ticks, 3u);
    }
    EXPECT_GE(ticks, 1u);
    tenant.remove(db.get());
    db.reset();
  }
  drain(ctl);
  EXPECT_EQ(g->current(), 0u);
}

}  // namespace
}  // namespace memcg::rocksdb::testing
