// The admission queue's workers and timer (admission_queue.hpp): the items' bookkeeping, the
// passes that try heads without waiting, and the completion of items that never run: those
// stopped by their token (a std::stop_callback per queued item) and those whose deadline passed
// (the queue's timer thread), with no free worker needed.
//
// Why a timer thread of the queue's own rather than the library's (signal/timer.hpp): the
// deadlines are on the controller's clock, which may be a ManualClock (the library's timer
// serves only the SystemClock, other clocks through Controller::tick()); and done callables of
// expired or stopped items run on it, which must not delay the memory.events notifications and
// PSI polls of every controller. It waits on the controller's clock like the workers do.

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <utility>

#include "admission_queue_core.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/admission/admission.hpp"
#include "memcg/core/admission/internal/admission_state.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/tree/group.hpp"

namespace memcg {
namespace internal {

// ---- the items ---------------------------------------------------------------------------------

bool AdmissionQueueCore::take(uint64_t id, ReserveStatus why, std::vector<Completion>* out) {
  auto it = where.find(id);
  if (it == where.end()) return false;
  GroupEntry* e = it->second.entry;
  auto node = e->items.find(ItemKey{it->second.priority, id});
  if (node == e->items.end()) return false;  // being tried
  HookBypass bypass;
  out->reserve(out->size() + 1);  // may throw: nothing changed
  ItemPtr item = std::move(node->second);
  e->items.erase(node);
  forget(*item, e);
  out->push_back({std::move(item), why, e->stats});
  if (e->backlogged() && e->held_by != nullptr) release(e);  // its head changed
  settle(e);
  return true;
}

void AdmissionQueueCore::forget(const QueueItem& item, GroupEntry* e) {
  where.erase(item.id);
  if (item.deadline_ns < Clock::kMaxNs) deadlines.erase({item.deadline_ns, item.id});
  nqueued.fetch_sub(1, std::memory_order_relaxed);
  add(e->stats->queued, -1);
}

// Items whose deadline passed (an item being tried is completed by its worker after the try;
// the ones after it are not held up by it), and the items stopped by their token.
void AdmissionQueueCore::sweep(uint64_t now, std::vector<Completion>* out) {
  HookBypass bypass;
  for (auto it = deadlines.begin(); it != deadlines.end() && it->first <= now;) {
    auto next = std::next(it);
    take(it->second, ReserveStatus::kTimedOut, out);  // erases `it` unless being tried
    it = next;
  }
  if (!stopped.empty()) {
    out->reserve(out->size() + stopped.size());
    for (Completion& c : stopped) out->push_back(std::move(c));
    stopped.clear();
  }
}

void StopHook::operator()() const noexcept { core->stop_requested(id); }

// An item's stop token fired (on the thread that requested the stop): the item leaves the queue
// at once, no longer counted as queued, and the timer completes it. An item being tried is
// left to its worker, which looks at the token after the try.
void AdmissionQueueCore::stop_requested(uint64_t id) noexcept {
  std::lock_guard<std::mutex> lock(mu);
  if (stopping) return;  // the destruction completes every queued item
  try {
    if (take(id, ReserveStatus::kCancelled, &stopped)) wake_timer(0);
  } catch (...) {
    // No memory to list it: it stays queued, and its next try sees the token.
  }
}

void AdmissionQueueCore::complete(std::vector<Completion>& list) noexcept {
  for (Completion& c : list) {
    QueueGroupState* s = c.stats;
    switch (c.status) {
      case ReserveStatus::kTimedOut:
        add(s->timed_out, 1);
        break;
      case ReserveStatus::kCancelled:
        add(s->cancelled, 1);
        break;
      case ReserveStatus::kNeverFits:
        add(s->never_fits, 1);
        break;
      default:
        add(s->refused, 1);
        break;
    }
    try {
      if (c.item->done) c.item->done(c.status);
    } catch (...) {
      count_error(s);
    }
    c.item.reset();  // its reservation (holding nothing) and callables go here, unlocked
  }
  list.clear();
}

// ---- the workers ---------------------------------------------------------------------------------

void AdmissionQueueCore::run_admitted(std::unique_lock<std::mutex>& lock, GroupRef group,
                                      ItemPtr item) {
  // The group's entry may be gone (nothing else queued): `group` keeps its statistics alive
  // until they are counted, and is released with no lock held.
  QueueGroupState* s = QueueAccess::peek(*group);
  const uint64_t now = clock.now_ns();
  const uint64_t waited = now > item->submit_ns ? now - item->submit_ns : 0;
  add(s->admitted, 1);
  add(s->running, 1);
  add(s->wait_ns_sum, static_cast<int64_t>(waited));
  for (uint64_t m = s->max_wait_ns.load(std::memory_order_relaxed);
       waited > m && !s->max_wait_ns.compare_exchange_weak(m, waited, std::memory_order_relaxed);) {
  }
  nrunning.fetch_add(1, std::memory_order_relaxed);
  // Others may be admissible too: one more worker looks (it wakes the next in turn).
  if (!backlog.empty()) wake_one();
  lock.unlock();
  item->unregister_stop();  // running: the token now reaches the reservation only
  {
    WorkScope task(*group);  // the worker is a task of the item's group while it runs (psi.hpp)
    try {
      item->run(item->res);
    } catch (...) {
      count_error(s);
    }
  }
  item.reset();  // the reservation gives its memory back (unless run moved it)
  add(s->running, -1);
  nrunning.fetch_sub(1, std::memory_order_relaxed);
  group.reset();
  lock.lock();
  ++epoch;  // memory came back: heads may be admissible now
}

bool AdmissionQueueCore::scan(std::unique_lock<std::mutex>& lock, std::vector<Completion>& done) {
  end_holds(clock.now_ns());
  const uint64_t pass = ++passes;
  for (auto it = backlog.begin();;) {
    if (stopping) return false;
    // Groups being tried (one per worker at most) or looked at by this pass already are passed.
    while (it != backlog.end() && (it->entry->trying != 0 || it->entry->pass == pass)) ++it;
    if (it == backlog.end()) return false;
    GroupEntry* e = it->entry;
    const VKey at = *it;
    e->pass = pass;
    if (held_back(e)) {  // e left the index
      it = backlog.upper_bound(at);
      continue;
    }
    auto head = e->items.begin();
    ItemPtr item = std::move(head->second);
    e->items.erase(head);
    e->trying = item->id;
    e->cancel_trying = false;
    add(e->stats->tries, 1);
    lock.unlock();
    const uint64_t now = clock.now_ns();
    // One try: the expected-peak check and the ladder without the OOM killer, no wait.
    const ReserveStatus st = now >= item->deadline_ns
                                 ? ReserveStatus::kTimedOut
                                 : item->res.reserve_until(item->bytes, now);
    // Refused for lack of room: where (the hold-back needs the level), read with no lock held.
    const bool no_room = st == ReserveStatus::kTimedOut && now < item->deadline_ns;
    const Group* blocked = nullptr;
    if (no_room) {
      const Group& g = *e->group;  // held: e is backlogged while it is tried
      const auto units = static_cast<int64_t>(std::min<uint64_t>(item->units, INT64_MAX));
      blocked = blocking_level(g, admit_expected(g, units) - item->res.units());
    }
    lock.lock();
    bool cancelled = e->cancel_trying || (!held(st) && item->stop.stop_requested());
    if (held(st) && !cancelled && !stopping) {
      e->trying = 0;
      forget(*item, e);
      admitted(e, item->units);
      GroupRef group = e->group;
      settle(e);
      run_admitted(lock, std::move(group), std::move(item));
      return true;
    }
    if (held(st)) {
      // Admitted while it was cancelled or the queue stops: it does not run.
      lock.unlock();
      item->res.release();
      lock.lock();
      cancelled = cancelled || e->cancel_trying;
    }
    e->trying = 0;
    e->cancel_trying = false;
    if (no_room && !cancelled && !stopping) {
      if (blocked == e->group.get()) {
        unstarve(e);  // its own items must give memory back: holding others back is no use
        catch_up(e, nullptr);
      } else if (blocked != nullptr) {
        starve(e, blocked);
      } else {
        unstarve(e);  // there is room now: the next try will tell
      }
    }
    const bool again = !cancelled && (held(st) || (st == ReserveStatus::kTimedOut &&
                                                    clock.now_ns() < item->deadline_ns));
    if (again) {
      // Not admitted (or the queue stops): back at its place, the head.
      HookBypass bypass;
      const ItemKey key{item->priority, item->id};
      e->items.emplace(key, std::move(item));
      it = backlog.upper_bound(at);  // the index may have changed while the lock was dropped
      continue;
    }
    forget(*item, e);
    const ReserveStatus why = cancelled ? ReserveStatus::kCancelled : st;
    {
      HookBypass bypass;
      done.push_back({std::move(item), why, e->stats});
    }
    settle(e);
    return true;
  }
}

void AdmissionQueueCore::work() {
  ClockWaiter me;
  std::vector<Completion> done;
  std::unique_lock<std::mutex> lock(mu);
  while (!stopping) {
    sweep(clock.now_ns(), &done);
    if (!done.empty()) {
      lock.unlock();
      complete(done);
      lock.lock();
      continue;
    }
    const uint64_t seen = epoch;
    // The poll period counts from this look: a clock that moved during the scan's tries
    // already counts towards the next look.
    const uint64_t looked = clock.now_ns();
    if (scan(lock, done)) {
      if (!done.empty()) {
        lock.unlock();
        complete(done);
        lock.lock();
      }
      continue;
    }
    if (stopping) break;
    if (epoch != seen) continue;  // something came back or arrived while it looked
    const bool any = nqueued.load(std::memory_order_relaxed) > 0;
    // Nothing admissible: one worker polls on the clock (memory freed outside the queue), the
    // others sleep until woken.
    if (any && poller == nullptr) {
      poller = &me;
      const uint64_t until = Clock::after(looked, options.poll_ns);
      bool woken = false;
      // A clock's wait may return early (a ManualClock's every ms of real time): the poll is
      // measured on the controller's clock.
      while (!woken && !stopping && epoch == seen && clock.now_ns() < until)
        woken = clock.wait_until(me, lock, until, {});
      if (poller == &me) poller = nullptr;
    } else {
      {
        HookBypass bypass;
        idle.push_back(&me);
      }
      bool woken = false;
      while (!woken && !stopping) woken = clock.wait_until(me, lock, Clock::kMaxNs, {});
      std::erase(idle, &me);  // when woken by stop or returned early
    }
  }
}

// The queue's timer: completes the items whose deadline passed and those stopped by their token
// while every worker may be in a run. Sleeps until the next deadline of an item not being tried
// (those are completed by their worker), or until woken by a submit or a stop.
void AdmissionQueueCore::timer() {
  std::vector<Completion> done;
  std::unique_lock<std::mutex> lock(mu);
  while (!stopping) {
    const uint64_t now = clock.now_ns();
    sweep(now, &done);
    if (!done.empty()) {
      lock.unlock();
      complete(done);
      lock.lock();
      continue;
    }
    auto next = deadlines.upper_bound({now, UINT64_MAX});
    timer_until = next == deadlines.end() ? Clock::kMaxNs : next->first;
    timer_asleep = true;
    clock.wait_until(timer_waiter, lock, timer_until, {});
    timer_asleep = false;
  }
}

}  // namespace internal
}  // namespace memcg
