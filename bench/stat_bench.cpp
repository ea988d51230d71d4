// Benchmarks of memory.stat through the Controller:
//   (a) reading the root's statistics in a tree of 10 000 groups with nothing pending: the file
//       (text formatting included) and the raw read (periodic check, threshold test, totals),
//       against the baseline of aggregating the whole tree from the per-shard counters;
//   (b) what the per-kind accounting adds to a charge: a try_charge + uncharge pair served by the
//       stock at depth 4 (the stock slot caches the kind's count), against the same pair without
//       a kind (kNoStatKind), the pair with the statistic sent through rstat on every charge
//       (the kernel's way: the ablation of the slot cache), and Group::stat_add alone.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/files/files.hpp"
#include "memcg/percpu/internal/stock.hpp"
#include "bench_check.hpp"

namespace memcg {
namespace {

constexpr size_t kGroups = 10'000;

// root, 10 children, 100 grandchildren, 9 889 leaves below them; one app kind.
struct StatTree {
  StatTree() : ctl(options()) {
    groups.emplace_back(&ctl.root());
    parent.push_back(0);
    auto add = [&](size_t p, const std::string& name) {
      GroupRef g;
      if (ctl.create(*groups[p], name, &g) != 0) std::abort();
      groups.push_back(g);
      parent.push_back(p);
    };
    for (int i = 0; i < 10; ++i) add(0, "t" + std::to_string(i));
    for (int i = 0; i < 100; ++i) add(1 + i / 10, "s" + std::to_string(i));
    for (int i = 0; groups.size() < kGroups; ++i) add(11 + i % 100, "l" + std::to_string(i));
    // Some statistics everywhere, then fold them: "nothing pending".
    const int hash = ctl.stat_index("hash_tables");
    for (size_t i = 1; i < groups.size(); i += 7) {
      BENCH_CHECK(try_charge(*groups[i], 3, kDefaultCharge, i % 2 ? hash : StatRegistry::kFile));
    }
    ctl.flush_stats();
  }
  static Options options() {
    Options o;
    o.stat_kinds = {"hash_tables"};
    return o;
  }
  Controller ctl;
  std::vector<GroupRef> groups;  // parents before children
  std::vector<size_t> parent;
};

StatTree& tree() {
  static StatTree* t = new StatTree;  // kept for the whole run
  return *t;
}

// (a) memory.stat of the root, as a user reads it.
void BM_ReadStatFileRoot(benchmark::State& state) {
  StatTree& t = tree();
  std::string out;
  for (auto _ : state) {
    static_cast<void>(read_file(t.ctl.root(), "memory.stat", &out));  // the root has it: 0
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_ReadStatFileRoot)->Unit(benchmark::kNanosecond);

// The same read without the file and the text: the periodic check and the reader's
// fold-if-needed that read_stat does, then every total.
void BM_ReadStatRawRoot(benchmark::State& state) {
  StatTree& t = tree();
  Group& root = t.ctl.root();
  const int nr_items = static_cast<int>(t.ctl.stats().size());
  for (auto _ : state) {
    t.ctl.tick();
    t.ctl.rstat().flush_if_needed(root.stat_node());
    int64_t sum = 0;
    for (int i = 0; i < nr_items; ++i) sum += root.stat(i);
    benchmark::DoNotOptimize(sum);
  }
}
BENCHMARK(BM_ReadStatRawRoot)->Unit(benchmark::kNanosecond);

// Baseline: a full-tree flush without rstat's bookkeeping, i.e. what a reader must do when
// nothing records which groups changed: every group's every shard's every counter, summed and
// carried up the tree.
void BM_FullTreeAggregationBaseline(benchmark::State& state) {
  StatTree& t = tree();
  Rstat& rs = t.ctl.rstat();
  const size_t nr_items = t.ctl.stats().size();
  const int shards = rs.nr_shards();
  std::vector<int64_t> totals(t.groups.size() * nr_items);
  for (auto _ : state) {
    std::fill(totals.begin(), totals.end(), 0);
    for (size_t g = t.groups.size(); g-- > 0;) {
      int64_t* mine = &totals[g * nr_items];
      const RstatNode& n = t.groups[g]->stat_node();
      for (int s = 0; s < shards; ++s)
        for (size_t i = 0; i < nr_items; ++i) mine[i] += rs.raw(n, s, static_cast<int>(i));
      if (g != 0) {
        int64_t* up = &totals[t.parent[g] * nr_items];
        for (size_t i = 0; i < nr_items; ++i) up[i] += mine[i];
      }
    }
    benchmark::DoNotOptimize(totals.data());
  }
}
BENCHMARK(BM_FullTreeAggregationBaseline)->Unit(benchmark::kMicrosecond);

// For reference: rstat's own flush of the whole tree with nothing pending.
void BM_FlushStatsIdle(benchmark::State& state) {
  StatTree& t = tree();
  for (auto _ : state) t.ctl.flush_stats();
}
BENCHMARK(BM_FlushStatsIdle)->Unit(benchmark::kNanosecond);

// (b) A chain a/b/c/d below the root; d is at depth 4.
struct Chain {
  Chain() {
    GroupRef g(&ctl.root());
    for (const char* name : {"a", "b", "c", "d"}) {
      GroupRef c;
      if (ctl.create(*g, name, &c) != 0) std::abort();
      g = c;
    }
    leaf = g;
    // Put a batch into this CPU's stock.
    BENCH_CHECK(try_charge(*leaf, 1));
    uncharge(*leaf, 1);
  }
  Controller ctl;
  GroupRef leaf;
};

// Arg: fold every N pairs (0 = never). Without folds the accounting walk soon stops at the leaf
// (it has recorded more than the threshold); with them it climbs the levels below the threshold
// again, which is the steady state of a process whose statistics are read.
void BM_ChargePairWithKind(benchmark::State& state) {
  Chain c;
  Group& g = *c.leaf;
  const int64_t every = state.range(0);
  int64_t n = 0;
  for (auto _ : state) {
    static_cast<void>(try_charge(g, 1, kDefaultCharge, StatRegistry::kAnon));  // no limit: kOk
    uncharge(g, 1, StatRegistry::kAnon);
    if (every != 0 && ++n == every) {
      n = 0;
      c.ctl.flush_stats();
    }
  }
  state.counters["stock_hit_ratio"] = [&] {
    const Stock::Stats s = c.ctl.stock().stats();
    return s.hits + s.misses ? static_cast<double>(s.hits) / (s.hits + s.misses) : 0.0;
  }();
}
BENCHMARK(BM_ChargePairWithKind)->ArgName("fold_every")->Arg(0)->Arg(4096);

// The same pair without a statistic: the charge alone.
void BM_ChargePairWithoutKind(benchmark::State& state) {
  Chain c;
  Group& g = *c.leaf;
  for (auto _ : state) {
    static_cast<void>(try_charge(g, 1, kDefaultCharge, kNoStatKind));  // no limit: kOk
    uncharge(g, 1, kNoStatKind);
  }
}
BENCHMARK(BM_ChargePairWithoutKind);

// The pair with its statistic as two rstat updates instead of the slot's cached count.
void BM_ChargePairRstatPerCharge(benchmark::State& state) {
  Chain c;
  Group& g = *c.leaf;
  const int64_t every = state.range(0);
  int64_t n = 0;
  for (auto _ : state) {
    static_cast<void>(try_charge(g, 1, kDefaultCharge, kNoStatKind));  // no limit: kOk
    g.stat_add(StatRegistry::kAnon, 4096, 1);
    g.stat_add(StatRegistry::kAnon, -4096, 1);
    uncharge(g, 1, kNoStatKind);
    if (every != 0 && ++n == every) {
      n = 0;
      c.ctl.flush_stats();
    }
  }
}
BENCHMARK(BM_ChargePairRstatPerCharge)->ArgName("fold_every")->Arg(0)->Arg(4096);

// The accounting of one pair on its own: two stat_add calls (+ and -), as a pair makes.
void BM_StatAddPair(benchmark::State& state) {
  Chain c;
  Group& g = *c.leaf;
  const int64_t every = state.range(0);
  int64_t n = 0;
  for (auto _ : state) {
    g.stat_add(StatRegistry::kAnon, 4096, 1);
    g.stat_add(StatRegistry::kAnon, -4096, 1);
    if (every != 0 && ++n == every) {
      n = 0;
      c.ctl.flush_stats();
    }
  }
}
BENCHMARK(BM_StatAddPair)->ArgName("fold_every")->Arg(0)->Arg(4096);

}  // namespace
}  // namespace memcg

BENCHMARK_MAIN();
