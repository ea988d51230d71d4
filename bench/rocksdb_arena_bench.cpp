// memcg::rocksdb's arena mode against plain RocksDB, alternated in one run
// (docs/BENCHMARKS-rocksdb.md). jemalloc is the program's malloc for every variant.
//
//  reads/plain_capacity    RocksDB's own LRU cache at capacity C, no memcg, thread unbound
//  reads/arena             arena-mode memcg::rocksdb::Tenant (memcg/rocksdb/arena.hpp) on a group
//                          whose memory.max leaves the cache C (read back after warm-up); the
//                          reading thread bound to the group's arena
//  misses/plain            RocksDB's cache at 4 MiB, no memcg (every Get a likely miss)
//  misses/arena_allocator  the same cache with ArenaAllocator on a group with no limit, the
//                          reading thread bound: the cost of page-granular charging, no limit hit
// Each pair is registered kPairs times, interleaved, so the variants alternate through the run.
#include <benchmark/benchmark.h>
#include <rocksdb/db.h>
#include <rocksdb/table.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "memcg/memcg.hpp"
#include "memcg/rocksdb/arena.hpp"
#include "rocksdb_bench_common.hpp"

namespace {

using namespace memcg::bench::rocksdb_common;

constexpr uint64_t kGroupMax = 24 * kMiB;  // the arena tenant's memory.max (pages, not blocks)

struct World {
  DataSet data{"memcg-rocksdb-arena-bench"};
  memcg::Controller ctl;
  memcg::GroupRef arena_group, meter_group;
  std::unique_ptr<memcg::jemalloc::Arena> arena, meter_arena;
  Dbs dbs;

  World() {
    if (ctl.create("/arena", &arena_group) != 0 || ctl.create("/meter", &meter_group) != 0 ||
        memcg::jemalloc::Arena::create(*arena_group, &arena, memcg::rocksdb::kArenaOptions) != 0 ||
        memcg::jemalloc::Arena::create(*meter_group, &meter_arena, memcg::rocksdb::kArenaOptions) !=
            0)
      std::abort();
    arena_group->set_max(kGroupMax);
    memcg::rocksdb::TenantOptions to;
    to.cache.capacity_bytes = 8 * kGroupMax;  // the group, not the configuration, decides
    dbs.tenant = std::make_unique<memcg::rocksdb::Tenant>(
        *arena_group, memcg::rocksdb::arena_options(*arena, to));
    ::rocksdb::Options go = db_options();
    dbs.tenant->configure(go, table_options());
    dbs.governed = open(go, data.path("governed"));
    dbs.tenant->add(dbs.governed.get());
    {
      memcg::rocksdb::ScopedTenantThread bound(*arena, *dbs.governed);
      warm(*dbs.governed);
    }
    dbs.open_plain(data);
    dbs.open_charged(data, std::make_shared<memcg::rocksdb::ArenaAllocator>(*meter_arena));
  }

  ~World() {
    dbs.close();  // before the arenas their blocks live in
    memcg::jemalloc::flush_thread_cache();
    arena.reset();
    meter_arena.reset();
    memcg::jemalloc::collect_released();
  }
};

void BM_ReadsArena(benchmark::State& state) {
  World& w = world<World>();
  {
    memcg::rocksdb::ScopedTenantThread bound(*w.arena, *w.dbs.governed);
    reads(state, *w.dbs.governed, false);
  }
  governed_counters(state, w.dbs.tenant->cache().cache()->GetCapacity(), w.arena_group->peak(),
                    kGroupMax);
  state.counters["forced_KiB"] = static_cast<double>(w.arena->stats().forced) / 1024;
  state.counters["deferred"] = static_cast<double>(w.dbs.tenant->cache().deferred());
}
void BM_MissesArenaAllocator(benchmark::State& state) {
  World& w = world<World>();
  memcg::rocksdb::ScopedTenantThread bound(*w.meter_arena, *w.dbs.meter_charged);
  reads(state, *w.dbs.meter_charged, true);
}

[[maybe_unused]] const bool registered = [] {
  register_pairs<World>("reads/arena", BM_ReadsArena, "misses/arena_allocator",
                        BM_MissesArenaAllocator);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
