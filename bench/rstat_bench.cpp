// Benchmarks of the rstat engine on a 10 000-node, 4-level tree (root, 10, 100, 9 889 leaves)
// with 12 statistic items:
//   (a) flushing an idle tree vs the naive aggregation that sums every node's every shard;
//   (b) flush cost with k nodes pending;
//   (c) ablation of the flush-side skips on an idle tree, at 2 and 64 shards;
//   (d) the cost of one update.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "memcg/percpu/internal/rstat.hpp"

namespace memcg {
namespace {

constexpr size_t kItems = 12;
constexpr int kNodes = 10'000;

struct TreeKey {
  int shards;
  bool speculative;
  bool mask;
  bool operator==(const TreeKey&) const = default;
};

class BenchTree {
 public:
  explicit BenchTree(TreeKey key) : key_(key), rs_(kItems, options(key)) {
    nodes_.push_back(std::make_unique<RstatNode>(rs_, nullptr));
    for (int i = 0; i < 10; ++i)
      nodes_.push_back(std::make_unique<RstatNode>(rs_, nodes_[0].get()));
    for (int i = 0; i < 100; ++i) {
      nodes_.push_back(std::make_unique<RstatNode>(rs_, nodes_[1 + i / 10].get()));
    }
    for (int i = 0; nodes_.size() < kNodes; ++i) {
      nodes_.push_back(std::make_unique<RstatNode>(rs_, nodes_[11 + i % 100].get()));
    }
  }
  ~BenchTree() {
    for (size_t i = nodes_.size(); i-- > 1;) rs_.detach(*nodes_[i]);
    while (!nodes_.empty()) nodes_.pop_back();
  }
  const TreeKey& key() const { return key_; }
  Rstat& rs() { return rs_; }
  RstatNode& root() { return *nodes_[0]; }
  RstatNode& node(size_t i) { return *nodes_[i]; }
  RstatNode& leaf() { return *nodes_.back(); }
  size_t size() const { return nodes_.size(); }

 private:
  static Rstat::Options options(TreeKey key) {
    Rstat::Options o;
    o.nr_shards = key.shards;
    o.speculative_check = key.speculative;
    o.nonempty_mask = key.mask;
    return o;
  }

  TreeKey key_;
  Rstat rs_;
  std::vector<std::unique_ptr<RstatNode>> nodes_;
};

// One tree at a time: at 64 shards a tree takes about 150 MB.
BenchTree& tree_for(TreeKey key) {
  static std::unique_ptr<BenchTree> tree;
  if (!tree || !(tree->key() == key)) {
    tree.reset();
    tree = std::make_unique<BenchTree>(key);
    // Dirty every shard once and flush, so the idle case starts from a flushed tree.
    for (int s = 0; s < key.shards; ++s) tree->rs().update_on(s, tree->leaf(), 0, 1, 1);
    tree->rs().flush(tree->root());
  }
  return *tree;
}

// (a) Idle tree: lazy flush from the root (default options) ...
void BM_FlushIdleTree(benchmark::State& state) {
  BenchTree& t = tree_for({static_cast<int>(state.range(0)), true, true});
  for (auto _ : state) t.rs().flush(t.root());
}
BENCHMARK(BM_FlushIdleTree)->ArgName("shards")->Arg(2)->Arg(64)->Unit(benchmark::kNanosecond);

// ... vs the baseline: aggregate by summing every node's every shard.
void BM_NaiveFullWalk(benchmark::State& state) {
  BenchTree& t = tree_for({static_cast<int>(state.range(0)), true, true});
  const int shards = t.rs().nr_shards();
  for (auto _ : state) {
    int64_t sum = 0;
    for (size_t n = 0; n < t.size(); ++n) {
      for (int s = 0; s < shards; ++s) {
        for (size_t i = 0; i < kItems; ++i) sum += t.rs().raw(t.node(n), s, static_cast<int>(i));
      }
    }
    benchmark::DoNotOptimize(sum);
  }
}
BENCHMARK(BM_NaiveFullWalk)->ArgName("shards")->Arg(2)->Arg(64)->Unit(benchmark::kNanosecond);

// (b) k random nodes updated, each on a random one of 64 shards, then flush(root); only the
// flush is timed.
void BM_FlushPending(benchmark::State& state) {
  BenchTree& t = tree_for({64, true, true});
  const int k = static_cast<int>(state.range(0));
  std::mt19937_64 rng(1);
  const Rstat::Counters before = t.rs().counters();
  for (auto _ : state) {
    for (int j = 0; j < k; ++j) {
      t.rs().update_on(static_cast<int>(rng() % 64), t.node(rng() % t.size()),
                       static_cast<int>(rng() % kItems), 4096, 1);
    }
    const auto start = std::chrono::steady_clock::now();
    t.rs().flush(t.root());
    const auto end = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(end - start).count());
  }
  const Rstat::Counters after = t.rs().counters();
  state.counters["nodes_flushed/op"] =
      benchmark::Counter(static_cast<double>(after.nodes_flushed - before.nodes_flushed),
                         benchmark::Counter::kAvgIterations);
  state.counters["shard_locks/op"] = benchmark::Counter(
      static_cast<double>(after.shard_lock_acquisitions - before.shard_lock_acquisitions),
      benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_FlushPending)
    ->ArgName("k")
    ->Arg(1)
    ->Arg(10)
    ->Arg(100)
    ->Arg(1000)
    ->UseManualTime()
    ->Unit(benchmark::kNanosecond);

// (c) Idle tree, flush from the root: mode 0 = neither skip (every shard's lock is taken),
// 1 = speculative on-tree test only, 2 = non-empty mask only.
void BM_FlushIdleAblation(benchmark::State& state) {
  const int shards = static_cast<int>(state.range(0));
  const int mode = static_cast<int>(state.range(1));
  BenchTree& t = tree_for({shards, mode == 1, mode == 2});
  const uint64_t locks_before = t.rs().counters().shard_lock_acquisitions;
  for (auto _ : state) t.rs().flush(t.root());
  state.counters["shard_locks/op"] = benchmark::Counter(
      static_cast<double>(t.rs().counters().shard_lock_acquisitions - locks_before),
      benchmark::Counter::kAvgIterations);
  state.SetLabel(mode == 0 ? "no check" : mode == 1 ? "speculative check" : "non-empty mask");
}
BENCHMARK(BM_FlushIdleAblation)
    ->ArgNames({"shards", "mode"})
    ->ArgsProduct({{2, 64}, {0, 1, 2}})
    ->Unit(benchmark::kNanosecond);

// (d) One update of a leaf (depth 3) on the calling thread's shard; the steady state, where the
// leaf is already on the shard's tree. update_on() leaves out the shard lookup.
void BM_Update(benchmark::State& state) {
  static BenchTree* t = &tree_for({0 /* CPUs */, true, true});
  RstatNode& leaf = t->node(t->size() - 1 - static_cast<size_t>(state.thread_index()));
  int item = 0;
  for (auto _ : state) {
    t->rs().update(leaf, item, 4096, 1);
    item = item == kItems - 1 ? 0 : item + 1;
  }
}
BENCHMARK(BM_Update)->Threads(1)->Threads(2)->Unit(benchmark::kNanosecond);

void BM_UpdateOn(benchmark::State& state) {
  BenchTree& t = tree_for({0, true, true});
  RstatNode& leaf = t.leaf();
  int item = 0;
  for (auto _ : state) {
    t.rs().update_on(0, leaf, item, 4096, 1);
    item = item == kItems - 1 ? 0 : item + 1;
  }
}
BENCHMARK(BM_UpdateOn)->Unit(benchmark::kNanosecond);

}  // namespace
}  // namespace memcg

BENCHMARK_MAIN();
