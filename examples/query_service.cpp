// A three-tenant query service whose queries grow past their estimates.
//
// The service has a 512 MiB budget split between three tenants: etl (max 320M), dash (max 256M,
// min 128M, with an 84M cache of its own) and adhoc (max 256M, low 32M). Each query is a
// memcg::Member whose kill callback tells it to stop (it notices between two steps of its work,
// like a real query), admitted with Reservation::reserve_for, then growing in steps past its
// estimate: well-behaved
// queries end at their estimate plus 0-50 %, and 5 % of etl's queries are runaways that grow
// until the OOM killer stops them. A few etl queries ask for more than etl can ever hold.
//
// The admission front-end, the same for every policy (how a service should use reserve_for):
// each tenant has a queue of queries not yet admitted. 16 worker threads each take the next query
// of a tenant picked at random (40 % etl, 30 % dash, 30 % adhoc; a new query when the queue is
// empty) and try its admission with reserve_for for at most 5 ms (kAdmitTry). If it is not
// admitted by then, the worker puts the query back at the front of its tenant's queue and takes
// a query of another tenant: a worker does not sit in one tenant's admission queue while other
// tenants' queries are ready. A query's admission deadline is 2 s from its first try
// (kAdmitTimeout) over all its tries; past it, it counts as timed out. (Before this front-end
// every worker blocked in reserve_for(estimate, 2s) of the query it drew, so once etl's
// admissions queued, the workers gathered there and the service ran at etl's rate:
// docs/BENCHMARKS-policy.md.)
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
// A spill: an etl query asked to spill (CancelReason::kSpill) writes half of what it holds to
// disk and gives that memory back, in the callback if the query is between two requests (the
// OOM killer then finds the room at once), else at its next step; it carries on, needing that
// much less from then on. It spills at most once; chosen again, it is killed.
//
// Prints per run: finished queries/s (every admitted query that ended: completed, killed,
// preempted, stopped at a limit), completed queries/s (well-behaved queries that ran to their
// end: the service's real output, the figure its goals use), kills of runaways and of
// well-behaved queries, spills, never-fits, timed-out admissions, the longest wait (a query's
// whole wait for admission, over its tries), and the share of the workers' time spent waiting
// for admission. Exits non-zero unless every runaway was
// stopped, the budget held, and every counter was back to 0 at the end. Run without arguments it
// runs `all` for 3 s (the CI test). --verbose adds completed queries per tenant and MiB of
// completed work per second, kills of well-behaved queries per tenant, the runaways' life and
// size, svc's mean usage and promised headroom, and each group's admission figures
// (admit_stats). --serve PORT serves the controller over HTTP on 127.0.0.1 while it runs (the
// page, /metrics, /v1/oom: example_server.hpp) until --seconds pass or SIGINT/SIGTERM.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memcg/alloc/lru_cache.hpp"
#include "memcg/memcg.hpp"
#include "example_server.hpp"

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBudget = 512 * kMiB;
constexpr uint64_t kChunk = 4 * kMiB;  // one growth step
constexpr int kSteps = 10;             // steps of work of a well-behaved query
constexpr auto kStepTime = std::chrono::milliseconds(2);
constexpr uint64_t kRunawayCap = 2048 * kMiB;  // a runaway past this was never stopped

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
bool growth_wait(Policy p) { return p == Policy::kGrowWait || p == Policy::kAll; }
bool spills(Policy p) { return p == Policy::kSpill || p == Policy::kAll; }
memcg::OomOrder oom_order(Policy p) {
  return p == Policy::kExcess ? memcg::OomOrder::kExcess
         : p == Policy::kAll  ? memcg::OomOrder::kAuto
                              : memcg::OomOrder::kKernel;
}

volatile std::sig_atomic_t g_interrupted = 0;  // --serve: SIGINT or SIGTERM ends the run

constexpr auto kSpillGrace = std::chrono::milliseconds(20);
constexpr auto kAdmitTimeout = std::chrono::seconds(2);  // a query's whole admission deadline
constexpr auto kAdmitTry = std::chrono::milliseconds(5);  // one worker's try at it

struct Counters {
  std::atomic<uint64_t> done{0}, runaways{0}, killed_runaway{0}, killed_good{0}, spills{0},
      never_fits{0}, timed_out{0}, failed{0}, runaway_unstopped{0}, longest_wait_ns{0}, forced{0},
      preempted_runaway{0}, preempted_good{0}, limited_runaway{0}, admit_wait_ns{0}, done_etl{0},
      done_mib{0}, runaway_ns{0}, runaway_peak_mib{0};
  std::atomic<uint64_t> killed_good_of[3] = {0, 0, 0};  // by tenant: etl, dash, adhoc
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

// What a query shares with its member's callback, which may run on another thread (the
// killer's) at any time, also while the query ends: shared, so that it outlives both.
struct QueryState {
  std::mutex mu;
  memcg::Reservation res;  // the query's memory, under mu
  bool unbound = false;    // under mu: the query has ended and res is empty (its member going)
  std::atomic<bool> stop{false}, preempted{false}, spill_later{false};
  std::atomic<uint64_t> spilled{0};  // bytes written to disk by a spill, not needed any more
};

// One query of a tenant's queue: admitted at `estimate`, growing to `final_bytes` (0: a
// runaway); `first_ns` is when a worker first tried to admit it (0: not yet), the start of its
// admission deadline (kAdmitTimeout).
struct Pending {
  int tenant = 0;  // 0 etl, 1 dash, 2 adhoc
  uint64_t estimate = 0, final_bytes = 0, first_ns = 0;
};

enum class Outcome { kEnded, kRequeue };

// Runs `p` on `g`: tries its admission for at most kAdmitTry (never past its deadline); if it
// is not admitted in that time, kRequeue (nothing counted but the wait), else the query runs to
// its end (kEnded).
Outcome run_query(memcg::Group& g, const Pending& p, bool can_spill, Policy policy,
                  Counters& c) {
  const uint64_t estimate = p.estimate, final_bytes = p.final_bytes;
  const auto q = std::make_shared<QueryState>();
  // The callback runs on the killer's (or the preempting waiter's) thread. A kill or a
  // preemption only tells the query to stop: it gives its memory back when it unwinds
  // (res.release()). A spill writes half of what the query holds to disk and gives that memory
  // back at once, if the query is not in the middle of a request (its own thread holds mu
  // then, and the callback never waits for it); otherwise the query does it at its next step.
  memcg::Member member(g, "query", [q, &c](memcg::Member& m) {
    const memcg::CancelReason why = memcg::Member::cancel_reason();
    if (why == memcg::CancelReason::kSpill) {
      std::unique_lock<std::mutex> lock(q->mu, std::try_to_lock);
      if (!lock.owns_lock()) {
        q->spill_later.store(true, std::memory_order_release);
        return;
      }
      if (q->unbound) return;  // the query ended: nothing to spill, `m` may be going
      const uint64_t out = q->res.bytes() / 2;
      q->res.shrink(out);
      q->spilled.fetch_add(out, std::memory_order_relaxed);
      ++c.spills;
      // Once only: chosen again, it is killed. (Cannot fail: 0 is always valid.) The query
      // cannot end meanwhile: it takes mu before its member goes.
      static_cast<void>(m.set_spill_grace(std::chrono::nanoseconds(0)));
      return;
    }
    if (why == memcg::CancelReason::kPreempt) q->preempted.store(true, std::memory_order_relaxed);
    q->stop.store(true, std::memory_order_release);
  });
  // Before the member goes, on every path: the reservation gives everything back and is unbound.
  struct Unbind {
    QueryState& s;
    ~Unbind() {
      std::lock_guard<std::mutex> lock(s.mu);
      s.res = memcg::Reservation();
      s.unbound = true;
    }
  } unbind{*q};
  std::mutex& mu = q->mu;
  memcg::Reservation& res = q->res;
  std::atomic<bool>& stop = q->stop;
  std::atomic<bool>& preempted = q->preempted;
  std::atomic<bool>& spill_later = q->spill_later;
  std::atomic<uint64_t>& spilled = q->spilled;
  if (can_spill && member.set_spill_grace(kSpillGrace) != 0) std::abort();
  memcg::ReserveOptions options;
  options.oom = memcg::OomPolicy::kPieces;
  options.growth_wait = growth_wait(policy);
  std::unique_lock<std::mutex> lock(mu);
  res = memcg::Reservation(member, options);
  const uint64_t t0 = now_ns();
  const uint64_t deadline = p.first_ns + static_cast<uint64_t>(
                                             std::chrono::nanoseconds(kAdmitTimeout).count());
  const auto left = std::chrono::nanoseconds(deadline > t0 ? deadline - t0 : 0);
  const memcg::ReserveStatus st = res.reserve_for(estimate, std::min<std::chrono::nanoseconds>(
                                                                left, kAdmitTry));
  lock.unlock();
  const uint64_t t1 = now_ns();
  c.admit_wait_ns += t1 - t0;
  if (st == memcg::ReserveStatus::kTimedOut && t1 < deadline) return Outcome::kRequeue;
  const uint64_t waited = t1 - p.first_ns;  // the query's whole wait, over its tries
  c.wait(waited);
  if (st == memcg::ReserveStatus::kNeverFits) {
    ++c.never_fits;
    return Outcome::kEnded;
  }
  if (!memcg::held(st)) {
    ++(st == memcg::ReserveStatus::kTimedOut ? c.timed_out : c.failed);
    return Outcome::kEnded;
  }
  const bool runaway = final_bytes == 0;
  if (runaway) ++c.runaways;
  const uint64_t target = runaway ? kRunawayCap : final_bytes;
  const uint64_t step = runaway ? kChunk : std::max<uint64_t>(kMiB, (target - estimate) / kSteps);
  int nomem_retries = 0;
  bool limited = false;  // its growth passed the tenant's memory.max: refused at once
  for (int i = 0; !stop.load(std::memory_order_acquire); ++i) {
    std::this_thread::sleep_for(kStepTime);  // the query's work
    lock.lock();
    if (spill_later.exchange(false, std::memory_order_acq_rel) &&
        member.spill_grace().count() > 0) {
      // Asked while it was in a request: it spills now (the same as the callback's spill).
      const uint64_t out = res.bytes() / 2;
      res.shrink(out);
      spilled.fetch_add(out, std::memory_order_relaxed);
      ++c.spills;
      if (member.set_spill_grace(std::chrono::nanoseconds(0)) != 0) std::abort();
    }
    // What was spilled is on disk: the work needs that much less from now on.
    const uint64_t need = target - std::min(target, spilled.load(std::memory_order_relaxed));
    if (res.bytes() >= need) {
      lock.unlock();
      break;
    }
    const uint64_t add = std::min(step, need - res.bytes());
    memcg::ReserveStatus gs;
    if (policy == Policy::kWait200) {
      const uint64_t w0 = now_ns();
      gs = res.grow_for(add, std::chrono::milliseconds(200));
      c.wait(now_ns() - w0);
      if (gs == memcg::ReserveStatus::kTimedOut) gs = res.grow(add);  // then the killer
    } else {
      gs = res.grow(add);
    }
    lock.unlock();
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
      std::fprintf(stderr, "  (a %s query's growth failed: %s, %d retries)\n",
                   runaway ? "runaway" : "well-behaved", memcg::reserve_status_name(gs),
                   nomem_retries);
      break;
    }
    if (!runaway && i >= kSteps * 4) break;  // bounded even if growth stalls
  }
  lock.lock();
  if (runaway) {
    c.runaway_ns += now_ns() - t1;
    c.runaway_peak_mib += res.bytes() / kMiB;
  }
  if (member.killed()) {
    ++(runaway ? c.killed_runaway : c.killed_good);
    if (!runaway) ++c.killed_good_of[p.tenant];
  } else if (preempted.load(std::memory_order_relaxed)) {
    ++(runaway ? c.preempted_runaway : c.preempted_good);  // cancelled to make room
  } else if (limited && runaway) {
    ++c.limited_runaway;  // stopped by never-fits at its tenant's limit
  } else if (runaway) {
    ++c.runaway_unstopped;
    std::fprintf(stderr, "  (a runaway ended unstopped at %llu MiB)\n",
                 static_cast<unsigned long long>(res.bytes() / kMiB));
  } else {
    ++c.done;
    if (g.name() == "etl") ++c.done_etl;
    c.done_mib += final_bytes / kMiB;
  }
  res.release();
  return Outcome::kEnded;
}

// The tenants' queues of queries not yet admitted: a worker takes the next query of a tenant (a
// new one when its queue is empty) and puts it back at the front when its admission try ends
// without memory.
struct Queues {
  std::mutex mu;
  std::deque<Pending> q[3];
};

struct Result {
  double finished_qps = 0, completed_qps = 0, admit_wait_share = 0;
  uint64_t killed_runaway = 0, killed_good = 0, runaways = 0, runaway_unstopped = 0, spills = 0,
           limited_runaway = 0,
           never_fits = 0, timed_out = 0, failed = 0, done = 0, preempted_runaway = 0, preempted_good = 0;
  double longest_wait_ms = 0;
  uint64_t peak = 0, sampled = 0, end_usage = 0;
  bool ok = false;
};

Result run(Policy policy, double seconds, int workers, uint64_t seed, bool verbose, int port) {
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
  // Learned-peak admission is on by default (auto); without it a fixed growth factor of 1
  // admits as before it.
  const char* growth = learned_admission(policy) ? "auto" : "1";
  for (memcg::Group* g : {t.svc.get(), t.etl.get(), t.dash.get(), t.adhoc.get()})
    if (memcg::set_oom_order(*g, oom_order(policy)) != 0 ||
        memcg::write_file(*g, "memory.admit.growth", growth) != 0)
      return {};

  // dash's cache, protected by its memory.min.
  memcg::LruCache cache(*t.dash, "dash-cache");
  const int64_t cache_units = static_cast<int64_t>((84 * kMiB) / ctl.to_bytes(1));
  const int64_t cached = cache.grow(cache_units);
  memcg_example::ExampleServer server;  // stopped before the groups and the controller go
  if (port >= 0 && !server.start(ctl, port)) std::exit(3);

  Counters c;
  std::atomic<bool> stop_sampler{false};
  std::atomic<uint64_t> peak{0};
  uint64_t usage_sum = 0, promised_sum = 0, samples = 0;  // svc's, in bytes and units
  std::jthread sampler([&] {
    while (!stop_sampler.load(std::memory_order_relaxed)) {
      const uint64_t u = t.svc->current();
      if (u > peak.load(std::memory_order_relaxed)) peak.store(u, std::memory_order_relaxed);
      if (verbose) {  // the sampler's thread alone writes these; read after it is joined
        usage_sum += u;
        promised_sum += static_cast<uint64_t>(
            std::max<int64_t>(0, memcg::admit_stats(*t.svc).promised_units));
        ++samples;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(seconds));
  Queues queues;
  std::vector<std::jthread> pool;
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(w));
      std::uniform_real_distribution<double> u(0.0, 1.0);
      int skip = -1;  // the tenant whose query this worker just put back
      while (std::chrono::steady_clock::now() < end && !g_interrupted) {
        int tenant = -1;
        while (tenant < 0 || tenant == skip) {
          const double pick = u(rng);
          tenant = pick < 0.4 ? 0 : pick < 0.7 ? 1 : 2;
        }
        skip = -1;
        Pending p;
        bool queued = false;
        {
          std::lock_guard<std::mutex> lock(queues.mu);
          if (!queues.q[tenant].empty()) {
            p = queues.q[tenant].front();
            queues.q[tenant].pop_front();
            queued = true;
          }
        }
        const bool is_etl = tenant == 0;
        if (!queued) {  // a new query of that tenant
          p.tenant = tenant;
          p.estimate = (is_etl ? 16 : 8) * kMiB +
                       static_cast<uint64_t>(u(rng) * static_cast<double>((is_etl ? 48 : 24) * kMiB));
          p.final_bytes =
              p.estimate + static_cast<uint64_t>(u(rng) * 0.5 * static_cast<double>(p.estimate));
          const double kind = u(rng);
          if (is_etl && kind < 0.05) p.final_bytes = 0;         // a runaway
          if (is_etl && kind > 0.995) p.estimate = 400 * kMiB;  // can never fit in etl
          if (p.estimate > p.final_bytes && p.final_bytes != 0) p.final_bytes = p.estimate;
        }
        if (p.first_ns == 0) p.first_ns = now_ns();
        memcg::Group& g = tenant == 0 ? *t.etl : tenant == 1 ? *t.dash : *t.adhoc;
        if (run_query(g, p, is_etl && spills(policy), policy, c) == Outcome::kRequeue) {
          std::lock_guard<std::mutex> lock(queues.mu);
          queues.q[tenant].push_front(p);
          skip = tenant;  // and takes another tenant's query
        }
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
  // Finished: every admitted query that ended; completed: the well-behaved ones that ran to their
  // end (a killed query is work lost, not work served).
  r.finished_qps = static_cast<double>(c.done + c.killed_good + c.killed_runaway +
                                       c.preempted_good + c.preempted_runaway + c.limited_runaway +
                                       c.failed) /
                   elapsed;
  r.completed_qps = static_cast<double>(c.done) / elapsed;
  r.admit_wait_share =
      static_cast<double>(c.admit_wait_ns.load()) / (elapsed * 1e9 * static_cast<double>(workers));
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
  if (verbose)
    std::printf("  completed: etl %.1f q/s, dash+adhoc %.1f q/s, %.0f MiB of final size/s\n",
                static_cast<double>(c.done_etl) / elapsed,
                static_cast<double>(c.done - c.done_etl) / elapsed,
                static_cast<double>(c.done_mib) / elapsed);
  if (verbose)
    std::printf("  well-behaved kills: etl %llu, dash %llu, adhoc %llu\n",
                static_cast<unsigned long long>(c.killed_good_of[0].load()),
                static_cast<unsigned long long>(c.killed_good_of[1].load()),
                static_cast<unsigned long long>(c.killed_good_of[2].load()));
  if (verbose && c.runaways > 0)
    std::printf("  runaways: %.1f ms from admission to their end, %.0f MiB at the end, on "
                "average\n",
                static_cast<double>(c.runaway_ns) / 1e6 / static_cast<double>(c.runaways),
                static_cast<double>(c.runaway_peak_mib) / static_cast<double>(c.runaways));
  if (verbose && samples > 0)
    std::printf("  svc on average: memory.current %.1fM, promised to admitted queries %.1fM\n",
                static_cast<double>(usage_sum) / static_cast<double>(samples) / kMiB,
                static_cast<double>(ctl.to_bytes(1)) * static_cast<double>(promised_sum) /
                    static_cast<double>(samples) / kMiB);
  if (verbose)
    for (memcg::Group* g : {t.svc.get(), t.etl.get(), t.dash.get(), t.adhoc.get()}) {
      const memcg::AdmitStats a = memcg::admit_stats(*g);
      std::printf("  %-5s admit.growth %.3f (%s)  tolerance %.3f  learned %llu  cut short %llu  "
                  "admit_waits %llu  growth_waits %llu (granted %llu)\n",
                  g->name().c_str(), a.growth_permille / 1000.0, a.fixed ? "fixed" : "auto",
                  a.tolerance_permille / 1000.0,
                  static_cast<unsigned long long>(a.samples),
                  static_cast<unsigned long long>(a.skipped),
                  static_cast<unsigned long long>(a.admit_waits),
                  static_cast<unsigned long long>(a.growth_waits),
                  static_cast<unsigned long long>(a.growth_granted));
    }
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

void print(int round, Policy p, const Result& r) {
  std::printf("%d %-8s finished %7.1f q/s  completed %7.1f q/s  kills: %4llu runaway / %4llu "
              "well-behaved  runaways %4llu  preempted %llu/%llu  limited %llu  spills %3llu  "
              "never-fits %3llu  timed-out %3llu  longest wait %7.1f ms  admission wait %4.1f%%  "
              "peak %5.1fM  end %llu  %s\n",
              round, policy_name(p), r.finished_qps, r.completed_qps,
              static_cast<unsigned long long>(r.killed_runaway),
              static_cast<unsigned long long>(r.killed_good),
              static_cast<unsigned long long>(r.runaways),
              static_cast<unsigned long long>(r.preempted_runaway),
              static_cast<unsigned long long>(r.preempted_good),
              static_cast<unsigned long long>(r.limited_runaway),
              static_cast<unsigned long long>(r.spills),
              static_cast<unsigned long long>(r.never_fits),
              static_cast<unsigned long long>(r.timed_out), r.longest_wait_ms,
              100.0 * r.admit_wait_share, static_cast<double>(r.peak) / static_cast<double>(kMiB),
              static_cast<unsigned long long>(r.end_usage), r.ok ? "ok" : "FAILED");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string policy = "all";
  double seconds = 3;
  int workers = 16, rounds = 1;
  bool verbose = false;
  uint64_t seed = 1;
  int port = -1;
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
    } else if (a == "--verbose") {
      verbose = true;
    } else if (a == "--seed") {
      seed = std::strtoull(value("--seed"), nullptr, 10);
    } else if (a == "--serve") {
      port = std::atoi(value("--serve"));
    } else {
      std::fprintf(stderr,
                   "usage: %s [--policy today|admit|excess|growwait|spill|wait200|all|"
                   "alternate] [--seconds S] [--workers N] [--rounds N] [--seed N] [--verbose] "
                   "[--serve PORT]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!(seconds > 0 && seconds <= 600) || workers < 1 || workers > 256 || rounds < 1 ||
      rounds > 100 || port < -1 || port > 65535) {
    std::fputs("--seconds in (0, 600], --workers in [1, 256], --rounds in [1, 100], --serve in "
               "[0, 65535]\n", stderr);
    return 2;
  }
  if (port >= 0) {
    std::signal(SIGINT, [](int) { g_interrupted = 1; });
    std::signal(SIGTERM, [](int) { g_interrupted = 1; });
  }
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
  for (int round = 0; round < rounds; ++round)
    for (Policy p : policies) {
      const Result r =
          run(p, seconds, workers, seed + static_cast<uint64_t>(round), verbose, port);
      print(round + 1, p, r);
      ok &= r.ok;
    }
  std::puts(ok ? "query_service: ok" : "query_service: FAILED");
  return ok ? 0 : 1;
}
