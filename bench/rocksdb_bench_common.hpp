// What rocksdb_bench and rocksdb_arena_bench share, so that both measure on the same ground:
// the data set (kKeys keys of kValue bytes, written once in a temporary directory and copied for
// each variant), the plain DBs' options and caches (C, kMeterCache), the skewed read
// distribution, the timed read loop, the plain variants (reads/plain_capacity, misses/plain) and
// the interleaved registration of the pairs. What each bench governs (the group's limit, the
// tenant's options, the charged cache's allocator, the thread binding) stays in its own file.
#ifndef MEMCG_BENCH_ROCKSDB_BENCH_COMMON_HPP_
#define MEMCG_BENCH_ROCKSDB_BENCH_COMMON_HPP_

#include <benchmark/benchmark.h>
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/table.h>
#include <stdlib.h>  // mkdtemp

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <system_error>

#include "memcg/rocksdb/tenant.hpp"
#include "smoke.hpp"

namespace memcg::bench::rocksdb_common {

constexpr int kKeys = 200'000;  // ~45 MB of values
constexpr std::size_t kValue = 200;
constexpr int kPairs = 5;
constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kMeterCache = 4 * kMiB;  // the misses/* caches: every Get a likely miss
// The hot set of reads: key ~ kKeys * u^(1 + kSkew), so that the cache matters.
constexpr double kSkew = 1.5;

inline std::string key(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "key%09d", i);
  return buf;
}

inline ::rocksdb::BlockBasedTableOptions table_options() {
  ::rocksdb::BlockBasedTableOptions t;
  t.block_size = 4096;
  t.cache_index_and_filter_blocks = true;
  return t;
}

// Every DB's options but the table's (the governed DB gets those from Tenant::configure).
inline ::rocksdb::Options db_options() {
  ::rocksdb::Options o;
  o.create_if_missing = true;
  o.compression = ::rocksdb::kNoCompression;
  return o;
}

// A plain (ungoverned) DB's options on `cache`.
inline ::rocksdb::Options base_options(std::shared_ptr<::rocksdb::Cache> cache) {
  ::rocksdb::Options o = db_options();
  ::rocksdb::BlockBasedTableOptions t = table_options();
  t.block_cache = std::move(cache);
  o.table_factory.reset(::rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

inline std::unique_ptr<::rocksdb::DB> open(const ::rocksdb::Options& o, const std::string& p) {
  ::rocksdb::DB* db = nullptr;
  const ::rocksdb::Status s = ::rocksdb::DB::Open(o, p, &db);
  if (!s.ok()) {
    std::fprintf(stderr, "open %s: %s\n", p.c_str(), s.ToString().c_str());
    std::abort();
  }
  return std::unique_ptr<::rocksdb::DB>(db);
}

// Zipf-like: key ~ kKeys * u^(1 + kSkew).
inline int pick(std::mt19937_64& rng) {
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  return static_cast<int>(std::pow(u, 1.0 + kSkew) * (kKeys - 1));
}

inline void warm(::rocksdb::DB& db) {
  std::string v;
  std::mt19937_64 rng(42);
  const int n = memcg::bench::smoke_run() ? 1'000 : 100'000;
  for (int i = 0; i < n; ++i) db.Get(::rocksdb::ReadOptions(), key(pick(rng)), &v);
}

// One data set, written once and copied, so every variant reads the same files: the copies are
// dir/governed, dir/plain, dir/meter_plain and dir/meter_charged. The directory goes with it.
struct DataSet {
  std::filesystem::path dir;

  explicit DataSet(const char* prefix) {
    std::string tmpl = (std::filesystem::temp_directory_path() / prefix).string() + "-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    dir = tmpl;
    {
      auto db = open(base_options(::rocksdb::NewLRUCache(8 * kMiB)), path("seed"));
      ::rocksdb::WriteOptions wo;
      wo.disableWAL = true;
      const std::string v(kValue, 'v');
      for (int i = 0; i < kKeys; ++i) db->Put(wo, key(i), v);
      db->CompactRange(::rocksdb::CompactRangeOptions(), nullptr, nullptr);
    }
    for (const char* name : {"governed", "plain", "meter_plain", "meter_charged"})
      std::filesystem::copy(dir / "seed", dir / name, std::filesystem::copy_options::recursive);
  }
  DataSet(const DataSet&) = delete;
  DataSet& operator=(const DataSet&) = delete;
  ~DataSet() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  std::string path(const char* name) const { return (dir / name).string(); }
};

// The four DBs of a run, on the copies of one DataSet, and the tenant that governs `governed`.
// A World sets up the tenant and the governed DB its own way, then calls open_plain() and
// open_charged(). Closed (a tenant's DB before the tenant) by close() or at the latest here.
struct Dbs {
  std::unique_ptr<memcg::rocksdb::Tenant> tenant;
  std::unique_ptr<::rocksdb::DB> governed, plain, meter_plain, meter_charged;
  uint64_t capacity = 0;  // C, in RocksDB's terms

  Dbs() = default;
  Dbs(const Dbs&) = delete;
  Dbs& operator=(const Dbs&) = delete;
  ~Dbs() { close(); }

  // After the governed DB's warm-up: C read back from the governor, the plain DB at C (warmed)
  // and misses/plain's DB at kMeterCache.
  void open_plain(const DataSet& data) {
    tenant->safe_point();
    capacity = tenant->cache().cache()->GetCapacity();
    plain = open(base_options(::rocksdb::NewLRUCache(capacity)), data.path("plain"));
    warm(*plain);
    meter_plain = open(base_options(::rocksdb::NewLRUCache(kMeterCache)), data.path("meter_plain"));
  }

  // misses/<charged>'s DB: a cache as misses/plain's, its blocks from `allocator`.
  void open_charged(const DataSet& data, std::shared_ptr<::rocksdb::MemoryAllocator> allocator) {
    ::rocksdb::LRUCacheOptions lru;
    lru.capacity = kMeterCache;
    lru.memory_allocator = std::move(allocator);
    meter_charged = open(base_options(::rocksdb::NewLRUCache(lru)), data.path("meter_charged"));
  }

  void close() {
    if (tenant && governed) tenant->remove(governed.get());
    governed.reset();
    plain.reset();
    meter_plain.reset();
    meter_charged.reset();
    tenant.reset();
  }
};

// The timed loop: skewed reads (pick) or uniform ones (misses).
inline void reads(benchmark::State& state, ::rocksdb::DB& db, bool uniform) {
  std::mt19937_64 rng(7);
  std::string v;
  uint64_t failed = 0;
  for (auto _ : state) {
    const int k = uniform ? static_cast<int>(rng() % kKeys) : pick(rng);
    if (!db.Get(::rocksdb::ReadOptions(), key(k), &v).ok()) ++failed;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["failed"] = static_cast<double>(failed);
}

// reads/<governed>'s first counters: the governed cache's capacity after the run, and how far the
// group's peak went past its memory.max.
inline void governed_counters(benchmark::State& state, uint64_t capacity, uint64_t peak,
                              uint64_t max) {
  state.counters["capacity_MiB"] = static_cast<double>(capacity) / kMiB;
  state.counters["peak_over_max_KiB"] =
      (static_cast<double>(peak) - static_cast<double>(max)) / 1024;
}

// A bench's World is built once, at its first use; its Dbs are `dbs`.
template <class World>
World& world() {
  static World w;
  return w;
}

// reads/plain_capacity: RocksDB's own cache at C, the governed side's capacity.
template <class World>
void plain_capacity(benchmark::State& state) {
  World& w = world<World>();
  reads(state, *w.dbs.plain, false);
  state.counters["capacity_MiB"] = static_cast<double>(w.dbs.capacity) / kMiB;
}

// misses/plain: RocksDB's own cache at kMeterCache, uniform reads.
template <class World>
void misses_plain(benchmark::State& state) {
  reads(state, *world<World>().dbs.meter_plain, true);
}

using Bench = void (*)(benchmark::State&);

// Each pair kPairs times, interleaved, so the variants alternate through the run:
// reads/plain_capacity with `governed_name`, then misses/plain with `charged_name`.
template <class World>
void register_pairs(const char* governed_name, Bench governed, const char* charged_name,
                    Bench charged) {
  const int pairs = memcg::bench::smoke_run() ? 1 : kPairs;
  const double t = memcg::bench::min_time(1.0);
  for (int i = 0; i < pairs; ++i) {
    benchmark::RegisterBenchmark("reads/plain_capacity", plain_capacity<World>)->MinTime(t);
    benchmark::RegisterBenchmark(governed_name, governed)->MinTime(t);
  }
  for (int i = 0; i < pairs; ++i) {
    benchmark::RegisterBenchmark("misses/plain", misses_plain<World>)->MinTime(t);
    benchmark::RegisterBenchmark(charged_name, charged)->MinTime(t);
  }
}

}  // namespace memcg::bench::rocksdb_common

#endif  // MEMCG_BENCH_ROCKSDB_BENCH_COMMON_HPP_
