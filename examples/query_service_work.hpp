// The query service's queries and result caches (examples/query_service.cpp): what one query
// does once admitted, the member whose kill callback stops it, and a tenant's result cache, a
// memcg::Reclaimer whose entries hold Reservations.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <random>
#include <unordered_map>
#include <vector>

#include "memcg/memcg.hpp"

namespace qs {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int kTenants = 3;  // etl, dash, adhoc
const char* const kTenantNames[kTenants] = {"etl", "dash", "adhoc"};

// What the policy changes in a query (query_service.cpp picks it).
struct QueryPolicy {
  bool growth_wait = true;  // ReserveOptions::growth_wait
  bool grow_for = false;    // growth by grow_for(chunk, 200ms), then grow()
  bool spill = false;       // etl queries spill once before a kill
};

struct Counters {
  std::atomic<uint64_t> runaways{0}, killed_runaway{0}, killed_good{0}, spills{0}, never_fits{0},
      timed_out{0}, failed{0}, runaway_unstopped{0}, longest_wait_ns{0}, forced{0},
      preempted_runaway{0}, preempted_good{0}, limited_runaway{0}, admit_wait_ns{0}, done_mib{0},
      runaway_ns{0}, runaway_peak_mib{0}, cache_hits{0}, cached{0}, cache_refused{0};
  std::atomic<uint64_t> done_of[kTenants] = {0, 0, 0};         // completed, by tenant
  std::atomic<uint64_t> killed_good_of[kTenants] = {0, 0, 0};  // well-behaved kills
  std::atomic<uint64_t> hits_of[kTenants] = {0, 0, 0};         // answered from the cache
  uint64_t done() const { return done_of[0] + done_of[1] + done_of[2]; }
  void wait(uint64_t ns) {
    uint64_t w = longest_wait_ns.load();
    while (ns > w && !longest_wait_ns.compare_exchange_weak(w, ns)) {
    }
  }
};

// One query: admitted at `estimate`, growing to `final_bytes` (0: a runaway); `key` names its
// result (a cache hit answers it without running).
struct QuerySpec {
  int tenant = 0;
  uint64_t estimate = 0, final_bytes = 0;
  uint32_t key = 0;
};
QuerySpec make_query(int tenant, std::mt19937_64& rng);

// What a query shares with its member's callback, which may run on another thread (the
// killer's) at any time, also while the query ends: shared, so that it outlives both.
struct QueryState {
  std::mutex mu;
  memcg::Reservation res;  // the query's memory, under mu
  bool unbound = false;    // under mu: the query has ended and res is empty (its member going)
  std::atomic<bool> stop{false}, preempted{false}, spill_later{false};
  std::atomic<uint64_t> spilled{0};  // bytes written to disk by a spill, not needed any more
};

// A query's member and state. The destructor empties the reservation (under the state's mutex)
// before the member goes, so that a callback running late finds nothing to touch.
class Query {
 public:
  Query(memcg::Group& tenant, bool can_spill, Counters& c);
  ~Query();
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;
  memcg::Member& member() { return *member_; }
  QueryState& state() { return *q_; }

 private:
  std::shared_ptr<QueryState> q_;
  std::unique_ptr<memcg::Member> member_;
};

// A tenant's result cache: finished queries' results (1-4 MiB), each entry holding a
// Reservation of its tenant, evicted oldest first when reclaim asks (reclaim.hpp's contract:
// charge before taking the lock, uncharge inside reclaim() straight from the counters, the
// registration last). Nothing bounds it but its tenant's limits: it fills what the queries leave.
class ResultCache final : public memcg::Reclaimer {
 public:
  explicit ResultCache(memcg::Group& tenant) : tenant_(tenant), registration_(tenant, *this) {}
  ~ResultCache() override { clear(); }
  // Stores `bytes` of result under `key`; false when the tenant has no room (a plain reserve():
  // reclaim but never the OOM killer for a result).
  bool put(uint32_t key, uint64_t bytes);
  bool get(uint32_t key);  // a hit moves the entry to the front
  uint64_t bytes() const { return static_cast<uint64_t>(units_.load()) * unit_; }
  void clear();  // unregisters first, then gives everything back
  int64_t reclaimable() const noexcept override { return units_.load(std::memory_order_relaxed); }
  memcg::ReclaimResult reclaim(int64_t nr_to_scan, int priority) override;

 private:
  struct Entry {
    uint32_t key;
    memcg::Reservation res;
  };
  memcg::Group& tenant_;
  const uint64_t unit_ = tenant_.controller().unit_size();
  std::mutex mu_;
  std::list<Entry> lru_;  // front: most recent
  std::unordered_map<uint32_t, std::list<Entry>::iterator> index_;
  std::atomic<int64_t> units_{0};
  memcg::ReclaimerRegistration registration_;  // last: destroyed first
};

// Runs an admitted query (q.state().res holds its estimate) to its end: growth steps past the
// estimate, a kill, a preemption or a spill; counts the outcome, caches a completed query's
// result in `cache` (if any). `admitted_ns` is when it was admitted (steady clock).
void run_admitted(Query& q, const QuerySpec& spec, const QueryPolicy& policy, Counters& c,
                  ResultCache* cache, std::mt19937_64& rng);

uint64_t now_ns();  // steady clock

}  // namespace qs
