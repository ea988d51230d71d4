// Charge-path benchmarks: the cost of a try_charge + uncharge pair through the whole library
// (stock, counters, per-kind statistics) against hierarchical counters without a stock, in one
// binary so that every ratio comes from one run.
//
// Every pair charges a group at depth 4: three groups below the root ("a/b/c"), so the counters
// of a miss are four levels (c, b, a and the root's), the same depth as the baselines' chains.
//
//  - Pair/memcg: try_charge(1) + uncharge(1); 1, 2 and 4 threads on the same group (4 threads
//    oversubscribe the 2 cores).
//  - Pair/memcg_uncharge_direct: try_charge(1) + uncharge_direct(1): the uncharge walks the
//    counters, so the stock only drains and every 64th charge refills it. What refilling the
//    stock on uncharge buys.
//  - Pair/stock_only: ctl.stock().consume(&g, 1) + refill(&g, 1) on a Group: the stock alone,
//    without the per-kind statistics (Group::stat_add) that try_charge and uncharge add.
//  - Thrash/memcg/groups:N: one thread pinned to one CPU, pairs round-robin over N sibling groups
//    (7 fit in a shard's slots; 8 and 16 evict a slot on nearly every refill).
//  - Mixed/memcg: pairs of 1..200 units (fixed pseudo-random sequence; above 64 the stock is
//    bypassed and the counters are charged exactly).
//  - DrainAll/memcg: stock().drain_all(parent) with 7 groups stocked on each of 2 CPUs.
//  - Baselines at depth 4 (bench/baselines.hpp): PackedAtomic (an atomic add per level) and
//    MutexTree (one mutex per tree); PerThreadBatch/T:64 and T:1024 (4 MiB of 4 KiB units),
//    in the style of ClickHouse's MemoryTracker: each thread keeps an untracked amount and touches
//    the library's hierarchical PageCounter only when it passes the threshold.
//
// Slack (units charged or freed that the shared counters do not show):
//  - memcg: at most nr_shards x 7 x batch units in the whole controller (2 x 7 x 64 = 896 units
//    = 3.5 MiB here), whatever the number of threads; over-counted (usage looks higher), and
//    given back by the failure ladder before a charge fails.
//  - per-thread batch: up to threads x threshold units per tracker, under-counted (a limit can be
//    passed by that much), unbounded in the number of threads.
//  - PackedAtomic, MutexTree: none.
//
// items_per_second is the throughput of all threads together; "Time" with UseRealTime is the wall
// time per pair of all threads together.

#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "baselines.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/counter/page_counter.hpp"
#include "memcg/percpu/internal/stock.hpp"
#include "bench_check.hpp"
#include "smoke.hpp"

namespace memcg::bench {
namespace {

constexpr int kDepth = 4;
constexpr int64_t kSentinel = PageCounter::sentinel(12);

// One controller for the whole run; groups are created before any benchmark runs.
struct Fixture {
  Controller ctl;
  GroupRef leaf;                       // a/b/c
  GroupRef direct_leaf;                // a/b/d (uncharge_direct pairs)
  GroupRef stock_leaf;                 // a/b/e (stock-only pairs)
  GroupRef mixed_leaf;                 // a/b/m
  GroupRef nokind_leaf;                // a/b/k (charges without a statistic)
  GroupRef rstat_leaf;                 // a/b/r (statistic through rstat on every charge)
  GroupRef kinds_leaf;                 // a/b/x (two kinds alternating)
  std::array<GroupRef, 16> thrash;     // a/b/t0 .. t15
  GroupRef drain_parent;               // a/b/dr
  std::array<GroupRef, 7> drain_kids;  // a/b/dr/g0 .. g6 (depth 5)

  Fixture() {
    BENCH_CHECK(ctl.create("a"));
    BENCH_CHECK(ctl.create("a/b"));
    BENCH_CHECK(ctl.create("a/b/c", &leaf));
    BENCH_CHECK(ctl.create("a/b/d", &direct_leaf));
    BENCH_CHECK(ctl.create("a/b/e", &stock_leaf));
    BENCH_CHECK(ctl.create("a/b/m", &mixed_leaf));
    BENCH_CHECK(ctl.create("a/b/k", &nokind_leaf));
    BENCH_CHECK(ctl.create("a/b/r", &rstat_leaf));
    BENCH_CHECK(ctl.create("a/b/x", &kinds_leaf));
    for (size_t i = 0; i < thrash.size(); ++i)
      BENCH_CHECK(ctl.create("a/b/t" + std::to_string(i), &thrash[i]));
    BENCH_CHECK(ctl.create("a/b/dr", &drain_parent));
    for (size_t i = 0; i < drain_kids.size(); ++i)
      BENCH_CHECK(ctl.create(*drain_parent, "g" + std::to_string(i), &drain_kids[i]));
  }
};

Fixture& fx() {
  static Fixture f;
  return f;
}

// Pins the calling thread to one CPU for a scope.
class PinTo {
 public:
  explicit PinTo(int cpu) {
    sched_getaffinity(0, sizeof saved_, &saved_);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    ok_ = pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
  }
  ~PinTo() { pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_); }
  bool ok() const { return ok_; }

 private:
  cpu_set_t saved_;
  bool ok_;
};

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

void label_stock(benchmark::State& state) {
  state.SetLabel(fx().ctl.stock().uses_rseq() ? "rseq" : "try-lock");
}

// ---- memcg ------------------------------------------------------------------------------------

void BM_MemcgPair(benchmark::State& state) {
  Group& g = *fx().leaf;
  for (auto _ : state) {
    benchmark::DoNotOptimize(try_charge(g, 1));
    uncharge(g, 1);
  }
  state.SetItemsProcessed(state.iterations());
  label_stock(state);
}

// The same pair without a statistic: the charge alone, against which the cost of the statistic
// is measured.
void BM_MemcgPairNoKind(benchmark::State& state) {
  Group& g = *fx().nokind_leaf;
  for (auto _ : state) {
    benchmark::DoNotOptimize(try_charge(g, 1, kDefaultCharge, kNoStatKind));
    uncharge(g, 1, kNoStatKind);
  }
  state.SetItemsProcessed(state.iterations());
  label_stock(state);
}

// The statistic as an rstat update on every charge and uncharge (the kernel's way, and this
// library's before the stock slots cached it): the ablation of the slot cache.
void BM_MemcgPairRstatPerCharge(benchmark::State& state) {
  Group& g = *fx().rstat_leaf;
  const unsigned shift = fx().ctl.unit_shift();
  for (auto _ : state) {
    benchmark::DoNotOptimize(try_charge(g, 1, kDefaultCharge, kNoStatKind));
    g.stat_add(StatRegistry::kAnon, int64_t{1} << shift, 1);
    g.stat_add(StatRegistry::kAnon, -(int64_t{1} << shift), 1);
    uncharge(g, 1, kNoStatKind);
  }
  state.SetItemsProcessed(state.iterations());
  label_stock(state);
}

// Two kinds in turn on one group: the slot caches one of them, the other is passed on.
void BM_MemcgPairTwoKinds(benchmark::State& state) {
  Group& g = *fx().kinds_leaf;
  int i = 0;
  for (auto _ : state) {
    const int kind = (i++ & 1) ? StatRegistry::kFile : StatRegistry::kAnon;
    benchmark::DoNotOptimize(try_charge(g, 1, kDefaultCharge, kind));
    uncharge(g, 1, kind);
  }
  state.SetItemsProcessed(state.iterations());
  label_stock(state);
}

void BM_MemcgPairUnchargeDirect(benchmark::State& state) {
  Group& g = *fx().direct_leaf;
  for (auto _ : state) {
    benchmark::DoNotOptimize(try_charge(g, 1));
    uncharge_direct(g, 1);
  }
  state.SetItemsProcessed(state.iterations());
  label_stock(state);
}

void BM_StockOnlyPair(benchmark::State& state) {
  Group& g = *fx().stock_leaf;
  Stock& stock = fx().ctl.stock();
  int64_t misses = 0;
  for (auto _ : state) {
    // A miss charges a batch to the counters, as try_charge would.
    if (!stock.consume(&g, 1)) [[unlikely]] {
      ++misses;
      g.memory().charge(64);
      stock.refill(&g, 63);
    }
    stock.refill(&g, 1);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["miss_ratio"] =
      static_cast<double>(misses) / static_cast<double>(state.iterations());
  label_stock(state);
}

void BM_MemcgThrash(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  const std::vector<int> cpus = allowed_cpus();
  PinTo pin(cpus.empty() ? 0 : cpus.front());
  std::array<Group*, 16> groups{};
  for (size_t i = 0; i < n; ++i) groups[i] = fx().thrash[i].get();
  const Stock::Stats before = fx().ctl.stock().stats();
  size_t i = 0;
  for (auto _ : state) {
    Group& g = *groups[i];
    benchmark::DoNotOptimize(try_charge(g, 1));
    uncharge(g, 1);
    if (++i == n) i = 0;
  }
  const Stock::Stats after = fx().ctl.stock().stats();
  state.SetItemsProcessed(state.iterations());
  state.counters["evictions_per_pair"] = static_cast<double>(after.evictions - before.evictions) /
                                         static_cast<double>(state.iterations());
  label_stock(state);
}

void BM_MemcgMixed(benchmark::State& state) {
  Group& g = *fx().mixed_leaf;
  std::mt19937 rng(42);
  std::array<int64_t, 1024> sizes{};
  for (int64_t& s : sizes) s = 1 + static_cast<int64_t>(rng() % 200);
  size_t i = 0;
  for (auto _ : state) {
    const int64_t n = sizes[i++ & (sizes.size() - 1)];
    benchmark::DoNotOptimize(try_charge(g, n));
    uncharge(g, n);
  }
  state.SetItemsProcessed(state.iterations());
  label_stock(state);
}

void BM_MemcgDrainAll(benchmark::State& state) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) {
    state.SkipWithError("needs two CPUs");
    return;
  }
  Fixture& f = fx();
  for (auto _ : state) {
    state.PauseTiming();
    for (int c : {cpus[1], cpus[0]}) {
      PinTo pin(c);
      for (GroupRef& g : f.drain_kids) {
        benchmark::DoNotOptimize(try_charge(*g, 1));
        uncharge(*g, 1);
      }
    }
    {
      PinTo pin(cpus[0]);  // drain from the first CPU: one shard local, one remote
      state.ResumeTiming();
      f.ctl.stock().drain_all(f.drain_parent.get());
      state.PauseTiming();
    }
    state.ResumeTiming();
  }
  label_stock(state);
}

// ---- baselines --------------------------------------------------------------------------------

PackedChain& packed() {
  static PackedChain chain(kDepth, kSentinel);
  return chain;
}

MutexTree& mutex_tree() {
  static MutexTree tree(kDepth, kSentinel);
  return tree;
}

void BM_PackedAtomicPair(benchmark::State& state) {
  PackedAtomicCounter* leaf = packed().leaf();
  for (auto _ : state) {
    benchmark::DoNotOptimize(leaf->try_charge(1));
    leaf->uncharge(1);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_MutexTreePair(benchmark::State& state) {
  MutexTree::Node* leaf = mutex_tree().leaf();
  for (auto _ : state) {
    benchmark::DoNotOptimize(leaf->try_charge(1));
    leaf->uncharge(1);
  }
  state.SetItemsProcessed(state.iterations());
}

// A per-thread batch in the style of ClickHouse's MemoryTracker: the thread adds to its own
// untracked amount and charges (or uncharges) the shared counters only once that amount passes
// +threshold (or -threshold), all of it at once. The limit is checked only then, so each thread
// can be up to `threshold` past it.
class PerThreadBatch {
 public:
  explicit PerThreadBatch(int64_t threshold) : threshold_(threshold) {
    PageCounter* parent = nullptr;
    for (int i = 0; i < kDepth; ++i) {
      levels_.push_back(std::make_unique<PageCounter>(parent, kSentinel));
      parent = levels_.back().get();
    }
  }
  // Per-thread state: lives on the charging thread (thread_local in a real tracker).
  struct Local {
    int64_t untracked = 0;
  };
  bool try_charge(Local& l, int64_t n) {
    l.untracked += n;
    if (l.untracked > threshold_) [[unlikely]] {
      if (leaf()->try_charge(l.untracked) != nullptr) {
        l.untracked -= n;
        return false;
      }
      l.untracked = 0;
    }
    return true;
  }
  void uncharge(Local& l, int64_t n) {
    l.untracked -= n;
    if (l.untracked < -threshold_) [[unlikely]] {
      leaf()->uncharge(-l.untracked);
      l.untracked = 0;
    }
  }
  void flush(Local& l) {
    if (l.untracked > 0) leaf()->charge(l.untracked);
    if (l.untracked < 0) leaf()->uncharge(-l.untracked);
    l.untracked = 0;
  }

 private:
  PageCounter* leaf() { return levels_.back().get(); }
  int64_t threshold_;
  std::vector<std::unique_ptr<PageCounter>> levels_;
};

PerThreadBatch& per_thread(int64_t threshold) {
  static PerThreadBatch t64(64), t1024(1024);
  return threshold == 64 ? t64 : t1024;
}

void BM_PerThreadBatchPair(benchmark::State& state) {
  PerThreadBatch& t = per_thread(state.range(0));
  PerThreadBatch::Local local;
  for (auto _ : state) {
    benchmark::DoNotOptimize(t.try_charge(local, 1));
    t.uncharge(local, 1);
  }
  t.flush(local);
  state.SetItemsProcessed(state.iterations());
}

// A charge pattern that does reach the shared counters: 1-unit charges in runs of 100 then the
// matching uncharges (the untracked amount swings by 100, past a threshold of 64).
void BM_PerThreadBatchRuns(benchmark::State& state) {
  PerThreadBatch& t = per_thread(state.range(0));
  PerThreadBatch::Local local;
  for (auto _ : state) {
    for (int i = 0; i < 100; ++i) benchmark::DoNotOptimize(t.try_charge(local, 1));
    for (int i = 0; i < 100; ++i) t.uncharge(local, 1);
  }
  t.flush(local);
  state.SetItemsProcessed(state.iterations() * 100);
}

void BM_MemcgRuns(benchmark::State& state) {
  Group& g = *fx().leaf;
  for (auto _ : state) {
    for (int i = 0; i < 100; ++i) benchmark::DoNotOptimize(try_charge(g, 1));
    for (int i = 0; i < 100; ++i) uncharge(g, 1);
  }
  state.SetItemsProcessed(state.iterations() * 100);
  label_stock(state);
}

}  // namespace
}  // namespace memcg::bench

int main(int argc, char** argv) {
  using namespace memcg::bench;
  fx();  // create every group before any benchmark thread runs

  auto threads = [](benchmark::internal::Benchmark* b) {
    b->UseRealTime()->Threads(1)->Threads(2)->Threads(4);
  };
  benchmark::RegisterBenchmark("Pair/memcg", BM_MemcgPair)->Apply(threads);
  benchmark::RegisterBenchmark("Pair/PackedAtomic", BM_PackedAtomicPair)->Apply(threads);
  benchmark::RegisterBenchmark("Pair/MutexTree", BM_MutexTreePair)->Apply(threads);
  benchmark::RegisterBenchmark("Pair/PerThreadBatch", BM_PerThreadBatchPair)
      ->ArgName("T")
      ->Arg(64)
      ->Arg(1024)
      ->Apply(threads);
  benchmark::RegisterBenchmark("Pair/memcg_no_stat", BM_MemcgPairNoKind)->UseRealTime()->Threads(1);
  benchmark::RegisterBenchmark("Pair/memcg_rstat_per_charge", BM_MemcgPairRstatPerCharge)
      ->UseRealTime()
      ->Threads(1);
  benchmark::RegisterBenchmark("Pair/memcg_two_kinds", BM_MemcgPairTwoKinds)
      ->UseRealTime()
      ->Threads(1);
  benchmark::RegisterBenchmark("Pair/memcg_uncharge_direct", BM_MemcgPairUnchargeDirect)
      ->UseRealTime()
      ->Threads(1)
      ->Threads(2);
  benchmark::RegisterBenchmark("Pair/stock_only", BM_StockOnlyPair)
      ->UseRealTime()
      ->Threads(1)
      ->Threads(2);
  benchmark::RegisterBenchmark("Runs100/memcg", BM_MemcgRuns)->UseRealTime()->Threads(1);
  benchmark::RegisterBenchmark("Runs100/PerThreadBatch", BM_PerThreadBatchRuns)
      ->ArgName("T")
      ->Arg(64)
      ->Arg(1024)
      ->UseRealTime()
      ->Threads(1);
  benchmark::RegisterBenchmark("Thrash/memcg", BM_MemcgThrash)
      ->ArgName("groups")
      ->Arg(7)
      ->Arg(8)
      ->Arg(16)
      ->UseRealTime();
  benchmark::RegisterBenchmark("Mixed/memcg", BM_MemcgMixed)->UseRealTime()->Threads(1);
  // A fixed count: each iteration also pins to both CPUs and refills, outside the timing.
  benchmark::RegisterBenchmark("DrainAll/memcg/2cpus_x_7groups", BM_MemcgDrainAll)
      ->Iterations(fixed_iterations(20000))
      ->UseRealTime();

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
