// The AdmissionQueue at scale (admission_queue.hpp; docs/BENCHMARKS-policy.md, "AdmissionQueue
// at scale"): 20 000 items of 1 MiB under a parent of 8 MiB, spread round-robin over G
// backlogged groups (G = 10, 100, 1000, 10 000), served by 2 workers; /1 adds one starved group
// whose items (7.5 MiB, one per 100 small items) do not fit beside a running item, so that the
// hold-back is in play. Goal: admissions/s at G = 10 000 within 2x of G = 10.
//  - admissions/s: items admitted and run per second of real time (submits and runs together:
//    the benchmark thread submits all items while the workers serve them).
//  - submit_ns: the time of one submit() call seen by its caller (lock wait included).
//  - submit_lock_ns: the time submit() holds the queue's mutex (the queue's own counter, where
//    the library has it).
// BM_ReserveRoundRobin: the same admissions without the queue (one thread), the floor: memory
// admitted to another group each time touches that group's counters, which 10 000 groups do
// not keep in the caches.
// Reproduce: cmake --preset release && cmake --build --preset release --target
// admission_queue_bench && build/release/bench/admission_queue_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "bench_check.hpp"
#include "memcg/core/admission/admission_queue.hpp"
#include "memcg/core/admission/internal/admission_queue_state.hpp"
#include "memcg/core/tree/controller.hpp"
#include "smoke.hpp"

namespace memcg {
namespace {

using Clk = std::chrono::steady_clock;

constexpr int kItems = 20'000;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int kStarvedEvery = 100;  // one starved item per this many small ones

void BM_AdmissionQueue(benchmark::State& state) {
  const int groups = static_cast<int>(state.range(0));
  const bool with_starved = state.range(1) != 0;
  const int items = bench::smoke_run() ? 200 : kItems;
  Controller ctl;
  GroupRef parent, big;
  BENCH_CHECK(ctl.create("p", &parent));
  parent->set_max(8 * kMiB);
  std::vector<GroupRef> gs(static_cast<size_t>(groups));
  for (int i = 0; i < groups; ++i)
    BENCH_CHECK(ctl.create("p/g" + std::to_string(i), &gs[static_cast<size_t>(i)]));
  BENCH_CHECK(ctl.create("p/big", &big));
  AdmissionQueueOptions o;
  o.workers = 2;
  o.max_queued = 1 << 16;
  AdmissionQueue q(ctl, o);
#ifdef MEMCG_ADMISSION_QUEUE_ACCESS
  internal::AdmissionQueueAccess::time_submits(q, true);
#endif
  std::atomic<int64_t> ran{0}, not_run{0};
  int64_t submitted = 0, submit_ns = 0;
  for (auto _ : state) {
    const int64_t target = ran.load() + not_run.load();
    int64_t n = 0;
    for (int i = 0; i < items; ++i) {
      WorkItem w;
      w.bytes = kMiB;
      w.run = [&ran](Reservation&) { ran.fetch_add(1, std::memory_order_relaxed); };
      w.done = [&not_run](ReserveStatus) { not_run.fetch_add(1, std::memory_order_relaxed); };
      const auto t0 = Clk::now();
      SubmitStatus s = q.submit(*gs[static_cast<size_t>(i % groups)], std::move(w));
      if (with_starved && i % kStarvedEvery == 0) {
        WorkItem b;
        b.bytes = 7 * kMiB + kMiB / 2;
        b.run = [&ran](Reservation&) { ran.fetch_add(1, std::memory_order_relaxed); };
        b.done = [&not_run](ReserveStatus) { not_run.fetch_add(1, std::memory_order_relaxed); };
        if (s == SubmitStatus::kOk) s = q.submit(*big, std::move(b));
        ++n;
      }
      submit_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clk::now() - t0).count();
      if (s != SubmitStatus::kOk) {
        state.SkipWithError("submit refused");
        return;
      }
      ++n;
    }
    submitted += n;
    const auto until = Clk::now() + std::chrono::seconds(300);
    while (ran.load() + not_run.load() < target + n) {
      if (Clk::now() > until) {
        state.SkipWithError("items not served within 300 s");
        return;
      }
      std::this_thread::yield();
    }
  }
  if (not_run.load() != 0) state.SkipWithError("items completed without running");
  state.counters["admissions/s"] =
      benchmark::Counter(static_cast<double>(ran.load()), benchmark::Counter::kIsRate);
  // Tries of the starved group's heads per item it had admitted: each refused try is an
  // admission check and a ladder (stock drains) that the others' admissions wait behind.
  if (with_starved) {
    const AdmitQueueStats b = admit_queue_stats(*big);
    state.counters["starved_tries_per_item"] =
        static_cast<double>(b.tries) / static_cast<double>(std::max<uint64_t>(b.admitted, 1));
  }
  state.counters["submit_ns"] =
      static_cast<double>(submit_ns) / static_cast<double>(std::max<int64_t>(submitted, 1));
#ifdef MEMCG_ADMISSION_QUEUE_ACCESS
  const uint64_t timed = internal::AdmissionQueueAccess::submits_timed(q);
  state.counters["submit_lock_ns"] =
      timed ? static_cast<double>(internal::AdmissionQueueAccess::submit_lock_ns(q)) /
                  static_cast<double>(timed)
            : 0.0;
#endif
}

// The floor under the queue: the same admissions without it, on one thread. reserve_until(1 MiB,
// now) and the release, round-robin over the G groups under the 8 MiB parent: what admitting
// memory costs when every admission touches another group's counters (the queue's own cost at
// G groups is BM_AdmissionQueue's time less this).
void BM_ReserveRoundRobin(benchmark::State& state) {
  const int groups = static_cast<int>(state.range(0));
  Controller ctl;
  GroupRef parent;
  BENCH_CHECK(ctl.create("p", &parent));
  parent->set_max(8 * kMiB);
  std::vector<GroupRef> gs(static_cast<size_t>(groups));
  for (int i = 0; i < groups; ++i)
    BENCH_CHECK(ctl.create("p/g" + std::to_string(i), &gs[static_cast<size_t>(i)]));
  size_t next = 0;
  int64_t refused = 0;
  for (auto _ : state) {
    Reservation r(*gs[next]);
    if (r.reserve_until(kMiB, ctl.clock().now_ns()) != ReserveStatus::kOk) ++refused;
    next = next + 1 == gs.size() ? 0 : next + 1;
  }
  if (refused != 0) state.SkipWithError("reservations refused");
  state.counters["admissions/s"] = benchmark::Counter(static_cast<double>(state.iterations()),
                                                      benchmark::Counter::kIsRate);
}

BENCHMARK(BM_ReserveRoundRobin)->Arg(10)->Arg(100)->Arg(1000)->Arg(10000)->ArgName("groups")
    ->UseRealTime()->MinTime(bench::min_time(0.5));

BENCHMARK(BM_AdmissionQueue)
    ->ArgsProduct({{10, 100, 1000, 10000}, {0, 1}})
    ->ArgNames({"groups", "starved"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(bench::fixed_iterations(3));

}  // namespace
}  // namespace memcg

BENCHMARK_MAIN();
