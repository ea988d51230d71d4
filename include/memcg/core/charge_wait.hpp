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
// policy (first come first served, a bypass for requests that fit, an aging bound after which the
// oldest waiter reserves freed memory before anyone else).
//
// Cost: with no waiter in the process, the charge and uncharge hot paths are unchanged; the
// uncharge slow path and uncharge_direct() test one relaxed atomic.
//
// Threads: a waiter blocks its thread (it is a memory stall in PSI, memory.pressure) in the
// controller's Clock::wait_until(), and whoever grants or removes it wakes it with Clock::wake().
// Waiting takes no library lock that a charge takes; the wait state has its own mutex, a leaf,
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

#include "memcg/core/charge.hpp"

namespace memcg {

class Controller;
class Group;

enum class WaitStatus : uint8_t {
  kOk,        // charged within the limits (at once or after waiting)
  kTimedOut,  // the deadline passed first; nothing charged
  kCancelled, // the stop token was triggered first; nothing charged
  kRemoved,   // the charged group was removed or the controller destroyed; nothing charged
  kInvalid,   // refused: a negative count, or one no counter can hold (the root never refuses)
};

const char* wait_status_name(WaitStatus s) noexcept;

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

// The aging bound: a waiter that has waited this long (on the controller's clock) is served before
// any later one, and every unit freed under its queue is reserved for it until it is whole.
// Default 100 ms; a negative value is clamped to 0 (strict FIFO: no bypass at all). Per
// controller.
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
};
WaitStats wait_stats(const Group& group) noexcept;

}  // namespace memcg
