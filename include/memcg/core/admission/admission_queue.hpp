// AdmissionQueue: work items waiting for admission to their group's memory, served by a shared
// pool of worker threads, fairly across groups by weight, by priority within a group, each
// item running with its Reservation already admitted.
//
// Why it exists: a service whose workers block in reserve_for() on the work they drew runs at
// the rate of its slowest tenant, since the workers gather in that tenant's wait while the other
// tenants' work could run. Every service then writes the same front-end: per-tenant queues,
// short admission tries, put the work back and take another tenant's. Query engines ship this
// as a component (ClickHouse's workload scheduling with weights and priorities, the arbitrator
// queue of Velox, Trino's resource groups); this is memcg's, built on its admission rules.
//
//   memcg::AdmissionQueue queue(ctl, {.workers = 16});
//   memcg::AdmissionQueue::Ticket t;
//   if (queue.submit(*tenant, {.bytes = 64 << 20, .deadline_ns = now + 2'000'000'000,
//                              .run = [](memcg::Reservation& mem) { /* the query */ },
//                              .done = [](memcg::ReserveStatus s) { /* never ran: why */ }},
//                    &t) != memcg::SubmitStatus::kOk) { /* shed it: full, stopped, invalid */ }
//
// How an item is served. A worker looks at the groups with queued items in the order of their
// virtual time (smallest first, ties by first submission) and tries the head item of each (the
// highest priority, first in first out within a priority): reserve_until(bytes, now) on a
// Reservation made for the item's group or Member, i.e. the admission by expected peak
// (admission.hpp) and the charge ladder without the OOM killer, once, with no wait. The first
// head admitted runs on that worker, run(reservation); its group's virtual time then advances by
// its bytes (in units, at least one) / weight (memory.admit.weight), so that while several
// groups are backlogged each is admitted memory in proportion to its weight (weighted fair
// queueing of the bytes admitted; items of equal size are admitted in proportion to the
// weights). A group that had nothing queued re-enters at the smallest virtual time of the
// backlogged groups: idle time is not credit. A head that is not admitted stays at the head and
// the worker tries the next group: a worker never sits in one group's wait while another group's
// item is admissible.
//
// Why bytes and not admissions: what the groups share is room on their common limits (memory
// held for the time an item runs; like cpu.weight sharing the time it is spent). Counting
// admissions would promise a group of items twice as large twice the memory for the same weight,
// room its items cannot get beside the others' without holding everybody else back. The size is
// what admission knows of an item (its run time is known only at its end), so it is the cost.
//
// Large items (the hold-back). Passing over a head that does not fit lets smaller items of other
// groups take the room as it comes back, and a group of large items would be starved however
// small its virtual time: the order is right, the room never gathers. So when a group's head is
// refused because a shared level above it (an ancestor with a memory.max) has no room beside its
// usage and the running admissions' promises, the group is starved there; another group under
// that level that is ahead of it in virtual time by 4 of its own head items is held back (its
// items are not tried) until the starved head is admitted, so that the room gathers for it.
// Bounded: a hold lasts options.hold_ns of the controller's clock at most; then the starved
// group gives up its lag (its virtual time moves up to the others') and the others go on until
// they are 4 items ahead again. A group refused at its own memory.max holds nobody back (only
// its own items make room there), and the virtual time it could not use is not credit either.
// Groups under no shared limited level with the starved one are never held back.
// When no head is admitted, the workers sleep until an item is submitted, an item ends
// (its reservation gave memory back), or poll_ns of the controller's clock passed (memory freed
// elsewhere: caches, reservations outside the queue); one worker polls, the others sleep until
// woken. A try never sleeps, so it is no memory.wait admit_wait; the group's tries are counted
// in memory.admit.queue (`tries`).
//
// Stops and deadlines need no free worker: a queued item with a stop token has a
// std::stop_callback that takes it out of the queue at once (it no longer counts as queued nor
// against max_queued; no user code runs on the requesting thread), and the queue's timer thread
// (its own, sleeping on the controller's clock until the next deadline) completes the items
// stopped or expired while every worker is in a run. An item being tried is completed by its
// worker right after the try.
//
// Items that never run get done(status), once, with no library lock held:
//   kTimedOut   the item's deadline (controller clock, over all its tries) passed first
//   kCancelled  Ticket::cancel(), the item's stop token, or the queue's destruction
//   kNeverFits  bytes is more than the smallest memory.max of the path (refused at its try)
//   kRemoved    its group was removed (the try's reservation says so)
//   kKilled     its Member was OOM-killed before it was admitted
//   kInvalid    the reservation refused the request (e.g. ReserveOptions::priority out of range)
// done runs on a worker, on the queue's timer thread (stopped or expired items), on the thread
// calling Ticket::cancel(), or on the destroying thread.
// run and done may throw: the exception is caught, counted (callback_errors(), and the group's
// memory.admit.queue `errors`), and the worker goes on. After run returns, the reservation is
// destroyed (its memory given back, its admission ended) unless run moved it elsewhere.
//
// Statistics: per group, over every queue of the controller (admit_queue_stats(), the group's
// read-only memory.admit.queue file).
//
// Thread safety: every call may be made from any thread, run and done included (they may submit
// and cancel). Cost: a submit and each try take the queue's mutex briefly (never across a try,
// run or done); tries run with no queue lock held. With the queue empty, the workers and the
// timer sleep. With G groups backlogged an admission costs O(log G): the groups are kept in an
// index by virtual time, the starved ones in a list of their own, and a group held back leaves
// the index while it is held.
//
// REQUIRES: the controller outlives the queue; a Member given to submit() outlives its item's
// reservation, which the queue destroys after run or done returned and before the callables
// themselves (so a member owned by the callables, e.g. a captured std::shared_ptr, is enough).
// The queue holds a reference to a group only while the group has items queued: a group with
// nothing queued is forgotten (a removed group is freed), except for a virtual time ahead of
// where it would re-enter, kept by group id until the others pass it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <thread>
#include <vector>

#include "memcg/base/clock.hpp"
#include "memcg/core/admission/reservation.hpp"

namespace memcg {

class Controller;
class Group;
class Member;

// memory.admit.weight: a group's share of the memory admitted by an AdmissionQueue while several
// groups are backlogged, relative to the others' (like cgroup's cpu.weight).
inline constexpr uint32_t kAdmitWeightMin = 1;
inline constexpr uint32_t kAdmitWeightDefault = 100;
inline constexpr uint32_t kAdmitWeightMax = 10000;
// EINVAL outside kAdmitWeightMin..kAdmitWeightMax (nothing changes), ENOENT for the root, ENOMEM
// when the group's queue state cannot be allocated. Takes effect at the next admission.
[[nodiscard]] int set_admit_weight(Group& group, uint32_t weight) noexcept;
uint32_t admit_weight(const Group& group) noexcept;  // kAdmitWeightDefault until set

// What AdmissionQueues did with one group's items (all queues of its controller together).
struct AdmitQueueStats {
  uint64_t queued = 0;      // waiting for admission now
  uint64_t running = 0;     // admitted, run not returned yet
  uint64_t submitted = 0;   // accepted by submit()
  uint64_t admitted = 0;    // ran (or are running)
  uint64_t timed_out = 0;   // completed kTimedOut
  uint64_t cancelled = 0;   // completed kCancelled
  uint64_t never_fits = 0;  // completed kNeverFits
  uint64_t refused = 0;     // completed kRemoved, kKilled or kInvalid
  uint64_t tries = 0;       // admission tries (admitted or not)
  uint64_t errors = 0;      // exceptions caught from run and done
  uint64_t wait_ns_sum = 0; // from submit to admission, over the admitted items (controller clock)
  uint64_t max_wait_ns = 0;
};
AdmitQueueStats admit_queue_stats(const Group& group) noexcept;

enum class [[nodiscard]] SubmitStatus : uint8_t {
  kOk,       // queued; run or done will be called once
  kFull,     // AdmissionQueueOptions::max_queued items are queued already
  kStopped,  // the queue is being destroyed
  kInvalid,  // no run callable, a group of another controller, or an offline group
};
const char* submit_status_name(SubmitStatus s) noexcept;  // "ok", "full", "stopped", "invalid"

struct AdmissionQueueOptions {
  int workers = 4;            // threads of the pool: 1..1024
  size_t max_queued = 4096;   // items queued (not running) at most: 1..2^24
  // How often, on the controller's clock, the polling worker looks again when nothing was
  // admissible and nothing happened in the queue (memory freed elsewhere is seen this way).
  // 1 ms by default, as the admission's own poll (kAdmitPollNs); 1 us..1 s.
  uint64_t poll_ns = 1'000'000;
  // The longest hold-back for a group whose head is starved at a shared level (above), on the
  // controller's clock: room that does not gather within a few polls is not held idle longer.
  // 2 ms by default; 0 turns the hold-back off (plain weighted fair queueing); at most 10 s.
  uint64_t hold_ns = 2'000'000;
};

struct WorkItem {
  uint64_t bytes = 0;    // the estimate: the reservation's admitted total (0 admits at once)
  int priority = 0;      // within its group: higher first, FIFO within a priority
  // Over all tries, on the controller's clock (Controller::clock().now_ns() time).
  uint64_t deadline_ns = Clock::kMaxNs;
  ReserveOptions options;  // of the reservation the item runs with
  // Cancels the item while it is queued: it leaves the queue when the stop is requested and its
  // done(kCancelled) runs on the queue's timer (or, when a worker is trying it at that moment,
  // on that worker after the try). Given to the reservation too, so that a request of the
  // running item returns kCancelled.
  std::stop_token stop;
  std::function<void(Reservation&)> run;    // required; on a pool worker, admitted
  std::function<void(ReserveStatus)> done;  // optional; for an item that never ran
};

namespace internal {
struct AdmissionQueueCore;
struct AdmissionQueueAccess;  // introspection for tests and benchmarks (admission_queue_state.hpp)
}

class AdmissionQueue {
 public:
  // A submitted item, for cancelling it. Empty by default; copyable; valid after the queue is
  // gone (cancel() then returns false).
  class Ticket {
   public:
    Ticket() = default;
    // If the item has not started running: it never will, and true is returned. Its
    // done(kCancelled) runs on this thread before cancel() returns or, when a worker is trying
    // the item at this moment, on that worker right after the try (an admission it got is
    // given back). False when it runs or ran, was completed otherwise, or for an empty ticket.
    // No library lock is held while done runs.
    bool cancel() noexcept;

   private:
    friend class AdmissionQueue;
    std::weak_ptr<internal::AdmissionQueueCore> core_;
    uint64_t id_ = 0;
  };

  // Starts the workers. Throws std::invalid_argument for options out of range, and what
  // std::thread throws.
  explicit AdmissionQueue(Controller& controller, AdmissionQueueOptions options = {});
  // Stops taking items, waits for the running ones to return and joins the workers and the
  // timer, then completes every queued item with kCancelled (done on this thread).
  // REQUIRES: not called from a run or done callable of this queue (it would wait for itself:
  // checked, aborts with a message).
  ~AdmissionQueue();
  AdmissionQueue(const AdmissionQueue&) = delete;
  AdmissionQueue& operator=(const AdmissionQueue&) = delete;

  // Queues `item` for `group` (its reservation: Reservation(group, item.options, item.stop)).
  // On kOk, `ticket` (if given) refers to it; on anything else nothing is queued, nothing is
  // called, and `ticket` is left as it was.
  SubmitStatus submit(Group& group, WorkItem item, Ticket* ticket = nullptr);
  // The same for a Member (Reservation(member, ...)), queued under the member's group.
  SubmitStatus submit(Member& member, WorkItem item, Ticket* ticket = nullptr);

  size_t queued() const noexcept;   // items waiting for admission
  size_t running() const noexcept;  // items whose run has not returned
  uint64_t callback_errors() const noexcept;  // exceptions caught from run and done

 private:
  friend struct internal::AdmissionQueueAccess;
  SubmitStatus submit_item(Group& group, Member* member, WorkItem&& item, Ticket* ticket);
  std::shared_ptr<internal::AdmissionQueueCore> core_;
  std::vector<std::thread> workers_;
};

}  // namespace memcg
