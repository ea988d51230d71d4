// The points where the core tells the waiting-charge queues (charge_wait.hpp) that something
// changed. Each is local to the group's path: it costs one relaxed load per level from the group
// up to (not including) the root while no charge waits on a limit of that path, and nothing
// process-wide or controller-wide.
#ifndef MEMCG_INTERNAL_CHARGE_WAIT_HOOKS_HPP_
#define MEMCG_INTERNAL_CHARGE_WAIT_HOOKS_HPP_

#include <atomic>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"

namespace memcg::internal {

// The fields of Group and Controller that the waiting charges own.
struct WaitAccess {
  static std::atomic<int>& count(Group& g) noexcept { return g.wait_count_; }
  static const std::atomic<int>& count(const Group& g) noexcept { return g.wait_count_; }
  static std::atomic<WaitQueue*>& queue(Group& g) noexcept { return g.wait_queue_; }
  static WaitQueue* queue(const Group& g) noexcept {
    return g.wait_queue_.load(std::memory_order_acquire);
  }
  static std::atomic<ControllerWaits*>& state(Controller& c) noexcept { return c.waits_; }
  static std::atomic<uint64_t>& never_fits(Group& g) noexcept { return g.never_fits_; }
  static const std::atomic<uint64_t>& never_fits(const Group& g) noexcept {
    return g.never_fits_;
  }
  static ControllerWaits* state(const Controller& c) noexcept {
    return c.waits_.load(std::memory_order_acquire);
  }
};

// Some charge waits on the memory.max of `group` or of one of its ancestors. Relaxed: a waiter
// that is enqueueing while an uncharge looks is found by the waiter's own look after it queued
// (and, failing that, by its poll).
inline bool charge_waiters_on_path(const Group& group) noexcept {
  for (const Group* a = &group; a->parent() != nullptr; a = a->parent())
    if (WaitAccess::count(*a).load(std::memory_order_relaxed) != 0) [[unlikely]]
      return true;
  return false;
}

// Usage under `group` dropped (an uncharge) or a limit of `group` was raised: serve the queues
// of `group` and its ancestors. Takes only the queues' own mutexes (leaves). Callable under any
// library lock except a wait queue's own.
void wake_charge_waiters_slow(Group& group) noexcept;
inline void wake_charge_waiters(Group& group) noexcept {
  if (charge_waiters_on_path(group)) [[unlikely]]
    wake_charge_waiters_slow(group);
}

// An uncharge under `group` inside an allocator hook, where the queues' mutexes may not be
// taken: marks the queues of the path that have waiters, for run_deferred_wakes(). Atomic only,
// and takes no reference. False if no queue of the path has a waiter.
bool defer_wake_in_hook(Group& group) noexcept;
// Serves the queues that hooks marked (at a safe point: no library lock held, not in a hook).
// One relaxed load when none is marked.
void run_deferred_wakes(Controller& controller) noexcept;

// Counts a request refused as never fitting on `limiting` (never_fits()).
void count_never_fits(const Group& limiting) noexcept;

// `group` went offline: its waiters return kRemoved. Called by Controller::remove() with no lock.
void charge_wait_group_removed(Group& group) noexcept;
// `group` is being freed: its (empty) queue goes with it. Called by ~Group.
void charge_wait_group_freed(Group& group) noexcept;
// The controller is being destroyed: every waiter returns kRemoved, and this returns once all of
// them have left. Called first thing in ~Controller.
void charge_wait_controller_gone(Controller& controller) noexcept;
// Frees the controller's wait state. Called by ~Controller once its serial is dead.
void charge_wait_controller_freed(Controller& controller) noexcept;

// A waiting charge was granted `units` on the counters of `group`: memory.high is looked at as
// for every charge that reaches the counters (the event, reclaim and the throttle of the calling
// thread, charge.cpp).
void charged_after_wait(Group& group, int64_t units) noexcept;

}  // namespace memcg::internal

#endif  // MEMCG_INTERNAL_CHARGE_WAIT_HOOKS_HPP_
