// Cost of the per-CPU stock: a consume(1) + refill(1) pair (the charge/uncharge round trip of
// one unit that hits the stock), in rseq mode and in fallback (try-lock) mode; a drain_all over
// two CPUs; and the two ways of reading the current CPU.
//
// Each "Pair" iteration is one consume + one refill. With two threads, Google Benchmark divides
// the wall time by the iterations of both threads (so "Time" is the inverse of the combined
// throughput) and the CPU time of both by the same count (so "CPU" is the cost of one pair).
// "shared" = both threads use the same owner (each CPU still has its own slot for it).

#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <array>
#include <atomic>
#include <vector>

#include "memcg/base/internal/cpu.hpp"
#include "memcg/percpu/internal/stock.hpp"
#include "smoke.hpp"

namespace {

using memcg::Stock;
using memcg::StockOwner;

class BenchOwner final : public StockOwner {
 public:
  explicit BenchOwner(const BenchOwner* parent = nullptr) : parent_(parent) {}
  void stock_uncharge(int64_t units) noexcept override {
    given_back.fetch_add(units, std::memory_order_relaxed);
  }
  void stock_stat(int, int64_t units) noexcept override {
    stat.fetch_add(units, std::memory_order_relaxed);
  }
  void stock_get() noexcept override { refs.fetch_add(1, std::memory_order_relaxed); }
  void stock_put() noexcept override { refs.fetch_sub(1, std::memory_order_relaxed); }
  bool stock_is_within(const StockOwner* root) const noexcept override {
    for (const BenchOwner* p = this; p != nullptr; p = p->parent_) {
      if (p == root) return true;
    }
    return false;
  }
  std::atomic<int64_t> given_back{0};
  std::atomic<int64_t> stat{0};
  std::atomic<int> refs{0};

 private:
  const BenchOwner* parent_;
};

Stock& stock_for(bool fallback) {
  static Stock rseq_stock(0, 64, Stock::Mode::kAuto);
  static Stock lock_stock(0, 64, Stock::Mode::kFallback);
  return fallback ? lock_stock : rseq_stock;
}

std::array<BenchOwner, 4> g_owners;

void BM_ConsumeRefillPair(benchmark::State& state) {
  Stock& stock = stock_for(state.range(0) != 0);
  BenchOwner* o = &g_owners[state.range(1) != 0 ? 0 : 1 + state.thread_index()];
  stock.refill(o, 32);
  int64_t misses = 0;
  for (auto _ : state) {
    misses += !stock.consume(o, 1);
    stock.refill(o, 1);
  }
  state.counters["miss_ratio"] =
      benchmark::Counter(static_cast<double>(misses) / static_cast<double>(state.iterations()));
  state.SetLabel(stock.uses_rseq() ? "rseq" : "fallback");
}
BENCHMARK(BM_ConsumeRefillPair)
    ->ArgNames({"fallback", "shared"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Threads(1)
    ->UseRealTime();
BENCHMARK(BM_ConsumeRefillPair)
    ->ArgNames({"fallback", "shared"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({0, 1})
    ->Args({1, 1})
    ->Threads(2)
    ->UseRealTime();

// Reference: what the pair would cost with one uncontended atomic read-modify-write each.
void BM_AtomicFetchAddPair(benchmark::State& state) {
  alignas(64) std::atomic<int64_t> counter{0};
  for (auto _ : state) {
    counter.fetch_sub(1, std::memory_order_relaxed);
    counter.fetch_add(1, std::memory_order_relaxed);
  }
  benchmark::DoNotOptimize(counter.load());
}
BENCHMARK(BM_AtomicFetchAddPair);

bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// drain_all(root) with 7 descendants of root stocked on each of two CPUs, called from the first
// CPU: one shard local, one remote (a membarrier in rseq mode).
void BM_DrainAll2Cpus7Owners(benchmark::State& state) {
  cpu_set_t saved;
  sched_getaffinity(0, sizeof saved, &saved);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
    if (CPU_ISSET(c, &saved)) cpus.push_back(c);
  }
  if (cpus.size() < 2) {
    state.SkipWithError("needs two CPUs");
    return;
  }
  Stock stock(0, 64, state.range(0) != 0 ? Stock::Mode::kFallback : Stock::Mode::kAuto);
  BenchOwner root;
  std::vector<std::unique_ptr<BenchOwner>> owners;
  for (int i = 0; i < 7; ++i) owners.push_back(std::make_unique<BenchOwner>(&root));
  for (auto _ : state) {
    state.PauseTiming();
    for (int c : {cpus[1], cpus[0]}) {
      pin_to(c);
      for (auto& o : owners) stock.refill(o.get(), 1);
    }
    state.ResumeTiming();
    stock.drain_all(&root);
  }
  pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  state.SetLabel(stock.uses_rseq() ? "rseq" : "fallback");
}
// A fixed count: each iteration also pins to both CPUs and refills, outside the timing.
BENCHMARK(BM_DrainAll2Cpus7Owners)
    ->ArgName("fallback")
    ->Arg(0)
    ->Arg(1)
    ->Iterations(memcg::bench::fixed_iterations(20000))
    ->UseRealTime();

void BM_CurrentCpu_Rseq(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(memcg::internal::current_cpu());
}
BENCHMARK(BM_CurrentCpu_Rseq);

void BM_CurrentCpu_SchedGetcpu(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(sched_getcpu());
}
BENCHMARK(BM_CurrentCpu_SchedGetcpu);

}  // namespace

BENCHMARK_MAIN();
