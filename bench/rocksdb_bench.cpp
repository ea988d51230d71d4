// memcg::rocksdb against plain RocksDB, alternated in one run (docs/BENCHMARKS-rocksdb.md).
//
//  reads/plain_capacity    RocksDB's own LRU cache at capacity C, no memcg
//  reads/governed          memcg::rocksdb::Tenant on a group whose memory.max leaves the cache C
//                          (the governor's capacity, read back after warm-up)
//  misses/plain            RocksDB's cache at C, no memcg (every Get a likely miss)
//  misses/byte_allocator   the same cache with memcg's ByteAllocator on a group with no limit:
//                          the cost of charging every block, no limit hit
// Each pair is registered kPairs times, interleaved, so the variants alternate through the run.
#include <benchmark/benchmark.h>
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/table.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "memcg/memcg.hpp"
#include "memcg/rocksdb/tenant.hpp"
#include "bench_check.hpp"

namespace {

constexpr int kKeys = 200'000;  // ~45 MB of values
constexpr std::size_t kValue = 200;
constexpr int kPairs = 5;
constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kGroupMax = 16 * kMiB;  // the governed tenant's memory.max
// The hot set of reads: a skewed distribution over all keys, so that the cache matters.
constexpr double kSkew = 1.5;

std::string key(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "key%09d", i);
  return buf;
}

::rocksdb::Options base_options(std::shared_ptr<::rocksdb::Cache> cache) {
  ::rocksdb::Options o;
  o.create_if_missing = true;
  o.compression = ::rocksdb::kNoCompression;
  ::rocksdb::BlockBasedTableOptions t;
  t.block_size = 4096;
  t.cache_index_and_filter_blocks = true;
  t.block_cache = std::move(cache);
  o.table_factory.reset(::rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

struct World {
  std::filesystem::path dir;
  memcg::Controller ctl;
  memcg::GroupRef governed_group, meter_group;
  std::unique_ptr<memcg::rocksdb::Tenant> tenant;
  std::unique_ptr<::rocksdb::DB> governed, plain, meter_plain, meter_charged;
  std::shared_ptr<memcg::rocksdb::ByteAllocator> meter_allocator;
  uint64_t capacity = 0;  // C, in RocksDB's terms

  static std::unique_ptr<::rocksdb::DB> open(const ::rocksdb::Options& o, const std::string& p) {
    ::rocksdb::DB* db = nullptr;
    const ::rocksdb::Status s = ::rocksdb::DB::Open(o, p, &db);
    if (!s.ok()) {
      std::fprintf(stderr, "open %s: %s\n", p.c_str(), s.ToString().c_str());
      std::abort();
    }
    return std::unique_ptr<::rocksdb::DB>(db);
  }

  World() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "memcg-rocksdb-bench-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    dir = tmpl;
    // One data set, written once and copied, so every variant reads the same files.
    {
      auto db = open(base_options(::rocksdb::NewLRUCache(8 * kMiB)), (dir / "seed").string());
      ::rocksdb::WriteOptions wo;
      wo.disableWAL = true;
      const std::string v(kValue, 'v');
      for (int i = 0; i < kKeys; ++i) db->Put(wo, key(i), v);
      db->CompactRange(::rocksdb::CompactRangeOptions(), nullptr, nullptr);
    }
    for (const char* name : {"governed", "plain", "meter_plain", "meter_charged"})
      std::filesystem::copy(dir / "seed", dir / name, std::filesystem::copy_options::recursive);

    BENCH_CHECK(ctl.create("/governed", &governed_group));
    BENCH_CHECK(ctl.create("/meter", &meter_group));
    governed_group->set_max(kGroupMax);
    memcg::rocksdb::TenantOptions to;
    to.cache.capacity_bytes = 8 * kGroupMax;  // the group, not the configuration, decides
    tenant = std::make_unique<memcg::rocksdb::Tenant>(*governed_group, to);
    ::rocksdb::Options go;
    go.create_if_missing = true;
    go.compression = ::rocksdb::kNoCompression;
    ::rocksdb::BlockBasedTableOptions t;
    t.block_size = 4096;
    tenant->configure(go, t);
    governed = open(go, (dir / "governed").string());
    tenant->add(governed.get());
    warm(*governed);
    tenant->safe_point();
    capacity = tenant->cache().cache()->GetCapacity();
    plain = open(base_options(::rocksdb::NewLRUCache(capacity)), (dir / "plain").string());
    warm(*plain);

    meter_plain = open(base_options(::rocksdb::NewLRUCache(4 * kMiB)), (dir / "meter_plain").string());
    meter_allocator = std::make_shared<memcg::rocksdb::ByteAllocator>(*meter_group);
    ::rocksdb::LRUCacheOptions lru;
    lru.capacity = 4 * kMiB;
    lru.memory_allocator = meter_allocator;
    meter_charged = open(base_options(::rocksdb::NewLRUCache(lru)), (dir / "meter_charged").string());
  }

  static void warm(::rocksdb::DB& db) {
    std::string v;
    std::mt19937_64 rng(42);
    for (int i = 0; i < 100'000; ++i) db.Get(::rocksdb::ReadOptions(), key(pick(rng)), &v);
  }

  // Zipf-like: key ~ kKeys * u^kSkew.
  static int pick(std::mt19937_64& rng) {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    return static_cast<int>(std::pow(u, 1.0 + kSkew) * (kKeys - 1));
  }

  ~World() {
    tenant->remove(governed.get());
    governed.reset();
    plain.reset();
    meter_plain.reset();
    meter_charged.reset();
    tenant.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

World& world() {
  static World w;
  return w;
}

void reads(benchmark::State& state, ::rocksdb::DB& db, bool uniform) {
  std::mt19937_64 rng(7);
  std::string v;
  uint64_t failed = 0;
  for (auto _ : state) {
    const int k = uniform ? static_cast<int>(rng() % kKeys) : World::pick(rng);
    if (!db.Get(::rocksdb::ReadOptions(), key(k), &v).ok()) ++failed;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["failed"] = static_cast<double>(failed);
}

void BM_ReadsPlainCapacity(benchmark::State& state) {
  World& w = world();
  reads(state, *w.plain, false);
  state.counters["capacity_MiB"] = static_cast<double>(w.capacity) / kMiB;
}
void BM_ReadsGoverned(benchmark::State& state) {
  World& w = world();
  reads(state, *w.governed, false);
  state.counters["capacity_MiB"] =
      static_cast<double>(w.tenant->cache().cache()->GetCapacity()) / kMiB;
  state.counters["peak_over_max_KiB"] =
      (static_cast<double>(w.governed_group->peak()) - static_cast<double>(kGroupMax)) / 1024;
  state.counters["forced"] = static_cast<double>(w.tenant->cache().allocator().forced());
  const memcg::CacheGovernor::Stats gs = w.tenant->cache().governor().stats();
  state.counters["reclaims"] = static_cast<double>(gs.reclaims);
  state.counters["lowered"] = static_cast<double>(gs.lowered);
  state.counters["raised"] = static_cast<double>(gs.raised);
}
void BM_MissesPlain(benchmark::State& state) { reads(state, *world().meter_plain, true); }
void BM_MissesByteAllocator(benchmark::State& state) {
  reads(state, *world().meter_charged, true);
}

[[maybe_unused]] const bool registered = [] {
  for (int i = 0; i < kPairs; ++i) {
    benchmark::RegisterBenchmark("reads/plain_capacity", BM_ReadsPlainCapacity)->MinTime(1.0);
    benchmark::RegisterBenchmark("reads/governed", BM_ReadsGoverned)->MinTime(1.0);
  }
  for (int i = 0; i < kPairs; ++i) {
    benchmark::RegisterBenchmark("misses/plain", BM_MissesPlain)->MinTime(1.0);
    benchmark::RegisterBenchmark("misses/byte_allocator", BM_MissesByteAllocator)->MinTime(1.0);
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
