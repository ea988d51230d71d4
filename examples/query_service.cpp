// A three-tenant query service whose queries grow past their estimates.
//
// The service has a 512 MiB budget split between three tenants: etl (max 320M), dash (max 256M,
// min 128M, with an 84M cache of its own) and adhoc (max 256M, low 32M). Worker threads run
// one query after another. Each query is a memcg::Member whose kill callback tells it to stop
// (it notices between two steps of its work, like a real query), admitted with
// Reservation::reserve_for(estimate, 2s), then growing in steps past its estimate: well-behaved
// queries end at their estimate plus 0-50 %, and 5 % of etl's queries are runaways that grow
// until the OOM killer stops them. A few etl queries ask for more than etl can ever hold.
//
// Policies (--policy):
//   today    the kernel's victim order (memory.oom.order: kernel), growth by grow()
//   excess   victims by excess over the admitted size (memory.oom.order: excess), grow()
//   wait200  the kernel's order, growth by grow_for(chunk, 200ms), then grow() (the killer)
//   all      the library's defaults (memory.oom.order: auto), growth by grow()
//   alternate  each of the above in turn, --rounds times (for docs/BENCHMARKS-policy.md)
//
// Prints per run: queries/s, kills of runaways and of well-behaved queries, spills, never-fits,
// the longest wait. Exits non-zero unless every runaway was killed, the budget held, and every
// counter was back to 0 at the end. Run without arguments it runs `all` for 3 s (the CI test).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memcg/alloc/lru_cache.hpp"
#include "memcg/memcg.hpp"

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBudget = 512 * kMiB;
constexpr uint64_t kChunk = 4 * kMiB;  // one growth step
constexpr int kSteps = 10;             // steps of work of a well-behaved query
constexpr auto kStepTime = std::chrono::milliseconds(2);
constexpr uint64_t kRunawayCap = 2048 * kMiB;  // a runaway past this was never stopped

enum class Policy { kToday, kExcess, kWait200, kAll };
const char* policy_name(Policy p) {
  switch (p) {
    case Policy::kToday: return "today";
    case Policy::kExcess: return "excess";
    case Policy::kWait200: return "wait200";
    case Policy::kAll: return "all";
  }
  return "?";
}

struct Counters {
  std::atomic<uint64_t> done{0}, runaways{0}, killed_runaway{0}, killed_good{0}, spills{0},
      never_fits{0}, timed_out{0}, failed{0}, runaway_unstopped{0}, longest_wait_ns{0}, forced{0},
      preempted_runaway{0}, preempted_good{0}, limited_runaway{0};
  void wait(uint64_t ns) {
    for (uint64_t w = longest_wait_ns.load(); ns > w && !longest_wait_ns.compare_exchange_weak(w, ns);) {
    }
  }
};

struct Tenants {
  memcg::GroupRef svc, etl, dash, adhoc;
};

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// One query on `g`: admitted at `estimate`, growing to `final_bytes` (0: a runaway).
void run_query(memcg::Group& g, uint64_t estimate, uint64_t final_bytes, Policy policy,
               Counters& c) {
  std::atomic<bool> stop{false}, preempted{false};
  // The callback runs on the killer's (or the preempting waiter's) thread: it only asks the
  // query to stop; the query gives its memory back when it unwinds (res.release()).
  memcg::Member member(g, "query", [&stop, &preempted](memcg::Member&) {
    if (memcg::Member::cancel_reason() == memcg::CancelReason::kPreempt)
      preempted.store(true, std::memory_order_relaxed);
    stop.store(true, std::memory_order_release);
  });
  memcg::Reservation res(member, memcg::ReserveOptions{memcg::OomPolicy::kPieces});
  const uint64_t t0 = now_ns();
  const memcg::ReserveStatus st = res.reserve_for(estimate, std::chrono::seconds(2));
  c.wait(now_ns() - t0);
  if (st == memcg::ReserveStatus::kNeverFits) {
    ++c.never_fits;
    return;
  }
  if (!memcg::held(st)) {
    ++(st == memcg::ReserveStatus::kTimedOut ? c.timed_out : c.failed);
    return;
  }
  const bool runaway = final_bytes == 0;
  if (runaway) ++c.runaways;
  const uint64_t target = runaway ? kRunawayCap : final_bytes;
  const uint64_t step = runaway ? kChunk : std::max<uint64_t>(kMiB, (target - estimate) / kSteps);
  int nomem_retries = 0;
  bool limited = false;  // its growth passed the tenant's memory.max: refused at once
  for (int i = 0; !stop.load(std::memory_order_acquire); ++i) {
    std::this_thread::sleep_for(kStepTime);  // the query's work
    if (res.bytes() >= target) break;
    const uint64_t add = std::min(step, target - res.bytes());
    memcg::ReserveStatus gs;
    if (policy == Policy::kWait200) {
      const uint64_t w0 = now_ns();
      gs = res.grow_for(add, std::chrono::milliseconds(200));
      c.wait(now_ns() - w0);
      if (gs == memcg::ReserveStatus::kTimedOut) gs = res.grow(add);  // then the killer
    } else {
      gs = res.grow(add);
    }
    if (gs == memcg::ReserveStatus::kForced) ++c.forced;
    if (!memcg::held(gs)) {
      if (gs == memcg::ReserveStatus::kKilled || member.killed()) break;
      if (gs == memcg::ReserveStatus::kNeverFits) {
        limited = true;  // the query fails its growth and unwinds
        break;
      }
      // kNoMem: the killer chose no one this time (it was still waiting for an earlier victim
      // to unwind). A runaway keeps asking at its next step, as it would; a well-behaved query
      // fails.
      if (runaway && ++nomem_retries < 1000) continue;
      ++c.failed;
      break;
    }
    if (!runaway && i >= kSteps * 4) break;  // bounded even if growth stalls
  }
  if (member.killed()) {
    ++(runaway ? c.killed_runaway : c.killed_good);
  } else if (preempted.load(std::memory_order_relaxed)) {
    ++(runaway ? c.preempted_runaway : c.preempted_good);  // cancelled to make room
  } else if (limited && runaway) {
    ++c.limited_runaway;  // stopped by never-fits at its tenant's limit
  } else if (runaway) {
    ++c.runaway_unstopped;
  } else {
    ++c.done;
  }
  res.release();
}

struct Result {
  double qps = 0;
  uint64_t killed_runaway = 0, killed_good = 0, runaways = 0, runaway_unstopped = 0, spills = 0,
           limited_runaway = 0,
           never_fits = 0, timed_out = 0, failed = 0, done = 0, preempted_runaway = 0, preempted_good = 0;
  double longest_wait_ms = 0;
  uint64_t peak = 0, sampled = 0, end_usage = 0;
  bool ok = false;
};

Result run(Policy policy, double seconds, int workers, uint64_t seed) {
  memcg::Controller ctl;
  Tenants t;
  if (ctl.create("svc", &t.svc) || ctl.create(*t.svc, "etl", &t.etl) ||
      ctl.create(*t.svc, "dash", &t.dash) || ctl.create(*t.svc, "adhoc", &t.adhoc)) {
    std::fputs("cannot create the groups\n", stderr);
    std::exit(2);
  }
  t.svc->set_max(kBudget);
  t.etl->set_max(320 * kMiB);
  t.dash->set_max(256 * kMiB);
  t.dash->set_min(128 * kMiB);
  t.adhoc->set_max(256 * kMiB);
  t.adhoc->set_low(32 * kMiB);
  const memcg::OomOrder order = policy == Policy::kExcess ? memcg::OomOrder::kExcess
                                : policy == Policy::kAll  ? memcg::OomOrder::kAuto
                                                          : memcg::OomOrder::kKernel;
  // Learned-peak admission is on by default (auto); the other policies admit as before it (a
  // fixed growth factor of 1).
  const char* growth = policy == Policy::kAll ? "auto" : "1";
  for (memcg::Group* g : {t.svc.get(), t.etl.get(), t.dash.get(), t.adhoc.get()})
    if (memcg::set_oom_order(*g, order) != 0 ||
        memcg::write_file(*g, "memory.admit.growth", growth) != 0)
      return {};

  // dash's cache, protected by its memory.min.
  memcg::LruCache cache(*t.dash, "dash-cache");
  const int64_t cache_units = static_cast<int64_t>((84 * kMiB) / ctl.to_bytes(1));
  const int64_t cached = cache.grow(cache_units);

  Counters c;
  std::atomic<bool> stop_sampler{false};
  std::atomic<uint64_t> peak{0};
  std::jthread sampler([&] {
    while (!stop_sampler.load(std::memory_order_relaxed)) {
      const uint64_t u = t.svc->current();
      if (u > peak.load(std::memory_order_relaxed)) peak.store(u, std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(seconds));
  std::vector<std::jthread> pool;
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(w));
      std::uniform_real_distribution<double> u(0.0, 1.0);
      while (std::chrono::steady_clock::now() < end) {
        const double pick = u(rng);
        memcg::Group& g = pick < 0.4 ? *t.etl : pick < 0.7 ? *t.dash : *t.adhoc;
        const bool is_etl = pick < 0.4;
        uint64_t estimate = (is_etl ? 16 : 8) * kMiB +
                            static_cast<uint64_t>(u(rng) * static_cast<double>((is_etl ? 48 : 24) * kMiB));
        uint64_t final_bytes = estimate + static_cast<uint64_t>(u(rng) * 0.5 * static_cast<double>(estimate));
        const double kind = u(rng);
        if (is_etl && kind < 0.05) final_bytes = 0;                   // a runaway
        if (is_etl && kind > 0.995) estimate = 400 * kMiB;            // can never fit in etl
        if (estimate > final_bytes && final_bytes != 0) final_bytes = estimate;
        run_query(g, estimate, final_bytes, policy, c);
      }
    });
  }
  pool.clear();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stop_sampler = true;
  sampler.join();

  Result r;
  r.killed_runaway = c.killed_runaway;
  r.killed_good = c.killed_good;
  r.runaways = c.runaways;
  r.runaway_unstopped = c.runaway_unstopped;
  r.limited_runaway = c.limited_runaway;
  r.spills = c.spills;
  r.never_fits = c.never_fits;
  r.timed_out = c.timed_out;
  r.failed = c.failed;
  r.done = c.done;
  r.qps = static_cast<double>(c.done + c.killed_good + c.killed_runaway) / elapsed;
  r.longest_wait_ms = static_cast<double>(c.longest_wait_ns.load()) / 1e6;
  // The budget: memory.peak, the highest usage a charge was granted. A read of memory.current
  // may see more for an instant: a charge adds before it checks the limit and takes it back
  // when it does not fit (the kernel's page_counter_try_charge does the same), so the sampler's
  // maximum is only reported.
  r.peak = t.svc->peak();
  r.sampled = peak.load();
  const bool cache_kept = cache.size() == cached;
  cache.drop();
  ctl.drain_stocks();
  r.end_usage = t.svc->current() + t.etl->current() + t.dash->current() + t.adhoc->current();
  r.preempted_runaway = c.preempted_runaway;
  r.preempted_good = c.preempted_good;
  // Every runaway stopped by the library: killed, cancelled by a preemption request, or refused
  // at once when its total passed its tenant's memory.max (never-fits).
  r.ok = r.runaway_unstopped == 0 &&
         r.killed_runaway + r.preempted_runaway + r.limited_runaway == r.runaways &&
         r.peak <= kBudget &&
         r.end_usage == 0;
  if (c.forced) std::printf("  (%llu growth steps forced past memory.max)\n",
                            static_cast<unsigned long long>(c.forced.load()));
  if (r.sampled > kBudget)
    std::printf("  (memory.current read %llu bytes past the budget for an instant; memory.peak "
                "%llu)\n",
                static_cast<unsigned long long>(r.sampled - kBudget),
                static_cast<unsigned long long>(r.peak));
  if (!cache_kept) std::printf("  (dash's cache was reclaimed below its 84M)\n");
  return r;
}

void print(Policy p, const Result& r) {
  std::printf("%-8s %8.1f q/s  kills: %4llu runaway / %4llu well-behaved  runaways %4llu  "
              "preempted %llu/%llu  limited %llu  spills %3llu  never-fits %3llu  timed-out %3llu  longest wait %7.1f ms  "
              "peak %5.1fM  end %llu  %s\n",
              policy_name(p), r.qps, static_cast<unsigned long long>(r.killed_runaway),
              static_cast<unsigned long long>(r.killed_good),
              static_cast<unsigned long long>(r.runaways),
              static_cast<unsigned long long>(r.preempted_runaway),
              static_cast<unsigned long long>(r.preempted_good),
              static_cast<unsigned long long>(r.limited_runaway),
              static_cast<unsigned long long>(r.spills),
              static_cast<unsigned long long>(r.never_fits),
              static_cast<unsigned long long>(r.timed_out), r.longest_wait_ms,
              static_cast<double>(r.peak) / static_cast<double>(kMiB),
              static_cast<unsigned long long>(r.end_usage), r.ok ? "ok" : "FAILED");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string policy = "all";
  double seconds = 3;
  int workers = 16, rounds = 1;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--policy") {
      policy = value("--policy");
    } else if (a == "--seconds") {
      seconds = std::atof(value("--seconds"));
    } else if (a == "--workers") {
      workers = std::atoi(value("--workers"));
    } else if (a == "--rounds") {
      rounds = std::atoi(value("--rounds"));
    } else if (a == "--seed") {
      seed = std::strtoull(value("--seed"), nullptr, 10);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--policy today|excess|wait200|all|alternate] [--seconds S] "
                   "[--workers N] [--rounds N] [--seed N]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!(seconds > 0 && seconds <= 600) || workers < 1 || workers > 256 || rounds < 1 ||
      rounds > 100) {
    std::fputs("--seconds in (0, 600], --workers in [1, 256], --rounds in [1, 100]\n", stderr);
    return 2;
  }
  std::vector<Policy> policies;
  if (policy == "alternate") {
    policies = {Policy::kToday, Policy::kExcess, Policy::kWait200, Policy::kAll};
  } else if (policy == "today" || policy == "excess" || policy == "wait200" || policy == "all") {
    policies = {policy == "today"    ? Policy::kToday
                : policy == "excess" ? Policy::kExcess
                : policy == "wait200" ? Policy::kWait200
                                      : Policy::kAll};
  } else {
    std::fprintf(stderr, "unknown policy %s\n", policy.c_str());
    return 2;
  }
  bool ok = true;
  for (int round = 0; round < rounds; ++round)
    for (Policy p : policies) {
      const Result r = run(p, seconds, workers, seed + static_cast<uint64_t>(round));
      print(p, r);
      ok &= r.ok;
    }
  std::puts(ok ? "query_service: ok" : "query_service: FAILED");
  return ok ? 0 : 1;
}
