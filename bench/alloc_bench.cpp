// Cost of charging allocations through memcg::MemoryResource (pmr.hpp), against the same
// upstream without memcg and against a per-thread-batch tracker (alloc_baselines.hpp).
//
// "Pairs" benchmarks: each iteration allocates N objects of 16..256 bytes (sizes cycle in steps
// of 16, 136 bytes on average) and frees them in the same order; ns_per_pair is the CPU time per
// allocate + deallocate pair. N = 16 keeps the live bytes (2 KiB) within one charge unit, so the
// object reserve serves every call; N = 64 (8.5 KiB live) makes each iteration refill and return
// units through the unit charge path twice. With two threads both charge the same group from
// different CPUs.
// ObjStockPair is the object layer alone (charge + uncharge, no memory). MapOfStrings builds and
// destroys a std::map of 1000 string pairs with the default operator new (no hook in this program)
// and with malloc directly: hook_bench's baseline is the latter, and this shows they are equal.

#include <benchmark/benchmark.h>

#include <array>
#include <memory_resource>

#include "alloc_baselines.hpp"
#include "memcg/core/charge/attach.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/alloc/pmr.hpp"
#include "bench_check.hpp"

namespace {

using memcg::bench::BatchTracker;

constexpr int kMaxBatch = 64;

struct Env {
  memcg::Controller ctl;
  memcg::GroupRef group;
  memcg::MemoryResource bound;
  memcg::MemoryResource per_thread;
  memcg::bench::TrackedResource tracked;
  Env()
      : group(make_group(ctl)),
        bound(*group),
        per_thread(ctl),
        tracked(memcg::bench::global_tracker(), std::pmr::new_delete_resource()) {}
  static memcg::GroupRef make_group(memcg::Controller& ctl) {
    memcg::GroupRef g;
    BENCH_CHECK(ctl.create("bench", &g));
    return g;
  }
};

Env& env() {
  static Env* e = new Env;  // never destroyed: threads of other benchmarks may still use it
  return *e;
}

void pairs(benchmark::State& state, std::pmr::memory_resource* mr) {
  const int n = static_cast<int>(state.range(0));
  std::array<void*, kMaxBatch> p{};
  for (auto _ : state) {
    for (int i = 0; i < n; ++i) p[i] = mr->allocate(16 + 16 * (i % 16), 8);
    for (int i = 0; i < n; ++i) mr->deallocate(p[i], 16 + 16 * (i % 16), 8);
    benchmark::DoNotOptimize(p);
  }
  state.counters["ns_per_pair"] = benchmark::Counter(
      n, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_Pairs_Upstream(benchmark::State& state) {
  env();
  pairs(state, std::pmr::new_delete_resource());
}
void BM_Pairs_MemcgGroup(benchmark::State& state) {
  pairs(state, &env().bound);
}
void BM_Pairs_MemcgThreadGroup(benchmark::State& state) {
  memcg::ScopedAttach attach(*env().group);
  pairs(state, &env().per_thread);
}
void BM_Pairs_BatchTracker(benchmark::State& state) {
  pairs(state, &env().tracked);
}

void BM_ObjStockPair(benchmark::State& state) {
  memcg::Group& g = *env().group;
  const int n = static_cast<int>(state.range(0));
  for (auto _ : state) {
    // The group has no limit: every charge succeeds (no check in the timed loop).
    for (int i = 0; i < n; ++i) static_cast<void>(memcg::try_charge_object(g, 16 + 16 * (i % 16)));
    for (int i = 0; i < n; ++i) memcg::uncharge_object(g, 16 + 16 * (i % 16));
  }
  state.counters["ns_per_pair"] = benchmark::Counter(
      n, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["rseq"] = env().ctl.obj_stock().uses_rseq();
}

void BM_MapOfStrings_DefaultNew(benchmark::State& state) {
  for (auto _ : state)
    benchmark::DoNotOptimize(memcg::bench::map_of_strings<memcg::bench::NewAllocator>(1000, 7));
}
void BM_MapOfStrings_Malloc(benchmark::State& state) {
  for (auto _ : state)
    benchmark::DoNotOptimize(memcg::bench::map_of_strings<memcg::bench::MallocAllocator>(1000, 7));
}

BENCHMARK(BM_Pairs_Upstream)->Arg(16)->Arg(64)->Threads(1)->Threads(2);
BENCHMARK(BM_Pairs_MemcgGroup)->Arg(16)->Arg(64)->Threads(1)->Threads(2);
BENCHMARK(BM_Pairs_MemcgThreadGroup)->Arg(16)->Arg(64)->Threads(1)->Threads(2);
BENCHMARK(BM_Pairs_BatchTracker)->Arg(16)->Arg(64)->Threads(1)->Threads(2);
BENCHMARK(BM_ObjStockPair)->Arg(16)->Arg(64)->Threads(1)->Threads(2);
BENCHMARK(BM_MapOfStrings_DefaultNew);
BENCHMARK(BM_MapOfStrings_Malloc);

}  // namespace

BENCHMARK_MAIN();
