// The vmpressure listener gate, ablated on a reclaim-heavy loop: a cache at depth 3 (a/b/c) grows
// against b's memory.max, so that every few charges run the reclaim driver (half of the scanned
// units are referenced and rotate: medium pressure, a window every ~16 reclaim calls).
//
//   gate:1 — the library's behaviour: tree mode runs only while a listener exists.
//   gate:0 — the kernel's behaviour without the gate: tree mode always accounts and completes
//            windows (the kernel wakes its worker for each; here the delivery walk runs).
//   listeners:0/1 — none, or one callback listener on a (default mode, level low).
//
// Reported per iteration (64 units grown, ~2 reclaim calls): CPU time, `windows` (completed
// windows = the kernel's worker wake-ups) and `deliveries` (listener events).
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>

#include "memcg/core/tree/controller.hpp"
#include "memcg/alloc/lru_cache.hpp"
#include "memcg/core/reclaim/vmpressure.hpp"
#include "bench_check.hpp"

namespace memcg {
namespace {

// One shard and the chain a/b/c that both benchmarks reclaim in.
struct Chain {
  Chain() : ctl(one_shard()) {
    BENCH_CHECK(ctl.create("a", &a));
    BENCH_CHECK(ctl.create("a/b", &b));
    BENCH_CHECK(ctl.create("a/b/c", &c));
  }
  static Options one_shard() {
    Options o;
    o.nr_shards = 1;
    return o;
  }
  Controller ctl;
  GroupRef a, b, c;
};

void BM_ReclaimLoop(benchmark::State& state) {
  const bool gate = state.range(0) != 0;
  const bool listener = state.range(1) != 0;
  Chain chain;
  GroupRef &a = chain.a, &b = chain.b, &c = chain.c;
  b->set_max(uint64_t{4} << 20);  // 1024 units of 4 KiB
  LruCache cache(*c, "cache", 50);
  cache.grow(1024);
  internal::set_vmpressure_gate(gate);
  std::atomic<uint64_t> heard{0};
  PressureListener l;
  if (listener) BENCH_CHECK(l.listen(*a, "low", [&](PressureLevel) { heard.fetch_add(1); }));
  const VmpressureStats before = vmpressure_stats();
  for (auto _ : state) benchmark::DoNotOptimize(cache.grow(64));
  const VmpressureStats after = vmpressure_stats();
  internal::set_vmpressure_gate(true);
  state.counters["windows"] = benchmark::Counter(
      static_cast<double>(after.windows - before.windows), benchmark::Counter::kAvgIterations);
  state.counters["deliveries"] =
      benchmark::Counter(static_cast<double>(after.deliveries - before.deliveries),
                         benchmark::Counter::kAvgIterations);
  state.counters["heard"] =
      benchmark::Counter(static_cast<double>(heard.load()), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_ReclaimLoop)
    ->ArgNames({"gate", "listeners"})
    ->Args({1, 0})
    ->Args({0, 0})
    ->Args({1, 1})
    ->Args({0, 1});

// The tree-mode input alone (what every reclaim call pays at its end), 64 units per call, no
// listener: gated (one relaxed load) versus ungated (lock, accumulate, a window every 8 calls).
void BM_TreeInput(benchmark::State& state) {
  const bool gate = state.range(0) != 0;
  Chain chain;
  internal::set_vmpressure_gate(gate);
  for (auto _ : state) vmpressure_tree(*chain.c, ReclaimReason::kLimit, 64, 32);
  internal::set_vmpressure_gate(true);
}
BENCHMARK(BM_TreeInput)->ArgName("gate")->Arg(1)->Arg(0);

}  // namespace
}  // namespace memcg

BENCHMARK_MAIN();
