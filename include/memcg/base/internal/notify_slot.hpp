// The per-group hook of memory.events change notification (notify.hpp). Not part of the
// interface: Group embeds a NotifySlot and calls notify_events_raised() from raise().
#pragma once

#include <atomic>
#include <cstdint>

namespace memcg {

class Group;

namespace internal {

struct NotifyState;  // src/notify.cpp

// Live event listeners in the process. Group::raise() reads it with one relaxed load and skips
// all notification work while it is 0. A listener registered while an event is being raised may
// miss that event: it happened before the registration completed.
extern std::atomic<int64_t> g_nr_event_listeners;

inline bool event_listeners_exist() noexcept {
  return g_nr_event_listeners.load(std::memory_order_relaxed) != 0;
}

// Tells the listeners of every file that raising an event on `g` changed (memory.events.local of
// g; memory.events of g and its ancestors below the root, or of g alone with local_events), and
// delivers the group's controller's deferred notifications that are due. Slow path.
void notify_events_raised(Group& g) noexcept;

// `g` was removed (Controller::remove, after the group went offline): each listener of its two
// files gets its final notification, marked as the removal, and then lets go of the group; no
// listener can subscribe to it any more.
void notify_group_removed(Group& g) noexcept;

// A group's notification state: empty until the first listener subscribes, freed with the group.
class NotifySlot {
 public:
  NotifySlot() = default;
  ~NotifySlot();
  NotifySlot(const NotifySlot&) = delete;
  NotifySlot& operator=(const NotifySlot&) = delete;

  // seq_cst: pairs with Group::is_online() in the removal notice (notify.cpp).
  NotifyState* get() const noexcept { return state_.load(std::memory_order_seq_cst); }
  // The state, created on first use; safe against concurrent callers. `owner` embeds this slot.
  NotifyState& get_or_create(Group& owner);

 private:
  std::atomic<NotifyState*> state_{nullptr};
};

}  // namespace internal
}  // namespace memcg
