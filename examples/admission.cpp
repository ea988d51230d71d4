// Admission control for a query engine: queries of estimated sizes share a pool with a limit.
// Each query holds its memory in a memcg::Reservation. Reserving the estimate up front either
// fails (the query is rejected) or, with reserve_for, waits until earlier queries finish and give
// their memory back.
//
// Run 1 reserves without waiting: all 16 queries ask at once for 12 MiB each against a 64 MiB
// pool, so only 5 fit and 11 are rejected. Run 2 reserves the same queries with a 10 s deadline:
// every query runs, at most 5 at a time, and nothing is rejected or OOM-killed. The example
// checks both and exits non-zero otherwise.
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "memcg/memcg.hpp"

namespace {

constexpr int kQueries = 16;
constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kPool = 64 * kMiB;
constexpr uint64_t kEstimate = 12 * kMiB;

struct Outcome {
  int ran = 0;
  int rejected = 0;
  int peak_running = 0;
};

Outcome run(memcg::Controller& ctl, memcg::Group& pool, bool wait) {
  std::atomic<int> ran{0}, rejected{0}, running{0}, peak{0};
  // Every query starts to reserve at once (so that, with waiting too, 11 of them find the pool
  // full however the threads are scheduled); without waiting, every query also tries while the
  // others still hold their memory.
  std::barrier all_started(kQueries), all_tried(kQueries);
  std::vector<std::jthread> queries;
  for (int q = 0; q < kQueries; ++q) {
    queries.emplace_back([&] {
      memcg::Reservation budget(pool);  // gives back what it holds when destroyed
      all_started.arrive_and_wait();
      const memcg::ReserveStatus status =
          wait ? budget.reserve_for(kEstimate, std::chrono::seconds(10)) : budget.reserve(kEstimate);
      if (!memcg::held(status)) ++rejected;
      if (memcg::held(status)) {
        const int now = ++running;
        for (int p = peak.load(); now > p && !peak.compare_exchange_weak(p, now);) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the query's work
        --running;
        ++ran;
      }
      if (!wait) all_tried.arrive_and_wait();
      budget.release();
    });
  }
  queries.clear();
  // Units pre-charged in the per-CPU stocks still count in memory.current; give them back so
  // that the check below (usage 0 at the end) sees exactly what the queries still hold.
  ctl.drain_stocks();
  return {ran.load(), rejected.load(), peak.load()};
}

}  // namespace

int main() {
  memcg::Controller ctl;
  memcg::GroupRef pool;
  if (ctl.create("queries", &pool) != 0) return 1;
  pool->set_max(kPool);

  const Outcome reject = run(ctl, *pool, false);
  std::printf("without waiting: %d ran, %d rejected\n", reject.ran, reject.rejected);
  const Outcome admit = run(ctl, *pool, true);
  // A waiting reservation first waits for admission (its expected peak must fit beside the
  // running ones', admission.hpp), then charges; a query that was admitted finds its memory
  // free, so here the waits are admission waits, not charge waits.
  const memcg::WaitStats ws = memcg::wait_stats(*pool);
  const memcg::AdmitStats as = memcg::admit_stats(*pool);
  std::printf("with waiting:    %d ran, %d rejected, at most %d at once; %llu waited for "
              "admission, %llu waited to charge (%llu granted)\n",
              admit.ran, admit.rejected, admit.peak_running,
              static_cast<unsigned long long>(as.admit_waits),
              static_cast<unsigned long long>(ws.waits),
              static_cast<unsigned long long>(ws.granted));
  std::printf("oom events: %llu, oom kills: %llu, pool usage at the end: %llu\n",
              static_cast<unsigned long long>(pool->events().get(memcg::Event::kOom)),
              static_cast<unsigned long long>(pool->events().get(memcg::Event::kOomKill)),
              static_cast<unsigned long long>(pool->current()));

  const int fit = static_cast<int>(kPool / kEstimate);
  bool ok = true;
  ok &= reject.rejected == kQueries - fit && reject.ran == fit;
  ok &= admit.ran == kQueries && admit.rejected == 0 && admit.peak_running <= fit;
  ok &= as.admit_waits + ws.waits > 0 && ws.granted == ws.waits && ws.timed_out == 0;
  ok &= pool->events().get(memcg::Event::kOomKill) == 0 && pool->current() == 0;
  std::puts(ok ? "admission: ok" : "admission: FAILED");
  return ok ? 0 : 1;
}
