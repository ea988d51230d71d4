// Change notification of memory.events and memory.events.local: the in-process equivalent of
// polling those cgroup files for "modified" (poll(2) with POLLPRI, or inotify IN_MODIFY).
//
// An EventListener subscribes to one file of one group. Whenever a counter of that file changes
// (Group::raise), the listener is told through both of
//   - its eventfd(2), whose counter goes up by 1 per notification: poll fd() for POLLIN from any
//     thread, then consume() (or wait(), which does both);
//   - its callback, if it has one, called as callback(group, file).
// As in the kernel, notifications are rate-limited per (group, file) to one per 10 ms: a change
// within 10 ms of the last notification is not announced at once but remembered, and one
// notification for all such changes is delivered when the interval ends. "When the interval ends"
// is measured on the controller's Clock: with the SystemClock a library timer thread delivers it
// on time; with any other clock (a ManualClock) it is delivered by the first Group::raise() or
// Controller::tick() of that controller at or after the end of the interval.
//
// A raise on G changes G's memory.events.local and the memory.events of G and of each ancestor
// below the root (of G alone when the controller runs with local_events), so each of those files'
// listeners is notified (subject to its rate limit). The root has neither file, hence no
// listeners.
//
// Where callbacks run: on the thread that raised the event (inside a charge's slow path, a
// reclaim or an OOM kill: keep them short and do not charge from them), on the library's timer
// thread, inside Controller::tick(), or inside Controller::remove() (the removal notice). No
// library lock is held while a callback runs, so a callback may subscribe and unsubscribe
// listeners, its own included. A callback must not throw. Each call holds its own reference to
// the group it is given: the group stays valid for the whole call, whoever destroys which
// listener meanwhile.
//
// Removal (the kernel's file going away: poll gives POLLERR|POLLPRI, inotify IN_DELETE_SELF then
// IN_IGNORED): when the group is removed, each listener of its two files gets one final
// notification, not rate-limited, with removed() already true (the callback sees
// group.is_online() false; an eventfd reader sees the counter go up and then removed()), and then
// lets go of the group: group() returns null, no further notification comes, and the listener
// no longer keeps the group dying. Opening a listener on a removed group fails with ENOENT.
// vmpressure listeners and PSI triggers are told the same way, through the same delivery
// primitive (vmpressure.hpp, psi.hpp: "Removal").
//
// Thread safety: listeners may be created and destroyed at any time from any thread, also during
// deliveries. Cost: nothing on any path while no listener exists in the process (one relaxed load
// per raise); with listeners, a raise takes one mutex per changed file that has state.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "memcg/core/tree/group.hpp"

namespace memcg {

class Controller;

enum class EventsFile : uint8_t {
  kEvents,       // memory.events (hierarchical)
  kEventsLocal,  // memory.events.local
};

// "memory.events" or "memory.events.local".
const char* events_file_name(EventsFile file) noexcept;

// The rate limit: at most one notification per (group, file) per this interval, 10 ms as in the
// kernel (its file-modified notifications are limited to one per 10 ms per file).
inline constexpr uint64_t kEventNotifyIntervalNs = 10'000'000;

class EventListener {
 public:
  using Callback = std::function<void(Group& group, EventsFile file)>;

  // Subscribes to changes of `file` of `group`; `callback` may be empty (eventfd only). The
  // listener holds a reference to the group until the group is removed. Errors: EINVAL for a
  // null `out`; ENOENT for the root group (it has neither file) or a removed group; the errno of
  // a failed eventfd(2) (EMFILE, ENFILE, ENOMEM); ENOMEM. On error nothing is registered.
  [[nodiscard]] static int open(Group& group, EventsFile file, Callback callback,
                                std::unique_ptr<EventListener>* out);

  // Unsubscribes. When it returns, the callback will not start again and, unless called on a
  // thread that is itself inside a callback of the library (any listener's), none of this
  // listener's calls is running: it waits for this listener's own calls only, never for other
  // listeners'. (Inside a callback it does not wait, which could close a cycle of waits; a call
  // of this listener still running elsewhere keeps its own reference to its group.) The eventfd
  // stays open until no delivery uses it.
  // REQUIRES: the group's controller is still alive; not called from this listener's own
  // callback while holding a lock that another of its calls takes.
  ~EventListener();
  EventListener(const EventListener&) = delete;
  EventListener& operator=(const EventListener&) = delete;

  // The group; null once it was removed (the listener no longer holds it).
  Group* group() const noexcept;
  EventsFile file() const noexcept { return file_; }
  // True once the group was removed: its final notification is delivered or being delivered.
  bool removed() const noexcept;
  // The eventfd (non-blocking, close-on-exec): readable while notifications are unconsumed.
  int fd() const noexcept;
  // Notifications since the last consume(), resetting the count; 0 if none.
  uint64_t consume() noexcept;
  // Waits up to `timeout_ms` (-1: forever) for a notification with poll(2), then consume()s.
  uint64_t wait(int timeout_ms) noexcept;

  struct Core;  // shared with in-flight deliveries; src/core/signal/notify.cpp

 private:
  EventListener(EventsFile file, std::shared_ptr<Core> core);

  EventsFile file_;
  std::shared_ptr<Core> core_;
};

// ---------------------------------------------------------------------------------------------
// Implementation details below; not part of the interface.
namespace internal {
// Delivers the deferred notifications of `controller`'s groups whose interval has ended on its
// clock. Called by Controller::tick(); costs one relaxed load while nothing is deferred.
void deliver_due_notifications(Controller& controller) noexcept;

// Deferred notifications waiting in the queue, over all controllers (for tests).
int64_t deferred_notifications_queued() noexcept;

// Test seam, null by default: when set, called with no lock held by a raise or a deferred
// delivery right after it deferred a notification (queued it for the end of the interval), so
// that a test can interleave the removal of the file's last listener at exactly that point.
extern std::atomic<void (*)()> g_notify_defer_seam;
}  // namespace internal

}  // namespace memcg
