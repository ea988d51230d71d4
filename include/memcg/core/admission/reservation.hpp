// Reservation: the memory of one query, job or request, in bytes, held for as long as the object
// lives. It is the type to start with: it keeps its group (or member) and what it charged, gives
// everything back when destroyed, can grow and shrink as the work goes on, can wait for memory
// with a deadline, and says in its status which rule refused a request.
//
//   memcg::Member query(*pool, "q17", [&](memcg::Member&) { stop.request_stop(); });
//   memcg::Reservation mem(query, {.oom = memcg::OomPolicy::kPieces}, stop.get_token());
//   if (mem.reserve_for(64 << 20, 2s) != memcg::ReserveStatus::kOk) return;   // admission
//   ...
//   switch (mem.grow(chunk)) { ... }                                           // as it runs
//
// Sizes are bytes; the charge is whole units of the controller (Options::unit_shift), so that a
// reservation of `b` bytes charges ceil(b / unit) units, and growing or shrinking charges or
// uncharges only the difference of the rounded totals (no rounding error accumulates).
//
// The OOM rule for large requests (the kernel's costly order, PAGE_ALLOC_COSTLY_ORDER): a single
// charge of more than kCostlyChargeBytes (8 pages of 4 KiB, 32 KiB; charge.hpp) never invokes the
// OOM killer. When reclaim cannot make room, it fails (kNoMemCostly). That is right for a large,
// optional allocation and surprising for a query that grows by megabytes: a runaway query then
// fails its own growth again and again while nobody is killed. OomPolicy picks the behaviour:
//   kKernel  one charge per call, as the kernel does: requests above the costly size fail
//            without an OOM kill (kNoMemCostly), smaller ones may OOM-kill.
//   kPieces  the request is charged in pieces of at most the costly size, each of which may run
//            the OOM killer, as a loop of small allocations would in the kernel: a request of any
//            size is OOM-eligible. The victim is chosen by badness (oom.hpp); if it is this
//            reservation's own member, the growth fails with kKilled. All or nothing: a request
//            that fails part-way gives back the pieces it charged.
//   kNever   never the OOM killer (kRetryMayFail): reclaim and retries only.
// Waiting requests (reserve_for, reserve_until, grow_for) never OOM-kill, whatever the policy:
// they run the ladder without the OOM killer, then wait (charge_wait.hpp) in the class of
// ReserveOptions::priority, so that an interactive query's reservation is served before a
// batch job's when both wait on one limit:
//   memcg::Reservation mem(query, {.priority = memcg::WaitPriority::kHigh}, stop.get_token());
//
// Never-fits: a request larger than the smallest memory.max on the group's path is refused at
// once with kNeverFits, before any reclaim, wait or OOM kill; limiting_group() names that group
// and its memory.wait counts it (charge_wait.hpp, never_fits). The request is the total for
// reserve(), reserve_for(), reserve_until() and grow_for() (a wait never kills, so a total past
// the limit could never be served), and the growth alone for grow(): a reservation whose total
// grows past the limit is not refused but goes to the OOM killer per its policy, which may kill
// its own member (kKilled), as the kernel kills a task that grows past its limit; a member
// alone in its group is killed that way.
//
// Admitted size: reserve(), reserve_for() and reserve_until() state a total, which becomes the
// reservation's admitted size (admitted_units()); grow() and grow_for() add past it, shrinking
// below it lowers it. A Member's admitted size is the sum over its reservations, and when a limit
// is hit the OOM killer's default order chooses members past their admitted size first, largest
// excess first (oom.hpp): a query that grew past its estimate goes before well-behaved ones.
//
// Admission by learned peak (admission.hpp): a waiting admission (reserve_for, reserve_until)
// is let in only when its expected peak (its total times the group's growth factor, learned as
// the decayed mean of the peak/admitted ratios of the group's waiting admissions that ran their
// course, 1 with no history; memory.admit.growth) fits beside the expected peaks of the running
// admitted reservations on every limited level of the path. While it runs it promises the
// headroom up to that peak (memory.wait admit_promised_bytes); its end (release, destruction, a
// new waiting admission) gives the promise back and teaches the group its peak/admitted ratio,
// unless it was cut short (its member OOM-killed or preempted, or a growth of it refused:
// kNoMem, kNoMemCostly, kNeverFits, kKilled), whose ratio says nothing of where it was going.
// Giving memory back (release, shrink) wakes the waiting admissions. A plain
// reserve() states an admitted size for the OOM order but is not admitted by expectation and
// teaches nothing: it is a try, not a queue, and its caller has its own answer to kNoMem.
//
// Growth past admission (grow() on a reservation with an admitted size, when the total passes
// it; OomPolicy kKernel or kPieces), in three steps:
//   1. what is free: the ladder (reclaim, stock drains, retries) without the OOM killer;
//   2. memory on its way: if the fullest limit of the path is short by S units and members under
//      it that were OOM-killed or asked to give memory back (preemption) still hold at least S
//      units, wait for them (a waiting charge in the reservation's class) for at most the
//      growth bound of that limit: twice the decayed mean of the earlier such waits that got
//      their memory, clamped to [kGrowthWaitMinNs, kGrowthWaitMaxNs] (2..100 ms; 20 ms before
//      any); memory.wait growth_waits, growth_granted, growth_bound_usec. Nothing else counts
//      as on its way (a query that may finish soon cannot be told from one that will not);
//   3. the OOM killer, per the policy (whose admission-aware order chooses the members past
//      their admitted size first, oom.hpp).
// Before these steps, growth past the reservation's tolerated peak (admission.hpp: its admitted
// size times the group's learned mean plus two standard deviations of peak/admitted, at least
// its expected peak) may take only memory not promised to other admitted reservations
// (usage + their promise + need <= max on every limited level where they have one); otherwise
// it goes to the OOM killer of that level (kKernel over the costly size: kNoMemCostly; kNever:
// kNoMem), whose excess order chooses the largest excess, a runaway, early. grow_for() is not
// subject to it (it never kills, admission.hpp).
// Growth within the admitted size, and grow() on a reservation never admitted, charge at once
// per the policy, as before. kNever skips step 2 (and has no step 3), and so does
// ReserveOptions::growth_wait = false (steps 1 and 3 become the one charge per the policy).
//
// Cancellation: a reservation made for a Member charges through it (its badness counts the
// reservation) and refuses to grow once the member was OOM-killed (kKilled). The stop token
// given at construction (typically the one the member's kill callback or a preemption triggers)
// makes every later request return kCancelled (a reserve() to a smaller total too: nothing
// changes) and ends a wait in progress. Neither releases what is held: the owner unwinds, and
// shrink(), release() or the destructor give it back.
//
// Releasing: shrink(), release() and the destructor uncharge straight from the counters
// (uncharge_direct for a group, Member::uncharge for a member), so that a waiting reservation of
// another query sees the memory free at once.
//
// Thread safety: like any object, one thread at a time per reservation; reservations of one
// member or group may be used from different threads at once.
// REQUIRES: the member (for the Member form) outlives the reservation; the group form holds a
// reference to its group itself. The controller outlives both.
#pragma once

#include <chrono>
#include <cstdint>
#include <stop_token>

#include "memcg/core/admission/admission.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/group.hpp"

namespace memcg {

class Member;

// What happened to a request, and which rule refused it.
enum class [[nodiscard]] ReserveStatus : uint8_t {
  kOk,           // held: the reservation now has the asked size
  kForced,       // held, past memory.max: forced where a charge cannot fail (NoFailScope, reclaim)
  kNoMem,        // memory.max held after reclaim, stock drains, retries and, where the policy
                 // allows, the OOM killer (no victim, or the kills did not make room)
  kNoMemCostly,  // memory.max held after reclaim; OomPolicy::kKernel and a request over
                 // kCostlyChargeBytes, so the OOM killer was not asked (the costly-order rule)
  kTimedOut,     // a waiting request's deadline passed first
  kCancelled,    // the stop token was triggered (before the request, or while it waited)
  kKilled,       // the member was OOM-killed: a killed query does not grow
  kRemoved,      // a waiting request's group was removed or the controller destroyed
  kInvalid,      // no group (an empty reservation), a total no counter can hold, or a
                 // priority out of range (ReserveOptions::priority)
  kNeverFits,    // refused at once, waiting or not: the request (the total; grow(): the
                 // growth) is more than the smallest memory.max on the path (limiting_group()
                 // names it), so neither waiting nor the OOM killer could make room; nothing
                 // changed
};

// "ok", "forced", "nomem", "nomem-costly", "timed-out", "cancelled", "killed", "removed",
// "invalid", "never-fits".
const char* reserve_status_name(ReserveStatus s) noexcept;

// True when the reservation holds what was asked (kOk, kForced).
inline bool held(ReserveStatus s) noexcept {
  return s == ReserveStatus::kOk || s == ReserveStatus::kForced;
}

// How a request that does not fit may use the OOM killer (see the file comment).
enum class OomPolicy : uint8_t {
  kKernel,  // one charge: over kCostlyChargeBytes never OOM-kills (the kernel's costly order)
  kPieces,  // pieces of at most kCostlyChargeBytes: every request is OOM-eligible
  kNever,   // reclaim and retries only
};

struct ReserveOptions {
  OomPolicy oom = OomPolicy::kKernel;
  // The class of this reservation's waiting requests (reserve_for, reserve_until, grow_for):
  // when memory is short, a kHigh query is served before a kLow batch job queued on the same
  // limit (charge_wait.hpp, WaitPriority). kDefault takes the group's memory.wait.priority.
  // Requests that do not wait ignore it. A value outside kLow..kHigh and not kDefault makes
  // every request that would charge kInvalid (nothing is charged; shrinking still works).
  WaitPriority priority = WaitPriority::kDefault;
  // Growth past admission waits for memory on its way (step 2 of grow(), above). false: such
  // growth charges per the OOM policy at once, as a growth within the admitted size does (the
  // behaviour before that step, for services that measure it or would rather be killed soon).
  bool growth_wait = true;
};

class Reservation {
 public:
  // Empty: every request is kInvalid, release() does nothing.
  Reservation() = default;
  // Bound to `group` (it takes a reference), holding nothing yet.
  explicit Reservation(Group& group, ReserveOptions options = {}, std::stop_token stop = {});
  // Bound to `member`: charges count towards its badness; kKilled once it was OOM-killed.
  explicit Reservation(Member& member, ReserveOptions options = {}, std::stop_token stop = {});
  Reservation(Reservation&& o) noexcept;
  Reservation& operator=(Reservation&& o) noexcept;  // releases what this one held first
  ~Reservation() { release(); }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

  // Makes the reservation hold `total` bytes: grows by the difference, or shrinks to it (always
  // kOk). On any status but kOk/kForced nothing changed.
  ReserveStatus reserve(uint64_t total) noexcept;
  // The same, waiting up to `timeout` on the controller's clock when the limit holds (never
  // OOM-kills), and first until its expected peak fits (admission by learned peak, above). The
  // rule: on every level of the path with a memory.max, usage + the running admissions' promises
  // + (expected peak - held) <= max, where usage that reclaim can take at once (caches beyond
  // their effective protection) is reclaimed rather than waited for (admission.hpp, "Reclaim
  // for admission"); protected memory and memory held by running work are waited for. A
  // timeout of 0 tries once without waiting.
  ReserveStatus reserve_for(uint64_t total, std::chrono::nanoseconds timeout) noexcept;
  // The same with a deadline on the controller's clock (Controller::clock().now_ns() time), for a
  // query whose every request shares one admission deadline.
  ReserveStatus reserve_until(uint64_t total, uint64_t deadline_ns) noexcept;
  // Adds `bytes` to what is held (policy as configured). On failure nothing changed. Past the
  // admitted size: what is free, then a bounded wait only for memory measurably coming back
  // (killed or preempted members unwinding), then the OOM killer (see the file comment); the
  // wait is at most the limit's growth bound (2..100 ms), so a runaway is still killed soon.
  ReserveStatus grow(uint64_t bytes) noexcept;
  // Adds `bytes`, waiting up to `timeout` on the controller's clock for any memory (never the
  // OOM killer). The trade-off: a long timeout (200 ms, say) turns most kills into waits, but
  // every growth that finds the limit full then waits, whether or not anything is coming back,
  // and a runaway that never stops is never killed, only made to wait; a service measured
  // fewer kills and a much lower throughput that way. grow() waits only while memory is on its
  // way and then lets the killer act; grow_for() is for work that would rather wait than die.
  ReserveStatus grow_for(uint64_t bytes, std::chrono::nanoseconds timeout) noexcept;
  // Gives back `bytes` (at most what is held).
  void shrink(uint64_t bytes) noexcept;
  // Gives back everything; the reservation stays bound and may grow again.
  void release() noexcept;

  uint64_t bytes() const noexcept { return bytes_; }   // what the owner asked for
  int64_t units() const noexcept { return units_; }    // what is charged: ceil(bytes / unit)
  // The units the work was admitted with: what it held after its last reserve(), reserve_for()
  // or reserve_until() (the calls that state a total), lowered by shrinks below it; grow() and
  // grow_for() add past it. For a Member, the sum over its reservations is Member::admitted(),
  // and what it charges past that is its excess, which the OOM killer's admission-aware order
  // looks at first (oom.hpp).
  int64_t admitted_units() const noexcept { return admitted_; }
  Group* group() const noexcept { return group_.get(); }
  // After kNeverFits: the group whose memory.max the request was larger than (on the path of
  // group(), which keeps it alive); null otherwise. Its memory.wait counts such refusals.
  const Group* limiting_group() const noexcept { return limiting_; }
  Member* member() const noexcept { return member_; }
  const ReserveOptions& options() const noexcept { return options_; }

 private:
  // Charges `units` more: at once per the OOM policy, or waiting until `deadline_ns`.
  ReserveStatus charge_units(int64_t units) noexcept;
  ReserveStatus wait_units(int64_t units, uint64_t deadline_ns) noexcept;
  void uncharge_units(int64_t units) noexcept;
  // The status of a request to hold `total` bytes before charging: kInvalid (also for a
  // priority out of range), kCancelled,
  // kKilled, or kOk with the units it takes in `*need` (0 or less: nothing to charge).
  ReserveStatus prepare(uint64_t total, int64_t* need) const noexcept;
  ReserveStatus grow_to(uint64_t total, bool wait, uint64_t deadline_ns, bool admit) noexcept;
  // Sets the admitted units (what a reserve call stated), keeping the member's sum in step.
  void set_admitted(int64_t units) noexcept;
  ReserveStatus admit_units(int64_t need, uint64_t deadline_ns) noexcept;
  ReserveStatus grow_past(int64_t need) noexcept;
  // Growth past the expected peak: kOk once `need` fits beside the others' promises (the OOM
  // killer asked for that room as needed), else the refusal.
  ReserveStatus respect_promises(int64_t need) noexcept;
  // Keeps the promise on the path (admission.hpp) at max(0, expected_ - max(units_, peak_)).
  void update_promise() noexcept;
  // Ends a waiting admission: teaches the group its peak ratio, gives the promise back.
  void end_admission() noexcept;

  GroupRef group_;
  Member* member_ = nullptr;
  ReserveOptions options_;
  std::stop_token stop_;
  uint64_t bytes_ = 0;
  int64_t units_ = 0;
  const Group* limiting_ = nullptr;  // of the last request refused as kNeverFits
  int64_t admitted_ = 0;             // see admitted_units()
  int64_t expected_ = 0;    // expected peak of the waiting admission in force (0: none)
  int64_t promised_ = 0;    // what this reservation adds to its path's promised units now
  int64_t learn_base_ = 0;  // the units a waiting admission admitted (0: nothing to teach)
  int64_t peak_ = 0;        // the most units held since that admission
  bool cut_short_ = false;  // a growth since that admission was refused (it teaches nothing)
  int64_t tolerated_ = 0;        // tolerated peak of the waiting admission in force (0: none)
  int64_t member_tolerated_ = 0;  // what this reservation adds to Member::tolerated_peak()
};

}  // namespace memcg
