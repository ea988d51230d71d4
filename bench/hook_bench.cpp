// Cost of the global operator new/delete hook (this program links memcg::hook).
//
// MapOfStrings builds and destroys a std::map of 1000 string pairs (3000 allocations of 24..112
// bytes and their frees):
//  - Malloc: allocator calling malloc/free directly, so the hook is not involved (the "no hook"
//    baseline; alloc_bench shows it costs the same as the default operator new without the hook);
//  - MallocHeader16: malloc/free with 16 bytes in front of each block, no accounting (the
//    layout part of the hook's cost);
//  - HookUnattached: operator new/delete, i.e. the hook, thread not attached (header, root path);
//  - HookAttached: operator new/delete, thread attached: every block charged its
//    malloc_usable_size (HookAttachedRequested: its requested size plus header);
// All variants use allocator templates of the same shape (alloc_baselines.hpp), so that the
// containers compile to the same code and only the allocation functions differ.
//  - BatchTracker: malloc/free plus a per-thread-batch tracker (alloc_baselines.hpp).
// NewDelete: pairs of new/delete of 16..256 bytes (32 per iteration), same variants.

#include <benchmark/benchmark.h>

#include <array>
#include <cstdlib>

#include "alloc_baselines.hpp"
#include "memcg/core/charge/attach.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/hook/hook.hpp"
#include "bench_check.hpp"

namespace {

constexpr int kBatch = 32;

memcg::Group& group() {
  // Never destroyed: blocks charged to it may be freed at any time until exit.
  static memcg::Controller* ctl = new memcg::Controller;
  static memcg::Group* g = [] {
    memcg::GroupRef r;
    BENCH_CHECK(ctl->create("bench", &r));
    memcg::Group* p = r.get();
    p->get();  // kept for the life of the program
    return p;
  }();
  return *g;
}

template <template <typename> class Alloc>
void map_of_strings(benchmark::State& state, bool attached) {
  memcg::Group& g = group();
  if (attached) BENCH_CHECK(memcg::attach_current_thread(g));
  for (auto _ : state) benchmark::DoNotOptimize(memcg::bench::map_of_strings<Alloc>(1000, 7));
  if (attached) memcg::detach_current_thread();
  state.counters["allocs_per_s"] =
      benchmark::Counter(3000, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MapOfStrings_Malloc(benchmark::State& s) {
  map_of_strings<memcg::bench::MallocAllocator>(s, false);
}
void BM_MapOfStrings_MallocHeader16(benchmark::State& s) {
  map_of_strings<memcg::bench::Header16Allocator>(s, false);
}
void BM_MapOfStrings_HookUnattached(benchmark::State& s) {
  map_of_strings<memcg::bench::NewAllocator>(s, false);
}
void BM_MapOfStrings_HookAttached(benchmark::State& s) {
  map_of_strings<memcg::bench::NewAllocator>(s, true);
}
void BM_MapOfStrings_HookAttachedRequested(benchmark::State& s) {
  memcg::hook::set_charge_usable_size(false);  // charge requested size + header
  map_of_strings<memcg::bench::NewAllocator>(s, true);
  memcg::hook::set_charge_usable_size(true);
}
void BM_MapOfStrings_BatchTracker(benchmark::State& s) {
  map_of_strings<memcg::bench::TrackedAllocator>(s, false);
}

template <typename New, typename Delete>
void new_delete(benchmark::State& state, New nw, Delete del) {
  std::array<void*, kBatch> p{};
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) p[i] = nw(16 + 16 * (i % 16));
    for (int i = 0; i < kBatch; ++i) del(p[i]);
    benchmark::DoNotOptimize(p);
  }
  state.counters["ns_per_pair"] = benchmark::Counter(
      kBatch, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_NewDelete_Malloc(benchmark::State& s) {
  new_delete(
      s, [](size_t n) { return std::malloc(n); }, [](void* p) { std::free(p); });
}
void BM_NewDelete_HookUnattached(benchmark::State& s) {
  group();
  new_delete(
      s, [](size_t n) { return ::operator new(n); }, [](void* p) { ::operator delete(p); });
}
void BM_NewDelete_HookAttached(benchmark::State& s) {
  memcg::ScopedAttach attach(group());
  new_delete(
      s, [](size_t n) { return ::operator new(n); }, [](void* p) { ::operator delete(p); });
}

BENCHMARK(BM_MapOfStrings_Malloc)->Threads(1)->Threads(2);
BENCHMARK(BM_MapOfStrings_MallocHeader16)->Threads(1)->Threads(2);
BENCHMARK(BM_MapOfStrings_HookUnattached)->Threads(1)->Threads(2);
BENCHMARK(BM_MapOfStrings_HookAttached)->Threads(1)->Threads(2);
BENCHMARK(BM_MapOfStrings_HookAttachedRequested)->Threads(1)->Threads(2);
BENCHMARK(BM_MapOfStrings_BatchTracker)->Threads(1)->Threads(2);
BENCHMARK(BM_NewDelete_Malloc)->Threads(1)->Threads(2);
BENCHMARK(BM_NewDelete_HookUnattached)->Threads(1)->Threads(2);
BENCHMARK(BM_NewDelete_HookAttached)->Threads(1)->Threads(2);

}  // namespace

BENCHMARK_MAIN();
