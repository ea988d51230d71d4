// vmpressure: how hard reclaim has to work, turned into three levels (low, medium, critical), for
// listeners, and the socket-pressure flag derived from it (the kernel's mm/vmpressure.c).
//
// Pressure of a window of reclaim = share of scanned memory that could not be freed:
// 100 x (1 - reclaimed / scanned), in integer percent; >= 60 is medium, >= 95 critical. A window
// is 2 MiB of scanning (512 pages of 4 KiB, scaled to the controller's unit). Reclaim at priority
// 3 or below (it already scans an eighth of every list) forces a critical window.
//
// Two modes:
//  - Tree mode feeds listeners. Reclaim adds what it scanned under its reclaim root to that root's
//    window; when the window is full its level goes to the listeners of the root and its ancestors
//    (routing by listener mode, see PressureMode in parse.hpp).
//  - Per-group mode feeds socket pressure. Each non-root group reclaimed keeps its own window;
//    a medium-or-worse window puts it under socket pressure for 1 s (controller clock).
// Proactive reclaim (memory.reclaim) feeds neither.
//
// Delivery: the kernel hands a full window to a worker thread. Here the window is delivered
// synchronously, on the reclaiming thread, by the reclaim call that filled it (at the end of the
// call, or at the priority step that forced a critical window), with no library lock held. The
// thread is still marked as reclaiming, so a charge made by a callback is forced and never
// recurses into reclaim. An eventfd listener only costs a write(2) on that thread. No lock is
// held during a call, so calls of one listener may run concurrently on several reclaiming
// threads; each is counted on the listener (the delivery primitive shared with memory.events and
// PSI), which is what reset() waits for. A callback should do its work and return (a cache
// shrink, a flag), not wait: the reclaiming thread waits with it.
//
// Expected rates (the kernel's delivery, which is the default here too): one event per window of
// 2 MiB scanned by reclaim under the listener's group, plus a forced critical window at each of
// the priorities 3, 2, 1 and 0 that a reclaim call reaches: 4 critical events per reclaim call
// that finds nothing to free. A charge that fails at a full group makes up to 18 reclaim calls
// (the first, one after draining the stocks, 16 retries), so 72 critical events per
// failing charge (tests/vmpressure_test.cpp measures it); charging threads that keep failing
// produce thousands per second. A listener that acts on the level, not on every window, sets
// a rate limit (PressureListener::set_rate_limit): at most one event per interval, the rest
// dropped and counted.
//
// Cost: free without listeners. A process-wide count of listeners gates tree mode: while it is 0
// reclaim does one relaxed load per call and no accounting, locking or delivery; windows gathered
// before a first registration are discarded, so a new listener's first event needs a fresh
// window. Per-group mode (socket pressure) is never gated: one short lock per group visit of
// non-proactive reclaim. under_socket_pressure() is a few relaxed loads.
//
// Thread safety: every call may be made from any thread. Listeners may be registered and removed
// at any time, including from inside a listener callback and while a window is being delivered.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "memcg/core/tree/group.hpp"
#include "memcg/core/signal/pressure.hpp"
#include "memcg/core/reclaim/reclaim.hpp"

namespace memcg {

// ---- level computation --------------------------------------------------------------------------

// The window, in 4 KiB pages (SWAP_CLUSTER_MAX x 16): 2 MiB of scanning.
inline constexpr int64_t kVmpressureWindowPages = 512;
inline constexpr int kVmpressureMedium = 60;    // percent
inline constexpr int kVmpressureCritical = 95;  // percent
// Reclaim priority at or below which a window is critical whatever it freed (ilog2(100 / 10)).
inline constexpr int kVmpressureCriticalPriority = 3;
// How long a medium-or-worse per-group window keeps the group under socket pressure.
inline constexpr uint64_t kSocketPressureHoldNs = 1'000'000'000;

// Pressure in percent of a window that scanned `scanned` and freed `reclaimed` (0 when
// reclaimed >= scanned or scanned <= 0), with the kernel's integer arithmetic.
int vmpressure_percent(int64_t scanned, int64_t reclaimed) noexcept;
PressureLevel vmpressure_level(int64_t scanned, int64_t reclaimed) noexcept;
// The window in the controller's units (at least 1).
int64_t vmpressure_window(const Group& group) noexcept;

// ---- listeners ----------------------------------------------------------------------------------

// A registration for vmpressure events of one group: fires for windows of level `level` or
// higher that the routing of `mode` lets through. Events go to a callback (given the level of the
// window) and/or an eventfd (its counter grows by 1 per event; the registration keeps its own
// duplicate of the descriptor, so closing the application's copy is harmless).
//
// Destroying or reset() unregisters; once it returns the callback is not called again and none
// of this listener's calls is running (it waits for this listener's calls only), unless reset()
// runs inside a callback of the library (any listener's: then a call already running on another
// thread may complete, and reset() does not wait, which could close a cycle of waits).
// REQUIRES: reset() is not called while holding a lock that this listener's callback takes.
//
// Removal (the kernel's memcg_event_remove: when a cgroup goes, each event registered on it is
// unregistered and its eventfd signalled once more, "the event is going away"): when the group is
// removed (Controller::remove), the listener gets one final notification, not rate-limited, with
// removed() already true: the eventfd's counter goes up by 1 (as in the kernel, a reader sees it
// like an event and checks removed()) and the callback is called with the listener's own level
// (it tells the removal by removed() on its handle). Then the listener lets go of the group: no
// further event comes, and the listener no longer keeps the group dying; the handle stays
// registered until reset(), which then touches no group (the controller may be gone by then).
// The final notification runs inside Controller::remove(), with no library lock held; it is
// not counted in delivered(). Registering on a removed group fails with ENOENT.
class PressureListener {
 public:
  using Callback = std::function<void(PressureLevel)>;

  PressureListener() = default;
  PressureListener(PressureListener&&) noexcept;
  PressureListener& operator=(PressureListener&&) noexcept;
  ~PressureListener() { reset(); }

  // Registers on `group`. 0; EBUSY if this handle already holds a registration; EINVAL for an
  // empty callback and no eventfd; EBADF for an eventfd that cannot be duplicated; ENOENT for a
  // removed group.
  [[nodiscard]] int listen(Group& group, PressureLevel level, PressureMode mode,
                           Callback callback, int eventfd = -1);
  // Same, with the registration text `<level>[,<mode>]` (parse_pressure_level).
  [[nodiscard]] int listen(Group& group, std::string_view args, Callback callback,
                           int eventfd = -1);

  // At most one event per `min_interval` on the controller's clock (callback and eventfd alike);
  // events inside the interval are dropped and counted by suppressed(). A dropped event still
  // counts as this listener's for the routing (a kDefault listener further up stays silent).
  // 0 (the default) delivers every window, as the kernel does. A listener at a low level that
  // must not miss a critical window registers a second listener at kCritical. May be called at
  // any time. 0; EINVAL when nothing is registered or the interval is negative.
  [[nodiscard]] int set_rate_limit(std::chrono::nanoseconds min_interval) noexcept;

  void reset() noexcept;
  explicit operator bool() const noexcept { return entry_ != nullptr; }
  // Events delivered to this registration so far.
  uint64_t delivered() const noexcept;
  // Events dropped by the rate limit so far.
  uint64_t suppressed() const noexcept;
  // True once the group was removed: the final notification is delivered or being delivered.
  bool removed() const noexcept;

 private:
  // Holds the registration's reference to the group until its removal (delivery.hpp).
  std::shared_ptr<void> entry_;  // internal::PressureListenerEntry
};

// The legacy text interface: a line written to cgroup.event_control,
// `<event_fd> <pressure_level_fd> <level>[,<mode>]` (parse_event_control). In a process there is
// no memory.pressure_level file to hand in; the second fd is checked for syntax only. Registers an
// eventfd listener on `group` into `out`. 0, EINVAL, EBUSY, EBADF or ENOENT as listen() says.
[[nodiscard]] int register_event_control(Group& group, std::string_view line,
                                         PressureListener* out);

// Registered listeners in the whole process (the gate of tree mode).
int64_t nr_pressure_listeners() noexcept;

// ---- socket pressure ----------------------------------------------------------------------------

// True while `group` or one of its ancestors had a medium-or-worse per-group window in the last
// second. Consumers of socket-like buffers should stop growing them while it is true.
bool under_socket_pressure(const Group& group) noexcept;

// ---- inputs from reclaim ------------------------------------------------------------------------
// The reclaim driver calls these; a custom reclaim policy (Controller::set_reclaim_hook) may call
// them too. `reason` kProactive makes each a no-op.

// Per-group mode: what one visit of `group` during a reclaim scanned and freed. No-op for the
// root group or scanned <= 0.
void vmpressure_group(Group& group, ReclaimReason reason, int64_t scanned,
                      int64_t reclaimed) noexcept;
// Tree mode: what a reclaim rooted at `root` scanned and freed. Delivers a full window.
void vmpressure_tree(Group& root, ReclaimReason reason, int64_t scanned,
                     int64_t reclaimed) noexcept;
// Reclaim rooted at `root` reached `priority`; at kVmpressureCriticalPriority or below this feeds
// a whole window with nothing freed (a critical event).
void vmpressure_prio(Group& root, ReclaimReason reason, int priority) noexcept;

// ---- statistics and ablation --------------------------------------------------------------------

struct VmpressureStats {
  uint64_t windows;     // tree-mode windows completed (the kernel's worker runs)
  uint64_t deliveries;  // listener events fired (callback calls and eventfd writes)
};
VmpressureStats vmpressure_stats() noexcept;
// Windows of the group's own reclaim completed so far (per-group mode, which always runs: the
// root and proactive reclaim have none), by level: [0] low, [1] medium, [2] critical.
void vmpressure_level_counts(const Group& group, uint64_t out[3]) noexcept;

namespace internal {
// Process-wide listener count; tree mode runs only while it is non-zero (or the gate is off).
inline std::atomic<int64_t> g_vmpressure_listeners{0};
// Benchmarks only: false makes tree mode account and complete windows with no listener, as
// kernels without the gate do. Not for production use.
void set_vmpressure_gate(bool on) noexcept;
}  // namespace internal

}  // namespace memcg
