// Waiting charges (charge_wait.hpp).
//  - WaitWake: a thread waits in try_charge_wait for 1 unit of a full group; the benchmark
//    thread uncharges 1 unit and measures the time from just before the uncharge until the
//    waiter has returned kOk (it stores a timestamp), i.e. the wake latency. Manual time.
//  - WaitNoWaiterPair: try_charge(1) + uncharge(1) in a process with no waiter (the stock hit,
//    for comparison with Pair/memcg of charge_bench, which this code must leave unchanged).
//  - WaitUnchargeSlowWithWaiter: uncharge(65) + try_charge(65) (a stock miss each way, so the
//    uncharge takes the slow path) with no waiter (/0), a waiter on another group of the same
//    controller (/1), a waiter in another controller (/2): a waiter off the uncharging group's
//    path must cost it nothing. /3: a waiter on the group's parent, where the uncharge goes to
//    the counters and serves the queue.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "bench_check.hpp"
#include "smoke.hpp"

namespace memcg {
namespace {

using Clk = std::chrono::steady_clock;

void BM_WaitWake(benchmark::State& state) {
  Options o;
  o.batch = 1;
  Controller ctl(o);
  GroupRef g;
  BENCH_CHECK(ctl.create("g", &g));
  g->set_max(4 * ctl.unit_size());
  BENCH_CHECK(try_charge(*g, 4));
  std::atomic<int64_t> returned_at{0};
  std::atomic<int> round{0};
  std::atomic<bool> stop{false};
  std::thread waiter([&] {
    int seen = 0;
    while (!stop.load()) {
      while (round.load() == seen && !stop.load()) std::this_thread::yield();
      if (stop.load()) break;
      seen = round.load();
      const WaitStatus s = try_charge_wait(*g, 1, Clk::now() + std::chrono::seconds(10));
      returned_at.store(Clk::now().time_since_epoch().count());
      if (s != WaitStatus::kOk) std::abort();
    }
  });
  for (auto _ : state) {
    returned_at.store(0);
    round.fetch_add(1);
    // Wait until the waiter is queued (its memory stall has begun: it is in the queue).
    while (wait_stats(*g).waiters == 0) std::this_thread::yield();
    const auto t0 = Clk::now();
    uncharge_direct(*g, 1);
    int64_t t1;
    while ((t1 = returned_at.load()) == 0) {
    }
    state.SetIterationTime(std::chrono::duration<double>(
                               Clk::duration(t1) - t0.time_since_epoch())
                               .count());
  }
  stop = true;
  waiter.join();
  uncharge_direct(*g, 4);
}
BENCHMARK(BM_WaitWake)->UseManualTime()->Iterations(bench::fixed_iterations(2000));

void BM_WaitNoWaiterPair(benchmark::State& state) {
  Controller ctl;
  GroupRef g;
  BENCH_CHECK(ctl.create("g", &g));
  for (auto _ : state) {
    benchmark::DoNotOptimize(try_charge(*g, 1));
    uncharge(*g, 1);
  }
}
BENCHMARK(BM_WaitNoWaiterPair);

void BM_WaitUnchargeSlowWithWaiter(benchmark::State& state) {
  Controller ctl, other;
  GroupRef g, full, top, under, fill, full_other;
  BENCH_CHECK(ctl.create("g", &g));
  BENCH_CHECK(ctl.create("full", &full));
  BENCH_CHECK(ctl.create("top", &top));
  BENCH_CHECK(ctl.create("top/under", &under));
  BENCH_CHECK(ctl.create("top/fill", &fill));
  BENCH_CHECK(other.create("full", &full_other));
  for (Group* f : {full.get(), full_other.get()}) {
    f->set_max(ctl.unit_size());
    BENCH_CHECK(try_charge(*f, 1));
  }
  top->set_max(1024 * ctl.unit_size());
  // `top` half full: a waiter for 600 units fits its limit (a request larger than the limit is
  // refused at once, never queued) but not the room left, also while `under` holds nothing.
  constexpr int64_t kFill = 512, kTopWaiter = 600;
  BENCH_CHECK(try_charge(*fill, kFill));
  // 0: no waiter; 1: a waiter on another group of the controller; 2: a waiter in another
  // controller; 3: a waiter on the parent of the uncharging group (its path: the uncharge then
  // goes to the counters and serves the queue, for comparison).
  Group* wait_on = state.range(0) == 1   ? full.get()
                   : state.range(0) == 2 ? full_other.get()
                   : state.range(0) == 3 ? top.get()
                                         : nullptr;
  Group& charged = state.range(0) == 3 ? *under : *g;
  std::jthread waiter;
  if (wait_on != nullptr) {
    // On `top`: more than the room `fill` leaves, so it stays queued for the whole run.
    const int64_t units = wait_on == top.get() ? kTopWaiter : 1;
    waiter = std::jthread([&, wait_on, units](std::stop_token st) {
      // Stays queued until the run ends and cancels it (kCancelled): nothing to check.
      static_cast<void>(try_charge_wait(*wait_on, units, Clk::now() + std::chrono::hours(1), st));
    });
    // Bounded: a waiter that is refused instead of queued fails the set-up, it is not waited
    // for forever.
    for (int i = 0; wait_stats(*wait_on).waiters == 0; ++i) {
      if (i == 10'000) bench::check_failed("queueing the waiter", "not queued within 10 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  BENCH_CHECK(try_charge(charged, 65));  // the measured charge succeeds beside the waiter
  uncharge(charged, 65);
  for (auto _ : state) {
    benchmark::DoNotOptimize(try_charge(charged, 65));
    uncharge(charged, 65);
  }
  if (wait_on != nullptr && wait_stats(*wait_on).waiters != 1)
    bench::check_failed("the waiter", "served or gone during the run");
  waiter = {};
  for (Group* f : {full.get(), full_other.get()}) uncharge_direct(*f, 1);
  uncharge(*fill, kFill);
}
BENCHMARK(BM_WaitUnchargeSlowWithWaiter)->Arg(0)->Arg(1)->Arg(2)->Arg(3);

}  // namespace
}  // namespace memcg

BENCHMARK_MAIN();
