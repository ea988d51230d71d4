// The per-group passes at scale: what one pass over every group costs at G = 100 .. 100 000
// groups (a tree of G / 100 parents under the root, each with 99 children; every child has a
// limit, a charge, an event and a statistic update). docs/BENCHMARKS.md has the table and the
// command.
//   Render/G, RenderAll/G   render_prometheus() at its defaults (top 1 000 groups) and with every
//                           group (top_k = 0); counters: body bytes, peak_MB = the most heap the
//                           call held at once beyond what was live before (this program counts
//                           operator new), groups in the tree
//   Render*Reused/G         the same into the caller's string, kept from call to call
//   StatFlush/G             one statistic update in every group, then one flush from the root
//                           (the rstat fold of the whole tree: what /metrics and memory.stat pay)
//   StatReadEach/G          memory.stat read of every group, leaves first, after an update
//                           past the flush threshold in each (a flush per group)
//   PsiSample/G             the PSI averages of every group brought up to now (psi_stats), as
//                           the page and /metrics do
//   HistorySample/G         the page's history sampler (one sample round, top groups kept)
//   OomScan/G               one OOM decision over G members (one per group) under a domain
//                           at its limit: candidate scan, order, kill of the victim
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "../src/http/history.hpp"
#include "smoke.hpp"
#include "memcg/base/events.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/files/files.hpp"
#include "memcg/files/prometheus.hpp"

// ---- heap accounting: the bytes operator new holds now, and the most it held -----------------
namespace {
std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};

void* counted_alloc(size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  const int64_t live =
      g_live.fetch_add(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed) +
      static_cast<int64_t>(malloc_usable_size(p));
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
  return p;
}
void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  g_live.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}
}  // namespace

void* operator new(size_t n) { return counted_alloc(n); }
void* operator new[](size_t n) { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, size_t) noexcept { counted_free(p); }
void operator delete[](void* p, size_t) noexcept { counted_free(p); }

namespace memcg {
namespace {

// The heap the calls between start() and peak_bytes() held at most, beyond what was live at
// start(). Single-threaded use.
struct PeakHeap {
  int64_t base = 0;
  void start() {
    base = g_live.load(std::memory_order_relaxed);
    g_peak.store(base, std::memory_order_relaxed);
  }
  double peak_mb() const {
    return static_cast<double>(g_peak.load(std::memory_order_relaxed) - base) / 1e6;
  }
};

struct ScaleTree {
  explicit ScaleTree(size_t groups) {
    const size_t parents = std::max<size_t>(1, groups / 100);
    const size_t per = groups / parents - 1;
    for (size_t i = 0; i < parents; ++i) {
      GroupRef p;
      if (ctl.create("p" + std::to_string(i), &p) != 0) std::abort();
      for (size_t j = 0; j < per; ++j) {
        GroupRef c;
        if (ctl.create(*p, "c" + std::to_string(j), &c) != 0) std::abort();
        c->set_max(uint64_t{64} << 20);
        const int64_t units = 1 + static_cast<int64_t>((i * per + j) % 64);
        if (!charged(try_charge(*c, units))) std::abort();
        c->raise(Event::kHigh);
        c->stat_add(StatRegistry::kSock, 1, 1);
        leaves.push_back(c);
        charges.push_back(units);
      }
    }
    ctl.flush_stats();
  }
  ~ScaleTree() {
    for (size_t i = 0; i < leaves.size(); ++i) uncharge(*leaves[i], charges[i]);
  }
  // Every online group, in walk order.
  std::vector<GroupRef> all() {
    std::vector<GroupRef> out;
    ctl.walk(ctl.root(), [&](Group& g) { out.emplace_back(&g); }, false);
    return out;
  }
  Controller ctl;
  std::vector<GroupRef> leaves;
  std::vector<int64_t> charges;
};

// The size a benchmark runs at: its argument, or at most 1 000 groups in a smoke run (a
// 100 000-group OOM takes minutes on a loaded machine; the smoke run checks set-up and checks).
size_t groups_of(const benchmark::State& state) {
  const size_t g = static_cast<size_t>(state.range(0));
  return bench::smoke_run() ? std::min<size_t>(g, 1000) : g;
}

// One tree per size, built once (100 000 groups take a few seconds), alive until exit.
ScaleTree& tree(size_t groups) {
  static auto* trees = new std::map<size_t, std::unique_ptr<ScaleTree>>();
  auto& t = (*trees)[groups];
  if (!t) {
    trees->clear();  // one at a time: the largest hold a few hundred MB
    t = std::make_unique<ScaleTree>(groups);
  }
  return *t;
}

void render(benchmark::State& state, size_t top_k, bool reuse) {
  ScaleTree& t = tree(groups_of(state));
  PrometheusOptions o;
  o.top_k = top_k;
  size_t bytes = 0;
  double peak = 0;
  PeakHeap heap;
  std::string kept;  // the scraper's own buffer, when it reuses one: grown before the runs
  if (reuse) render_prometheus(t.ctl, o, &kept);
  for (auto _ : state) {
    heap.start();
    if (reuse) {
      render_prometheus(t.ctl, o, &kept);
      bytes = kept.size();
      benchmark::DoNotOptimize(kept.data());
    } else {
      std::string s = render_prometheus(t.ctl, o);
      bytes = s.size();
      benchmark::DoNotOptimize(s.data());
    }
    peak = std::max(peak, heap.peak_mb());
  }
  state.counters["groups"] = static_cast<double>(t.ctl.nr_groups());
  state.counters["body_MB"] = static_cast<double>(bytes) / 1e6;
  state.counters["peak_MB"] = peak;
}

void BM_Render(benchmark::State& state) { render(state, PrometheusOptions::kDefaultTopK, false); }
BENCHMARK(BM_Render)->Arg(100)->Arg(1000)->Arg(10'000)->Unit(benchmark::kMillisecond);

void BM_RenderAll(benchmark::State& state) { render(state, 0, false); }
BENCHMARK(BM_RenderAll)->Arg(100)->Arg(1000)->Arg(10'000)->Unit(benchmark::kMillisecond);

// The same into the caller's string, kept from one call to the next.
void BM_RenderReused(benchmark::State& state) {
  render(state, PrometheusOptions::kDefaultTopK, true);
}
BENCHMARK(BM_RenderReused)->Arg(100)->Arg(1000)->Arg(10'000)->Unit(benchmark::kMillisecond);

void BM_RenderAllReused(benchmark::State& state) { render(state, 0, true); }
BENCHMARK(BM_RenderAllReused)->Arg(100)->Arg(1000)->Arg(10'000)->Unit(benchmark::kMillisecond);

void BM_StatFlush(benchmark::State& state) {
  ScaleTree& t = tree(groups_of(state));
  std::vector<GroupRef> groups = t.all();
  int64_t sign = 1;
  for (auto _ : state) {
    for (GroupRef& g : groups) g->stat_add(StatRegistry::kSock, sign, 1);
    sign = -sign;
    t.ctl.rstat().flush(t.ctl.root().stat_node());
  }
  state.counters["groups"] = static_cast<double>(groups.size());
  state.counters["ns_per_group"] = benchmark::Counter(
      static_cast<double>(groups.size()), benchmark::Counter::kIsIterationInvariantRate |
                                               benchmark::Counter::kInvert);
}
BENCHMARK(BM_StatFlush)->Arg(1000)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);

void BM_StatReadEach(benchmark::State& state) {
  ScaleTree& t = tree(groups_of(state));
  std::vector<GroupRef> groups = t.all();
  std::reverse(groups.begin(), groups.end());  // leaves before their parents
  const int64_t past = t.ctl.rstat().flush_threshold() + 1;
  int64_t sign = 1;
  std::string text;
  for (auto _ : state) {
    for (GroupRef& g : groups) g->stat_add(StatRegistry::kSock, sign * past, past);
    sign = -sign;
    for (GroupRef& g : groups) {
      if (read_file(*g, "memory.stat", &text) != 0) std::abort();
    }
  }
  state.counters["groups"] = static_cast<double>(groups.size());
  state.counters["ns_per_group"] = benchmark::Counter(
      static_cast<double>(groups.size()), benchmark::Counter::kIsIterationInvariantRate |
                                               benchmark::Counter::kInvert);
}
BENCHMARK(BM_StatReadEach)->Arg(1000)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);

void BM_PsiSample(benchmark::State& state) {
  ScaleTree& t = tree(groups_of(state));
  for (auto _ : state) {
    std::vector<GroupRef> groups = t.all();
    for (GroupRef& g : groups) benchmark::DoNotOptimize(psi_stats(*g));
  }
  state.counters["groups"] = static_cast<double>(t.ctl.nr_groups());
  state.counters["ns_per_group"] = benchmark::Counter(
      static_cast<double>(t.ctl.nr_groups()), benchmark::Counter::kIsIterationInvariantRate |
                                                  benchmark::Counter::kInvert);
}
BENCHMARK(BM_PsiSample)->Arg(1000)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);

void BM_HistorySample(benchmark::State& state) {
  ScaleTree& t = tree(groups_of(state));
  http::detail::History history(32, 120);  // 32 series as the server keeps by default
  for (auto _ : state) history.sample(t.ctl);
  state.counters["groups"] = static_cast<double>(t.ctl.nr_groups());
  state.counters["ns_per_group"] = benchmark::Counter(
      static_cast<double>(t.ctl.nr_groups()), benchmark::Counter::kIsIterationInvariantRate |
                                                  benchmark::Counter::kInvert);
}
BENCHMARK(BM_HistorySample)->Arg(1000)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);

// G members, one a group, in a domain at its limit; each iteration one charge past the limit
// makes the OOM killer scan every member, order them and kill the largest (its callback gives
// its memory back). The victim is replaced outside the timed region.
struct OomTree {
  static Options options() {
    Options o;
    o.batch = 1;  // no per-CPU stock: the domain is full to the unit
    return o;
  }
  explicit OomTree(size_t groups) : ctl(options()) {
    if (ctl.create("dom", &dom) != 0) std::abort();
    const size_t parents = std::max<size_t>(1, groups / 100);
    const size_t per = groups / parents - 1;
    for (size_t i = 0; i < parents; ++i) {
      GroupRef p;
      if (ctl.create(*dom, "p" + std::to_string(i), &p) != 0) std::abort();
      for (size_t j = 0; j < per; ++j) {
        GroupRef c;
        if (ctl.create(*p, "c" + std::to_string(j), &c) != 0) std::abort();
        slots.push_back(c);
      }
    }
    members.resize(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) join(i);
    if (ctl.create(*dom, "trigger", &trigger_group) != 0) std::abort();
    trigger = std::make_unique<Member>(*trigger_group, "trigger", nullptr, Member::kImmune);
    dom->set_max(dom->current());  // full: the next unit needs a victim
  }
  ~OomTree() {
    trigger.reset();
    members.clear();
  }
  // A member in slot `i`, charged 1 + i % 8 units (8: the largest charge that may OOM-kill,
  // costly_charge_units()); its kill gives them back and names its slot.
  void join(size_t i) {
    members[i] = std::make_unique<Member>(*slots[i], "m" + std::to_string(i), [this, i](Member& m) {
      m.uncharge(m.charged());
      victim = i;
    });
    if (!charged(members[i]->charge(1 + static_cast<int64_t>(i % 8)))) std::abort();
  }
  size_t victim = SIZE_MAX;
  Controller ctl;
  GroupRef dom, trigger_group;
  std::vector<GroupRef> slots;
  std::vector<std::unique_ptr<Member>> members;
  std::unique_ptr<Member> trigger;
};

void BM_OomScan(benchmark::State& state) {
  OomTree t(groups_of(state));
  const int64_t big = 8;  // as much as the largest member holds: one kill makes room
  for (auto _ : state) {
    t.victim = SIZE_MAX;
    if (!charged(t.trigger->charge(big)) || t.victim == SIZE_MAX) {
      state.SkipWithError("the charge failed, or passed without a kill");
      break;
    }
    state.PauseTiming();
    t.trigger->uncharge(big);
    t.members[t.victim].reset();
    t.join(t.victim);  // into the room the trigger gave back
    state.ResumeTiming();
  }
  state.counters["groups"] = static_cast<double>(t.ctl.nr_groups());
  state.counters["ns_per_group"] = benchmark::Counter(
      static_cast<double>(t.ctl.nr_groups()), benchmark::Counter::kIsIterationInvariantRate |
                                                  benchmark::Counter::kInvert);
}
BENCHMARK(BM_OomScan)->Arg(1000)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace memcg

BENCHMARK_MAIN();
