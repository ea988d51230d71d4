// Waiting charges: a third outcome besides success and failure. A charge that the failure ladder
// cannot serve (reclaim, stock drains and retries ran; nothing more can be freed without an OOM
// kill) waits, up to a deadline, for memory that other users of the same limit give back.
//
//   try_charge_wait(g, n, deadline, stop)
//     -> the ladder of try_charge, without the OOM killer (kRetryMayFail)
//     -> still no room: queue on the group whose memory.max held (g itself or an ancestor);
//        that group's memory.events `wait` counts it (an extension of the kernel's keys)
//     -> granted by an uncharge under that group, a memory.max write, or the waiter's own poll
//     -> or: deadline passed (kTimedOut), stop requested (kCancelled), the charged group
//        removed or the controller destroyed (kRemoved)
//
// Granting charges exactly the asked units to the waiter's group (no batch into the stock); a
// waiter that returns anything but kOk holds nothing. See docs/charge_wait.md for the fairness
// policy (priority classes, arrival order within a class, a bypass for requests that fit, an
// aging bound per class after which the oldest waiter reserves freed memory before anyone else,
// across the nested limits of its path).
//
// Cost: the charge and uncharge hot paths are unchanged; with no waiter on a limit of a group's
// path (the group and its ancestors), the uncharge slow path and uncharge_direct() under it
// read one relaxed count per level and take no lock, whatever waits elsewhere.
//
// Threads: a waiter blocks its thread (it is a memory stall in PSI, memory.pressure) in the
// controller's Clock::wait_until(), and whoever grants or removes it wakes it with Clock::wake().
// Waiting takes no library lock that a charge takes; each queue has its own mutex, a leaf,
// released while the thread is blocked.
//
// REQUIRES: as for any charge, the caller holds a reference to `group` for the call. Destroying
// the controller while threads wait is allowed: ~Controller wakes them (kRemoved) and waits until
// every one has left the library before it frees anything. Starting a new wait during the
// destruction is not (like any other use of a controller being destroyed).
#pragma once

#include <chrono>
#include <cstdint>
#include <stop_token>

#include "memcg/core/charge/charge.hpp"

namespace memcg {

class Controller;
class Group;

enum class [[nodiscard]] WaitStatus : uint8_t {
  kOk,        // charged within the limits (at once or after waiting)
  kTimedOut,  // the deadline passed first; nothing charged
  kCancelled, // the stop token was triggered first; nothing charged
  kRemoved,   // the charged group was removed or the controller destroyed; nothing charged
  kInvalid,   // refused: a negative count, or one no counter can hold (the root never refuses)
  kNeverFits, // refused at once: more than the smallest memory.max on the group's path, so no
              // amount of waiting could serve it (never_fits() names that group); nothing charged
};

// "ok", "timed-out", "cancelled", "removed", "invalid", "never-fits" ("unknown" for a value that
// is none of them), spelled as the same statuses of ReserveStatus are.
const char* wait_status_name(WaitStatus s) noexcept;

// The group on `group`'s path (itself included, the root excluded) whose memory.max is below
// `units`, the lowest such limit (the nearest on a tie), or null when `units` fits under every
// limit of the path. A request it names can never be whole under the limits as they are: the
// waiting entry points and Reservation refuse it at once (kNeverFits) instead of waiting out
// their deadline, and count it in that group's memory.wait (`never_fits`).
const Group* never_fits(const Group& group, int64_t units) noexcept;

// The class of a waiting charge. Waiters of a higher class are offered freed memory first; within
// a class, arrival order. Every class ages (see set_wait_aging): a waiter that has waited its
// class's aging bound is served before every waiter not yet aged, whatever their class, so a
// lower class never starves while memory is freed. kDefault takes the charged group's class
// (set_wait_priority, memory.wait.priority; kNormal unless set).
enum class WaitPriority : uint8_t { kLow = 0, kNormal = 1, kHigh = 2, kDefault = 255 };
inline constexpr int kWaitPriorities = 3;  // kLow..kHigh
const char* wait_priority_name(WaitPriority p) noexcept;  // "low", "normal", "high", "default"

// What a waiting charge may say beyond its size and deadline, so that callers (a Member, a
// reservation) pass one value through.
struct WaitOptions {
  WaitPriority priority = WaitPriority::kDefault;
  int kind = kDefaultKind;  // as for try_charge
};

using WaitClock = std::chrono::steady_clock;

// Time: every wait runs on the controller's clock (Options::clock, Controller::clock()): the
// deadline, the aging bound and the waiter's poll are measured with Clock::now_ns(), and the
// thread blocks in Clock::wait_until(). With a ManualClock a waiter times out when the clock is
// advanced past its deadline, not when real time passes.

// Charges `units` to `group`, waiting up to `timeout` on the controller's clock when the ladder
// cannot. units: 1..Controller::max_units() (0 charges nothing and returns kOk); a count above the
// sentinel, or a negative one, is kInvalid. The root group has no limit: kOk at once. A timeout
// of 0 (or a negative one, taken as 0) still runs the ladder once (a try without waiting); a
// deadline past Clock::kMaxNs is taken as kMaxNs. `kind` as for try_charge. The same units and
// kind go to uncharge() later.
WaitStatus try_charge_wait_for(Group& group, int64_t units, std::chrono::nanoseconds timeout,
                               std::stop_token stop = {}, int kind = kDefaultKind) noexcept;
// Bytes, rounded up to whole units as try_charge_bytes() does; uncharge with uncharge_bytes().
WaitStatus try_charge_bytes_wait_for(Group& group, uint64_t bytes, std::chrono::nanoseconds timeout,
                                     std::stop_token stop = {}, int kind = kDefaultKind) noexcept;
// The ChargeHandle form: on kOk, `out` owns the charge (and a reference to the group); on any
// other status `out` is left empty. Whatever `out` held before is released first.
WaitStatus charge_wait_for(ChargeHandle& out, Group& group, uint64_t bytes,
                           std::chrono::nanoseconds timeout, std::stop_token stop = {},
                           int kind = kDefaultKind) noexcept;

// The same with a deadline on the steady clock. When the ladder has failed and the wait begins,
// what is left of the deadline (deadline - WaitClock::now(), clamped at 0) becomes a timeout
// measured on the controller's clock: with the default SystemClock the two agree; with another
// clock the deadline means "this long from now" in that clock's time.
WaitStatus try_charge_wait(Group& group, int64_t units, WaitClock::time_point deadline,
                           std::stop_token stop = {}, int kind = kDefaultKind) noexcept;
WaitStatus try_charge_bytes_wait(Group& group, uint64_t bytes, WaitClock::time_point deadline,
                                 std::stop_token stop = {}, int kind = kDefaultKind) noexcept;
WaitStatus charge_wait(ChargeHandle& out, Group& group, uint64_t bytes,
                       WaitClock::time_point deadline, std::stop_token stop = {},
                       int kind = kDefaultKind) noexcept;

// The same with WaitOptions (the forms above are these with {kDefault, kind}). A priority outside
// kLow..kHigh and not kDefault is kInvalid.
WaitStatus try_charge_wait_for(Group& group, int64_t units, std::chrono::nanoseconds timeout,
                               std::stop_token stop, const WaitOptions& options) noexcept;
WaitStatus try_charge_bytes_wait_for(Group& group, uint64_t bytes, std::chrono::nanoseconds timeout,
                                     std::stop_token stop, const WaitOptions& options) noexcept;
WaitStatus charge_wait_for(ChargeHandle& out, Group& group, uint64_t bytes,
                           std::chrono::nanoseconds timeout, std::stop_token stop,
                           const WaitOptions& options) noexcept;
WaitStatus try_charge_wait(Group& group, int64_t units, WaitClock::time_point deadline,
                           std::stop_token stop, const WaitOptions& options) noexcept;
WaitStatus try_charge_bytes_wait(Group& group, uint64_t bytes, WaitClock::time_point deadline,
                                 std::stop_token stop, const WaitOptions& options) noexcept;
WaitStatus charge_wait(ChargeHandle& out, Group& group, uint64_t bytes,
                       WaitClock::time_point deadline, std::stop_token stop,
                       const WaitOptions& options) noexcept;

// The class of the waiting charges of `group` that ask for kDefault (kNormal until set). EINVAL
// for kDefault or a value outside kLow..kHigh (nothing changes), ENOENT for the root (it never
// waits). Shown and written as the group's memory.wait.priority file ("low", "normal", "high").
[[nodiscard]] int set_wait_priority(Group& group, WaitPriority priority) noexcept;
WaitPriority wait_priority(const Group& group) noexcept;

// Cooperative preemption, opt-in per group (off unless set; shown and written as the group's
// memory.wait.preempt file, "0" or "1"; ENOENT for the root). When on, a waiting charge queued on
// this group's memory.max whose class is above kLow, and that the freed memory cannot serve,
// asks holders of a lower class to give memory back: the Members of this group's subtree (not of
// the waiter's own group, not immune, not killed) whose group's class (wait_priority) is below
// the waiter's, lowest class first, largest first, as many as cover the shortage (the units the
// waiter still needs beyond the room on its path and beyond what members asked earlier still
// hold, for up to kOomVictimWaitNs after they were asked), at most kMaxPreemptAsks per look. Each
// is asked once through its callback, with
// Member::cancel_reason() kPreempt (oom.hpp): a request, not a kill. The waiter asks on its first
// look and after each poll while it is short and its deadline has not passed, with no library
// lock held; what the members release reaches it through the normal wake-up (or whoever is
// served first by the policy). memory.events `preempt` counts each request on the member's group;
// OomKiller::last_preempt_report() tells who was asked and why. A member asked is not asked
// again until it has held nothing.
inline constexpr int kMaxPreemptAsks = 4;
[[nodiscard]] int set_wait_preempt(Group& group, bool on) noexcept;
bool wait_preempt(const Group& group) noexcept;

// The aging bound: a waiter that has waited this long (on the controller's clock) is served before
// any later one, and every unit freed under its queue is reserved for it until it is whole.
// Default 100 ms; a negative value is clamped to 0 (strict FIFO: no bypass at all, and no
// priorities). Per controller. The bound is this for kNormal, half of it for kHigh and twice it
// for kLow: a low waiter is served before any waiter that came more than 1.5 bounds after it.
// The reserve an aged waiter gets is taken on every level of its path whose room it needs, so
// that units freed under a nested limit go to the aged waiter of the outer one before any
// younger waiter of the nested queue.
void set_wait_aging(Controller& controller, std::chrono::nanoseconds aging) noexcept;
std::chrono::nanoseconds wait_aging(const Controller& controller) noexcept;

// What is waiting on one group's limit (the queue of `group`, not of its descendants), and what
// has happened to the charges that waited on it since the controller was created. Shown as the
// group's memory.wait file (files.hpp).
struct WaitStats {
  uint64_t waiters = 0;       // waiting now
  uint64_t queued_bytes = 0;  // their asked bytes (units x unit size)
  uint64_t reserved_bytes = 0;// bytes already reserved for aged waiters (charged, not yet handed)
  uint64_t waits = 0;         // charges that queued here
  uint64_t granted = 0;       // ...and were granted
  uint64_t timed_out = 0;
  uint64_t cancelled = 0;
  uint64_t removed = 0;
  uint64_t never_fits = 0;    // requests refused at once for this group's memory.max (kNeverFits)
  // How long charges that queued here waited, whatever the outcome (on the controller's clock).
  uint64_t last_wait_ns = 0;
  uint64_t max_wait_ns = 0;
  uint64_t wait_ns_sum = 0;
  // Charges that left after waiting at most kWaitBucketsNs[i] (the last bucket: all of them).
  static constexpr int kBuckets = 6;
  uint64_t wait_buckets[kBuckets] = {};
  // The same figures per class (index: WaitPriority kLow..kHigh).
  struct Class {
    uint64_t waiters = 0, queued_bytes = 0, waits = 0, granted = 0, timed_out = 0, cancelled = 0,
             removed = 0;
  } by_priority[kWaitPriorities];
};
// The upper bounds of WaitStats::wait_buckets: 1 ms, 10 ms, 100 ms, 1 s, 10 s, and no bound.
inline constexpr uint64_t kWaitBucketsNs[WaitStats::kBuckets] = {
    1'000'000, 10'000'000, 100'000'000, 1'000'000'000, 10'000'000'000, UINT64_MAX};
WaitStats wait_stats(const Group& group) noexcept;

}  // namespace memcg
