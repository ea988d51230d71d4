// The query service's queries and result caches (query_service_work.hpp).
#include "query_service_work.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace qs {

namespace {
constexpr uint64_t kChunk = 4 * kMiB;  // one growth step of a runaway
constexpr int kSteps = 10;             // steps of work of a well-behaved query
constexpr auto kStepTime = std::chrono::milliseconds(2);
constexpr uint64_t kRunawayCap = 2048 * kMiB;  // a runaway past this was never stopped
constexpr auto kSpillGrace = std::chrono::milliseconds(20);
constexpr uint32_t kKeys = 1000;  // results a tenant's queries can ask for
}  // namespace

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

QuerySpec make_query(int tenant, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const bool is_etl = tenant == 0;
  QuerySpec p;
  p.tenant = tenant;
  p.estimate = (is_etl ? 16 : 8) * kMiB +
               static_cast<uint64_t>(u(rng) * static_cast<double>((is_etl ? 48 : 24) * kMiB));
  p.final_bytes =
      p.estimate + static_cast<uint64_t>(u(rng) * 0.5 * static_cast<double>(p.estimate));
  const double kind = u(rng);
  if (is_etl && kind < 0.05) p.final_bytes = 0;         // a runaway
  if (is_etl && kind > 0.995) p.estimate = 400 * kMiB;  // can never fit in etl
  if (p.estimate > p.final_bytes && p.final_bytes != 0) p.final_bytes = p.estimate;
  p.key = static_cast<uint32_t>(rng() % kKeys);
  return p;
}

// The callback runs on the killer's (or the preempting waiter's) thread. A kill or a preemption
// only tells the query to stop: it gives its memory back when it unwinds. A spill writes half of
// what the query holds to disk and gives that memory back at once, if the query is not in the
// middle of a request (its own thread holds mu then, and the callback never waits for it);
// otherwise the query does it at its next step.
Query::Query(memcg::Group& tenant, bool can_spill, Counters& c)
    : q_(std::make_shared<QueryState>()) {
  std::shared_ptr<QueryState> q = q_;
  member_ = std::make_unique<memcg::Member>(tenant, "query", [q, &c](memcg::Member& m) {
    const memcg::CancelReason why = memcg::Member::cancel_reason();
    if (why == memcg::CancelReason::kSpill) {
      std::unique_lock<std::mutex> lock(q->mu, std::try_to_lock);
      if (!lock.owns_lock() || q->res.bytes() == 0) {
        q->spill_later.store(true, std::memory_order_release);
        return;
      }
      if (q->unbound) return;  // the query ended: nothing to spill, `m` may be going
      const uint64_t out = q->res.bytes() / 2;
      q->res.shrink(out);
      q->spilled.fetch_add(out, std::memory_order_relaxed);
      ++c.spills;
      // Once only: chosen again, it is killed. (0 is always valid.)
      static_cast<void>(m.set_spill_grace(std::chrono::nanoseconds(0)));
      return;
    }
    if (why == memcg::CancelReason::kPreempt) q->preempted.store(true, std::memory_order_relaxed);
    q->stop.store(true, std::memory_order_release);
  });
  if (can_spill && member_->set_spill_grace(kSpillGrace) != 0) std::abort();
}

Query::~Query() {
  {
    std::lock_guard<std::mutex> lock(q_->mu);
    q_->res = memcg::Reservation();
    q_->unbound = true;
  }
  member_.reset();
}

bool ResultCache::put(uint32_t key, uint64_t bytes) {
  memcg::Reservation r(tenant_);
  // Charged before the lock: the charge may call reclaim() of this very cache.
  if (r.reserve(bytes) != memcg::ReserveStatus::kOk) return false;
  const int64_t units = r.units();
  memcg::Reservation old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      old = std::move(it->second->res);
      units_ -= old.units();
      lru_.erase(it->second);
      index_.erase(it);
    }
    lru_.push_front(Entry{key, std::move(r)});
    index_[key] = lru_.begin();
    units_ += units;
  }
  return true;  // `old` gives its memory back here, unlocked
}

bool ResultCache::get(uint32_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  lru_.splice(lru_.begin(), lru_, it->second);
  return true;
}

void ResultCache::clear() {
  registration_.reset();
  std::list<Entry> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.swap(lru_);
    index_.clear();
    units_ = 0;
  }
}

memcg::ReclaimResult ResultCache::reclaim(int64_t nr_to_scan, int) {
  std::list<Entry> out;
  int64_t units = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (units < nr_to_scan && !lru_.empty()) {
      auto last = std::prev(lru_.end());
      units += last->res.units();
      index_.erase(last->key);
      out.splice(out.begin(), lru_, last);
    }
    units_ -= units;
  }
  for (Entry& e : out) e.res.release();  // uncharge_direct: the waiting charges see it at once
  return {units, units};
}

void run_admitted(Query& query, const QuerySpec& spec, const QueryPolicy& policy, Counters& c,
                  ResultCache* cache, std::mt19937_64& rng) {
  QueryState& q = query.state();
  memcg::Member& member = query.member();
  const uint64_t t1 = now_ns();
  const bool runaway = spec.final_bytes == 0;
  if (runaway) ++c.runaways;
  const uint64_t target = runaway ? kRunawayCap : spec.final_bytes;
  const uint64_t step =
      runaway ? kChunk : std::max<uint64_t>(kMiB, (target - spec.estimate) / kSteps);
  int nomem_retries = 0;
  bool limited = false;  // its growth passed the tenant's memory.max: refused at once
  std::unique_lock<std::mutex> lock(q.mu, std::defer_lock);
  for (int i = 0; !q.stop.load(std::memory_order_acquire); ++i) {
    std::this_thread::sleep_for(kStepTime);  // the query's work
    lock.lock();
    if (q.spill_later.exchange(false, std::memory_order_acq_rel) &&
        member.spill_grace().count() > 0) {
      // Asked while it was in a request: it spills now (the same as the callback's spill).
      const uint64_t out = q.res.bytes() / 2;
      q.res.shrink(out);
      q.spilled.fetch_add(out, std::memory_order_relaxed);
      ++c.spills;
      if (member.set_spill_grace(std::chrono::nanoseconds(0)) != 0) std::abort();
    }
    // What was spilled is on disk: the work needs that much less from now on.
    const uint64_t need = target - std::min(target, q.spilled.load(std::memory_order_relaxed));
    if (q.res.bytes() >= need) {
      lock.unlock();
      break;
    }
    const uint64_t add = std::min(step, need - q.res.bytes());
    memcg::ReserveStatus gs;
    if (policy.grow_for) {
      const uint64_t w0 = now_ns();
      gs = q.res.grow_for(add, std::chrono::milliseconds(200));
      c.wait(now_ns() - w0);
      if (gs == memcg::ReserveStatus::kTimedOut) gs = q.res.grow(add);  // then the killer
    } else {
      gs = q.res.grow(add);
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
  bool completed = false;
  if (runaway) {
    c.runaway_ns += now_ns() - t1;
    c.runaway_peak_mib += q.res.bytes() / kMiB;
  }
  if (member.killed()) {
    ++(runaway ? c.killed_runaway : c.killed_good);
    if (!runaway) ++c.killed_good_of[spec.tenant];
  } else if (q.preempted.load(std::memory_order_relaxed)) {
    ++(runaway ? c.preempted_runaway : c.preempted_good);  // cancelled to make room
  } else if (limited && runaway) {
    ++c.limited_runaway;  // stopped by never-fits at its tenant's limit
  } else if (runaway) {
    ++c.runaway_unstopped;
    std::fprintf(stderr, "  (a runaway ended unstopped at %llu MiB)\n",
                 static_cast<unsigned long long>(q.res.bytes() / kMiB));
  } else {
    completed = true;
    ++c.done_of[spec.tenant];
    c.done_mib += spec.final_bytes / kMiB;
  }
  q.res.release();
  lock.unlock();
  // A completed query's result (1-4 MiB) goes to its tenant's cache, after its memory went back.
  if (completed && cache != nullptr) {
    const uint64_t size = kMiB + rng() % (3 * kMiB);
    ++(cache->put(spec.key, size) ? c.cached : c.cache_refused);
  }
}

}  // namespace qs
