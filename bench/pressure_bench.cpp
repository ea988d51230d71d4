// Costs of the pressure signals outside reclaim:
//   (a) an uncontended charge + uncharge that hits the stock, with nothing registered, with a
//       vmpressure listener and a PSI trigger on the group, and with both on every ancestor:
//       the target is no difference (the hot path has no pressure code);
//   (b) one MemStall section (enter + leave) on a group at depth 1 and 3, without and with a
//       trigger; one WorkScope (enter + leave) at depth 1 and 3;
//   (c) delivery latency of a full window to a listener: a callback (synchronous), and an
//       eventfd read by a thread blocked on it, both threads pinned to the same CPU.
#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/reclaim/vmpressure.hpp"
#include "bench_check.hpp"

namespace memcg {
namespace {

struct Tree {
  Tree() : ctl(opts()) {
    BENCH_CHECK(ctl.create("a", &a));
    BENCH_CHECK(ctl.create("a/b", &b));
    BENCH_CHECK(ctl.create("a/b/c", &c));
  }
  static Options opts() {
    Options o;
    o.nr_shards = 1;
    return o;
  }
  Controller ctl;
  GroupRef a, b, c;
};

// (a) mode 0: nothing; 1: listener + trigger on c; 2: listener + trigger on c, b, a and root.
void BM_StockHitCharge(benchmark::State& state) {
  Tree t;
  const int mode = static_cast<int>(state.range(0));
  PressureListener listeners[4];
  PsiTrigger triggers[4];
  Group* groups[4] = {t.c.get(), t.b.get(), t.a.get(), &t.ctl.root()};
  const int n = mode == 0 ? 0 : mode == 1 ? 1 : 4;
  for (int i = 0; i < n; ++i) {
    BENCH_CHECK(listeners[i].listen(*groups[i], "low,hierarchy", [](PressureLevel) {}));
    BENCH_CHECK(triggers[i].arm(*groups[i], "some 1000 1000000", [] {}));
  }
  BENCH_CHECK(try_charge(*t.c, 1));  // fill the stock
  for (auto _ : state) {
    static_cast<void>(try_charge(*t.c, 1));  // no limit: always kOk
    uncharge(*t.c, 1);
  }
  uncharge(*t.c, 1);
}
BENCHMARK(BM_StockHitCharge)->ArgName("registered")->Arg(0)->Arg(1)->Arg(2);

// (b) depth 1 (a) or 3 (c); with or without a privileged trigger on the group.
void BM_MemStall(benchmark::State& state) {
  Tree t;
  Group& g = state.range(0) == 1 ? *t.a : *t.c;
  PsiTrigger trig;
  if (state.range(1)) BENCH_CHECK(trig.arm(g, "some 1000000 1000000", [] {}));
  for (auto _ : state) {
    MemStall s(g);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_MemStall)->ArgNames({"depth", "trigger"})->Args({1, 0})->Args({3, 0})->Args({3, 1});

// (b') one WorkScope (enter + leave) on a group at depth 1 and 3: what an AdmissionQueue item's
// run and a service's query scope add, beside the MemStall section above.
void BM_WorkScope(benchmark::State& state) {
  Tree t;
  Group& g = state.range(0) == 1 ? *t.a : *t.c;
  for (auto _ : state) {
    WorkScope w(g);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_WorkScope)->ArgName("depth")->Arg(1)->Arg(3);

// (c) callback: the whole window completion and delivery, measured on the reclaiming thread.
void BM_DeliverCallback(benchmark::State& state) {
  Tree t;
  uint64_t heard = 0;
  PressureListener l;
  BENCH_CHECK(l.listen(*t.a, "low", [&](PressureLevel) { ++heard; }));
  const int64_t window = vmpressure_window(*t.c);
  for (auto _ : state) vmpressure_tree(*t.c, ReclaimReason::kLimit, window, 0);
  benchmark::DoNotOptimize(heard);
}
BENCHMARK(BM_DeliverCallback);

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// (c) eventfd: from the call that completes the window to the waiter's return from read(2), on
// one CPU (the waiter runs when the delivering thread yields).
void BM_DeliverEventfdSameCpu(benchmark::State& state) {
  Tree t;
  const int efd = eventfd(0, EFD_CLOEXEC);
  const int ack = eventfd(0, EFD_CLOEXEC);
  PressureListener l;
  BENCH_CHECK(l.listen(*t.a, PressureLevel::kLow, PressureMode::kDefault, nullptr, efd));
  const int64_t window = vmpressure_window(*t.c);
  std::atomic<int64_t> woke_ns{0};
  std::atomic<bool> stop{false};
  const int cpu = sched_getcpu();
  pin_to(cpu);
  std::thread waiter([&] {
    pin_to(cpu);
    uint64_t v;
    for (;;) {
      if (read(efd, &v, sizeof v) != sizeof v) break;
      woke_ns.store(std::chrono::steady_clock::now().time_since_epoch().count());
      const uint64_t one = 1;
      if (write(ack, &one, sizeof one) != sizeof one) break;
      if (stop.load()) break;
    }
  });
  for (auto _ : state) {
    const int64_t t0 = std::chrono::steady_clock::now().time_since_epoch().count();
    vmpressure_tree(*t.c, ReclaimReason::kLimit, window, 0);
    uint64_t v;
    if (read(ack, &v, sizeof v) != sizeof v) break;
    state.SetIterationTime(static_cast<double>(woke_ns.load() - t0) * 1e-9);
  }
  stop = true;
  vmpressure_tree(*t.c, ReclaimReason::kLimit, window, 0);
  waiter.join();
  l.reset();
  close(efd);
  close(ack);
}
BENCHMARK(BM_DeliverEventfdSameCpu)->UseManualTime();

}  // namespace
}  // namespace memcg

BENCHMARK_MAIN();
