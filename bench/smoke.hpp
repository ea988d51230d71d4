// The smoke run of the benchmarks (`ctest -L bench-smoke`, bench/CMakeLists.txt) sets
// MEMCG_BENCH_SMOKE=1. --benchmark_min_time bounds every benchmark but those that fix their
// iteration count or minimum time (thousands of iterations of a costly round, a wake-up across
// threads or pinning to each CPU; RocksDB reads repeated for a second in alternated pairs) and
// long warm-ups: those run a few instead, so that every benchmark still runs, set-up and checks
// included, in a bounded time. The figures of a smoke run mean nothing.
#ifndef MEMCG_BENCH_SMOKE_HPP_
#define MEMCG_BENCH_SMOKE_HPP_

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace memcg::bench {

inline bool smoke_run() {
  const char* smoke = std::getenv("MEMCG_BENCH_SMOKE");
  return smoke != nullptr && smoke[0] == '1';
}

// Iterations for a benchmark that fixes its count: `n`, or at most 10 in a smoke run.
inline int64_t fixed_iterations(int64_t n) { return smoke_run() ? std::min<int64_t>(n, 10) : n; }

// A benchmark's own minimum time (it overrides --benchmark_min_time): `seconds`, or a tiny one
// in a smoke run.
inline double min_time(double seconds) { return smoke_run() ? 0.0001 : seconds; }

}  // namespace memcg::bench

#endif  // MEMCG_BENCH_SMOKE_HPP_
