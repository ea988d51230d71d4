// Waiting charges (charge_wait.hpp): one queue per group whose memory.max held, with its own
// mutex, hung on the group; a small per-controller state for the aging bound and the teardown.
// Each waiter blocks in the controller's Clock::wait_until() and is woken with Clock::wake().
// The policy is in charge_wait_policy.cpp (dispatch_locked(), called by dispatch_path()); the
// public overloads and their deadlines are in charge_wait_api.cpp.
#include "memcg/core/wait/charge_wait.hpp"

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <new>
#include <utility>

#include "memcg/base/clock.hpp"
#include "memcg/base/internal/lazy_state.hpp"
#include "memcg/base/internal/lock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"
#include "memcg/core/wait/internal/charge_wait_hooks.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/percpu/internal/stock.hpp"
#include "charge_wait_internal.hpp"

namespace memcg {

namespace {

using internal::ControllerWaits;
using internal::room_and_limit;
using internal::WaitAccess;
using internal::Waiter;
using internal::WaitQueue;
using internal::finish;
using internal::kMaxJointQueues;

// How often a waiter looks for room by itself: units hidden in per-CPU stocks are given back by
// a drain, not by an uncharge, and an uncharge that raced with the waiter's enqueue may have
// missed it. Bounds the wake latency in those cases only.
// Measured on the controller's clock, like the deadline.
constexpr uint64_t kPollIntervalNs = 10'000'000;  // 10 ms
constexpr int64_t kDefaultAgingNs = 100'000'000;  // 100 ms

// The wait state of `ctl`, created by the first caller that needs it (allocated with no lock
// held; a loser of the race frees its copy).
ControllerWaits* controller_waits(Controller& ctl) noexcept {
  return internal::lazy_state(WaitAccess::state(ctl), kDefaultAgingNs);
}

// The queue of `g`, created if need be: allocated before any lock, installed and listed under
// the controller's wait mutex. Null if the allocation failed.
WaitQueue* queue_of(ControllerWaits& cw, Group& g) noexcept {
  auto& slot = WaitAccess::queue(g);
  if (WaitQueue* q = slot.load(std::memory_order_acquire)) return q;
  internal::HookBypass bypass;
  auto* fresh = new (std::nothrow) WaitQueue(g);
  if (fresh == nullptr) return nullptr;
  WaitQueue* q = nullptr;
  {
    std::lock_guard<std::mutex> lock(cw.mu);
    q = slot.load(std::memory_order_acquire);
    if (q == nullptr) {
      q = fresh;
      fresh = nullptr;
      q->ctl_next = cw.queues;
      if (cw.queues) cw.queues->ctl_prev = q;
      cw.queues = q;
      slot.store(q, std::memory_order_seq_cst);  // pairs with charge_wait_group_removed()
    }
  }
  delete fresh;  // lost the race: after the lock
  return q;
}

// Serves the queues of `from` and its ancestors that have waiters: locks them root first (every
// caller locks the queues of one path in that order), dispatches, unlocks. No queue lock held
// by the caller.
void dispatch_path(Group& from) noexcept {
  Controller& ctl = from.controller();
  const ControllerWaits* cw = WaitAccess::state(ctl);
  if (cw == nullptr) return;
  internal::HookBypass bypass;  // the rule of internal/lock.hpp for library mutexes
  internal::LockedQueues l;
  int total = 0;
  for (Group* a = &from; a->parent() != nullptr; a = a->parent())
    if (WaitAccess::count(*a).load(std::memory_order_acquire) != 0 &&
        WaitAccess::queue(std::as_const(*a)) != nullptr)
      ++total;
  int skip = total > kMaxJointQueues ? total - kMaxJointQueues : 0;  // the lowest ones
  for (Group* a = &from; a->parent() != nullptr && l.n < kMaxJointQueues; a = a->parent()) {
    WaitQueue* q = WaitAccess::count(*a).load(std::memory_order_acquire) != 0
                       ? WaitAccess::queue(std::as_const(*a))
                       : nullptr;
    if (q == nullptr) continue;
    if (skip > 0) {
      --skip;
      continue;
    }
    l.q[l.n++] = q;  // nearest first
  }
  if (l.n == 0) return;
  for (int i = l.n - 1; i >= 0; --i) l.q[i]->mu.lock();  // root first
  internal::dispatch_locked(l, ctl.clock(), static_cast<uint64_t>(cw->aging_ns.load(std::memory_order_relaxed)));
  for (int i = 0; i < l.n; ++i) l.q[i]->mu.unlock();
}

// The group whose counter refused `units`, or null when they fit now (then they are charged).
Group* charge_or_limiting_group(Group& group, int64_t units) noexcept {
  const auto* failed = group.memory().try_charge(units);
  if (failed == nullptr) return nullptr;
  for (Group* g = &group; g; g = g->parent())
    if (&g->memory() == failed) return g;
  return &group;
}

void account_kind(Group& group, int kind, int64_t units) noexcept {
  if (kind == kNoStatKind) return;
  group.stat_add(kind, units << group.controller().unit_shift(), units);
}

// What a charge that reached the counters does after them: memory.stat, pgfault, memory.high.
void after_grant(Group& group, int kind, int64_t units) noexcept {
  account_kind(group, kind, units);
  group.stat_add(StatRegistry::kPgfault, 1, 1);
  internal::charged_after_wait(group, units);
}

// The class a charge of `group` asking for `p` waits in; -1 for a value out of range.
int class_of(const Group& group, WaitPriority p) noexcept {
  if (p == WaitPriority::kDefault) {
    const WaitQueue* q = WaitAccess::queue(group);
    return q ? q->default_cls.load(std::memory_order_relaxed)
             : static_cast<int>(WaitPriority::kNormal);
  }
  const int c = static_cast<int>(p);
  return c < kWaitPriorities ? c : -1;
}

// The waiter leaves its queue (under its mutex): the totals of its class and the wait time.
void account_exit(WaitQueue& q, const Waiter& w, WaitStatus status, uint64_t now) noexcept {
  WaitStats::Class& c = q.counts[w.cls];
  switch (status) {
    case WaitStatus::kOk:
      ++c.granted;
      break;
    case WaitStatus::kRemoved:
      ++c.removed;
      break;
    case WaitStatus::kCancelled:
      ++c.cancelled;
      break;
    default:
      ++c.timed_out;
      break;
  }
  const uint64_t waited = now > w.since_ns ? now - w.since_ns : 0;
  q.last_wait_ns = waited;
  q.max_wait_ns = std::max(q.max_wait_ns, waited);
  q.wait_ns_sum += waited;
  for (int i = 0; i < WaitStats::kBuckets; ++i)
    if (waited <= kWaitBucketsNs[i]) {
      ++q.buckets[i];
      break;
    }
}

}  // namespace

void internal::room_and_limit(const Group& g, int64_t& room, int64_t& limit) noexcept {
  room = INT64_MAX;
  limit = INT64_MAX;
  for (const Group* a = &g; a && !a->is_root(); a = a->parent()) {
    room = std::min(room, a->memory().margin());
    limit = std::min(limit, a->memory().max());
  }
}

const char* wait_status_name(WaitStatus s) noexcept {
  switch (s) {
    case WaitStatus::kOk:
      return "ok";
    case WaitStatus::kTimedOut:
      return "timed-out";
    case WaitStatus::kCancelled:
      return "cancelled";
    case WaitStatus::kRemoved:
      return "removed";
    case WaitStatus::kInvalid:
      return "invalid";
    case WaitStatus::kNeverFits:
      return "never-fits";
  }
  return "unknown";  // as reserve_status_name and the C API's status names
}

const char* wait_priority_name(WaitPriority p) noexcept {
  switch (p) {
    case WaitPriority::kLow:
      return "low";
    case WaitPriority::kNormal:
      return "normal";
    case WaitPriority::kHigh:
      return "high";
    case WaitPriority::kDefault:
      return "default";
  }
  return "?";
}

WaitStatus internal::charge_or_wait(Group& group, int64_t units, const LazyDeadline& deadline,
                                    const std::stop_token& stop, int cls, int kind,
                                    const std::atomic<bool>* killed) noexcept {
  Controller& ctl = group.controller();
  Clock& clock = ctl.clock();

  // Larger than a limit of the path: no wait can serve it, and the ladder would reclaim for
  // nothing.
  if (const Group* limit = never_fits(group, units)) {
    internal::count_never_fits(*limit);
    return WaitStatus::kNeverFits;
  }
  // The whole ladder first, short of the OOM killer (it looks at memory.high itself).
  if (charged(try_charge(group, units, kMayBlock | kRetryMayFail, kind))) return WaitStatus::kOk;
  if (!group.is_online()) return WaitStatus::kRemoved;

  Group* limiting = charge_or_limiting_group(group, units);
  if (limiting == nullptr) {
    after_grant(group, kind, units);
    return WaitStatus::kOk;
  }
  if (stop.stop_requested()) return WaitStatus::kCancelled;
  const uint64_t deadline_ns = deadline();
  if (clock.now_ns() >= deadline_ns) return WaitStatus::kTimedOut;
  ControllerWaits* cw = controller_waits(ctl);
  WaitQueue* q = cw ? queue_of(*cw, *limiting) : nullptr;
  // Nothing to queue on (out of memory for the library's own state): the charge cannot wait.
  if (q == nullptr) return WaitStatus::kTimedOut;
  // This charge queues: counted on the group whose limit held, like `max`. Raised here, outside
  // every wait mutex and the bypass below, as an event may deliver notifications.
  limiting->raise(Event::kWait);

  group.get();  // held while waiting: the waiter's group outlives any uncharge that serves it
  WaitStatus status = WaitStatus::kOk;
  int64_t give_back = 0;
  bool counted = false;  // cw->active holds this thread
  {
    internal::HookBypass bypass;  // the rule of internal/lock.hpp for library mutexes
    {
      std::lock_guard<std::mutex> lock(cw->mu);
      if (!cw->dying.load(std::memory_order_relaxed)) {
        ++cw->active;
        counted = true;
      }
    }
    if (!counted) status = WaitStatus::kRemoved;
  }
  if (counted) {
    MemStall stall(group);  // waiting is a memory stall (PSI some; full if all attached wait)
    Waiter w(&group, units, cls);
    w.killed = killed;
    w.since_ns = clock.now_ns();
    internal::HookBypass bypass;
    auto& count = WaitAccess::count(*limiting);
    std::unique_lock<std::mutex> guard(q->mu);
    count.fetch_add(1, std::memory_order_seq_cst);
    w.arrival = q->arrivals++;
    // Keep each list in arrival order (dispatch_locked merges them): a thread that read the
    // clock before another but took the mutex after it queues at the other's time.
    if (const Waiter* last = q->lists[cls].tail; last != nullptr && last->since_ns > w.since_ns)
      w.since_ns = last->since_ns;
    q->lists[cls].push_back(&w);
    ++q->counts[cls].waits;
    // A removal or ~Controller that came between the checks above and the enqueue has looked at
    // the queue already: see it now (both stored before they took this queue's mutex).
    if (!group.is_online() || cw->dying.load(std::memory_order_seq_cst))
      w.state = Waiter::kRemoved;
    // Each look at the queues takes the mutexes of the path root first, so this one is let go
    // of first. Any library code may run meanwhile (uncharges that dispatch, a removal), so
    // everything is looked at again after each return.
    // Cooperative preemption: on the first look, then after each poll, while short.
    bool ask = cls > static_cast<int>(WaitPriority::kLow);
    for (;;) {
      if (w.state != Waiter::kWaiting) break;
      guard.unlock();
      dispatch_path(*limiting);
      guard.lock();
      if (w.state != Waiter::kWaiting) break;
      const uint64_t now = clock.now_ns();
      if (stop.stop_requested() || w.was_killed() || now >= deadline_ns) break;
      if (ask && q->preempt.load(std::memory_order_relaxed)) {
        ask = false;
        const int64_t need = w.units - w.reserved;
        guard.unlock();  // the members' callbacks run with no library lock held
        internal::preempt_for(*limiting, group, cls, need);
        guard.lock();
        continue;  // what they released may have served this waiter: look again
      }
      const uint64_t until = std::min(deadline_ns, Clock::after(now, kPollIntervalNs));
      clock.wait_until(w.clock_waiter, guard, until, stop);
      if (w.state != Waiter::kWaiting || stop.stop_requested() || w.was_killed()) continue;
      if (until < deadline_ns && clock.now_ns() >= until) {
        // A poll: give back what the stocks of the limiting subtree hide, then look again.
        guard.unlock();
        ctl.obj_stock().drain_all(limiting);
        ctl.stock().drain_all(limiting);
        guard.lock();
        ask = cls > static_cast<int>(WaitPriority::kLow);
      }
    }
    q->lists[cls].erase(&w);
    count.fetch_sub(1, std::memory_order_relaxed);
    switch (w.state) {
      case Waiter::kGranted:
        status = WaitStatus::kOk;
        break;
      case Waiter::kRemoved:
        status = WaitStatus::kRemoved;
        break;
      case Waiter::kWaiting:
        status = stop.stop_requested() || w.was_killed() ? WaitStatus::kCancelled
                                                         : WaitStatus::kTimedOut;
        break;
    }
    account_exit(*q, w, status, clock.now_ns());
    if (status != WaitStatus::kOk) give_back = w.reserved;
  }
  // No lock held from here on.
  if (give_back > 0) {
    group.memory().uncharge(give_back);
    internal::wake_charge_waiters(group);  // the reserve may serve someone else
  }
  if (status == WaitStatus::kOk) after_grant(group, kind, units);
  group.put();
  // Last: once `active` drops, a controller being destroyed may free everything (the clock
  // outlives the controller, and ~Controller waits for this wake before it goes on).
  if (counted) {
    internal::HookBypass bypass;
    std::lock_guard<std::mutex> lock(cw->mu);
    if (--cw->active == 0 && cw->destroyer != nullptr) clock.wake(*cw->destroyer);
  }
  return status;
}

int internal::wait_class_of(const Group& group, WaitPriority p) noexcept {
  return class_of(group, p);
}

int set_wait_priority(Group& group, WaitPriority priority) noexcept {
  if (group.is_root()) return ENOENT;
  const int c = static_cast<int>(priority);
  if (c >= kWaitPriorities) return EINVAL;
  ControllerWaits* cw = controller_waits(group.controller());
  WaitQueue* q = cw ? queue_of(*cw, group) : nullptr;
  if (q == nullptr) return ENOMEM;
  q->default_cls.store(static_cast<uint8_t>(c), std::memory_order_relaxed);
  return 0;
}

int set_wait_preempt(Group& group, bool on) noexcept {
  if (group.is_root()) return ENOENT;
  ControllerWaits* cw = controller_waits(group.controller());
  WaitQueue* q = cw ? queue_of(*cw, group) : nullptr;
  if (q == nullptr) return ENOMEM;
  q->preempt.store(on, std::memory_order_relaxed);
  return 0;
}

bool wait_preempt(const Group& group) noexcept {
  const WaitQueue* q = WaitAccess::queue(group);
  return q != nullptr && q->preempt.load(std::memory_order_relaxed);
}

WaitPriority wait_priority(const Group& group) noexcept {
  return static_cast<WaitPriority>(class_of(group, WaitPriority::kDefault));
}

void set_wait_aging(Controller& controller, std::chrono::nanoseconds aging) noexcept {
  ControllerWaits* cw = controller_waits(controller);
  if (cw == nullptr) return;
  cw->aging_ns.store(std::max<int64_t>(0, aging.count()), std::memory_order_relaxed);
  // Serve every queue again under the new bound: the controller's mutex keeps the queues (and
  // their groups, which free them under it) alive; it comes before the queues' ones.
  internal::HookBypass bypass;
  std::lock_guard<std::mutex> lock(cw->mu);
  for (WaitQueue* q = cw->queues; q; q = q->ctl_next)
    if (WaitAccess::count(*q->owner).load(std::memory_order_acquire) != 0) dispatch_path(*q->owner);
}

std::chrono::nanoseconds wait_aging(const Controller& controller) noexcept {
  const ControllerWaits* cw = WaitAccess::state(controller);
  return std::chrono::nanoseconds(cw ? cw->aging_ns.load(std::memory_order_relaxed)
                                     : kDefaultAgingNs);
}

const Group* never_fits(const Group& group, int64_t units) noexcept {
  const Group* lowest = nullptr;
  for (const Group* a = &group; a != nullptr && !a->is_root(); a = a->parent()) {
    const int64_t max = a->memory().max();
    if (units > max && (lowest == nullptr || max < lowest->memory().max())) lowest = a;
  }
  return lowest;
}

void internal::count_never_fits(const Group& limiting) noexcept {
  // The counter is the group's, not the caller's: a const path is all never_fits() returns.
  WaitAccess::never_fits(const_cast<Group&>(limiting)).fetch_add(1, std::memory_order_relaxed);
}

WaitStats wait_stats(const Group& group) noexcept {
  WaitStats s;
  s.never_fits = WaitAccess::never_fits(group).load(std::memory_order_relaxed);
  WaitQueue* q = WaitAccess::queue(group);
  if (q == nullptr) return s;
  const unsigned shift = group.controller().unit_shift();
  internal::HookBypass bypass;
  std::lock_guard<std::mutex> lock(q->mu);
  for (int c = 0; c < kWaitPriorities; ++c) {
    WaitStats::Class& k = s.by_priority[c];
    k = q->counts[c];
    k.waiters = 0;
    k.queued_bytes = 0;
    for (const Waiter* w = q->lists[c].head; w; w = w->next) {
      if (w->state != Waiter::kWaiting) continue;
      ++k.waiters;
      k.queued_bytes += static_cast<uint64_t>(w->units) << shift;
      s.reserved_bytes += static_cast<uint64_t>(w->reserved) << shift;
    }
    s.waiters += k.waiters;
    s.queued_bytes += k.queued_bytes;
    s.waits += k.waits;
    s.granted += k.granted;
    s.timed_out += k.timed_out;
    s.cancelled += k.cancelled;
    s.removed += k.removed;
  }
  s.last_wait_ns = q->last_wait_ns;
  s.max_wait_ns = q->max_wait_ns;
  s.wait_ns_sum = q->wait_ns_sum;
  for (int i = 0; i < WaitStats::kBuckets; ++i) s.wait_buckets[i] = q->buckets[i];
  // Cumulative, as a histogram is read.
  for (int i = 1; i < WaitStats::kBuckets; ++i) s.wait_buckets[i] += s.wait_buckets[i - 1];
  return s;
}

void internal::wake_charge_waiters_slow(Group& group) noexcept {
  dispatch_path(group);
}

void internal::wake_killed_waiters(Group& group) noexcept {
  Controller& ctl = group.controller();
  if (WaitAccess::state(std::as_const(ctl)) == nullptr) return;
  internal::HookBypass bypass;  // the rule of internal/lock.hpp for library mutexes
  // One queue at a time (each mutex a leaf here): only the killed waiters are woken, and each
  // re-checks its state under its own queue's mutex.
  for (Group* a = &group; a->parent() != nullptr; a = a->parent()) {
    if (WaitAccess::count(std::as_const(*a)).load(std::memory_order_acquire) == 0) continue;
    WaitQueue* q = WaitAccess::queue(std::as_const(*a));
    if (q == nullptr) continue;
    std::lock_guard<std::mutex> lock(q->mu);
    for (WaiterList& list : q->lists)
      for (Waiter* w = list.head; w != nullptr; w = w->next)
        if (w->was_killed()) ctl.clock().wake(w->clock_waiter);
  }
}

bool internal::defer_wake_in_hook(Group& group) noexcept {
  ControllerWaits* cw = WaitAccess::state(std::as_const(group.controller()));
  if (cw == nullptr) return false;
  bool marked = false;
  for (Group* a = &group; a->parent() != nullptr; a = a->parent()) {
    if (WaitAccess::count(std::as_const(*a)).load(std::memory_order_acquire) == 0) continue;
    WaitQueue* q = WaitAccess::queue(std::as_const(*a));
    if (q == nullptr) continue;
    q->hook_wake.store(true, std::memory_order_relaxed);
    marked = true;
  }
  // Release: whoever clears the controller's flag (acquire) sees the queues' flags.
  if (marked) cw->hook_wake.store(true, std::memory_order_release);
  return marked;
}

void internal::run_deferred_wakes(Controller& controller) noexcept {
  ControllerWaits* cw = WaitAccess::state(std::as_const(controller));
  if (cw == nullptr || !cw->hook_wake.load(std::memory_order_relaxed)) return;
  if (cw->dying.load(std::memory_order_acquire)) return;  // every waiter was sent away
  if (!cw->hook_wake.exchange(false, std::memory_order_acquire)) return;
  HookBypass bypass;
  // The owners are taken under the controller's wait mutex (a queue is unlinked under it before
  // its group is freed) and served after it is let go of: dispatch takes the queues' mutexes.
  constexpr int kBatch = 16;
  for (;;) {
    Group* owners[kBatch];
    int n = 0;
    bool more = false;
    {
      std::lock_guard<std::mutex> lock(cw->mu);
      for (WaitQueue* q = cw->queues; q != nullptr; q = q->ctl_next) {
        if (!q->hook_wake.load(std::memory_order_relaxed)) continue;
        if (n == kBatch) {
          more = true;
          break;
        }
        q->hook_wake.store(false, std::memory_order_relaxed);
        if (q->owner->try_get()) owners[n++] = q->owner;  // a group being freed has no waiter
      }
    }
    for (int i = 0; i < n; ++i) {
      dispatch_path(*owners[i]);
      owners[i]->put();
    }
    if (!more) return;
  }
}

void internal::charge_wait_group_removed(Group& group) noexcept {
  ControllerWaits* cw = WaitAccess::state(group.controller());
  if (cw == nullptr) return;
  Clock& clock = group.controller().clock();
  HookBypass bypass;
  // The waiters of `group` are on the queues of its path. A queue created after this looked
  // (seq_cst, against the store in queue_of()) belongs to a waiter that sees the group offline
  // once it has queued.
  for (Group* a = &group; a->parent() != nullptr; a = a->parent()) {
    WaitQueue* q = WaitAccess::queue(*a).load(std::memory_order_seq_cst);
    if (q == nullptr) continue;
    std::lock_guard<std::mutex> lock(q->mu);
    for (auto& list : q->lists)
      for (Waiter* w = list.head; w; w = w->next)
        if (w->group == &group && w->state == Waiter::kWaiting) finish(clock, *w, Waiter::kRemoved);
  }
}

void internal::charge_wait_group_freed(Group& group) noexcept {
  WaitQueue* q = WaitAccess::queue(group).exchange(nullptr, std::memory_order_acq_rel);
  if (q == nullptr) return;
  HookBypass bypass;
  if (ControllerWaits* cw = WaitAccess::state(group.controller())) {
    std::lock_guard<std::mutex> lock(cw->mu);
    (q->ctl_prev ? q->ctl_prev->ctl_next : cw->queues) = q->ctl_next;
    if (q->ctl_next) q->ctl_next->ctl_prev = q->ctl_prev;
  }
  delete q;  // no lock held
}

void internal::charge_wait_controller_gone(Controller& controller) noexcept {
  ControllerWaits* cw = WaitAccess::state(controller).load(std::memory_order_acquire);
  if (cw == nullptr) return;
  HookBypass bypass;
  {
    // Waits like a waiter, on the clock: a clock that runs threads one at a time must see that
    // this thread waits for the waiters it just woke.
    Clock& clock = controller.clock();
    ClockWaiter self;
    std::unique_lock<std::mutex> guard(cw->mu);
    cw->dying.store(true, std::memory_order_seq_cst);
    for (WaitQueue* q = cw->queues; q; q = q->ctl_next) {
      std::lock_guard<std::mutex> lock(q->mu);
      for (auto& list : q->lists)
        for (Waiter* w = list.head; w; w = w->next)
          if (w->state == Waiter::kWaiting) finish(clock, *w, Waiter::kRemoved);
    }
    cw->destroyer = &self;
    while (cw->active != 0) clock.wait_until(self, guard, Clock::kMaxNs, {});
    cw->destroyer = nullptr;
  }
}

void internal::charge_wait_controller_freed(Controller& controller) noexcept {
  // After the serial died (a safe point's run_deferred_wakes holds it live while it reads the
  // state). The queues stay with their groups, which ~Controller frees after this returns (and
  // then finds no state to unlist them from).
  ControllerWaits* cw = WaitAccess::state(controller).exchange(nullptr, std::memory_order_acq_rel);
  HookBypass bypass;
  delete cw;
}

}  // namespace memcg
