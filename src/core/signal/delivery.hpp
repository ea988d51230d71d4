// The one delivery primitive of the library's callbacks: memory.events watchers (notify.cpp),
// vmpressure listeners and PSI triggers. Private to the library.
//
// Every listener owns a DeliveryGate. A delivery opens on the gate where the deliverer knows the
// group it hands out is alive (under the lock that also guards the listener list, which the
// listeners' own references keep alive), takes its own reference to that group there, and
// finishes outside every library lock: it calls the callback unless the gate closed meanwhile,
// then drops the reference, then leaves the gate. So:
//   - nothing a callback is given can be freed under it: the delivery holds the group;
//   - deliveries are counted per listener: closing a gate waits for that listener's own
//     deliveries, never for another listener's (no batch-wide in-flight count);
//   - after close() returns, the callback does not start again, and, unless close() ran on a
//     thread that is itself inside a delivery, none is running and every reference a delivery
//     of this listener took is dropped.
// A thread inside a delivery (any listener's callback) does not wait in close(): the wait could
// be for itself, or close a cycle (two callbacks destroying each other's listener). The
// deliveries it leaves running still hold their group, so none can see it freed.
//
// The gate also keeps the listener's own reference to its group and tells the group's removal
// (the kernel's file going away), the same way for every kind of listener:
//   - hold() at registration, under the lock of the group's listener list, after checking that
//     the group is online (so a registration on a removed group fails with ENOENT);
//   - the removal (Controller::remove, after the group went offline) unlinks the listener under
//     that lock and calls begin_removal() there: removed() becomes true (group() null first),
//     later begin()s are refused, and the final delivery opens. Outside the lock,
//     finish_removal() makes the final notification, then lets go of the listener's reference;
//   - the listener's destruction takes the reference with release() (null when the removal took
//     it, having unlinked the listener), unlinks the listener under the same lock if still
//     listed, close()s the gate, then puts what it took.
// So every listener of a removed group gets one final notification that says so, unless it is
// being destroyed at the same time, and no listener keeps a removed group dying.
#ifndef MEMCG_CORE_DELIVERY_HPP_
#define MEMCG_CORE_DELIVERY_HPP_

#include <atomic>
#include <utility>

#include "memcg/core/tree/group.hpp"

namespace memcg::internal {

// Deliveries running on this thread, over all listeners.
inline thread_local int tl_delivery_depth = 0;

inline bool in_delivery() noexcept {
  return tl_delivery_depth != 0;
}

class DeliveryGate {
 public:
  DeliveryGate() = default;
  DeliveryGate(const DeliveryGate&) = delete;
  DeliveryGate& operator=(const DeliveryGate&) = delete;

  // Opens a delivery: counted on this gate, and holding a reference to `group` (may be null)
  // until finish(). False, with nothing taken, once the gate is closed.
  // REQUIRES: `group` stays alive during the call; the gate outlives finish().
  // Also false once the listener's group was removed: the final notification was the last.
  bool begin(Group* group) noexcept {
    // Dekker pair with close(): either this sees the gate closed, or close() sees the count.
    running_.fetch_add(1, std::memory_order_seq_cst);
    if (closed_.load(std::memory_order_seq_cst) || removed_.load(std::memory_order_seq_cst)) {
      leave();
      return false;
    }
    if (group) group->get();
    return true;
  }

  // Ends a delivery that begin() opened: runs `call` (noexcept) unless the gate closed since,
  // then drops the reference (which may release a removed group), then leaves the gate.
  template <typename F>
  void finish(Group* group, F&& call) noexcept {
    if (!closed_.load(std::memory_order_seq_cst)) {
      ++tl_delivery_depth;
      call();
      --tl_delivery_depth;
    }
    if (group) group->put();
    leave();
  }

  // No delivery starts after this; waits for the ones in flight unless the calling thread is
  // inside a delivery (see above). Idempotent.
  void close() noexcept {
    closed_.store(true, std::memory_order_seq_cst);
    if (in_delivery()) return;
    for (int r; (r = running_.load(std::memory_order_seq_cst)) != 0;) running_.wait(r);
  }

  bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }

  // ---- the listener's reference to its group, and the removal notice (see the top) ----

  // Takes the listener's reference to `group`. REQUIRES: under the lock of the group's listener
  // list, the group online; called once.
  void hold(Group& group) noexcept {
    group.get();
    held_.store(&group, std::memory_order_release);
  }
  // The group while the listener holds it and it is not removed; null afterwards.
  Group* group() const noexcept {
    if (removed_.load(std::memory_order_acquire)) return nullptr;
    return held_.load(std::memory_order_acquire);
  }
  // True once the group was removed: the final notification is delivered or being delivered.
  bool removed() const noexcept { return removed_.load(std::memory_order_acquire); }

  // Marks the removal and opens the final delivery, holding `group` as begin() does (finish()
  // skips the call if the gate closes meanwhile). REQUIRES: under the lock of the group's
  // listener list, which no longer lists the listener; `group` is the one held.
  void begin_removal(Group& group) noexcept {
    removed_.store(true, std::memory_order_seq_cst);
    running_.fetch_add(1, std::memory_order_seq_cst);
    group.get();
  }
  // Ends what begin_removal() opened with the final notification `call`, with no library lock
  // held, then lets go of the listener's reference unless its destruction took it first.
  // REQUIRES: the caller keeps the gate alive through the call (it owns a share of the listener).
  template <typename F>
  void finish_removal(Group& group, F&& call) noexcept {
    finish(&group, std::forward<F>(call));
    if (Group* g = release()) g->put();
  }
  // Takes the listener's reference: the group to put(), or null if the removal (or an earlier
  // call) took it.
  Group* release() noexcept { return held_.exchange(nullptr, std::memory_order_acq_rel); }

 private:
  void leave() noexcept {
    if (running_.fetch_sub(1, std::memory_order_seq_cst) == 1) running_.notify_all();
  }

  std::atomic<bool> closed_{false};
  std::atomic<bool> removed_{false};
  std::atomic<int> running_{0};
  std::atomic<Group*> held_{nullptr};
};

}  // namespace memcg::internal

#endif  // MEMCG_CORE_DELIVERY_HPP_
