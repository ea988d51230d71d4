// Waiting charges (charge_wait.hpp): one wait state per controller, one FIFO queue per group
// whose memory.max held; each waiter blocks in the controller's Clock::wait_until() and is woken
// with Clock::wake(). The policy is in dispatch().
#include "memcg/core/charge_wait.hpp"

#include <algorithm>
#include <list>
#include <mutex>
#include <unordered_map>

#include "memcg/base/clock.hpp"
#include "memcg/base/internal/lock.hpp"
#include "memcg/core/controller.hpp"
#include "memcg/core/group.hpp"
#include "memcg/core/internal/charge_wait_hooks.hpp"
#include "memcg/core/obj_stock.hpp"
#include "memcg/core/psi.hpp"
#include "memcg/percpu/internal/stock.hpp"

namespace memcg {

namespace internal {
std::atomic<long> g_charge_waiters{0};

struct ChargeHandleAccess {
  static void fill(ChargeHandle& h, Group& group, uint64_t bytes, int kind) noexcept {
    group.get();
    h.group_ = &group;
    h.bytes_ = bytes;
    h.kind_ = kind;
  }
};
}  // namespace internal

namespace {

// How often a waiter looks for room by itself: units hidden in per-CPU stocks are given back by
// a drain, not by an uncharge, and an uncharge that raced with the waiter's enqueue may have
// missed it. Bounds the wake latency in those cases only.
// Measured on the controller's clock, like the deadline.
constexpr uint64_t kPollIntervalNs = 10'000'000;  // 10 ms
constexpr int64_t kDefaultAgingNs = 100'000'000;  // 100 ms

struct Waiter {
  enum State : uint8_t { kWaiting, kGranted, kRemoved };
  Waiter(Group* g, int64_t n, uint64_t now_ns) noexcept
      : group(g), units(n), reserved(0), since_ns(now_ns) {}
  Group* group;       // charged group (a reference is held while waiting)
  int64_t units;      // asked
  int64_t reserved;   // already charged to `group` for it (aged waiters)
  uint64_t since_ns;  // queued at, on the controller's clock
  State state = kWaiting;
  ClockWaiter clock_waiter;  // what the controller's clock blocks and wakes
};

// Ends a wait: the state is final, the clock wakes the thread. Under the wait state's mutex.
void finish(Clock& clock, Waiter& w, Waiter::State state) noexcept {
  w.state = state;
  clock.wake(w.clock_waiter);
}

struct Queue {
  std::list<Waiter*> waiters;  // arrival order
  bool gone = false;           // the group was removed: erase once empty
  uint64_t waits = 0, granted = 0, timed_out = 0, cancelled = 0, removed = 0;
};

struct CtlWaits {
  std::mutex mu;  // a leaf: nothing else is locked under it
  std::unordered_map<const Group*, Queue> queues;
  std::atomic<int64_t> aging_ns{kDefaultAgingNs};
  int active = 0;  // threads inside a wait holding a reference into the controller
  bool dying = false;
  ClockWaiter* destroyer = nullptr;  // ~Controller, waiting for `active` to drop to 0
};

std::mutex g_registry_mu;  // taken before any CtlWaits::mu
std::unordered_map<const Controller*, CtlWaits*>& registry() {
  static auto* r = new std::unordered_map<const Controller*, CtlWaits*>();
  return *r;
}

// Finds (or creates) the wait state of `ctl` and returns it locked: the registry lock is held
// until the state's own lock is taken, so ~Controller cannot free it in between.
// Callers hold a HookBypass for as long as they hold the lock (the rule of internal/lock.hpp; a
// plain std::unique_lock is what the condition variables take).
CtlWaits* lock_state(const Controller& ctl, bool create, std::unique_lock<std::mutex>& out) {
  std::lock_guard<std::mutex> reg(g_registry_mu);
  auto& r = registry();
  auto it = r.find(&ctl);
  CtlWaits* cw = nullptr;
  if (it != r.end()) {
    cw = it->second;
  } else if (create) {
    cw = new CtlWaits();
    r.emplace(&ctl, cw);
  } else {
    return nullptr;
  }
  out = std::unique_lock<std::mutex>(cw->mu);
  return cw;
}

// The least room over every level from `g` to the root, and the least max.
void room_and_limit(const Group& g, int64_t& room, int64_t& limit) noexcept {
  room = INT64_MAX;
  limit = INT64_MAX;
  for (const Group* a = &g; a && !a->is_root(); a = a->parent()) {
    room = std::min(room, a->memory().margin());
    limit = std::min(limit, a->memory().max());
  }
}

// The policy, under cw.mu. Waiters are looked at in arrival order:
//  - one whose (remaining) units fit is granted, whatever waits before it (the bypass: a small
//    request that fits is never held behind a large one that does not);
//  - the first one that does not fit and has waited for the aging bound or longer stops the
//    scan: nobody after it is served, and the room there is is reserved for it (charged to its
//    group) until it is whole. Freed memory then goes to the oldest waiter first, so it cannot
//    starve while memory is freed. A waiter larger than some limit on its path can never be whole
//    and does not block anyone (it waits for its deadline or for a limit to be raised).
void dispatch(CtlWaits& cw, Queue& q, Clock& clock) noexcept {
  const uint64_t now = clock.now_ns();
  const auto aging = static_cast<uint64_t>(cw.aging_ns.load(std::memory_order_relaxed));
  for (Waiter* w : q.waiters) {
    if (w->state != Waiter::kWaiting) continue;
    const int64_t need = w->units - w->reserved;
    if (w->group->memory().try_charge(need) == nullptr) {
      w->reserved = w->units;
      finish(clock, *w, Waiter::kGranted);
      continue;
    }
    // A clock that reads earlier than `since` (only a broken one) leaves the waiter young.
    if (now < w->since_ns || now - w->since_ns < aging) continue;
    int64_t room, limit;
    room_and_limit(*w->group, room, limit);
    if (w->units > limit) continue;  // can never fit: blocks nobody
    if (room > 0 && room < need && w->group->memory().try_charge(room) == nullptr)
      w->reserved += room;
    break;
  }
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

}  // namespace

const char* wait_status_name(WaitStatus s) noexcept {
  switch (s) {
    case WaitStatus::kOk:
      return "ok";
    case WaitStatus::kTimedOut:
      return "timed_out";
    case WaitStatus::kCancelled:
      return "cancelled";
    case WaitStatus::kRemoved:
      return "removed";
    case WaitStatus::kInvalid:
      return "invalid";
  }
  return "?";
}

namespace {

// Charges `units` (checked, > 0) to `group` (not the root), waiting on the limit that holds.
// `deadline()` gives the deadline on the controller's clock; it is called once, only when the
// ladder failed, so that a charge that succeeds at once reads no clock (as before waits ran on
// the controller's clock).
template <class Deadline>
WaitStatus charge_or_wait(Group& group, int64_t units, const Deadline& deadline,
                          const std::stop_token& stop, int kind) noexcept {
  Controller& ctl = group.controller();
  Clock& clock = ctl.clock();

  // The whole ladder first, short of the OOM killer.
  if (charged(try_charge(group, units, kMayBlock | kRetryMayFail, kind))) return WaitStatus::kOk;
  if (!group.is_online()) return WaitStatus::kRemoved;

  Group* limiting = charge_or_limiting_group(group, units);
  if (limiting == nullptr) {
    account_kind(group, kind, units);
    group.stat_add(StatRegistry::kPgfault, 1, 1);
    return WaitStatus::kOk;
  }
  if (stop.stop_requested()) return WaitStatus::kCancelled;
  const uint64_t deadline_ns = deadline();
  if (clock.now_ns() >= deadline_ns) return WaitStatus::kTimedOut;
  // This charge queues: counted on the group whose limit held, like `max`. Raised here, outside
  // the wait state's mutex and the bypass below, as an event may deliver notifications.
  limiting->raise(Event::kWait);

  group.get();  // held while waiting: the waiter's group outlives any uncharge that serves it
  WaitStatus status = WaitStatus::kOk;
  int64_t give_back = 0;
  CtlWaits* cw = nullptr;
  bool counted = false;  // cw->active holds this thread
  {
    internal::HookBypass bypass;  // the queue node and the state are the library's
    MemStall stall(group);  // waiting is a memory stall (PSI some; full if all attached wait)
    Waiter w(&group, units, clock.now_ns());
    std::unique_lock<std::mutex> guard;
    cw = lock_state(ctl, true, guard);
    if (cw->dying) {
      status = WaitStatus::kRemoved;
    } else {
      ++cw->active;
      counted = true;
      Queue& q = cw->queues[limiting];
      auto pos = q.waiters.insert(q.waiters.end(), &w);
      ++q.waits;
      internal::g_charge_waiters.fetch_add(1, std::memory_order_seq_cst);
      // The mutex is released inside wait_until and during the poll's drain: any library code
      // may run then (uncharges that dispatch, a removal), so everything is looked at again
      // after each return. `q` stays valid: a queue is erased only once empty.
      for (;;) {
        dispatch(*cw, q, clock);
        if (w.state != Waiter::kWaiting) break;
        const uint64_t now = clock.now_ns();
        if (stop.stop_requested() || now >= deadline_ns) break;
        const uint64_t until = std::min(deadline_ns, Clock::after(now, kPollIntervalNs));
        clock.wait_until(w.clock_waiter, guard, until, stop);
        if (w.state != Waiter::kWaiting || stop.stop_requested()) continue;
        if (until < deadline_ns && clock.now_ns() >= until) {
          // A poll: give back what the stocks of the limiting subtree hide, then look again.
          guard.unlock();
          ctl.obj_stock().drain_all(limiting);
          ctl.stock().drain_all(limiting);
          guard.lock();
        }
      }
      internal::g_charge_waiters.fetch_sub(1, std::memory_order_relaxed);
      q.waiters.erase(pos);
      switch (w.state) {
        case Waiter::kGranted:
          status = WaitStatus::kOk;
          ++q.granted;
          break;
        case Waiter::kRemoved:
          status = WaitStatus::kRemoved;
          ++q.removed;
          break;
        case Waiter::kWaiting:
          status = stop.stop_requested() ? WaitStatus::kCancelled : WaitStatus::kTimedOut;
          ++(status == WaitStatus::kCancelled ? q.cancelled : q.timed_out);
          break;
      }
      if (status != WaitStatus::kOk) give_back = w.reserved;
      if (q.gone && q.waiters.empty()) cw->queues.erase(limiting);
    }
  }
  // No lock held from here on.
  if (give_back > 0) {
    group.memory().uncharge(give_back);
    internal::wake_charge_waiters(group);  // the reserve may serve someone else
  }
  if (status == WaitStatus::kOk) {
    account_kind(group, kind, units);
    group.stat_add(StatRegistry::kPgfault, 1, 1);
  }
  group.put();
  // Last: once `active` drops, a controller being destroyed may free everything (the clock
  // outlives the controller, and ~Controller waits for this wake before it goes on).
  if (counted) {
    internal::HookBypass bypass;
    std::unique_lock<std::mutex> guard(cw->mu);
    if (--cw->active == 0 && cw->dying && cw->destroyer != nullptr) clock.wake(*cw->destroyer);
  }
  return status;
}

// `timeout` from now on `clock`, saturated at kMaxNs; a negative timeout is 0.
uint64_t deadline_after(const Clock& clock, std::chrono::nanoseconds timeout) noexcept {
  return Clock::after(clock.now_ns(),
                      static_cast<uint64_t>(std::max<int64_t>(0, timeout.count())));
}

// A timeout from the call (the _for overloads): measured from when the call started.
struct AfterTimeout {
  uint64_t deadline_ns;
  AfterTimeout(const Group& g, std::chrono::nanoseconds timeout) noexcept
      : deadline_ns(deadline_after(g.controller().clock(), timeout)) {}
  uint64_t operator()() const noexcept { return deadline_ns; }
};

// A steady-clock deadline: what is left of it (0 once passed) becomes a timeout on the
// controller's clock, looked at when the wait starts.
struct AtSteadyDeadline {
  const Group& group;
  WaitClock::time_point deadline;
  uint64_t operator()() const noexcept {
    const auto now = WaitClock::now();
    // Compared first: deadline - now could overflow for a deadline far in the past.
    const auto left = deadline > now
                          ? std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now)
                          : std::chrono::nanoseconds(0);
    return deadline_after(group.controller().clock(), left);
  }
};

template <class Deadline>
WaitStatus charge_units(Group& group, int64_t units, const Deadline& deadline,
                        const std::stop_token& stop, int kind) noexcept {
  const Controller& ctl = group.controller();
  if (static_cast<uint64_t>(units) > static_cast<uint64_t>(ctl.max_units())) [[unlikely]]
    return WaitStatus::kInvalid;
  if (units == 0 || group.is_root()) return WaitStatus::kOk;
  return charge_or_wait(group, units, deadline, stop, kind);
}

template <class Deadline>
WaitStatus charge_bytes(Group& group, uint64_t bytes, const Deadline& deadline,
                        const std::stop_token& stop, int kind) noexcept {
  const Controller& ctl = group.controller();
  if (bytes > (static_cast<uint64_t>(ctl.max_units()) << ctl.unit_shift())) [[unlikely]]
    return WaitStatus::kInvalid;
  return charge_units(group, ctl.to_units_ceil(bytes), deadline, stop, kind);
}

template <class Deadline>
WaitStatus charge_handle(ChargeHandle& out, Group& group, uint64_t bytes, const Deadline& deadline,
                         const std::stop_token& stop, int kind) noexcept {
  out.release();
  const WaitStatus s = charge_bytes(group, bytes, deadline, stop, kind);
  if (s == WaitStatus::kOk && !group.is_root() && bytes > 0)
    internal::ChargeHandleAccess::fill(out, group, bytes, kind);
  return s;
}

}  // namespace

WaitStatus try_charge_wait_for(Group& group, int64_t units, std::chrono::nanoseconds timeout,
                               std::stop_token stop, int kind) noexcept {
  return charge_units(group, units, AfterTimeout(group, timeout), stop, kind);
}

WaitStatus try_charge_bytes_wait_for(Group& group, uint64_t bytes, std::chrono::nanoseconds timeout,
                                     std::stop_token stop, int kind) noexcept {
  return charge_bytes(group, bytes, AfterTimeout(group, timeout), stop, kind);
}

WaitStatus charge_wait_for(ChargeHandle& out, Group& group, uint64_t bytes,
                           std::chrono::nanoseconds timeout, std::stop_token stop,
                           int kind) noexcept {
  return charge_handle(out, group, bytes, AfterTimeout(group, timeout), stop, kind);
}

WaitStatus try_charge_wait(Group& group, int64_t units, WaitClock::time_point deadline,
                           std::stop_token stop, int kind) noexcept {
  return charge_units(group, units, AtSteadyDeadline{group, deadline}, stop, kind);
}

WaitStatus try_charge_bytes_wait(Group& group, uint64_t bytes, WaitClock::time_point deadline,
                                 std::stop_token stop, int kind) noexcept {
  return charge_bytes(group, bytes, AtSteadyDeadline{group, deadline}, stop, kind);
}

WaitStatus charge_wait(ChargeHandle& out, Group& group, uint64_t bytes,
                       WaitClock::time_point deadline, std::stop_token stop, int kind) noexcept {
  return charge_handle(out, group, bytes, AtSteadyDeadline{group, deadline}, stop, kind);
}

void set_wait_aging(Controller& controller, std::chrono::nanoseconds aging) noexcept {
  internal::HookBypass bypass;
  std::unique_lock<std::mutex> guard;
  CtlWaits* cw = lock_state(controller, true, guard);
  cw->aging_ns.store(std::max<int64_t>(0, aging.count()), std::memory_order_relaxed);
  for (auto& [g, q] : cw->queues) dispatch(*cw, q, controller.clock());
}

std::chrono::nanoseconds wait_aging(const Controller& controller) noexcept {
  internal::HookBypass bypass;
  std::unique_lock<std::mutex> guard;
  CtlWaits* cw = lock_state(controller, false, guard);
  return std::chrono::nanoseconds(cw ? cw->aging_ns.load(std::memory_order_relaxed)
                                     : kDefaultAgingNs);
}

WaitStats wait_stats(const Group& group) noexcept {
  WaitStats s;
  internal::HookBypass bypass;
  std::unique_lock<std::mutex> guard;
  CtlWaits* cw = lock_state(group.controller(), false, guard);
  if (cw == nullptr) return s;
  auto it = cw->queues.find(&group);
  if (it == cw->queues.end()) return s;
  const Queue& q = it->second;
  const unsigned shift = group.controller().unit_shift();
  for (const Waiter* w : q.waiters) {
    if (w->state != Waiter::kWaiting) continue;
    ++s.waiters;
    s.queued_bytes += static_cast<uint64_t>(w->units) << shift;
    s.reserved_bytes += static_cast<uint64_t>(w->reserved) << shift;
  }
  s.waits = q.waits;
  s.granted = q.granted;
  s.timed_out = q.timed_out;
  s.cancelled = q.cancelled;
  s.removed = q.removed;
  return s;
}

void internal::wake_charge_waiters_slow(Group& group) noexcept {
  HookBypass bypass;
  std::unique_lock<std::mutex> guard;
  CtlWaits* cw = lock_state(group.controller(), false, guard);
  if (cw == nullptr) return;
  for (const Group* a = &group; a; a = a->parent()) {
    auto it = cw->queues.find(a);
    if (it != cw->queues.end()) dispatch(*cw, it->second, group.controller().clock());
  }
}

void internal::charge_wait_group_removed(Group& group) noexcept {
  HookBypass bypass;
  std::unique_lock<std::mutex> guard;
  CtlWaits* cw = lock_state(group.controller(), false, guard);
  if (cw == nullptr) return;
  Clock& clock = group.controller().clock();
  for (auto& [g, q] : cw->queues)
    for (Waiter* w : q.waiters)
      if (w->group == &group && w->state == Waiter::kWaiting) finish(clock, *w, Waiter::kRemoved);
  auto it = cw->queues.find(&group);
  if (it != cw->queues.end()) {
    if (it->second.waiters.empty())
      cw->queues.erase(it);
    else
      it->second.gone = true;
  }
}

void internal::charge_wait_controller_gone(Controller& controller) noexcept {
  HookBypass bypass;
  CtlWaits* cw = nullptr;
  {
    std::lock_guard<std::mutex> reg(g_registry_mu);
    auto it = registry().find(&controller);
    if (it == registry().end()) return;
    cw = it->second;
    registry().erase(it);
  }
  {
    // Waits like a waiter, on the clock: a clock that runs threads one at a time must see that
    // this thread waits for the waiters it just woke.
    Clock& clock = controller.clock();
    ClockWaiter self;
    std::unique_lock<std::mutex> guard(cw->mu);
    cw->dying = true;
    cw->destroyer = &self;
    for (auto& [g, q] : cw->queues)
      for (Waiter* w : q.waiters)
        if (w->state == Waiter::kWaiting) finish(clock, *w, Waiter::kRemoved);
    while (cw->active != 0) clock.wait_until(self, guard, Clock::kMaxNs, {});
    cw->destroyer = nullptr;
  }
  delete cw;
}

}  // namespace memcg
