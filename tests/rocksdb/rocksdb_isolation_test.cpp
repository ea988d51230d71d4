// Two tenants under one parent at its limit: a noisy tenant does not shrink a protected tenant's
// cache below its memory.low (memory.min even when nothing else can be reclaimed).
#include "rocksdb/rocksdb_fixture.hpp"
#include "watchdog.hpp"

namespace memcg::rocksdb::testing {
namespace {

constexpr int kKeys = 40'000;
constexpr std::size_t kValue = 200;
constexpr uint64_t kMax = 8 * kMiB;
constexpr uint64_t kProtection = 5 * kMiB;

// Index blocks of every table of `db` (a Get may hold one per file it searches).
uint64_t index_bytes(::rocksdb::DB& db) {
  ::rocksdb::TablePropertiesCollection props;
  if (!db.GetPropertiesOfAllTables(&props).ok()) return 0;
  uint64_t sum = 0;
  for (const auto& [name, p] : props) sum += p->index_size;
  return sum;
}

enum class Protect { kNone, kLow, kMin };

struct Outcome {
  uint64_t quiet_usage;
  uint64_t quiet_cache;
  uint64_t quiet_low_events;
  uint64_t parent_peak;
  uint64_t overshoot;  // counted: the forced blocks live at their peak, the forced mirrors
};

// `heap_bytes`: memory the noisy tenant charges that no cache can give back (64 KiB charges,
// until one is refused).
Outcome run(Protect protect, uint64_t heap_bytes) {
  memcg::testing::Watchdog dog("isolation", std::chrono::seconds(90));
  ScratchDir dir;
  Controller ctl;
  GroupRef parent = make_group(ctl, "/p");
  GroupRef quiet = make_group(ctl, "/p/quiet");
  GroupRef noisy = make_group(ctl, "/p/noisy");
  parent->set_max(kMax);
  if (protect == Protect::kMin) quiet->set_min(kProtection);
  if (protect == Protect::kLow) quiet->set_low(kProtection);
  TenantOptions to;
  to.cache.capacity_bytes = 32 * kMiB;
  Tenant tq(*quiet, to);
  Tenant tn(*noisy, to);
  Outcome out{};
  {
    auto dq = open(small_options(tq), dir.sub("quiet"));
    auto dn = open(small_options(tn), dir.sub("noisy"));
    tq.add(dq.get());
    tn.add(dn.get());
    load(*dq, kKeys, kValue, true, true);
    load(*dn, kKeys, kValue, true, true);
    // The quiet tenant warms its cache while the noisy one is idle.
    EXPECT_EQ(random_reads(*dq, kKeys, kValue, 1, 30'000).failed, 0u);
    EXPECT_GT(tq.cache().allocator().live_bytes(), kProtection);
    std::vector<ChargeHandle> heap;
    for (uint64_t b = 0; b < heap_bytes; b += 64 * 1024) {
      ChargeHandle h(*noisy, 64 * 1024, kMayBlock | kRetryMayFail);
      if (!h.ok()) break;
      heap.push_back(std::move(h));
    }
    // The quiet tenant keeps reading (its cache refills to its capacity) while the noisy one
    // reads hard.
    std::atomic<bool> done{false};
    std::thread light([&] {
      for (uint64_t seed = 7; !done.load(); ++seed)
        EXPECT_EQ(random_reads(*dq, kKeys, kValue, 1, 500, seed).failed, 0u);
    });
    const ReadResult r = random_reads(*dn, kKeys, kValue, 2, 20'000, 3);
    done.store(true);
    light.join();
    EXPECT_EQ(r.failed, 0u);
    tq.safe_point();
    tn.safe_point();
    out.quiet_usage = quiet->current();
    out.quiet_cache = tq.cache().allocator().live_bytes();
    out.quiet_low_events = quiet->events().get(Event::kLow);
    out.parent_peak = parent->peak();
    // What was forced, counted by the allocators and the mirrors (docs/rocksdb.md); plus, per
    // reading thread, the block whose charge has raised the counters but not yet the count, and
    // a unit per CPU that the object layer's reserves may round a forced block up to.
    out.overshoot = tq.cache().allocator().forced_live_peak() +
                    tn.cache().allocator().forced_live_peak() +
                    tq.write_buffers().mirror().forced_bytes() +
                    tn.write_buffers().mirror().forced_bytes() +
                    3 * (std::max(index_bytes(*dq), index_bytes(*dn)) + 8192) +
                    std::thread::hardware_concurrency() * 4096 +
                    // memory.peak of /p is raised by forced charges, and a forced charge's usage
                    // includes what a concurrent failing try_charge has added at /p and not yet
                    // backed out (page_counter.hpp: the add is speculative, as in the kernel).
                    // Each of the three reading threads has at most one such try in flight: a
                    // stock refill of `batch` units, or the block itself when larger.
                    3 * (static_cast<uint64_t>(ctl.options().batch) * ctl.unit_size() + 8192);
    std::printf("protect %d heap %zu KiB: quiet usage %llu cache %llu, noisy %llu, low events "
                "%llu, parent peak %llu (max + %llu allowed)\n",
                static_cast<int>(protect), heap.size() * 64,
                (unsigned long long)out.quiet_usage, (unsigned long long)out.quiet_cache,
                (unsigned long long)noisy->current(), (unsigned long long)out.quiet_low_events,
                (unsigned long long)out.parent_peak, (unsigned long long)out.overshoot);
    EXPECT_EQ(parent->events().get(Event::kOomKill), 0u);
    tq.remove(dq.get());
    tn.remove(dn.get());
  }
  return out;
}

// Protection holds the group's usage; the cache is nearly all of it (the rest: mirrored
// memtables, units in per-CPU stocks). Reclaim may take a protected group one bite (32 units,
// as the kernel's) below its protection per reclaiming thread (three readers here), which the
// governor restores at its next update.
constexpr uint64_t kSlack = 3 * 32 * 4096 + 64 * 1024;
// The group's usage that is not its cache: units in the per-CPU stocks (a batch of 64 units per
// CPU) and the mirrored, empty memtables.
constexpr uint64_t kStockSlack = 2 * 64 * 4096 + 64 * 1024;
constexpr uint64_t kNoisyHeap = 2 * kMiB + kMiB / 2;

TEST(RocksdbIsolation, LowProtectsTheQuietTenantsCacheFromTheNoisyOnesPressure) {
  const Outcome o = run(Protect::kLow, kNoisyHeap);
  EXPECT_GE(o.quiet_usage + kSlack, kProtection);
  EXPECT_GE(o.quiet_cache + kStockSlack, o.quiet_usage);
  EXPECT_EQ(o.quiet_low_events, 0u);
  EXPECT_LE(o.parent_peak, kMax + o.overshoot);
}

TEST(RocksdbIsolation, WithoutProtectionUnreclaimablePressureTakesTheCache) {
  // The control of the next test: the same pressure, no protection.
  const Outcome o = run(Protect::kNone, 16 * kMiB);
  EXPECT_LT(o.quiet_usage + kSlack, kProtection);
}

TEST(RocksdbIsolation, MinHoldsEvenWhenNothingElseCanBeReclaimed) {
  const Outcome o = run(Protect::kMin, 16 * kMiB);
  EXPECT_GE(o.quiet_usage + kSlack, kProtection);
  EXPECT_GE(o.quiet_cache + kStockSlack, o.quiet_usage);
  // The noisy tenant's reads are then forced, within the stated overshoot.
  EXPECT_LE(o.parent_peak, kMax + o.overshoot);
}

}  // namespace
}  // namespace memcg::rocksdb::testing
