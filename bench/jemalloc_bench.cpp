// Cost of per-group jemalloc arenas (this program links memcg::jemalloc, so its malloc is
// jemalloc, and its operator new/delete are memcg::jemalloc's: jemalloc's fast paths plus the
// safe point's thread-local test). The same workloads as hook_bench (which runs on glibc malloc
// and memcg::hook), with the same allocator template, so that bench/jemalloc_compare.sh can put
// all of them side by side:
//  - JemallocOwnNew: plain jemalloc as a program without memcg has it: jemalloc's own operator
//    new and sized delete (libjemalloc's C++ entry points, looked up in the library), the thread
//    on its automatic arena. The baseline of the ratios;
//  - Jemalloc: the thread on its automatic arena, through memcg::jemalloc's operator new/delete;
//  - JemallocArena: the thread bound to an arena of its own without hooks (what an arena per
//    tenant costs before any accounting);
//  - MemcgArena: the thread bound with ScopedArenaAttach to a memcg::jemalloc arena of a group
//    (pages charged by the hooks); with threads:2 both threads share the tenant's arena;
//  - MemcgArenaRefuse: the same with an arena that refuses at its limit (ArenaFailure::kRefuse;
//    MemcgArena has the default, never-fail);
//  - MemcgArenaPerThread (threads:2): each thread in a tenant of its own, each with its arena;
//  - MemcgSpread: one tenant with two arenas (ArenaOptions::nr_arenas = 2): its bound threads
//    take them in turn.
// MapOfStrings builds and destroys a std::map of 1000 string pairs (3000 allocations of 24..112
// bytes); with threads:2 both threads do it at once (in the same group). NewDelete: pairs of
// new/delete of 16..256 bytes (32 per iteration).
// Footprint (one iteration): a map of 200 000 keys with 40-byte values built in a memcg arena,
// reporting the bytes the program asked for, memory.current, and the process's RSS growth.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <jemalloc/jemalloc.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "alloc_baselines.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/jemalloc/arena.hpp"

namespace {

constexpr int kBatch = 32;

struct Setup {
  memcg::Controller* ctl = new memcg::Controller;  // never destroyed: blocks may outlive runs
  memcg::GroupRef group;
  std::unique_ptr<memcg::jemalloc::Arena> arena;
  memcg::GroupRef other;  // a second tenant, for threads:2 with one tenant per thread
  std::unique_ptr<memcg::jemalloc::Arena> other_arena;
  memcg::GroupRef refuse;  // a tenant whose arena refuses at its limit (ArenaFailure::kRefuse)
  std::unique_ptr<memcg::jemalloc::Arena> refuse_arena;
  memcg::GroupRef spread;  // a tenant with two arenas (ArenaOptions::nr_arenas)
  std::unique_ptr<memcg::jemalloc::Arena> spread_arena;
  unsigned plain_arena = 0;  // a jemalloc arena with the default hooks
  Setup() {
    if (ctl->create("bench", &group) != 0 ||
        memcg::jemalloc::Arena::create(*group, &arena) != 0 || ctl->create("other", &other) != 0 ||
        memcg::jemalloc::Arena::create(*other, &other_arena) != 0)
      std::abort();
    memcg::jemalloc::ArenaOptions refusing;
    refusing.failure = memcg::jemalloc::ArenaFailure::kRefuse;
    if (ctl->create("refuse", &refuse) != 0 ||
        memcg::jemalloc::Arena::create(*refuse, &refuse_arena, refusing) != 0)
      std::abort();
    memcg::jemalloc::ArenaOptions two;
    two.nr_arenas = 2;
    if (ctl->create("spread", &spread) != 0 ||
        memcg::jemalloc::Arena::create(*spread, &spread_arena, two) != 0)
      std::abort();
    size_t sz = sizeof plain_arena;
    if (mallctl("arenas.create", &plain_arena, &sz, nullptr, 0) != 0) std::abort();
  }
};

Setup& setup() {
  static Setup* s = new Setup;
  return *s;
}

// jemalloc's own operator new and sized operator delete, as a program linking jemalloc without
// memcg::jemalloc calls them (this program's global ones are memcg::jemalloc's): looked up in the
// library that defines mallctl. Without them (a jemalloc built without its C++ part), malloc and
// sdallocx, which are what they call.
struct OwnNew {
  void* (*op_new)(size_t) = nullptr;
  void (*op_delete)(void*, size_t) = nullptr;
  void (*op_delete_unsized)(void*) = nullptr;
  OwnNew() {
    Dl_info info{};
    void* lib = nullptr;
    if (::dladdr(reinterpret_cast<void*>(&::mallctl), &info) != 0 && info.dli_fname != nullptr)
      lib = ::dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (lib != nullptr) {
      op_new = reinterpret_cast<void* (*)(size_t)>(::dlsym(lib, "_Znwm"));
      op_delete = reinterpret_cast<void (*)(void*, size_t)>(::dlsym(lib, "_ZdlPvm"));
      op_delete_unsized = reinterpret_cast<void (*)(void*)>(::dlsym(lib, "_ZdlPv"));
    }
    if (op_new == nullptr || op_delete == nullptr || op_delete_unsized == nullptr) {
      op_new = [](size_t n) {
        void* p = std::malloc(n);
        if (p == nullptr) std::abort();
        return p;
      };
      op_delete = [](void* p, size_t n) { ::sdallocx(p, n, 0); };
      op_delete_unsized = [](void* p) { std::free(p); };
    }
  }
};
const OwnNew& own_new() {
  static const OwnNew o;
  return o;
}

template <typename T>
struct OwnNewAllocator {
  using value_type = T;
  OwnNewAllocator() = default;
  template <typename U>
  OwnNewAllocator(const OwnNewAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(own_new().op_new(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { own_new().op_delete(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const OwnNewAllocator<U>&) const noexcept {
    return true;
  }
};

enum class Variant {
  kJemallocOwnNew,
  kJemalloc,
  kJemallocArena,
  kMemcgArena,
  kMemcgArenaRefuse,
  kMemcgArenaPerThread,
  kMemcgSpread
};

// Binds the calling thread for the benchmark's duration.
class Bind {
 public:
  Bind(Variant v, int thread) {
    Setup& s = setup();
    if (v == Variant::kMemcgArena || (v == Variant::kMemcgArenaPerThread && thread == 0)) {
      attach_ = std::make_unique<memcg::jemalloc::ScopedArenaAttach>(*s.arena);
    } else if (v == Variant::kMemcgArenaRefuse) {
      attach_ = std::make_unique<memcg::jemalloc::ScopedArenaAttach>(*s.refuse_arena);
    } else if (v == Variant::kMemcgSpread) {
      attach_ = std::make_unique<memcg::jemalloc::ScopedArenaAttach>(*s.spread_arena);
    } else if (v == Variant::kMemcgArenaPerThread) {
      attach_ = std::make_unique<memcg::jemalloc::ScopedArenaAttach>(*s.other_arena);
    } else if (v == Variant::kJemallocArena) {
      previous_ = memcg::jemalloc::current_thread_arena();
      memcg::jemalloc::flush_thread_cache();
      mallctl("thread.arena", nullptr, nullptr, &s.plain_arena, sizeof s.plain_arena);
      rebind_ = true;
    }
  }
  ~Bind() {
    if (rebind_) {
      memcg::jemalloc::flush_thread_cache();
      mallctl("thread.arena", nullptr, nullptr, &previous_, sizeof previous_);
    }
  }

 private:
  std::unique_ptr<memcg::jemalloc::ScopedArenaAttach> attach_;
  unsigned previous_ = 0;
  bool rebind_ = false;
};

// The memcg arena a variant uses, for its hook counters (null: none).
memcg::jemalloc::Arena* arena_of_variant(Variant v) {
  Setup& s = setup();
  switch (v) {
    case Variant::kMemcgArena:
      return s.arena.get();
    case Variant::kMemcgArenaRefuse:
      return s.refuse_arena.get();
    case Variant::kMemcgSpread:
      return s.spread_arena.get();
    default:
      return nullptr;
  }
}

// One map of the workload through the variant's operator new/delete.
size_t one_map(Variant v) {
  if (v == Variant::kJemallocOwnNew) return memcg::bench::map_of_strings<OwnNewAllocator>(1000, 7);
  return memcg::bench::map_of_strings<memcg::bench::NewAllocator>(1000, 7);
}

void map_of_strings(benchmark::State& state, Variant v) {
  Bind bind(v, state.thread_index());
  memcg::jemalloc::Arena* arena = state.thread_index() == 0 ? arena_of_variant(v) : nullptr;
  const memcg::jemalloc::ArenaStats before = arena ? arena->stats() : memcg::jemalloc::ArenaStats{};
  if (v == Variant::kJemallocOwnNew) {
    own_new();
    for (auto _ : state)
      benchmark::DoNotOptimize(memcg::bench::map_of_strings<OwnNewAllocator>(1000, 7));
  } else {
    for (auto _ : state)
      benchmark::DoNotOptimize(memcg::bench::map_of_strings<memcg::bench::NewAllocator>(1000, 7));
  }
  state.counters["allocs_per_s"] =
      benchmark::Counter(3000, benchmark::Counter::kIsIterationInvariantRate);
  if (arena != nullptr) {
    // Page charges and uncharges per map (all threads of the run): how often the hooks ran.
    const memcg::jemalloc::ArenaStats after = arena->stats();
    const double maps = static_cast<double>(state.iterations()) * state.threads();
    state.counters["commits_per_map"] = static_cast<double>(after.commits - before.commits) / maps;
    state.counters["decommits_per_map"] =
        static_cast<double>(after.decommits - before.decommits) / maps;
  }
}

void new_delete(benchmark::State& state, Variant v) {
  Bind bind(v, state.thread_index());
  std::array<void*, kBatch> p{};
  if (v == Variant::kJemallocOwnNew) {
    const OwnNew& o = own_new();
    for (auto _ : state) {
      for (int i = 0; i < kBatch; ++i) p[i] = o.op_new(16 + 16 * (i % 16));
      for (int i = 0; i < kBatch; ++i) o.op_delete_unsized(p[i]);
      benchmark::DoNotOptimize(p);
    }
  } else {
    for (auto _ : state) {
      for (int i = 0; i < kBatch; ++i) p[i] = ::operator new(16 + 16 * (i % 16));
      for (int i = 0; i < kBatch; ++i) ::operator delete(p[i]);
      benchmark::DoNotOptimize(p);
    }
  }
  state.counters["ns_per_pair"] = benchmark::Counter(
      kBatch, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_MapOfStrings_JemallocOwnNew(benchmark::State& s) {
  map_of_strings(s, Variant::kJemallocOwnNew);
}
void BM_MapOfStrings_Jemalloc(benchmark::State& s) {
  map_of_strings(s, Variant::kJemalloc);
}
void BM_MapOfStrings_JemallocArena(benchmark::State& s) {
  map_of_strings(s, Variant::kJemallocArena);
}
void BM_MapOfStrings_MemcgArena(benchmark::State& s) {
  map_of_strings(s, Variant::kMemcgArena);
}
void BM_MapOfStrings_MemcgArenaRefuse(benchmark::State& s) {
  map_of_strings(s, Variant::kMemcgArenaRefuse);
}
void BM_MapOfStrings_MemcgArenaPerThread(benchmark::State& s) {
  map_of_strings(s, Variant::kMemcgArenaPerThread);
}
void BM_MapOfStrings_MemcgSpread(benchmark::State& s) {
  map_of_strings(s, Variant::kMemcgSpread);
}
void BM_NewDelete_MemcgSpread(benchmark::State& s) {
  new_delete(s, Variant::kMemcgSpread);
}
void BM_NewDelete_MemcgArenaPerThread(benchmark::State& s) {
  new_delete(s, Variant::kMemcgArenaPerThread);
}
void BM_NewDelete_JemallocOwnNew(benchmark::State& s) {
  new_delete(s, Variant::kJemallocOwnNew);
}
void BM_NewDelete_Jemalloc(benchmark::State& s) {
  new_delete(s, Variant::kJemalloc);
}
void BM_NewDelete_JemallocArena(benchmark::State& s) {
  new_delete(s, Variant::kJemallocArena);
}
void BM_NewDelete_MemcgArena(benchmark::State& s) {
  new_delete(s, Variant::kMemcgArena);
}

// Counts the bytes asked for, then calls operator new (the arena's malloc).
size_t g_requested = 0;
template <typename T>
struct CountingAllocator {
  using value_type = T;
  CountingAllocator() = default;
  template <typename U>
  CountingAllocator(const CountingAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    g_requested += n * sizeof(T);
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept {
    g_requested -= n * sizeof(T);
    ::operator delete(p, n * sizeof(T));
  }
  template <typename U>
  bool operator==(const CountingAllocator<U>&) const noexcept {
    return true;
  }
};

uint64_t rss_bytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<uint64_t>(resident) * 4096;
}

void BM_Footprint_MemcgArena(benchmark::State& state) {
  using Str = std::basic_string<char, std::char_traits<char>, CountingAllocator<char>>;
  using Map = std::map<Str, Str, std::less<Str>, CountingAllocator<std::pair<const Str, Str>>>;
  Setup& s = setup();
  for (auto _ : state) {
    s.arena->purge();
    const uint64_t current0 = s.group->current();
    const uint64_t rss0 = rss_bytes();
    g_requested = 0;
    uint64_t current = 0, rss = 0, requested = 0;
    {
      memcg::jemalloc::ScopedArenaAttach in(*s.arena);
      Map m;
      for (int i = 0; i < 200000; ++i)
        m.emplace(Str("key-" + std::to_string(i * 7919) + "-padding-padding"), Str(40, 'v'));
      requested = g_requested;
      current = s.group->current() - current0;
      rss = rss_bytes() - rss0;
      benchmark::DoNotOptimize(m);
    }
    state.counters["requested_MiB"] = static_cast<double>(requested) / (1 << 20);
    state.counters["current_MiB"] = static_cast<double>(current) / (1 << 20);
    state.counters["rss_MiB"] = static_cast<double>(rss) / (1 << 20);
    state.counters["current_over_requested"] =
        static_cast<double>(current) / static_cast<double>(requested);
    state.counters["current_over_rss"] = static_cast<double>(current) / static_cast<double>(rss);
  }
}

BENCHMARK(BM_MapOfStrings_JemallocOwnNew)->Threads(1)->Threads(2);
BENCHMARK(BM_MapOfStrings_Jemalloc)->Threads(1)->Threads(2);
BENCHMARK(BM_MapOfStrings_JemallocArena)->Threads(1)->Threads(2);
BENCHMARK(BM_MapOfStrings_MemcgArena)->Threads(1)->Threads(2);
BENCHMARK(BM_MapOfStrings_MemcgArenaRefuse)->Threads(1)->Threads(2);
BENCHMARK(BM_MapOfStrings_MemcgArenaPerThread)->Threads(2);
BENCHMARK(BM_MapOfStrings_MemcgSpread)->Threads(1)->Threads(2);
BENCHMARK(BM_NewDelete_JemallocOwnNew)->Threads(1)->Threads(2);
BENCHMARK(BM_NewDelete_Jemalloc)->Threads(1)->Threads(2);
BENCHMARK(BM_NewDelete_JemallocArena)->Threads(1)->Threads(2);
BENCHMARK(BM_NewDelete_MemcgArena)->Threads(1)->Threads(2);
BENCHMARK(BM_NewDelete_MemcgArenaPerThread)->Threads(2);
BENCHMARK(BM_NewDelete_MemcgSpread)->Threads(1)->Threads(2);
BENCHMARK(BM_Footprint_MemcgArena)->Iterations(1);

// Instruction-count mode, for callgrind (its counts are deterministic where the wall clock of a
// shared machine is not): `jemalloc_bench --maps=<variant>:<n>` binds the thread as that
// variant's benchmark does, builds 50 maps to warm up, then `n` maps in measured_maps(), which
// callgrind counts alone:
//   valgrind --tool=callgrind --toggle-collect='*measured_maps*' \
//     build/release/bench/jemalloc_bench --maps=MemcgArena:200
[[gnu::noinline]] size_t measured_maps(Variant v, int n) {
  size_t sum = 0;
  for (int i = 0; i < n; ++i) sum += one_map(v);
  return sum;
}

int count_maps(const char* spec) {
  static const std::pair<const char*, Variant> kNames[] = {
      {"JemallocOwnNew", Variant::kJemallocOwnNew},
      {"Jemalloc", Variant::kJemalloc},
      {"JemallocArena", Variant::kJemallocArena},
      {"MemcgArena", Variant::kMemcgArena},
      {"MemcgArenaRefuse", Variant::kMemcgArenaRefuse},
      {"MemcgSpread", Variant::kMemcgSpread}};
  const char* colon = std::strchr(spec, ':');
  const int n = colon != nullptr ? std::atoi(colon + 1) : 0;
  for (const auto& [name, v] : kNames) {
    if (colon == nullptr || std::strlen(name) != static_cast<size_t>(colon - spec) ||
        std::strncmp(name, spec, colon - spec) != 0 || n <= 0)
      continue;
    Bind bind(v, 0);
    size_t sum = 0;
    for (int i = 0; i < 50; ++i) sum += one_map(v);
    sum += measured_maps(v, n);
    std::printf("%s: %d maps measured (checksum %zu)\n", name, n, sum);
    return 0;
  }
  std::fprintf(stderr, "usage: jemalloc_bench --maps=<variant>:<count>\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strncmp(argv[1], "--maps=", 7) == 0) return count_maps(argv[1] + 7);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
