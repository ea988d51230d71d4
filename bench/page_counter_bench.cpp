// Page-counter benchmarks: the cost of one try_charge(1) + uncharge(1) pair.
//
// Main comparison, at depth 1 (a lone counter) and 4 (a leaf and three ancestors), with 1 and 2
// threads charging the same leaf:
//   - PageCounter (the library's counter),
//   - MutexTree (baseline A: one mutex per tree),
//   - PackedAtomic (baseline B: an atomic add per level, every field of a level packed together).
// Ablations, depth 4:
//   - Propagate: min and low set at every level below the root, usage above them; the default
//     policy (skip unchanged protected usage) against AlwaysPropagatePolicy (exchange on every
//     charge, the kernel before 6.1);
//   - Layout: while one thread charges, a second one polls max(), high() and the parent's limits
//     of the same counters; the default 128-byte split against PackedCounterPolicy.
//
// items_per_second is the throughput of all threads together (pairs per second of wall time).

#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "baselines.hpp"
#include "memcg/counter/page_counter.hpp"

namespace memcg::bench {
namespace {

constexpr int64_t kSentinel = PageCounter::sentinel(12);

template <class Policy>
class LibChain {
 public:
  using Counter = BasicPageCounter<Policy>;
  // With `protect`, every level below the root gets min 100 and low 200 and the leaf is charged
  // 1000 units, so each level runs above its protection.
  LibChain(int depth, bool protect) {
    Counter* parent = nullptr;
    for (int i = 0; i < depth; ++i) {
      levels_.push_back(std::make_unique<Counter>(parent, kSentinel));
      parent = levels_.back().get();
      if (protect && i > 0) {
        parent->set_min(100);
        parent->set_low(200);
      }
    }
    if (protect) leaf()->charge(1000);
  }
  Counter* leaf() { return levels_.back().get(); }
  const std::vector<std::unique_ptr<Counter>>& levels() const { return levels_; }

 private:
  std::vector<std::unique_ptr<Counter>> levels_;
};

template <class Leaf>
void RunPairs(benchmark::State& state, Leaf* leaf) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(leaf->try_charge(1));
    leaf->uncharge(1);
  }
  state.SetItemsProcessed(state.iterations());
}

// Reads the limits of every level, and of each level's parent, until told to stop.
template <class Chain>
class Poller {
 public:
  explicit Poller(Chain& chain)
      : thread_([this, &chain] {
          int64_t sink = 0;
          while (!stop_.load(std::memory_order_relaxed)) {
            for (const auto& c : chain.levels()) {
              sink += c->max() + c->high();
              if (c->parent() != nullptr) sink += c->parent()->max() + c->parent()->high();
            }
            benchmark::DoNotOptimize(sink);
          }
        }) {}
  ~Poller() {
    stop_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

template <class Chain>
void RunPairsPolled(benchmark::State& state, Chain* chain) {
  Poller<Chain> poller(*chain);
  RunPairs(state, chain->leaf());
}

template <class Fn>
void Register(const std::string& name, Fn fn, bool two_threads = true) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime()->Threads(1);
  if (two_threads) b->Threads(2);
}

}  // namespace
}  // namespace memcg::bench

int main(int argc, char** argv) {
  using namespace memcg;
  using namespace memcg::bench;
  // Every fixture lives for the whole run; all threads of one benchmark share its leaf.
  static LibChain<DefaultCounterPolicy> lib1(1, false), lib4(4, false);
  static MutexTree mutex1(1, kSentinel), mutex4(4, kSentinel);
  static PackedChain packed1(1, kSentinel), packed4(4, kSentinel);
  static LibChain<DefaultCounterPolicy> skip4(4, true);
  static LibChain<AlwaysPropagatePolicy> always4(4, true);
  static LibChain<DefaultCounterPolicy> split4(4, false);
  static LibChain<PackedCounterPolicy> packedlayout4(4, false);

  Register("Pair/PageCounter/depth:1", [](benchmark::State& s) { RunPairs(s, lib1.leaf()); });
  Register("Pair/MutexTree/depth:1", [](benchmark::State& s) { RunPairs(s, mutex1.leaf()); });
  Register("Pair/PackedAtomic/depth:1", [](benchmark::State& s) { RunPairs(s, packed1.leaf()); });
  Register("Pair/PageCounter/depth:4", [](benchmark::State& s) { RunPairs(s, lib4.leaf()); });
  Register("Pair/MutexTree/depth:4", [](benchmark::State& s) { RunPairs(s, mutex4.leaf()); });
  Register("Pair/PackedAtomic/depth:4", [](benchmark::State& s) { RunPairs(s, packed4.leaf()); });

  Register("Propagate/SkipUnchanged/depth:4",
           [](benchmark::State& s) { RunPairs(s, skip4.leaf()); });
  Register("Propagate/Always/depth:4", [](benchmark::State& s) { RunPairs(s, always4.leaf()); });

  // One charging thread plus the poller: two busy threads on the two cores.
  Register(
      "Layout/Split128/polled/depth:4", [](benchmark::State& s) { RunPairsPolled(s, &split4); },
      false);
  Register(
      "Layout/Packed/polled/depth:4",
      [](benchmark::State& s) { RunPairsPolled(s, &packedlayout4); }, false);
  Register(
      "Layout/Split128/alone/depth:4", [](benchmark::State& s) { RunPairs(s, split4.leaf()); },
      false);
  Register(
      "Layout/Packed/alone/depth:4", [](benchmark::State& s) { RunPairs(s, packedlayout4.leaf()); },
      false);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
