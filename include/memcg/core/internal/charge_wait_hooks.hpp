// The points where the core tells the waiting-charge queues (charge_wait.hpp) that something
// changed. Each is a no-op while no charge waits anywhere in the process: the test is one
// relaxed load of a process-wide count.
#ifndef MEMCG_INTERNAL_CHARGE_WAIT_HOOKS_HPP_
#define MEMCG_INTERNAL_CHARGE_WAIT_HOOKS_HPP_

#include <atomic>

namespace memcg {
class Controller;
class Group;
}  // namespace memcg

namespace memcg::internal {

// Charges waiting now, in all controllers of the process.
extern std::atomic<long> g_charge_waiters;

inline bool any_charge_waiters() noexcept {
  return g_charge_waiters.load(std::memory_order_relaxed) != 0;
}

// Usage under `group` dropped (an uncharge) or a limit of `group` was raised: serve the queues
// of `group` and its ancestors. Takes only the wait state's own mutex (a leaf). Callable under
// any library lock.
void wake_charge_waiters_slow(Group& group) noexcept;
inline void wake_charge_waiters(Group& group) noexcept {
  if (any_charge_waiters()) [[unlikely]]
    wake_charge_waiters_slow(group);
}

// `group` went offline: its waiters return kRemoved. Called by Controller::remove() with no lock.
void charge_wait_group_removed(Group& group) noexcept;
// The controller is being destroyed: every waiter returns kRemoved, and this returns once all of
// them have left. Called first thing in ~Controller.
void charge_wait_controller_gone(Controller& controller) noexcept;

}  // namespace memcg::internal

#endif  // MEMCG_INTERNAL_CHARGE_WAIT_HOOKS_HPP_
