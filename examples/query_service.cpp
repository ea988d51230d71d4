// A three-tenant query service whose queries grow past their estimates.
//
// The service has a 512 MiB budget split between three tenants: etl (max 320M), dash (max 256M,
// min 128M, with an 84M cache of its own) and adhoc (max 256M, low 32M). Each query is a
// memcg::Member whose kill callback tells it to stop (it notices between two steps of its work,
// like a real query), admitted at its estimate, then growing in steps past it: well-behaved
// queries end at their estimate plus 0-50 %, and 5 % of etl's queries are runaways that grow
// until the OOM killer stops them. A few etl queries ask for more than etl can ever hold.
// Queries come 40 % from etl, 30 % from dash, 30 % from adhoc; a query's admission deadline is
// 2 s (kAdmitTimeout). The query itself is in query_service_work.cpp.
//
// The front-end (--front):
//   queue  (the default) the library's memcg::AdmissionQueue: a pool of --workers threads
//          (16) tries the next admissible query across the tenants and runs it admitted; the
//          tenants' memory.admit.weight is 400/300/300, their share of the memory the queue
//          admits (etl's queries are about twice as large: about a sixth of the queries), and
//          each tenant keeps a fixed number of queries outstanding (a finished one is replaced).
//   block  --workers threads split over the tenants 40/30/30 (6/5/5), each blocking in
//          reserve_for(estimate, 2s) of its own tenant's next query: how a service without a
//          front-end is written.
// --caches: each tenant keeps a result cache (a memcg::Reclaimer whose entries hold
// Reservations, 1-4 MiB per completed query, looked up by the query's key before it runs: a hit
// answers it at once). Nothing bounds the caches but the limits, so memory sits at the budget
// and admissions must reclaim them.
//
// Policies (--policy): today's behaviour, each new part of the library alone, all of them (the
// library's defaults), and growth that waits 200 ms:
//   today     the kernel's victim order (memory.oom.order: kernel), plain admission (a fixed
//             memory.admit.growth of 1), growth past admission straight to the killer
//             (ReserveOptions::growth_wait off), no spill
//   admit     today, with learned-peak admission (memory.admit.growth: auto)
//   excess    today, with victims by excess over the admitted size (memory.oom.order: excess)
//   growwait  today, with growth past admission that waits for memory on its way
//   spill     today, with spill before kill: etl queries can spill once (Member::set_spill_grace)
//   wait200   today, with growth by grow_for(chunk, 200ms), then grow() (the killer)
//   all       the library's defaults: auto admission, auto order, growth wait, and etl's spill
//   alternate each of the above in turn, --rounds times (for docs/BENCHMARKS-policy.md)
//
// Prints per run: finished queries/s (every admitted query that ended), completed queries/s
// (well-behaved queries that ran to their end), answered/s (completed plus cache hits), per
// tenant completions/s, kills of runaways and of well-behaved queries (and the latter per 1000
// answered), spills, never-fits, timed-out admissions, the longest admission wait and the share
// of the workers' time spent waiting for admission (block only: the queue's workers never wait).
// Exits non-zero unless every runaway was stopped, the budget held, and every counter was back
// to 0 at the end. Run without arguments it runs `all` for 3 s (the CI test). --verbose adds MiB
// of completed work per second, kills of well-behaved queries per tenant, the runaways' life and
// size, svc's mean usage and promised headroom, the caches, and each group's admission figures.
// --serve PORT serves the controller over HTTP on 127.0.0.1 while it runs (the page, /metrics,
// /v1/oom: example_server.hpp) until SIGINT/SIGTERM, or until --seconds pass when given. Served,
// adhoc also has a memory.high of 64M (kServedAdhocHigh), below what its queries need, so that
// the page, /metrics and the rules show a tenant throttled on memory.high (its `high` events,
// its throttle time, its pressure) beside etl's kills.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memcg/alloc/lru_cache.hpp"
#include "memcg/memcg.hpp"
#include "example_server.hpp"
#include "query_service_work.hpp"

namespace {

using qs::kMiB;
using qs::kTenants;
constexpr uint64_t kBudget = 512 * kMiB;
constexpr auto kAdmitTimeout = std::chrono::seconds(2);  // a query's whole admission deadline
// The queue front-end: queries each tenant keeps outstanding (queued or running), about its
// share of 16 workers plus a backlog of 4, so that every tenant has queries waiting.
constexpr int kOutstanding[kTenants] = {10, 9, 9};
constexpr double kShare[kTenants] = {0.4, 0.3, 0.3};
// --serve: adhoc's memory.high (its max stays 256M): a tenant in trouble on memory.high.
constexpr uint64_t kServedAdhocHigh = 64 * kMiB;

enum class Policy { kToday, kAdmit, kExcess, kGrowWait, kSpill, kWait200, kAll };
constexpr Policy kPolicies[] = {Policy::kToday,    Policy::kAdmit, Policy::kExcess,
                                Policy::kGrowWait, Policy::kSpill, Policy::kWait200,
                                Policy::kAll};
const char* policy_name(Policy p) {
  switch (p) {
    case Policy::kToday: return "today";
    case Policy::kAdmit: return "admit";
    case Policy::kExcess: return "excess";
    case Policy::kGrowWait: return "growwait";
    case Policy::kSpill: return "spill";
    case Policy::kWait200: return "wait200";
    case Policy::kAll: return "all";
  }
  return "?";
}
bool learned_admission(Policy p) { return p == Policy::kAdmit || p == Policy::kAll; }
memcg::OomOrder oom_order(Policy p) {
  return p == Policy::kExcess ? memcg::OomOrder::kExcess
         : p == Policy::kAll  ? memcg::OomOrder::kAuto
                              : memcg::OomOrder::kKernel;
}
qs::QueryPolicy query_policy(Policy p) {
  qs::QueryPolicy q;
  q.growth_wait = p == Policy::kGrowWait || p == Policy::kAll;
  q.grow_for = p == Policy::kWait200;
  q.spill = p == Policy::kSpill || p == Policy::kAll;
  return q;
}

volatile std::sig_atomic_t g_interrupted = 0;  // --serve: SIGINT or SIGTERM ends the run

// Until `end`, or an interruption (--serve).
bool running_until(std::chrono::steady_clock::time_point end) {
  return std::chrono::steady_clock::now() < end && !g_interrupted;
}

struct Config {
  Policy policy = Policy::kAll;
  bool queue = true;  // --front queue (else block)
  bool caches = false;
  double seconds = 3;  // 0 with --serve and no --seconds: until interrupted
  int workers = 16;
  uint64_t seed = 1;
  bool verbose = false;
  int port = -1;  // --serve
};

// A run's service: groups, dash's own cache, the result caches (with --caches).
struct Service {
  memcg::Controller ctl;
  memcg::GroupRef svc, tenant[kTenants];
  std::unique_ptr<memcg::LruCache> dash_cache;
  std::unique_ptr<qs::ResultCache> results[kTenants];
  qs::Counters c;
  qs::QueryPolicy qp;
  memcg::ReserveOptions options;
  std::atomic<bool> stopping{false};
  std::mutex rng_mu;
  std::mt19937_64 rng;
  qs::ResultCache* cache(int t) { return results[t].get(); }
  // The next query of tenant `t` not answered by its cache (a hit is counted and answered).
  qs::QuerySpec next_query(int t, std::mt19937_64& r) {
    for (;;) {
      const qs::QuerySpec s = qs::make_query(t, r);
      if (cache(t) == nullptr || !cache(t)->get(s.key)) return s;
      ++c.hits_of[t];
    }
  }
};

// How an admission that did not let the query run ends.
void count_refusal(qs::Counters& c, memcg::ReserveStatus st) {
  if (st == memcg::ReserveStatus::kNeverFits)
    ++c.never_fits;
  else if (st == memcg::ReserveStatus::kTimedOut)
    ++c.timed_out;
  else if (st != memcg::ReserveStatus::kCancelled)
    ++c.failed;
}

// --front block: one tenant's worker, blocking in its own tenant's admissions.
void block_worker(Service& s, int t, uint64_t seed, std::chrono::steady_clock::time_point end) {
  std::mt19937_64 rng(seed);
  while (running_until(end)) {
    // The worker works for its tenant while it admits and runs the query: PSI counts it as one of
    // the tenant's tasks, so one worker's stall is `some` while another of the tenant runs.
    memcg::WorkScope work(*s.tenant[t]);
    const qs::QuerySpec spec = s.next_query(t, rng);
    qs::Query query(*s.tenant[t], t == 0 && s.qp.spill, s.c);
    qs::QueryState& q = query.state();
    std::unique_lock<std::mutex> lock(q.mu);
    q.res = memcg::Reservation(query.member(), s.options);
    const uint64_t t0 = qs::now_ns();
    const memcg::ReserveStatus st = q.res.reserve_for(spec.estimate, kAdmitTimeout);
    lock.unlock();
    const uint64_t waited = qs::now_ns() - t0;
    s.c.admit_wait_ns += waited;
    s.c.wait(waited);
    if (!memcg::held(st)) {
      count_refusal(s.c, st);
      continue;
    }
    qs::run_admitted(query, spec, s.qp, s.c, s.cache(t), rng);
  }
}

// --front queue: submits one query of tenant `t` to `queue`; its end (run or done) submits the
// next one while the run lasts.
void submit_query(Service& s, memcg::AdmissionQueue& queue, int t) {
  qs::QuerySpec spec;
  uint64_t seed;
  {
    std::lock_guard<std::mutex> lock(s.rng_mu);
    spec = s.next_query(t, s.rng);
    seed = s.rng();
  }
  // The member lives with the callables: the queue destroys the reservation first.
  auto query = std::make_shared<qs::Query>(*s.tenant[t], t == 0 && s.qp.spill, s.c);
  memcg::WorkItem item;
  item.bytes = spec.estimate;
  item.deadline_ns = s.ctl.clock().now_ns() +
                     static_cast<uint64_t>(std::chrono::nanoseconds(kAdmitTimeout).count());
  item.options = s.options;
  const uint64_t submitted = qs::now_ns();
  item.run = [&s, &queue, query, spec, seed, t, submitted](memcg::Reservation& admitted) {
    s.c.wait(qs::now_ns() - submitted);
    {
      std::lock_guard<std::mutex> lock(query->state().mu);
      query->state().res = std::move(admitted);
    }
    std::mt19937_64 rng(seed);
    qs::run_admitted(*query, spec, s.qp, s.c, s.cache(t), rng);
    if (!s.stopping.load()) submit_query(s, queue, t);
  };
  item.done = [&s, &queue, t](memcg::ReserveStatus st) {
    count_refusal(s.c, st);
    if (!s.stopping.load()) submit_query(s, queue, t);
  };
  const memcg::SubmitStatus st = queue.submit(query->member(), std::move(item));
  if (st != memcg::SubmitStatus::kOk && st != memcg::SubmitStatus::kStopped) ++s.c.failed;
}

struct Result {
  double finished_qps = 0, completed_qps = 0, answered_qps = 0, admit_wait_share = 0;
  double tenant_qps[kTenants] = {0, 0, 0};
  uint64_t killed_runaway = 0, killed_good = 0, runaways = 0, spills = 0, never_fits = 0,
           timed_out = 0, answered = 0;
  double longest_wait_ms = 0;
  uint64_t peak = 0, end_usage = 0;
  bool ok = false;
};

Result run(const Config& cfg) {
  auto sp = std::make_unique<Service>();
  Service& s = *sp;
  memcg::Controller& ctl = s.ctl;
  if (ctl.create("svc", &s.svc)) std::exit(2);
  for (int t = 0; t < kTenants; ++t)
    if (ctl.create(*s.svc, qs::kTenantNames[t], &s.tenant[t])) std::exit(2);
  memcg::Group& etl = *s.tenant[0];
  memcg::Group& dash = *s.tenant[1];
  memcg::Group& adhoc = *s.tenant[2];
  s.svc->set_max(kBudget);
  etl.set_max(320 * kMiB);
  dash.set_max(256 * kMiB);
  dash.set_min(128 * kMiB);
  adhoc.set_max(256 * kMiB);
  adhoc.set_low(32 * kMiB);
  if (cfg.port >= 0) adhoc.set_high(kServedAdhocHigh);
  // Learned-peak admission is on by default (auto); without it a fixed growth factor of 1
  // admits as before it.
  const char* growth = learned_admission(cfg.policy) ? "auto" : "1";
  for (memcg::Group* g : {s.svc.get(), &etl, &dash, &adhoc})
    if (memcg::set_oom_order(*g, oom_order(cfg.policy)) != 0 ||
        memcg::write_file(*g, "memory.admit.growth", growth) != 0)
      return {};
  for (int t = 0; t < kTenants; ++t)
    if (memcg::set_admit_weight(*s.tenant[t], static_cast<uint32_t>(kShare[t] * 1000)) != 0)
      return {};
  s.qp = query_policy(cfg.policy);
  s.options.oom = memcg::OomPolicy::kPieces;
  s.options.growth_wait = s.qp.growth_wait;
  s.rng.seed(cfg.seed);

  // dash's cache, protected by its memory.min.
  s.dash_cache = std::make_unique<memcg::LruCache>(dash, "dash-cache");
  const int64_t cached = s.dash_cache->grow(static_cast<int64_t>((84 * kMiB) / ctl.to_bytes(1)));
  if (cfg.caches)
    for (int t = 0; t < kTenants; ++t)
      s.results[t] = std::make_unique<qs::ResultCache>(*s.tenant[t]);
  memcg_example::ExampleServer server;  // stopped before the groups and the controller go
  if (cfg.port >= 0 && !server.start(ctl, cfg.port)) std::exit(3);

  std::atomic<bool> stop_sampler{false};
  uint64_t usage_sum = 0, promised_sum = 0, cache_sum = 0, samples = 0;
  std::jthread sampler([&] {
    while (!stop_sampler.load(std::memory_order_relaxed)) {
      usage_sum += s.svc->current();  // the sampler's thread alone writes these
      promised_sum += static_cast<uint64_t>(
          std::max<int64_t>(0, memcg::admit_stats(*s.svc).promised_units));
      for (int t = 0; t < kTenants; ++t) cache_sum += s.cache(t) ? s.cache(t)->bytes() : 0;
      ++samples;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  const auto start = std::chrono::steady_clock::now();
  const auto end =
      cfg.seconds > 0 ? start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(cfg.seconds))
                      : std::chrono::steady_clock::time_point::max();  // until interrupted
  if (cfg.queue) {
    memcg::AdmissionQueue queue(ctl, {.workers = cfg.workers, .max_queued = 1024});
    for (int t = 0; t < kTenants; ++t)
      for (int i = 0; i < kOutstanding[t]; ++i) submit_query(s, queue, t);
    while (running_until(end)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s.stopping = true;
    // The queue's destructor waits for the running queries and cancels the queued ones.
  } else {
    std::vector<std::jthread> pool;
    for (int w = 0; w < cfg.workers; ++w) {
      // Workers split 40/30/30 over the tenants, as the queries are (16: 6/5/5).
      const double at = (w + 0.5) / cfg.workers;
      const int t = at < kShare[0] ? 0 : at < kShare[0] + kShare[1] ? 1 : 2;
      pool.emplace_back(block_worker, std::ref(s), t, cfg.seed * 1000003 + w, end);
    }
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stop_sampler = true;
  sampler.join();

  qs::Counters& c = s.c;
  Result r;
  r.killed_runaway = c.killed_runaway;
  r.killed_good = c.killed_good;
  r.runaways = c.runaways;
  r.spills = c.spills;
  r.never_fits = c.never_fits;
  r.timed_out = c.timed_out;
  const uint64_t hits = c.hits_of[0] + c.hits_of[1] + c.hits_of[2];
  r.answered = c.done() + hits;
  r.finished_qps = static_cast<double>(c.done() + c.killed_good + c.killed_runaway +
                                       c.preempted_good + c.preempted_runaway +
                                       c.limited_runaway + c.failed) / elapsed;
  r.completed_qps = static_cast<double>(c.done()) / elapsed;
  r.answered_qps = static_cast<double>(r.answered) / elapsed;
  for (int t = 0; t < kTenants; ++t) r.tenant_qps[t] = static_cast<double>(c.done_of[t]) / elapsed;
  r.admit_wait_share = static_cast<double>(c.admit_wait_ns.load()) /
                       (elapsed * 1e9 * static_cast<double>(cfg.workers));
  r.longest_wait_ms = static_cast<double>(c.longest_wait_ns.load()) / 1e6;
  // The budget: memory.peak, the highest usage a charge was granted.
  r.peak = s.svc->peak();
  const bool cache_kept = s.dash_cache->size() == cached;
  s.dash_cache->drop();
  for (auto& rc : s.results)
    if (rc) rc->clear();
  ctl.drain_stocks();
  r.end_usage = s.svc->current() + etl.current() + dash.current() + adhoc.current();
  // Every runaway stopped by the library: killed, cancelled by a preemption request, or refused
  // at once when its total passed its tenant's memory.max (never-fits).
  r.ok = c.runaway_unstopped == 0 &&
         c.killed_runaway + c.preempted_runaway + c.limited_runaway == c.runaways &&
         r.peak <= kBudget && r.end_usage == 0;
  if (cfg.verbose) {
    std::printf("  %.0f MiB of final size/s; answered from the caches %llu/%llu/%llu\n",
                static_cast<double>(c.done_mib) / elapsed,
                static_cast<unsigned long long>(c.hits_of[0].load()),
                static_cast<unsigned long long>(c.hits_of[1].load()),
                static_cast<unsigned long long>(c.hits_of[2].load()));
    std::printf("  well-behaved kills: etl %llu, dash %llu, adhoc %llu\n",
                static_cast<unsigned long long>(c.killed_good_of[0].load()),
                static_cast<unsigned long long>(c.killed_good_of[1].load()),
                static_cast<unsigned long long>(c.killed_good_of[2].load()));
    if (c.runaways > 0)
      std::printf("  runaways: %.1f ms from admission to their end, %.0f MiB at the end, on "
                  "average\n",
                  static_cast<double>(c.runaway_ns) / 1e6 / static_cast<double>(c.runaways),
                  static_cast<double>(c.runaway_peak_mib) / static_cast<double>(c.runaways));
    if (samples > 0)
      std::printf("  svc on average: memory.current %.1fM, promised to admitted queries %.1fM, "
                  "result caches %.1fM (%llu results cached, %llu refused)\n",
                  static_cast<double>(usage_sum) / static_cast<double>(samples) / kMiB,
                  static_cast<double>(ctl.to_bytes(1)) * static_cast<double>(promised_sum) /
                      static_cast<double>(samples) / kMiB,
                  static_cast<double>(cache_sum) / static_cast<double>(samples) / kMiB,
                  static_cast<unsigned long long>(c.cached.load()),
                  static_cast<unsigned long long>(c.cache_refused.load()));
    for (memcg::Group* g : {s.svc.get(), &etl, &dash, &adhoc}) {
      const memcg::AdmitStats a = memcg::admit_stats(*g);
      const memcg::AdmitQueueStats qst = memcg::admit_queue_stats(*g);
      std::printf("  %-5s admit.growth %.3f (%s)  tolerance %.3f  learned %llu  cut short %llu  "
                  "admit_waits %llu  growth_waits %llu (granted %llu)  queue: admitted %llu "
                  "tries %llu mean wait %.1f ms\n",
                  g->name().c_str(), a.growth_permille / 1000.0, a.fixed ? "fixed" : "auto",
                  a.tolerance_permille / 1000.0, static_cast<unsigned long long>(a.samples),
                  static_cast<unsigned long long>(a.skipped),
                  static_cast<unsigned long long>(a.admit_waits),
                  static_cast<unsigned long long>(a.growth_waits),
                  static_cast<unsigned long long>(a.growth_granted),
                  static_cast<unsigned long long>(qst.admitted),
                  static_cast<unsigned long long>(qst.tries),
                  qst.admitted ? static_cast<double>(qst.wait_ns_sum) / 1e6 /
                                     static_cast<double>(qst.admitted)
                               : 0.0);
    }
  }
  if (c.forced)
    std::printf("  (%llu growth steps forced past memory.max)\n",
                static_cast<unsigned long long>(c.forced.load()));
  if (!cache_kept) std::printf("  (dash's cache was reclaimed below its 84M)\n");
  return r;
}

void print(int round, const Config& cfg, const Result& r) {
  std::printf("%d %-8s %-5s %-9s finished %6.1f q/s  completed %6.1f q/s (etl %5.1f dash %5.1f "
              "adhoc %5.1f)  answered %6.1f q/s  kills: %3llu runaway / %4llu well-behaved "
              "(%5.1f per 1000 answered)  runaways %3llu  spills %3llu  never-fits %2llu  "
              "timed-out %3llu  longest wait %6.1f ms  admission wait %4.1f%%  peak %5.1fM  %s\n",
              round, policy_name(cfg.policy), cfg.queue ? "queue" : "block",
              cfg.caches ? "caches" : "no-caches", r.finished_qps, r.completed_qps,
              r.tenant_qps[0], r.tenant_qps[1], r.tenant_qps[2], r.answered_qps,
              static_cast<unsigned long long>(r.killed_runaway),
              static_cast<unsigned long long>(r.killed_good),
              r.answered ? 1000.0 * static_cast<double>(r.killed_good) /
                               static_cast<double>(r.answered)
                         : 0.0,
              static_cast<unsigned long long>(r.runaways),
              static_cast<unsigned long long>(r.spills),
              static_cast<unsigned long long>(r.never_fits),
              static_cast<unsigned long long>(r.timed_out), r.longest_wait_ms,
              100.0 * r.admit_wait_share, static_cast<double>(r.peak) / static_cast<double>(kMiB),
              r.ok ? "ok" : "FAILED");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  std::string policy = "all", front = "queue";
  int rounds = 1;
  bool seconds_given = false;
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
    } else if (a == "--front") {
      front = value("--front");
    } else if (a == "--caches") {
      cfg.caches = true;
    } else if (a == "--seconds") {
      cfg.seconds = std::atof(value("--seconds"));
      seconds_given = true;
    } else if (a == "--workers") {
      cfg.workers = std::atoi(value("--workers"));
    } else if (a == "--rounds") {
      rounds = std::atoi(value("--rounds"));
    } else if (a == "--verbose") {
      cfg.verbose = true;
    } else if (a == "--seed") {
      cfg.seed = std::strtoull(value("--seed"), nullptr, 10);
    } else if (a == "--serve") {
      cfg.port = std::atoi(value("--serve"));
    } else {
      std::fprintf(stderr,
                   "usage: %s [--policy today|admit|excess|growwait|spill|wait200|all|"
                   "alternate] [--front queue|block] [--caches] [--seconds S] [--workers N] "
                   "[--rounds N] [--seed N] [--verbose] [--serve PORT]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!(cfg.seconds > 0 && cfg.seconds <= 600) || cfg.workers < 3 || cfg.workers > 256 ||
      rounds < 1 || rounds > 100 || (front != "queue" && front != "block") || cfg.port < -1 ||
      cfg.port > 65535) {
    std::fputs("--seconds in (0, 600], --workers in [3, 256], --rounds in [1, 100], --front "
               "queue or block, --serve in [0, 65535]\n", stderr);
    return 2;
  }
  if (cfg.port >= 0 && !seconds_given) cfg.seconds = 0;  // serve until interrupted
  if (cfg.port >= 0) {
    std::signal(SIGINT, [](int) { g_interrupted = 1; });
    std::signal(SIGTERM, [](int) { g_interrupted = 1; });
  }
  cfg.queue = front == "queue";
  std::vector<Policy> policies;
  if (policy == "alternate") {
    policies.assign(std::begin(kPolicies), std::end(kPolicies));
  } else {
    for (Policy p : kPolicies)
      if (policy == policy_name(p)) policies = {p};
    if (policies.empty()) {
      std::fprintf(stderr, "unknown policy %s\n", policy.c_str());
      return 2;
    }
  }
  bool ok = true;
  const uint64_t seed = cfg.seed;
  for (int round = 0; round < rounds; ++round)
    for (Policy p : policies) {
      cfg.policy = p;
      cfg.seed = seed + static_cast<uint64_t>(round);
      const Result r = run(cfg);
      print(round + 1, cfg, r);
      ok &= r.ok;
    }
  std::puts(ok ? "query_service: ok" : "query_service: FAILED");
  return ok ? 0 : 1;
}
