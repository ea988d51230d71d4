// Admission by learned peak (admission.hpp) and the measurements behind growth past admission
// (reservation.hpp): per-group decayed ratio histograms, promised headroom, admission waits.
#include "memcg/core/admission/admission.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <mutex>
#include <utility>
#include <vector>

#include "memcg/base/clock.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/base/internal/lazy_state.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"
#include "memcg/core/admission/internal/admission_state.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/percpu/internal/stock.hpp"

#include "core/charge/charge_ladder.hpp"

namespace memcg {
namespace internal {

struct AdmitState {
  // Guarded by mu (a leaf): the decayed sums of the ratios (sum) and of their weights (total).
  std::mutex mu;
  double sum = 0;
  double sum2 = 0;  // of the squared ratios: their spread (the tolerance)
  double total = 0;
  uint64_t samples = 0;
  uint64_t skipped = 0;
  // Relaxed atomics: single values read by the files and the admission check, each meaningful
  // alone; the admission check itself runs under the admission mutex (below).
  std::atomic<uint32_t> fixed_permille{0};
  std::atomic<uint32_t> learned_permille{1000};
  std::atomic<uint32_t> tolerance_permille{kAdmitMaxGrowthPermille};
  std::atomic<int64_t> promised{0};
  std::atomic<uint64_t> admit_waits{0};
  std::atomic<uint64_t> admit_reclaims{0};   // admissions that reclaimed on this level
  std::atomic<uint64_t> admit_reclaimed{0};  // units they reclaimed there
  std::atomic<uint64_t> growth_waits{0};
  std::atomic<uint64_t> growth_granted{0};
  std::atomic<uint64_t> growth_mean_ns{kGrowthWaitPriorNs};
};

struct AdmitAccess {
  static std::atomic<AdmitState*>& slot(Group& g) noexcept { return g.admit_; }
  static AdmitState* peek(const Group& g) noexcept {
    return g.admit_.load(std::memory_order_acquire);  // pairs with the release of the creator
  }
  static std::mutex& policy_mutex(Group& g) noexcept { return g.policy_mutex_; }
  static const std::vector<Member*>& members(Group& g) noexcept { return g.members_; }
};

namespace {

// The state of `g`, created on first use. The root has none (it admits everything).
AdmitState* state(Group& g) noexcept {
  return lazy_state(AdmitAccess::slot(g));
}

// One process-wide admission mutex: the expected-fit check and the promise it grants are one
// step, across the levels of a path. Leaf; never held while charging or calling out.
struct Waiters {
  std::mutex mu;
  std::vector<std::pair<ClockWaiter*, Clock*>> list;
  // list.size(), readable without mu: an uncharge wakes the waiters only when there are any.
  std::atomic<size_t> count{0};
};
Waiters& waiters() noexcept {
  static Waiters w;
  return w;
}

uint32_t mean_permille(const AdmitState& s) noexcept {
  if (s.total < kAdmitMinWeight) return 1000;  // no history: the prior
  const double mean = std::round(1000.0 * s.sum / s.total);  // to the nearest thousandth
  return static_cast<uint32_t>(
      std::clamp(mean, 1000.0, static_cast<double>(kAdmitMaxGrowthPermille)));
}

// The decayed mean plus kAdmitToleranceSd decayed standard deviations of the ratios.
uint32_t tolerance_of(const AdmitState& s) noexcept {
  // Too little history to know the spread: nothing is past the tolerance.
  if (s.total < kAdmitMinSpreadWeight) return kAdmitMaxGrowthPermille;
  const double mean = s.sum / s.total;
  const double sd = std::sqrt(std::max(0.0, s.sum2 / s.total - mean * mean));
  const double t = std::round(1000.0 * (mean + kAdmitToleranceSd * sd));
  return static_cast<uint32_t>(
      std::clamp(t, 1000.0, static_cast<double>(kAdmitMaxGrowthPermille)));
}

uint32_t factor(const Group& g) noexcept {
  const AdmitState* s = AdmitAccess::peek(g);
  if (s == nullptr) return 1000;
  const uint32_t fixed = s->fixed_permille.load(std::memory_order_relaxed);
  return fixed != 0 ? fixed : s->learned_permille.load(std::memory_order_relaxed);
}

// The tolerance in force: the learned one, at least the factor in force.
uint32_t tolerance(const Group& g) noexcept {
  const AdmitState* s = AdmitAccess::peek(g);
  if (s == nullptr) return kAdmitMaxGrowthPermille;  // no history
  return std::max(factor(g), s->tolerance_permille.load(std::memory_order_relaxed));
}

// What `need` more units lack by expectation on level `a` (admission.hpp):
// usage + promised + need - max, where promised counts the admitted reservations under `a`.
// Zero or less: they fit there. A level without memory.max lacks nothing.
int64_t short_by(const Group& a, int64_t need) noexcept {
  const int64_t max = a.memory().max();
  if (max >= a.controller().max_units()) return 0;  // no memory.max here
  const AdmitState* s = AdmitAccess::peek(a);
  const int64_t promised = s ? s->promised.load(std::memory_order_relaxed) : 0;
  return a.memory().usage() + std::max<int64_t>(promised, 0) + need - max;
}

// True when `need` more units fit by expectation on every limited level of the path.
bool fits_expected(const Group& g, int64_t need) noexcept {
  for (const Group* a = &g; a != nullptr && !a->is_root(); a = a->parent())
    if (short_by(*a, need) > 0) return false;
  return true;
}

void count_admit_wait(Group& g, int64_t need) noexcept {
  for (Group* a = &g; a != nullptr && !a->is_root(); a = a->parent()) {
    if (short_by(*a, need) > 0) {
      if (AdmitState* s = state(*a)) s->admit_waits.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
}

// Reclaim for admission (admission.hpp): when `need` units lack room by expectation only for
// memory that reclaim can take at once, make that room as a charge's ladder would, without the
// OOM killer: drain the stocks of the highest level that lacks room (pre-charged units count
// against its limit and come back at once), then, lowest level first, reclaim in that level's
// subtree what it still lacks (its reclaim lowers its ancestors' usage too), up to
// kMaxReclaimRetries fruitless attempts a level. Nothing is reclaimed when some level lacks more
// than its reclaimable_now(): reclaim could not admit the request there, and the caches would be
// emptied for nothing. Returns true when anything was freed. REQUIRES: no library lock held
// (reclaimers are called).
bool admit_reclaim(Group& g, int64_t need) noexcept {
  try {
    Group* top = nullptr;
    for (Group* a = &g; a != nullptr && !a->is_root(); a = a->parent())
      if (short_by(*a, need) > 0) top = a;
    if (top == nullptr) return true;  // room appeared meanwhile
    Controller& ctl = g.controller();
    const int64_t before = top->memory().usage();
    ctl.obj_stock().drain_all(top);  // object reserves first: they return units
    ctl.stock().drain_all(top);
    bool freed = top->memory().usage() < before;
    for (Group* a = &g; a != nullptr && !a->is_root(); a = a->parent()) {
      const int64_t lack = short_by(*a, need);
      if (lack > 0 && reclaimable_now(*a) < lack) return freed;  // reclaim cannot admit it
    }
    const int64_t min_reclaim = at_least_one(kMinReclaimBytes >> ctl.unit_shift());
    for (Group* a = &g; a != nullptr && !a->is_root(); a = a->parent()) {
      int64_t reclaimed = 0;
      for (int attempt = 0; attempt < kMaxReclaimRetries; ++attempt) {
        const int64_t lack = short_by(*a, need);
        if (lack <= 0) break;
        reclaimed += std::max<int64_t>(0, reclaim_stalled(g, *a, std::max(lack, min_reclaim)));
      }
      if (reclaimed > 0) {
        freed = true;
        if (AdmitState* s = state(*a)) {
          s->admit_reclaims.fetch_add(1, std::memory_order_relaxed);
          s->admit_reclaimed.fetch_add(static_cast<uint64_t>(reclaimed),
                                       std::memory_order_relaxed);
        }
      }
      if (short_by(*a, need) > 0) break;  // no room here: the levels above cannot admit it
    }
    return freed;
  } catch (...) {  // the walk's bookkeeping could not be allocated: nothing more to do now
    return false;
  }
}

void wake_admissions() noexcept {
  Waiters& w = waiters();
  if (w.count.load(std::memory_order_acquire) == 0) return;  // nobody waits: no lock taken
  std::lock_guard<std::mutex> lock(w.mu);
  for (auto& [waiter, clock] : w.list) clock->wake(*waiter);
}

}  // namespace

void admit_group_freed(Group& g) noexcept {
  HookBypass bypass;
  delete AdmitAccess::slot(g).exchange(nullptr, std::memory_order_acq_rel);
}

void admit_learn(Group& g, int64_t admitted, int64_t peak, bool cut_short) noexcept {
  if (admitted <= 0 || g.is_root()) return;
  AdmitState* s = state(g);
  if (s == nullptr) return;
  std::lock_guard<std::mutex> lock(s->mu);
  if (cut_short) {
    ++s->skipped;  // censored: the work would have grown further (admission.hpp)
    return;
  }
  const double ratio =
      static_cast<double>(std::max(peak, admitted)) / static_cast<double>(admitted);
  const double r = std::min(ratio, static_cast<double>(kAdmitMaxGrowthPermille) / 1000.0);
  s->sum = s->sum * kAdmitDecay + r;
  s->sum2 = s->sum2 * kAdmitDecay + r * r;
  s->total = s->total * kAdmitDecay + 1.0;
  ++s->samples;
  s->learned_permille.store(mean_permille(*s), std::memory_order_relaxed);
  s->tolerance_permille.store(tolerance_of(*s), std::memory_order_relaxed);
}

void admit_uncharged() noexcept { wake_admissions(); }

namespace {
int64_t scaled(const Group& g, int64_t total, uint32_t f) noexcept {
  int64_t e = total;
  if (f > 1000 && total > 0) {
    // ceil(total * f / 1000), saturating (the path's limits clamp it below).
    e = total > (INT64_MAX - 999) / static_cast<int64_t>(f)
            ? INT64_MAX
            : (total * static_cast<int64_t>(f) + 999) / 1000;
  }
  for (const Group* a = &g; a != nullptr && !a->is_root(); a = a->parent())
    e = std::min(e, a->memory().max());
  return std::max(e, total);
}
}  // namespace

int64_t admit_expected(const Group& g, int64_t total) noexcept {
  return scaled(g, total, factor(g));
}

int64_t admit_tolerated(const Group& g, int64_t total) noexcept {
  return scaled(g, total, tolerance(g));
}

void admit_promise_add(Group& g, int64_t delta) noexcept {
  if (delta == 0) return;
  for (Group* a = &g; a != nullptr && !a->is_root(); a = a->parent())
    if (AdmitState* s = state(*a)) s->promised.fetch_add(delta, std::memory_order_relaxed);
  if (delta < 0) wake_admissions();
}

AdmitWait admit_wait(Group& g, int64_t need, uint64_t deadline_ns,
                     const std::stop_token& stop) noexcept {
  Clock& clock = g.controller().clock();
  Waiters& w = waiters();
  ClockWaiter me;
  std::unique_lock<std::mutex> lock(w.mu);
  bool listed = false;
  bool counted = false;
  uint64_t reclaim_after_ns = 0;  // no reclaim before this time (after a fruitless one)
  AdmitWait result = AdmitWait::kOk;
  for (;;) {
    if (fits_expected(g, need)) {
      for (Group* a = &g; a != nullptr && !a->is_root(); a = a->parent())
        if (AdmitState* s = state(*a)) s->promised.fetch_add(need, std::memory_order_relaxed);
      break;
    }
    // Room that reclaim can make at once is room: take it rather than wait for it. Outside the
    // admission mutex (reclaimers are called); then everything is looked at again.
    bool freed = false;
    if (clock.now_ns() >= reclaim_after_ns) {
      lock.unlock();
      freed = admit_reclaim(g, need);
      lock.lock();
      if (freed && fits_expected(g, need)) continue;  // admitted at the top
      // Nothing to take: look again after a while, not at every wake-up (a cache refills, a
      // protection changes; a reclaim that frees nothing costs a walk of the subtree).
      if (!freed) reclaim_after_ns = Clock::after(clock.now_ns(), kAdmitReclaimRetryNs);
    }
    // The stop and the deadline are looked at on every retry: room freed and taken again
    // before this look (a cache refilled meanwhile) does not keep the admission going.
    if (stop.stop_requested()) {
      result = AdmitWait::kCancelled;
      break;
    }
    const uint64_t now = clock.now_ns();
    if (now >= deadline_ns) {
      result = AdmitWait::kTimedOut;
      break;
    }
    if (freed) continue;  // reclaim made progress: try again at once, without sleeping
    if (!counted) count_admit_wait(g, need);  // it sleeps: a try that did not fit is no wait
    counted = true;
    if (!listed) {
      HookBypass bypass;  // the waiter list is library bookkeeping
      w.list.emplace_back(&me, &clock);
      w.count.store(w.list.size(), std::memory_order_release);
      listed = true;
    }
    clock.wait_until(me, lock, std::min(deadline_ns, Clock::after(now, kAdmitPollNs)), stop);
  }
  if (listed) {
    auto& l = w.list;
    l.erase(std::remove_if(l.begin(), l.end(), [&](const auto& e) { return e.first == &me; }),
            l.end());
    w.count.store(l.size(), std::memory_order_release);
  }
  return result;
}

Group* promised_level(Group& g, int64_t need, int64_t own, int64_t* want) noexcept {
  for (Group* a = &g; a != nullptr && !a->is_root(); a = a->parent()) {
    const int64_t max = a->memory().max();
    if (max >= g.controller().max_units()) continue;  // no memory.max here
    const AdmitState* s = AdmitAccess::peek(*a);
    const int64_t promised = s ? s->promised.load(std::memory_order_relaxed) : 0;
    const int64_t others = std::max<int64_t>(0, promised - std::max<int64_t>(own, 0));
    if (others > 0 && a->memory().usage() + others + need > max) {
      *want = need + others;
      return a;
    }
  }
  return nullptr;
}

Group* full_level(Group& g, int64_t units) noexcept {
  Group* lowest = nullptr;
  for (Group* a = &g; a != nullptr && !a->is_root(); a = a->parent()) {
    const int64_t max = a->memory().max();
    if (a->memory().usage() + units > max && (lowest == nullptr || max < lowest->memory().max()))
      lowest = a;
  }
  return lowest;
}

int64_t unwinding_units(Group& limit) noexcept {
  int64_t sum = 0;
  limit.controller().walk(limit, [&](Group& g) {
    std::lock_guard<std::mutex> lock(AdmitAccess::policy_mutex(g));
    for (const Member* m : AdmitAccess::members(g))
      if (m->killed() || m->preempt_requested()) sum += m->charged();
  });
  return sum;
}

uint64_t growth_bound_ns(const Group& limit) noexcept {
  const AdmitState* s = AdmitAccess::peek(limit);
  const uint64_t mean = s ? s->growth_mean_ns.load(std::memory_order_relaxed) : kGrowthWaitPriorNs;
  return std::clamp<uint64_t>(2 * mean, kGrowthWaitMinNs, kGrowthWaitMaxNs);
}

void growth_observe(Group& limit, bool granted, uint64_t waited_ns) noexcept {
  AdmitState* s = state(limit);
  if (s == nullptr) return;
  s->growth_waits.fetch_add(1, std::memory_order_relaxed);
  if (!granted) return;  // a wait that got nothing says nothing about how long unwinding takes
  s->growth_granted.fetch_add(1, std::memory_order_relaxed);
  // A decayed mean; racing updates may lose one sample, which a mean can afford.
  const uint64_t old = s->growth_mean_ns.load(std::memory_order_relaxed);
  const uint64_t w = std::min<uint64_t>(waited_ns, kGrowthWaitMaxNs);
  s->growth_mean_ns.store(old - old / 8 + w / 8, std::memory_order_relaxed);
}

}  // namespace internal

int set_admit_growth(Group& group, uint32_t permille) noexcept {
  if (group.is_root()) return ENOENT;
  if (permille != 0 && (permille < 1000 || permille > kAdmitMaxGrowthPermille)) return EINVAL;
  internal::AdmitState* s = internal::state(group);
  if (s == nullptr) return ENOMEM;
  s->fixed_permille.store(permille, std::memory_order_relaxed);
  internal::wake_admissions();  // a lower factor may let waiting admissions in
  return 0;
}

uint32_t admit_growth_setting(const Group& group) noexcept {
  const internal::AdmitState* s = internal::AdmitAccess::peek(group);
  return s ? s->fixed_permille.load(std::memory_order_relaxed) : 0;
}

uint32_t admit_growth(const Group& group) noexcept { return internal::factor(group); }

AdmitStats admit_stats(const Group& group) noexcept {
  AdmitStats st;
  st.growth_permille = internal::factor(group);
  st.tolerance_permille = internal::tolerance(group);
  st.growth_bound_ns = internal::growth_bound_ns(group);
  internal::AdmitState* s = internal::AdmitAccess::peek(group);
  if (s == nullptr) return st;
  st.fixed = s->fixed_permille.load(std::memory_order_relaxed) != 0;
  st.promised_units = s->promised.load(std::memory_order_relaxed);
  st.admit_waits = s->admit_waits.load(std::memory_order_relaxed);
  st.admit_reclaims = s->admit_reclaims.load(std::memory_order_relaxed);
  st.admit_reclaimed_units = s->admit_reclaimed.load(std::memory_order_relaxed);
  st.growth_waits = s->growth_waits.load(std::memory_order_relaxed);
  st.growth_granted = s->growth_granted.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(s->mu);
  st.samples = s->samples;
  st.skipped = s->skipped;
  st.weight = s->total;
  return st;
}

}  // namespace memcg
