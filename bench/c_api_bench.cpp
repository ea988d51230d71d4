// The C API's charge path against the C++ call it wraps, in one binary so that the difference
// comes from one run (interleaved repetitions: --benchmark_enable_random_interleaving).
//
//  - Pair/cpp_bytes: memcg::try_charge_bytes(g, 4096) + uncharge_bytes(g, 4096), the C++ byte
//    calls that memcg_charge and memcg_uncharge wrap.
//  - Pair/c: memcg_charge(h, 4096, MEMCG_CHARGE_DEFAULT) + memcg_uncharge(h, 4096) through
//    memcg/c/memcg.h: the same calls behind a NULL check, a flag check and the status mapping.
//  - Pair/cpp_units: try_charge(g, 1) + uncharge(g, 1), the inline unit calls (charge_bench's
//    Pair/memcg), for reference.
//
// Each charges a group at depth 4 (a/b/c) of its own controller, made the same way (default
// options): the C one through memcg_controller_create, the C++ ones directly.
#include <benchmark/benchmark.h>

#include "bench_check.hpp"
#include "memcg/c/memcg.h"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"

namespace memcg::bench {
namespace {

constexpr uint64_t kBytes = 4096;

struct CppFixture {
  Controller ctl;
  GroupRef leaf;
  CppFixture() {
    BENCH_CHECK(ctl.create("a"));
    BENCH_CHECK(ctl.create("a/b"));
    BENCH_CHECK(ctl.create("a/b/c", &leaf));
  }
};

struct CFixture {
  memcg_controller* ctl = nullptr;
  memcg_group* leaf = nullptr;
  CFixture() {
    BENCH_CHECK(memcg_controller_create(nullptr, &ctl));
    BENCH_CHECK(memcg_group_create(ctl, "a", nullptr));
    BENCH_CHECK(memcg_group_create(ctl, "a/b", nullptr));
    BENCH_CHECK(memcg_group_create(ctl, "a/b/c", &leaf));
  }
  ~CFixture() {
    memcg_group_release(leaf);
    (void)memcg_controller_destroy(ctl);  // 0: the only handle is gone
  }
};

CppFixture& cpp() {
  static CppFixture f;
  return f;
}
CFixture& c() {
  static CFixture f;
  return f;
}

void BM_Pair_cpp_bytes(benchmark::State& state) {
  Group& g = *cpp().leaf;
  for (auto _ : state) {
    ChargeStatus s = try_charge_bytes(g, kBytes);
    benchmark::DoNotOptimize(s);
    uncharge_bytes(g, kBytes);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_Pair_c(benchmark::State& state) {
  memcg_group* g = c().leaf;
  for (auto _ : state) {
    memcg_charge_status s = memcg_charge(g, kBytes, MEMCG_CHARGE_DEFAULT);
    benchmark::DoNotOptimize(s);
    memcg_uncharge(g, kBytes);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_Pair_cpp_units(benchmark::State& state) {
  Group& g = *cpp().leaf;
  for (auto _ : state) {
    ChargeStatus s = try_charge(g, 1);
    benchmark::DoNotOptimize(s);
    uncharge(g, 1);
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_Pair_cpp_bytes)->Name("Pair/cpp_bytes");
BENCHMARK(BM_Pair_c)->Name("Pair/c");
BENCHMARK(BM_Pair_cpp_units)->Name("Pair/cpp_units");

}  // namespace
}  // namespace memcg::bench

BENCHMARK_MAIN();
