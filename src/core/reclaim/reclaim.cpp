// The reclaim driver: registrations of reclaimers, the walk over the reclaim root's subtree with
// effective protection, proportional scan targets and rising priority.
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/base/internal/lock.hpp"

#include <algorithm>
#include <unordered_map>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/base/internal/int128.hpp"
#include "memcg/counter/protection.hpp"
#include "memcg/core/reclaim/vmpressure.hpp"

namespace memcg {

namespace {

// A thread as seen by unregistration: the registration whose in-flight call it waits for, if any.
// Lets an unregistration made from inside a reclaimer see whether waiting would close a cycle.
struct CallerThread {
  const ReclaimerEntry* waiting_for = nullptr;  // guarded by g_wait_mutex
};
thread_local CallerThread tl_caller;

// Held while a thread records what it waits for and while it walks the chain of waits. A thread
// whose call ends while a walker may be reading its record passes through it once (see
// CallGuard), so a record read by a walker stays alive for the walk.
std::mutex g_wait_mutex;
// Threads walking (or about to): a call that ends reads it after clearing its caller (seq_cst on
// both sides, Dekker-style), so a walker that saw the caller is waited out.
std::atomic<int> g_nr_walkers{0};

}  // namespace

// One registration. `call_mutex` is held for the duration of a call into the reclaimer: it keeps
// calls of one registration from running concurrently and lets unregistration wait for an
// in-flight call. `caller` names the thread in that call (null between calls).
struct ReclaimerEntry {
  Reclaimer* reclaimer;
  Group* group;
  std::mutex call_mutex;
  std::atomic<bool> removed{false};
  std::atomic<const CallerThread*> caller{nullptr};
};

struct ReclaimAccess {
  static void add(Group& g, std::shared_ptr<ReclaimerEntry> e) {
    internal::LockGuard lock(g.policy_mutex_);
    g.reclaimers_.push_back(std::move(e));
  }
  static void remove(Group& g, const ReclaimerEntry* e) {
    internal::LockGuard lock(g.policy_mutex_);
    auto& v = g.reclaimers_;
    v.erase(std::remove_if(v.begin(), v.end(), [e](const auto& p) { return p.get() == e; }),
            v.end());
  }
  static std::vector<std::shared_ptr<ReclaimerEntry>> snapshot(Group& g) {
    internal::LockGuard lock(g.policy_mutex_);
    return g.reclaimers_;
  }
  static std::atomic<uint64_t>& cursor(Group& g) { return g.reclaim_cursor_; }
};

struct ReclaimerRegistration::Entry : ReclaimerEntry {};

namespace {

// The innermost registration whose reclaim() runs on this thread; null outside every call.
thread_local const ReclaimerEntry* tl_calling = nullptr;

// Longest chain of waits walked before giving up and treating it as a cycle (threads waiting on
// each other's reclaimers; never anywhere near this in practice).
constexpr int kMaxWaitChain = 1024;

// True when waiting for `e`'s in-flight call from this thread could never end: the call runs on
// this thread (a reclaimer unregistering itself, or a call this thread is nested in), or the
// thread running it waits, directly or through others, for a call running on this thread.
// REQUIRES: g_wait_mutex held, g_nr_walkers raised.
bool wait_would_deadlock(const ReclaimerEntry& e) {
  const ReclaimerEntry* want = &e;
  for (int hops = 0; hops < kMaxWaitChain; ++hops) {
    const CallerThread* t = want->caller.load(std::memory_order_seq_cst);
    if (t == nullptr) return false;  // no call in flight (or one just starting: it sees our wait)
    if (t == &tl_caller) return true;
    want = t->waiting_for;  // t is inside a call: alive until it passes g_wait_mutex
    if (want == nullptr) return false;
  }
  return true;
}

// Waits until no call of `e` runs on another thread, unless that could deadlock (see above): then
// returns at once, and the call may still be running.
void wait_for_call(ReclaimerEntry& e) {
  if (tl_calling == nullptr) {
    // In no call: no thread can be waiting for this one, so the wait ends.
    std::lock_guard wait(e.call_mutex);
    return;
  }
  g_nr_walkers.fetch_add(1, std::memory_order_seq_cst);
  bool wait = false;
  {
    std::lock_guard lock(g_wait_mutex);
    if (!wait_would_deadlock(e)) {
      tl_caller.waiting_for = &e;  // a thread that would wait for us finds the cycle and does not
      wait = true;
    }
  }
  g_nr_walkers.fetch_sub(1, std::memory_order_seq_cst);
  if (!wait) return;
  { std::lock_guard in_flight(e.call_mutex); }
  std::lock_guard lock(g_wait_mutex);
  tl_caller.waiting_for = nullptr;
}

}  // namespace

ReclaimerRegistration::ReclaimerRegistration(Group& group, Reclaimer& reclaimer)
    : entry_(std::make_shared<Entry>()) {
  entry_->reclaimer = &reclaimer;
  entry_->group = &group;
  group.get();
  ReclaimAccess::add(group, entry_);
}

ReclaimerRegistration::ReclaimerRegistration(ReclaimerRegistration&& o) noexcept = default;

ReclaimerRegistration& ReclaimerRegistration::operator=(ReclaimerRegistration&& o) noexcept {
  if (this != &o) {
    reset();
    entry_ = std::move(o.entry_);
  }
  return *this;
}

void ReclaimerRegistration::reset() noexcept {
  if (!entry_) return;
  entry_->removed.store(true, std::memory_order_release);
  ReclaimAccess::remove(*entry_->group, entry_.get());
  // Wait for a call in flight on another thread, unless that could never end (reclaim.hpp). The
  // group's reference can go either way: a call in flight runs under the walk's own reference.
  wait_for_call(*entry_);
  entry_->group->put();
  entry_.reset();
}

namespace {

constexpr int kDefPriority = 12;  // the kernel's DEF_PRIORITY: scan 1/4096 of each list first
constexpr int64_t kSwapClusterBytes = 32 * 4096;

// One group of the walk, with its inputs and effective protection.
struct WalkNode {
  GroupRef group;
  int parent;  // index in the walk, -1 for the reclaim root
  EffectiveProtection eff;
};

std::vector<WalkNode> collect_subtree(Group& root) {
  std::vector<WalkNode> nodes;
  std::unordered_map<const Group*, int> index;
  root.controller().walk(root, [&](Group& g) {
    // A group whose last reference is gone is being released: skip it and, since its children
    // keep it alive, it has none.
    GroupRef ref = GroupRef::try_acquire(&g);
    if (!ref) return;
    const int parent = &g == &root ? -1 : index.at(g.parent());
    index.emplace(&g, static_cast<int>(nodes.size()));
    nodes.push_back({std::move(ref), parent, {}});
  });
  return nodes;
}

ProtectionInput input_of(const Group& g) {
  const PageCounter& m = g.memory();
  return {m.usage(), m.min(), m.low(), m.children_min_usage(), m.children_low_usage()};
}

// Top-down, so that each parent's values are fresh when its children are computed.
void compute_walk_protection(std::vector<WalkNode>& nodes, bool recursive) {
  for (WalkNode& n : nodes) {
    if (n.parent < 0) {
      n.eff = {};  // the reclaim root's own protection is ignored
      continue;
    }
    const WalkNode& p = nodes[n.parent];
    const ProtectionInput self = input_of(*n.group);
    if (self.usage == 0) {
      n.eff = {};
    } else if (p.parent < 0) {
      n.eff = {self.min, self.low};  // a child of the reclaim root gets its declared values
    } else {
      n.eff = compute_protection(self, input_of(*p.group), p.eff, recursive);
    }
  }
}

// Exclusive use of one registration for the span of a group visit: held, it guarantees the
// reclaimer is alive (unregistration waits for it) and not being called by another thread.
class CallGuard {
 public:
  explicit CallGuard(ReclaimerEntry& e) : e_(e), lock_(e.call_mutex, std::try_to_lock) {
    live_ = lock_.owns_lock() && !e.removed.load(std::memory_order_acquire);
    if (live_) {
      outer_ = tl_calling;
      tl_calling = &e;
      e.caller.store(&tl_caller, std::memory_order_seq_cst);
    }
  }
  ~CallGuard() {
    if (!live_) return;
    tl_calling = outer_;
    // Before the call mutex is released (after this body). A walker that read this thread as the
    // caller holds g_wait_mutex until its walk ends: pass through it so this thread's record
    // outlives the walk. seq_cst store then load: either the walker's count is seen here, or
    // the walker's later load of `caller` sees null.
    e_.caller.store(nullptr, std::memory_order_seq_cst);
    if (g_nr_walkers.load(std::memory_order_seq_cst) != 0) std::lock_guard pass(g_wait_mutex);
  }
  bool live() const { return live_; }

  // Calls the reclaimer; never lets an exception or an impossible report through. What it
  // reports is clamped to what it was asked to scan, so no sum of reports can overflow.
  ReclaimResult call(int64_t nr_to_scan, int priority) {
    ReclaimResult r;
    try {
      r = e_.reclaimer->reclaim(nr_to_scan, priority);
    } catch (...) {
      r = {};
    }
    if (r.scanned < 0 || r.reclaimed < 0 || r.reclaimed > r.scanned) return {};
    r.scanned = std::min(r.scanned, nr_to_scan);
    r.reclaimed = std::min(r.reclaimed, r.scanned);
    return r;
  }
  int64_t size() const noexcept { return e_.reclaimer->reclaimable(); }

 private:
  ReclaimerEntry& e_;
  std::unique_lock<std::mutex> lock_;
  const ReclaimerEntry* outer_ = nullptr;
  bool live_ = false;
};

}  // namespace

int64_t reclaim(Group& root, int64_t nr_units, ReclaimReason reason, ReclaimStats* stats) {
  Controller& ctl = root.controller();
  const int64_t cluster = std::max<int64_t>(1, kSwapClusterBytes >> ctl.unit_shift());
  const int64_t nr_to_reclaim = std::max(nr_units, cluster);
  const bool recursive = ctl.options().recursive_protection;
  internal::ReclaimScope in_reclaim;  // charges made by reclaimers are forced
  const int64_t usage_before = root.memory().usage();

  std::vector<WalkNode> nodes = collect_subtree(root);
  ReclaimStats st;
  std::atomic<uint64_t>& cursor = ReclaimAccess::cursor(root);
  bool low_override = false;

  for (;;) {
    bool low_skipped = false;
    for (int priority = kDefPriority; priority >= 0; --priority) {
      ++st.passes;
      vmpressure_prio(root, reason, priority);  // no-op above the critical priority
      compute_walk_protection(nodes, recursive);
      // A partial walk: resume after the group where the last one stopped, so that successive
      // reclaims of the same root spread their pressure over the subtree.
      const uint64_t resume_after = cursor.load(std::memory_order_relaxed);
      size_t start = 0;
      for (size_t i = 0; i < nodes.size(); ++i)
        if (nodes[i].group->id() == resume_after) start = i + 1;
      bool bailed = false;
      for (size_t i = start; i < nodes.size() && !bailed; ++i) {
        WalkNode& n = nodes[i];
        Group& g = *n.group;
        const int64_t usage = g.memory().usage();
        const bool is_root = n.parent < 0;
        if (!is_root && n.eff.emin >= usage) continue;  // below min: never reclaimed
        if (!is_root && n.eff.elow >= usage) {          // below low: only when nothing else
          if (!low_override) {
            low_skipped = true;
            continue;
          }
          g.raise(Event::kLow);
        }
        int64_t group_reclaimed = 0;
        int64_t group_scanned = 0;
        for (const auto& entry : ReclaimAccess::snapshot(g)) {
          CallGuard guard(*entry);
          if (!guard.live()) continue;
          const int64_t size = guard.size();
          if (size <= 0) continue;
          int64_t scan = size;
          if (!is_root && (n.eff.emin > 0 || n.eff.elow > 0)) {
            // Proportional protection: scan the unprotected share of the list.
            int64_t protection = n.eff.emin;
            if (!low_override && n.eff.elow > n.eff.emin) {
              protection = n.eff.elow;
              low_skipped = true;
            }
            const int64_t size_of_group = std::max(usage, protection);
            scan = size - static_cast<int64_t>(static_cast<internal::i128>(size) * protection /
                                               (size_of_group + 1));
            scan = std::max(scan, cluster);
          }
          scan >>= priority;
          // A removed group's leftovers are scraped out even at gentle priorities.
          if (scan == 0 && !g.is_online()) scan = std::min(size, cluster);
          while (scan > 0) {
            const int64_t chunk = std::min(scan, cluster);
            scan -= chunk;
            const ReclaimResult r = guard.call(chunk, priority);
            st.scanned += r.scanned;
            st.reclaimed += r.reclaimed;
            group_scanned += r.scanned;
            group_reclaimed += r.reclaimed;
            if (r.scanned == 0 || group_reclaimed >= nr_to_reclaim) break;
          }
        }
        if (group_scanned > 0) {
          const bool proactive = reason == ReclaimReason::kProactive;
          g.stat_add(proactive ? StatRegistry::kPgscanProactive : StatRegistry::kPgscanDirect,
                     group_scanned, group_scanned);
          if (group_reclaimed > 0)
            g.stat_add(proactive ? StatRegistry::kPgstealProactive : StatRegistry::kPgstealDirect,
                       group_reclaimed, group_reclaimed);
        }
        vmpressure_group(g, reason, group_scanned, group_reclaimed);
        if (st.reclaimed >= nr_to_reclaim) {
          cursor.store(g.id(), std::memory_order_relaxed);
          bailed = true;
        }
      }
      if (!bailed) cursor.store(0, std::memory_order_relaxed);
      if (st.reclaimed >= nr_to_reclaim) break;
    }
    // Best-effort protection is breached only when a whole attempt freed nothing.
    if (st.reclaimed > 0 || !low_skipped || low_override) break;
    low_override = true;
    st.low_breached = true;
  }
  vmpressure_tree(root, reason, st.scanned, st.reclaimed);  // gated: free without listeners
  if (stats) *stats = st;
  return internal::confirmed_reclaim(st.reclaimed, usage_before, root.memory().usage());
}

int64_t internal::reclaimable_now(Group& root) {
  std::vector<WalkNode> nodes = collect_subtree(root);
  compute_walk_protection(nodes, root.controller().options().recursive_protection);
  int64_t sum = 0;
  for (const WalkNode& n : nodes) {
    Group& g = *n.group;
    const int64_t usage = g.memory().usage();
    const int64_t protection = n.parent < 0 ? 0 : std::max(n.eff.emin, n.eff.elow);
    if (usage <= protection) continue;  // protected: the driver skips it (or breaches only low)
    int64_t size = 0;
    for (const auto& entry : ReclaimAccess::snapshot(g)) {
      CallGuard guard(*entry);  // keeps the reclaimer alive while its size is read
      // Capped as it goes: no claimed size, however large, can overflow the sum.
      if (guard.live()) size = std::min(usage, size + std::clamp<int64_t>(guard.size(), 0, usage));
    }
    sum += std::min(size, usage - protection);
  }
  return std::min(sum, std::max<int64_t>(0, root.memory().usage()));
}

}  // namespace memcg
