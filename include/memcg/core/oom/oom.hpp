// OOM handling: killable members and the OOM killer that picks among them when a group cannot
// be brought under memory.max any other way, mirroring the kernel's memcg OOM killer and
// memory.oom.group.
//
// A Member is what the application can kill to get memory back: a query, a connection, a tenant
// session (the kernel's task). It lives in one group, charges through the member (so its size,
// the kernel's badness, is known) and has a bias, the analogue of oom_score_adj (-1000 = immune,
// up to +1000). Killing calls the member's kill callback, which must release (or arrange to
// release) the member's memory; the charge that triggered the OOM is then retried.
//
// The policy (which charges may OOM-kill, the order of handlers, victim choice, spill and kill,
// the kernel and excess orders, memory.oom.group, waiting for a victim) is stated in
// docs/policy.md. In short: only a charge of at most kCostlyChargeBytes that reclaim cannot make
// room for runs the OOM killer (a waiting charge never does). The killer calls the OOM handlers
// of the domain and its ancestors; then, while a killed member of the domain still holds memory
// (for at most kOomVictimWaitNs after its kill), it waits for that member; otherwise it chooses a
// victim in the domain's memory.oom.order ("auto" by default: by excess over the admitted size
// once any candidate has admitted units, else by the kernel's badness; immune members never),
// may ask it to spill first (not when it holds more than its tolerated peak), and kills it (with
// its memory.oom.group). The OomReport names what decided.
//
// Kill callbacks run without any library lock held, on the thread that ran the OOM killer (the
// charging thread, or the writer of memory.max), at most once per kill, and never inside an
// allocator's hooks: a charge made there leaves the OOM decision to the thread's next safe point
// (safe_point.hpp). A callback may charge, uncharge, read files, and destroy its own member or
// any other (a member of the same oom.group destroyed before its turn is skipped), also by
// waiting for another thread that destroys it (cancel the victim's query and join its worker):
// ~Member never waits for a callback, and the killer touches nothing of a member destroyed
// meanwhile. Once the member is gone the callback must not use the Member& it was given. A
// callback that throws makes that kill fail: the member is not marked killed, no oom_kill event
// is raised, the failure is listed in the OomReport and the next candidate is chosen. What a
// callback allocates is not charged by the global operator new hook (hook.hpp); what it charges
// explicitly is. A charge of a killed member fails at once instead of waiting for a victim.
//
// OOM handlers (OomHandler below) are called with no library lock held, on the thread whose
// charge ran the OOM path, before any victim is chosen; one after which the domain has room ends
// the OOM (no kill; `oom_handled` in memory.events). A call has its handler's budget and the
// chain kOomHandlerChainBudgetNs, on the controller's clock; a call that overruns or throws is
// skipped by the OOMs of the next kOomHandlerPenaltyNs. While a handler runs, an OOM on its thread
// in its group's subtree (or an ancestor's) fails the charge at once: a handler frees memory, it
// gets none from the group it serves. Whether it made room is judged by the domain's counters.
//
// Thread safety: every call may be made from any thread. A member must not be destroyed while
// another thread uses it (charges, uncharges); its own kill callback may destroy it, also in the
// middle of the member's own charge, which then fails and leaves nothing charged.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/group.hpp"

namespace memcg {

// How long the OOM killer waits for a killed member to release its memory before it may choose
// another victim, on the controller's clock (the kernel's OOM reaper gives up on a victim after
// about a second of attempts).
inline constexpr uint64_t kOomVictimWaitNs = 1'000'000'000;

namespace internal {
struct Preemption;      // cooperative preemption (preempt.cpp)
struct OperatorAction;  // kill_member, preempt_member (operator.cpp)
}

// Why a member's callback is called, so that one callback can tell a kill from a request:
// - kOomKill: the OOM killer chose it; it is marked killed and must release its memory.
// - kPreempt: a waiting charge of a higher class asks it to give memory back (a request, not a
//   kill; charge_wait.hpp, set_wait_preempt).
// - kSpill: the OOM killer chose it and it asked to spill first (Member::set_spill_grace): it
//   should release what it can (spill to disk, drop a cache) within its grace time and carry on;
//   if that does not make room, a kOomKill call follows.
// - kCancel: the application cancelled its work (for code that routes its own cancellation
//   through the same callback; the library itself never passes it).
// - kOperator: someone outside the process acted on the member (kill_member, preempt_member:
//   memcg::http's POST /v1/members/<id>/kill or /preempt, or the process budget). killed()
//   tells a kill (true: release everything) from a request to give memory back (false).
// Appended in this order: the values are stable.
enum class CancelReason : uint8_t { kOomKill, kPreempt, kSpill, kCancel, kOperator };
// "oom_kill", "preempt", "spill", "cancel", "operator".
const char* cancel_reason_name(CancelReason r) noexcept;

// Which order the OOM killer chooses victims in, per OOM domain (memory.oom.order; see the file
// comment). kAuto is the default.
enum class OomOrder : uint8_t { kAuto, kKernel, kExcess };
const char* oom_order_name(OomOrder o) noexcept;  // "auto", "kernel", "excess"
// Sets the order used when `group`'s limit is the one hit. EINVAL for a value out of range,
// ENOENT for the root (whose limit is never hit).
int set_oom_order(Group& group, OomOrder order) noexcept;
OomOrder oom_order(const Group& group) noexcept;

// Bounds of the OOM handler chain (see the file comment), on the controller's clock.
inline constexpr uint64_t kOomHandlerBudgetNs = 10'000'000;        // default per call (10 ms)
inline constexpr uint64_t kOomHandlerChainBudgetNs = 100'000'000;  // per OOM, all handlers
inline constexpr uint64_t kOomHandlerPenaltyNs = 1'000'000'000;    // skip after overrun/throw
inline constexpr int kMaxOomHandlersPerGroup = 16;  // a bound on what one caller can register
// A member's spill grace is at most this (the OOM killer's wait for a victim).
inline constexpr uint64_t kMaxSpillGraceNs = 1'000'000'000;
// At most this many members are asked to spill in one OOM before one is killed.
inline constexpr int kMaxSpillsPerOom = 4;

class Member {
 public:
  static constexpr int kImmune = -1000;
  using KillFn = std::function<void(Member&)>;

  // Joins `group` (it must be online). `on_kill` is called when the OOM killer picks it (once,
  // unless it throws: see above), and when a waiting charge of a higher class asks it to give
  // memory back (cooperative preemption, charge_wait.hpp), and when the OOM killer chose it and
  // it asked to spill first (set_spill_grace): cancel_reason() tells which. It may be empty
  // (killing then only marks the member; a preemption or spill request does nothing).
  Member(Group& group, std::string name, KillFn on_kill, int score_adj = 0);
  // Uncharges what it still holds and leaves its group. Waits while its kill callback runs on
  // another thread.
  ~Member();
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;

  // Charges `units` for this member (they count towards its badness). Nothing for units <= 0.
  // kNoMem, with nothing charged, if the member's kill callback destroyed it during the charge.
  // Units, not bytes (Controller::to_units_ceil; Reservation speaks bytes). The costly-order
  // rule applies: more than costly_charge_units() in one call never runs the OOM killer (kNoMem
  // once reclaim gives up); charge in pieces of at most that size for OOM-eligible growth.
  ChargeStatus charge(int64_t units, uint32_t flags = kDefaultCharge) noexcept;
  // A waiting charge for this member (charge_wait.hpp): `units` in one call, waiting up to
  // `timeout` on the controller's clock when the ladder cannot serve them (it never OOM-kills).
  // On kOk they count towards its badness like any charge. A kill of this member ends the wait
  // with kCancelled (killed() is then true), as a fatal signal ends a task's memcg wait: a
  // killed member unwinds, it waits for nothing (at once when the killer told it; within the
  // wait's 10 ms poll when the kill was left to a preemption request in flight).
  WaitStatus charge_wait(int64_t units, std::chrono::nanoseconds timeout,
                         std::stop_token stop = {}) noexcept;
  // The same with a priority and a kind (charge_wait.hpp, WaitOptions).
  WaitStatus charge_wait(int64_t units, std::chrono::nanoseconds timeout, std::stop_token stop,
                         const WaitOptions& options) noexcept;
  // Uncharges up to what it holds; returns what was uncharged.
  int64_t uncharge(int64_t units) noexcept;
  int64_t charged() const noexcept { return charged_.load(std::memory_order_relaxed); }
  // Units this member's reservations were admitted with (Reservation keeps it up to date): the
  // size its work was expected to need, so that growth past it can be told from the expected.
  int64_t admitted() const noexcept { return admitted_.load(std::memory_order_relaxed); }
  // For work whose memory is not held in Reservations (they keep admitted() up to date by
  // themselves): adds `delta` units (negative to take back) to what it was admitted with, so that
  // the OOM killer's excess order sees its estimate. The result never goes below 0.
  void add_admitted(int64_t delta) noexcept;
  // Units this member's reservations tolerate peaking at: the sum over those with a waiting
  // admission in force (Reservation::reserve_for, reserve_until) of their tolerated peak
  // (admission.hpp: the admitted size times the group's learned mean plus two standard
  // deviations of peak/admitted, at least its expected peak). 0 when none has one (add_admitted()
  // states no such peak). Spill before kill looks at it (below).
  int64_t tolerated_peak() const noexcept { return tolerated_.load(std::memory_order_relaxed); }

  // Spill before kill: when the OOM killer chooses this member, it first calls its callback with
  // CancelReason::kSpill and waits up to `grace` (on the controller's clock) for the domain to
  // have room; only then (no room) is it killed. Zero turns it off (the default). EINVAL, with
  // nothing changed, for a negative grace or one above kMaxSpillGraceNs. The callback must not
  // wait for memory of the domain (it runs on the charging thread).
  int set_spill_grace(std::chrono::nanoseconds grace) noexcept;
  std::chrono::nanoseconds spill_grace() const noexcept {
    return std::chrono::nanoseconds(spill_grace_ns_.load(std::memory_order_relaxed));
  }

  void set_score_adj(int adj) noexcept;  // clamped to [-1000, 1000]
  int score_adj() const noexcept { return adj_.load(std::memory_order_relaxed); }
  bool killed() const noexcept { return killed_.load(std::memory_order_acquire); }
  // Inside a member's callback: why it was called (kOomKill outside any callback). It is the
  // calling thread's, not the member's (static): a callback may read it even when the member's
  // own thread destroys the member meanwhile (`m.cancel_reason()` touches nothing of `m`). A
  // preemption request runs the callback like a kill (no library lock held, on the waiting
  // thread, never twice at once for one member) but marks nothing: the member is expected to
  // release what it can (cancel its query), and may ignore the request; it is not asked again
  // until it has held nothing (or for kOomVictimWaitNs, see charge_wait.hpp).
  static CancelReason cancel_reason() noexcept;
  // Asked to give memory back (a preemption request) and still holding memory since.
  bool preempt_requested() const noexcept {
    return preempt_asked_.load(std::memory_order_acquire);
  }
  const std::string& name() const noexcept { return name_; }
  Group& group() const noexcept { return *group_; }
  // A number no other member of this controller has had or will have (1, 2, ... in creation
  // order), so that someone outside the process can name this member (operator.hpp).
  uint64_t id() const noexcept { return id_; }

 private:
  friend class OomKiller;
  friend struct internal::Preemption;
  friend struct internal::OperatorAction;
  friend class Reservation;
  int64_t take_charged(int64_t units) noexcept;  // up to `units` off charged_; what it took

  GroupRef group_;
  const std::string name_;
  const uint64_t id_;
  KillFn on_kill_;  // guarded by the OOM lock; moved out while a kill is in progress
  std::atomic<int> adj_;
  std::atomic<int64_t> charged_{0};
  std::atomic<int64_t> admitted_{0};  // sum of its reservations' admitted units
  std::atomic<int64_t> tolerated_{0};  // sum of its reservations' tolerated peaks
  std::atomic<bool> killed_{false};
  std::atomic<bool> preempt_asked_{false};  // set under the OOM lock; cleared when it holds 0
  std::atomic<uint64_t> spill_grace_ns_{0};
  uint64_t spilled_in_ = 0;  // the OOM (serial) that last asked it to spill (OOM lock)
  uint64_t preempt_asked_at_ns_ = 0;         // when, on the controller's clock (OOM lock)
  // Guarded by the controller's OOM lock.
  uint64_t killed_at_ns_ = 0;  // when it was killed, on the controller's clock
  bool given_up_ = false;      // waited kOomVictimWaitNs for it: it holds back no choice
  uint64_t failed_in_ = 0;     // the OOM (serial) in which its callback threw
  // A preemption request runs its callback (moved out of on_kill_); an OOM kill that chooses it
  // meanwhile marks it killed and leaves the kill to be told when the request returns.
  bool preempting_ = false;
  bool kill_pending_ = false;
  uint64_t kill_pending_in_ = 0;  // the OOM (serial) that chose it
};

// Why a victim was chosen: the OOM report.
struct OomCandidate {
  std::string member;
  std::string group;
  int64_t charged = 0;
  int score_adj = 0;
  int64_t badness = 0;
  int64_t admitted = 0;  // units its reservations were admitted with
  int64_t excess = 0;    // charged past admitted (0 when nothing was admitted)
  WaitPriority priority = WaitPriority::kNormal;  // its group's memory.wait.priority class
};
// What ended an OOM: the report's `decider`.
enum class OomDecider : uint8_t {
  kNone,         // no member could be killed and no handler made room
  kKernelOrder,  // a victim chosen by the kernel's badness
  kExcessOrder,  // a victim chosen by excess over admission
  kHandler,      // an OOM handler made room (OomReport::handler names it)
  kSpill,        // the chosen member spilled and made room: nobody killed
  kPreempt,      // the victim's kill was left to a preemption request in progress
  kOperator,     // an operator's kill (kill_member): no OOM, a decision from outside
};
inline constexpr int kNumOomDeciders = static_cast<int>(OomDecider::kOperator) + 1;
const char* oom_decider_name(OomDecider d) noexcept;  // "none", "kernel", "excess", ...
// One handler call of an OOM's chain.
struct OomHandlerCall {
  std::string handler;
  std::string group;     // where it is registered
  int64_t freed = 0;     // units it said it freed (at most what its group held then)
  std::string outcome;   // "made_room", "passed", "threw: ...", "overran", "skipped"
};
// A kill that failed: the member's callback threw (the member was not killed).
struct OomFailure {
  std::string member;
  std::string error;  // what() of the exception, or "unknown exception"
};
struct OomReport {
  std::string domain;  // the group whose limit was hit
  int64_t request_units = 0;
  std::vector<OomCandidate> top;    // the first candidates, in the order used (at most 5)
  std::string victim;               // member chosen ("" if none)
  std::string oom_group;            // group killed as a whole ("" if none)
  std::vector<std::string> killed;  // every member killed
  std::vector<OomFailure> failed;   // kills whose callback threw, in order
  OomOrder order = OomOrder::kKernel;  // the order the victim was chosen in (never kAuto)
  OomDecider decider = OomDecider::kNone;
  std::string handler;                 // the handler that made room ("" unless kHandler)
  std::vector<OomHandlerCall> handlers;  // the chain's calls, in order
  std::vector<std::string> spilled;    // members asked to spill, in order
  // The reason the victim's callback was last called with: kSpill when a spill made room,
  // kOomKill when it was killed.
  CancelReason reason = CancelReason::kOomKill;
  std::string format() const;       // a short human-readable report
};

// ---- OOM handlers ----------------------------------------------------------------------------
// Why: a group's owner often knows memory it can give back faster and cheaper than a kill (spill
// a query's state, drop an unregistered cache, cancel queued work). A handler gets the first word
// on each OOM of its group's subtree; the killer runs only when none made room.

// What a handler is told.
struct OomContext {
  Group& domain;              // the group whose limit was hit
  Group& group;               // the group the handler is registered on (domain or an ancestor)
  int64_t request_units = 0;  // the charge that could not be served
  int64_t shortage_units = 0;  // request minus the domain's room when the handler is called
};
// Returns the units it freed (<= 0: it passed). It may uncharge, release reclaimable memory,
// signal other threads; it must not wait for memory of `domain`.
using OomHandlerFn = std::function<int64_t(const OomContext&)>;

struct OomHandlerStats {
  uint64_t calls = 0;
  uint64_t made_room = 0;  // OOMs it ended
  // What it said it freed, in total (saturating at INT64_MAX), each claim clamped to what the
  // handler's group held when it was called: nothing it frees can be more than that.
  int64_t freed_units = 0;
  uint64_t threw = 0;
  uint64_t overran = 0;
  uint64_t skipped = 0;  // OOMs that skipped it (penalty after an overrun or a throw)
  uint64_t overclaimed = 0;  // calls whose claim was above what its group held (clamped)
};

namespace internal {
struct OomHandlerEntry;
}

// A registered handler; the destructor (or reset()) unregisters it. Unregistering waits for a call
// of the handler in progress on another thread to return (not for one on its own thread: a
// handler may unregister itself). REQUIRES: destroyed before its controller.
class OomHandler {
 public:
  OomHandler() noexcept;
  ~OomHandler();
  OomHandler(OomHandler&&) noexcept;
  OomHandler& operator=(OomHandler&&) noexcept;
  OomHandler(const OomHandler&) = delete;
  OomHandler& operator=(const OomHandler&) = delete;

  // Registers `fn` on `group` as `name`, replacing what `*out` held. EINVAL for an empty name or
  // function, a null `out` or a budget <= 0 or above kOomHandlerChainBudgetNs; ENOENT if the group
  // is offline; ENOSPC past kMaxOomHandlersPerGroup on the group. Nothing changes on error.
  static int add(Group& group, std::string name, OomHandlerFn fn, OomHandler* out,
                 std::chrono::nanoseconds budget = std::chrono::nanoseconds(kOomHandlerBudgetNs));

  void reset() noexcept;  // unregisters (see above); nothing if not registered
  bool registered() const noexcept { return entry_ != nullptr; }
  const std::string& name() const noexcept;  // "" if not registered
  OomHandlerStats stats() const noexcept;

 private:
  std::shared_ptr<internal::OomHandlerEntry> entry_;
};

// A cooperative preemption: the members a waiting charge asked to give memory back, in the order
// asked (lowest class first, largest first). The OOM-style report of charge_wait.hpp's
// set_wait_preempt.
struct PreemptVictim {
  std::string member;
  std::string group;
  WaitPriority priority = WaitPriority::kNormal;  // the class of its group
  int64_t charged = 0;                            // units it held when asked
};
struct PreemptReport {
  std::string domain;        // the group whose memory.max held the waiter (preempt is on there)
  std::string waiter_group;  // the group the waiting charge is for
  WaitPriority priority = WaitPriority::kNormal;  // the waiter's class
  int64_t request_units = 0;   // what the waiter still needed
  int64_t shortage_units = 0;  // beyond the room there was and what earlier requests will free
  std::vector<PreemptVictim> asked;
  std::vector<OomFailure> failed;  // requests whose callback threw
  // An operator's request (preempt_member, the process budget), not a waiting charge's: the
  // OOM log shows its decider as "operator" (waiter_group is then "").
  bool by_operator = false;
  std::string format() const;      // a short human-readable report
};

// Installs the OOM killer as the controller's OOM policy (Controller::set_oom_hook). The
// controller keeps members registered per group.
class OomKiller {
 public:
  // Selects and kills in `domain` for a charge of `units`. True if it made progress: killed, or
  // waited for a previous victim (see above), or the domain has room for `units`. False if no
  // member could be killed. REQUIRES: no library lock held (it runs kill callbacks).
  static bool kill(Group& domain, int64_t units, OomReport* report = nullptr);
  // The last report produced in this controller (empty if none).
  static OomReport last_report(Controller& controller);
  // The last cooperative preemption in this controller (empty if none).
  static PreemptReport last_preempt_report(Controller& controller);
};

namespace internal {
struct KillBatch;  // one OOM kill in progress (oom.cpp)

// Per-controller OOM state. The OOM lock makes one decision at a time and guards the members'
// OOM fields, the kills in progress and the last report. It is never held while a kill callback
// or an event listener runs, and nothing is charged while it is held.
struct OomState {
  std::mutex mu;
  // Signalled when a kill callback returns, a member is destroyed, or a killed member has
  // released all it held.
  std::condition_variable cv;
  KillBatch* batches = nullptr;  // kills in progress, linked through KillBatch::next
  uint64_t serial = 0;           // OOM invocations so far
  OomReport last;
  PreemptReport last_preempt;
  // Registered OOM handlers, in registration order (oom_handler.cpp).
  std::vector<std::shared_ptr<OomHandlerEntry>> handlers;
  // The last member id given (Member::id); read without the lock.
  std::atomic<uint64_t> member_ids{0};
};
}  // namespace internal

}  // namespace memcg
