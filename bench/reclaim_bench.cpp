// Reclaim: the kernel selftest's protection scenario end to end, reclaim throughput from a large
// tree, and the charge path of a group that sits just under its limit.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/alloc/lru_cache.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "bench_check.hpp"

namespace {

constexpr int64_t kMiB = 256;  // 4 KiB units

// A: max 200M; B: min 50M over C (min 75M), D (25M), E (0), F (500M); 50M of cache in C, D, E;
// then a sibling member pins 148M in 4 KiB charges (the memory.min selftest).
void BM_ProtectionScenario148M(benchmark::State& state) {
  for (auto _ : state) {
    memcg::Options o;
    o.nr_shards = 1;
    memcg::Controller ctl(o);
    memcg::GroupRef a, b, g;
    std::vector<memcg::GroupRef> leaves(4);
    BENCH_CHECK(ctl.create("A", &a));
    BENCH_CHECK(ctl.create("A/B", &b));
    BENCH_CHECK(ctl.create("A/G", &g));
    const char* names[] = {"A/B/C", "A/B/D", "A/B/E", "A/B/F"};
    for (int i = 0; i < 4; ++i) BENCH_CHECK(ctl.create(names[i], &leaves[i]));
    a->set_max(uint64_t{200} << 20);
    std::vector<std::unique_ptr<memcg::LruCache>> caches;
    for (int i = 0; i < 3; ++i) {
      caches.push_back(std::make_unique<memcg::LruCache>(*leaves[i], "c"));
      caches.back()->grow(50 * kMiB);
    }
    b->set_min(uint64_t{50} << 20);
    leaves[0]->set_min(uint64_t{75} << 20);
    leaves[1]->set_min(uint64_t{25} << 20);
    leaves[3]->set_min(uint64_t{500} << 20);
    memcg::Member m(*g, "g", [](memcg::Member& v) { v.uncharge(v.charged()); });
    // The selftest's charges: what they reclaim (B's usage after them) is what is measured.
    for (int64_t i = 0; i < 148 * kMiB; ++i) static_cast<void>(m.charge(1));
    benchmark::DoNotOptimize(b->current());
    state.counters["B_MiB"] = static_cast<double>(b->current()) / (1 << 20);
  }
}
BENCHMARK(BM_ProtectionScenario148M)->Unit(benchmark::kMillisecond)->Iterations(3);

// Proactive reclaim rooted at the top of a 1 000-group tree (10 x 10 x 10), every leaf holding
// 1 MiB of cache; measures bytes reclaimed per second of reclaim.
void BM_ReclaimThroughput1000Groups(benchmark::State& state) {
  memcg::Options o;
  o.nr_shards = 1;
  memcg::Controller ctl(o);
  memcg::GroupRef top;
  BENCH_CHECK(ctl.create("top", &top));
  std::vector<std::unique_ptr<memcg::LruCache>> caches;
  for (int i = 0; i < 10; ++i) {
    const std::string l1 = "top/" + std::to_string(i);
    BENCH_CHECK(ctl.create(l1));
    for (int j = 0; j < 10; ++j) {
      const std::string l2 = l1 + "/" + std::to_string(j);
      BENCH_CHECK(ctl.create(l2));
      for (int k = 0; k < 10; ++k) {
        memcg::GroupRef leaf;
        BENCH_CHECK(ctl.create(l2 + "/" + std::to_string(k), &leaf));
        caches.push_back(std::make_unique<memcg::LruCache>(*leaf, "c"));
      }
    }
  }
  int64_t reclaimed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (auto& c : caches) c->grow(kMiB - c->size());
    state.ResumeTiming();
    // Ask for half of it, 4 MiB at a time, as memory.reclaim would.
    int64_t got = 0;
    while (got < 500 * kMiB) got += memcg::reclaim(*top, 4 * kMiB, memcg::ReclaimReason::kProactive);
    reclaimed += got;
  }
  state.SetBytesProcessed(reclaimed * 4096);
}
BENCHMARK(BM_ReclaimThroughput1000Groups)->Unit(benchmark::kMillisecond);

// The charge path of a group 1 unit under its limit with a cache to reclaim from: every charge
// misses the stock (the batch does not fit), charges exactly, and every other one reclaims.
void BM_ChargeJustUnderLimit(benchmark::State& state) {
  memcg::Options o;
  o.nr_shards = 1;
  memcg::Controller ctl(o);
  memcg::GroupRef g;
  BENCH_CHECK(ctl.create("g", &g));
  g->set_max(uint64_t{64} << 20);
  memcg::LruCache cache(*g, "c");
  cache.grow(64 * kMiB);
  for (auto _ : state) {
    if (memcg::try_charge(*g, 1) != memcg::ChargeStatus::kNoMem) memcg::uncharge_direct(*g, 1);
  }
}
BENCHMARK(BM_ChargeJustUnderLimit);

// The same pair with room to spare, for comparison (stock hits).
void BM_ChargeWithRoom(benchmark::State& state) {
  memcg::Options o;
  o.nr_shards = 1;
  memcg::Controller ctl(o);
  memcg::GroupRef g;
  BENCH_CHECK(ctl.create("g", &g));
  for (auto _ : state) {
    static_cast<void>(memcg::try_charge(*g, 1));  // no limit: always kOk
    memcg::uncharge(*g, 1);
  }
}
BENCHMARK(BM_ChargeWithRoom);

}  // namespace

BENCHMARK_MAIN();
