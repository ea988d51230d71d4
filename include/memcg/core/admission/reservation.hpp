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
// Sizes are bytes; the charge is whole units of the controller (Options::unit_shift): `b` bytes
// hold ceil(b / unit) units, and a growth or shrink charges or uncharges only the difference of
// the rounded totals.
//
// The rules these calls follow (the costly order and the OOM policies, never-fits, admitted size,
// admission by learned peak, growth past admission, the tolerated peak, the OOM killer's order)
// are stated, with the whole flow down to a kill, in docs/policy.md. What a caller relies on:
//   - reserve() and grow() do not queue for memory (their waits are bounded: memory.high
//     throttling, an OOM victim's unwinding, grow()'s step 2) and may run the OOM killer, per
//     OomPolicy: kKernel (one charge; over kCostlyChargeBytes, 32 KiB, it fails with
//     kNoMemCostly rather than kill), kPieces (pieces of at most that size, each OOM-eligible;
//     kKilled when the victim is this reservation's member; all or nothing), kNever (no killer:
//     kNoMem).
//   - reserve_for(), reserve_until() and grow_for() wait up to their deadline, in the class of
//     ReserveOptions::priority, and never OOM-kill. A waiting admission (reserve_for,
//     reserve_until) is admitted by learned peak: only once its expected peak (its total times
//     the group's memory.admit.growth factor) fits beside the peaks promised to the admitted
//     reservations running on its path; it then promises that headroom until it ends.
//   - grow() past the admitted size (the total the last reserve call stated): 1. what is free,
//     without the OOM killer; 2. if killed or preempted members under the full limit hold the
//     shortage, a wait for them of at most the limit's growth bound (twice the decayed mean of
//     the earlier such waits that got memory, 2..100 ms); 3. the OOM killer per the policy.
//     Past its tolerated peak it may not take what is promised to other admissions (the OOM
//     killer is asked for room beside them instead).
//   - kNeverFits, at once, for a request over the smallest memory.max of the path (the total; for
//     grow(), the growth): nothing reclaimed, waited for or killed (limiting_group()).
//   - Cancellation: once the stop token fires, every request returns kCancelled (a reserve() to a
//     smaller total too: nothing changes) and a wait in progress ends; once the member was
//     OOM-killed, every request that would charge returns kKilled. Neither releases what is
//     held: shrink(), release() and the destructor do, straight from the counters, so that
//     waiting requests see the memory free at once.
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
