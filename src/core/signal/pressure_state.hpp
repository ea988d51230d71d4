// Per-group state of the pressure signals (vmpressure.hpp, psi.hpp), private to the library.
//
// Every group owns one GroupPressure, created with the group and freed with it. Nothing here is
// touched by the charge hot path: vmpressure is fed by the reclaim driver, PSI by stall sections
// on slow paths and by thread attachment.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "memcg/base/clock.hpp"
#include "memcg/core/signal/pressure.hpp"
#include "memcg/core/signal/psi.hpp"
#include "delivery.hpp"

namespace memcg::internal {

// Where one registration's events go: a callback, an eventfd (owned duplicate: the registration
// never writes to a descriptor the application has closed and reused), or both.
//
// Lifetime: entries are shared_ptrs. A delivering thread copies the list under the owner's lock,
// drops the lock, then fires each entry through its DeliveryGate (delivery.hpp), holding no lock;
// removal unlinks the entry, then closes the gate, which waits for this entry's own calls in
// flight only (not from inside a callback: see delivery.hpp). The gate also holds the
// registration's reference to its group and tells the group's removal (delivery.hpp): the
// removal unlinks the entry under the owner's lock, marks it, and makes one final notification
// (notify(), not counted in `delivered`), then lets go of the group.
struct NotifyEntry {
  NotifyEntry(std::function<void(int)> fn, int eventfd_dup) : fn(std::move(fn)), efd(eventfd_dup) {}
  ~NotifyEntry();
  NotifyEntry(const NotifyEntry&) = delete;
  NotifyEntry& operator=(const NotifyEntry&) = delete;

  // Delivers one event (callback argument `arg`) unless retired. Never throws. REQUIRES: the
  // caller holds a shared_ptr to the entry for the duration of the call.
  void fire(int arg) noexcept;
  // The eventfd write and the callback, inside a delivery opened on `gate`.
  void notify(int arg) noexcept;
  // No call starts after this; waits for this entry's calls in flight (see above).
  void retire() noexcept { gate.close(); }

  const std::function<void(int)> fn;
  const int efd;  // -1 when none
  DeliveryGate gate;
  std::atomic<uint64_t> delivered{0};
};

// dup(2)s `fd` with close-on-exec; -1 (errno set) on failure.
int dup_eventfd(int fd) noexcept;

// ---- vmpressure ---------------------------------------------------------------------------------

struct PressureListenerEntry : NotifyEntry {
  PressureListenerEntry(std::function<void(int)> fn, int efd, PressureLevel level,
                        PressureMode mode)
      : NotifyEntry(std::move(fn), efd), level(level), mode(mode) {}
  const PressureLevel level;
  const PressureMode mode;

  // Rate limit (PressureListener::set_rate_limit): at most one event per min_interval_ns on the
  // controller's clock; 0 = every window, as the kernel delivers. An event inside the interval
  // is dropped and counted in `suppressed`.
  std::atomic<uint64_t> min_interval_ns{0};
  std::atomic<uint64_t> next_ns{0};  // the earliest time of the next event
  std::atomic<uint64_t> suppressed{0};
  // True if an event at `now_ns` may be delivered; claims the interval that starts there.
  bool admit(uint64_t now_ns) noexcept {
    const uint64_t interval = min_interval_ns.load(std::memory_order_relaxed);
    if (interval == 0) return true;
    uint64_t next = next_ns.load(std::memory_order_relaxed);
    do {
      if (now_ns < next) {
        suppressed.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
    } while (!next_ns.compare_exchange_weak(next, Clock::after(now_ns, interval),
                                            std::memory_order_relaxed));
    return true;
  }
};

// Units scanned and reclaimed since the last vmpressure window closed.
struct ScanWindow {
  int64_t scanned = 0;
  int64_t reclaimed = 0;

  // Adds one reclaim pass. Once `window` units were scanned, hands the window's totals out
  // through the pointers, starts a new one and returns true.
  bool add(int64_t s, int64_t r, int64_t window, int64_t* s_win, int64_t* r_win) noexcept {
    scanned += s;
    reclaimed += r;
    if (scanned < window) return false;
    *s_win = scanned;
    *r_win = reclaimed;
    scanned = reclaimed = 0;
    return true;
  }
};

struct VmpressureState {
  // Tree mode (notifications): what reclaim rooted here scanned and reclaimed since the last
  // window. Guarded by tree_mutex. `generation` is the listener generation the numbers were
  // gathered under: a stale generation means they predate the first registration and are
  // discarded.
  std::mutex tree_mutex;
  ScanWindow tree;
  uint64_t generation = 0;

  // Per-group mode (socket pressure): this group's own reclaim. Guarded by group_mutex.
  std::mutex group_mutex;
  ScanWindow own;
  // Clock time (ns) until which the group is under socket pressure; 0 = never. Relaxed: a reader
  // that sees an old value is off by at most one window, which the next window corrects.
  std::atomic<uint64_t> socket_deadline_ns{0};
  // Per-group windows completed, by level (low, medium, critical): monitoring only, relaxed.
  std::atomic<uint64_t> levels[3] = {};
  // The level last published on the event bus, plus one (0: none yet): a window publishes only
  // a change. Exchanged, so two racing windows publish a change once.
  std::atomic<uint8_t> bus_level{0};

  // Listeners registered on this group, in registration order. Copy-on-write: delivery reads a
  // snapshot, so registration and removal never wait for a delivery. Guarded by listeners_mutex.
  std::mutex listeners_mutex;
  std::shared_ptr<const std::vector<std::shared_ptr<PressureListenerEntry>>> listeners;
};

// The removal notices of the pressure registrations (Controller::remove, after the group went
// offline): each vmpressure listener and PSI trigger of `g` is unlinked, gets its final
// notification with removed() true, and lets go of the group (delivery.hpp).
void vmpressure_group_removed(Group& g) noexcept;
void psi_group_removed(Group& g) noexcept;

// ---- PSI ----------------------------------------------------------------------------------------

struct PsiTriggerEntry : NotifyEntry {
  PsiTriggerEntry(std::function<void(int)> fn, int efd, const PsiTriggerSpec& spec, bool privileged)
      : NotifyEntry(std::move(fn), efd), spec(spec), privileged(privileged) {}
  const PsiTriggerSpec spec;
  const bool privileged;
  // Guarded by the group's PsiGroupState::mutex.
  uint64_t win_start_ns = 0;
  uint64_t win_start_total = 0;
  uint64_t win_prev_growth = 0;
  uint64_t last_seen_total = 0;  // the state's total at the last evaluation
  uint64_t last_growth_ns = 0;   // when the total last grew (or the window restarted)
  uint64_t last_event_ns = 0;
  bool fired_once = false;
  bool pending = false;
  // When the trigger must be looked at again with no activity (0: not needed): the end of the
  // rate limit while an event is pending, or while its state stalls the time the threshold
  // could be reached (the kernel's rtpoll worker). Guarded by the group's mutex; mirrored in
  // the poll registry (psi.cpp).
  uint64_t poll_due_ns = 0;
};

struct PsiGroupState {
  std::mutex mutex;    // guards everything below
  int nr_stalled = 0;  // threads in a stall section accounted to this group
  int nr_extra = 0;    // of those, threads not attached to this group or a descendant
  int nr_tasks = 0;    // threads attached to this group or a descendant
  bool some = false;
  bool full = false;
  uint64_t state_since_ns = 0;    // last change of the counts above
  uint64_t total_ns[2] = {0, 0};  // time in SOME / FULL up to state_since_ns
  internal::PsiAverages averages;
  std::vector<std::shared_ptr<PsiTriggerEntry>> triggers;
};

struct GroupPressure {
  explicit GroupPressure(uint64_t created_ns) {
    // Times beyond Clock::kMaxNs are taken as that time (clock.hpp).
    if (created_ns > Clock::kMaxNs) created_ns = Clock::kMaxNs;
    psi.averages.reset(created_ns);
    psi.state_since_ns = created_ns;
  }
  VmpressureState vmp;
  PsiGroupState psi;
};

}  // namespace memcg::internal
