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
#include <rocksdb/db.h>
#include <rocksdb/table.h>

#include <memory>
#include <string>

#include "bench_check.hpp"
#include "memcg/memcg.hpp"
#include "memcg/rocksdb/tenant.hpp"
#include "rocksdb_bench_common.hpp"

namespace {

using namespace memcg::bench::rocksdb_common;

constexpr uint64_t kGroupMax = 16 * kMiB;  // the governed tenant's memory.max

struct World {
  DataSet data{"memcg-rocksdb-bench"};
  memcg::Controller ctl;
  memcg::GroupRef governed_group, meter_group;
  std::shared_ptr<memcg::rocksdb::ByteAllocator> meter_allocator;
  Dbs dbs;  // last: closed before the groups go

  World() {
    BENCH_CHECK(ctl.create("/governed", &governed_group));
    BENCH_CHECK(ctl.create("/meter", &meter_group));
    governed_group->set_max(kGroupMax);
    memcg::rocksdb::TenantOptions to;
    to.cache.capacity_bytes = 8 * kGroupMax;  // the group, not the configuration, decides
    dbs.tenant = std::make_unique<memcg::rocksdb::Tenant>(*governed_group, to);
    ::rocksdb::Options go = db_options();
    ::rocksdb::BlockBasedTableOptions t;
    t.block_size = 4096;
    dbs.tenant->configure(go, t);
    dbs.governed = open(go, data.path("governed"));
    dbs.tenant->add(dbs.governed.get());
    warm(*dbs.governed);
    dbs.open_plain(data);
    meter_allocator = std::make_shared<memcg::rocksdb::ByteAllocator>(*meter_group);
    dbs.open_charged(data, meter_allocator);
  }
};

void BM_ReadsGoverned(benchmark::State& state) {
  World& w = world<World>();
  reads(state, *w.dbs.governed, false);
  governed_counters(state, w.dbs.tenant->cache().cache()->GetCapacity(), w.governed_group->peak(),
                    kGroupMax);
  state.counters["forced"] = static_cast<double>(w.dbs.tenant->cache().allocator().forced());
  const memcg::CacheGovernor::Stats gs = w.dbs.tenant->cache().governor().stats();
  state.counters["reclaims"] = static_cast<double>(gs.reclaims);
  state.counters["lowered"] = static_cast<double>(gs.lowered);
  state.counters["raised"] = static_cast<double>(gs.raised);
}
void BM_MissesByteAllocator(benchmark::State& state) {
  reads(state, *world<World>().dbs.meter_charged, true);
}

[[maybe_unused]] const bool registered = [] {
  register_pairs<World>("reads/governed", BM_ReadsGoverned, "misses/byte_allocator",
                        BM_MissesByteAllocator);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
