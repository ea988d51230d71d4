// PSI for memory: the share of wall-clock time in which threads of a group wait for memory
// (memory.pressure), with the kernel's running averages and triggers (kernel/sched/psi.c).
//
// Stall time. A thread stalls while it is inside a MemStall section. The library opens them on
// its slow paths only: reclaim in the charge path's failure ladder, the OOM handler, each
// reclaim of memory.high handling and the memory.high throttling sleep. Applications may open
// their own around waits for memory they know of. Sections nest: inner ones cost nothing.
// A section is accounted to the group whose charge stalled and to every ancestor; the root is
// the whole process.
//
// Tasks. The library sees threads, not a scheduler: a thread is a task of a group while it works
// for it, taken as runnable. It works for a group while it runs inside a WorkScope of the group
// (below), which an AdmissionQueue opens around each item's run and a service opens around a
// query's work; otherwise while it is attached to the group (attach.hpp). It is then a task of
// the group's ancestors too. A thread stalling in a section accounted to a group it does not work
// for (an unattached thread outside any scope, or one working elsewhere) counts as a task of that
// group for as long as it stalls there. Then
//   SOME = at least one task stalled;  FULL = every non-idle task stalled,
// so a pool whose workers run the group's work in scopes reports FULL only when every worker of
// the group stalls, SOME when one stalls while another runs (a pool of unattached threads outside
// scopes is FULL whenever one stalls: each stalling thread is then its group's only task).
// One shard per group: time in a state is plain wall-clock time (controller clock).
//
// Averages: avg10/avg60/avg300 on a fixed 2 s grid from the group's creation, in 11-bit fixed
// point with decay factors 1677, 1981, 2034 and integer percent per period, as the kernel does.
// There is no aggregator thread: periods that passed are folded in when the group's state changes
// or is read, each period with the totals it had at its grid point, so the result is what a
// punctual 2 s aggregator would compute. The cost is bounded whatever the clock did: idle periods
// are decayed in one step, and a state held through many periods is folded period by period only
// until the averages have reached its sample (at most ~1800 periods, the 300 s average being the
// slowest), after which further periods leave them unchanged and are skipped in one step.
// Unprivileged triggers are then evaluated at the last grid point of the stretch only.
//
// Triggers (`some|full <stall us> <window us>`): an event when the state's stall time in the
// last window reaches the threshold, at most one per window (a breach inside the rate limit stays
// pending and fires when the limit ends). The window's growth adds the linear share of the
// previous window's growth for the part of the window that lies before its start. Privileged
// triggers (the typed API's default and memory.pressure writes; any window up to 10 s) are
// evaluated whenever the group's state changes: a stall section starts or ends, a thread
// attaches or detaches, or the group is read. Unprivileged triggers (window a multiple of 2 s)
// are evaluated on the 2 s averaging grid.
//
// Polls (the kernel's rtpoll worker): while a trigger has an event pending, or its state is
// stalled, it is also looked at on time with no activity at all: a pending event at the end of
// its rate limit, a stall in progress when it could have reached the threshold (at least 1 ms
// apart, so a breach inside a long section is seen at most 1 ms late), an unprivileged trigger at
// its next grid point. On the SystemClock the library's timer thread does it (callbacks then run
// there); on any other clock Controller::tick() does, for the triggers due at its clock's time.
// An idle trigger with nothing pending costs nothing.
//
// Cost: nothing on the charge hot path (a stock hit opens no section). Entering and leaving a
// section takes one short lock per level of the group's path and reads the clock; a level with
// triggers also updates their poll times (one process-wide lock when a time changes).
//
// Thread safety: every call may be made from any thread; triggers may be created and destroyed
// at any time, also from inside a trigger callback.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "memcg/core/tree/group.hpp"
#include "memcg/core/signal/pressure.hpp"

namespace memcg {

// A memory-stall section on the calling thread, accounted to `group` and its ancestors. Nested
// sections (any group) are no-ops. REQUIRES: the caller holds a reference to `group` for the
// lifetime of the section; the section ends on the thread that opened it.
class MemStall {
 public:
  explicit MemStall(Group& group) noexcept;
  ~MemStall();
  MemStall(const MemStall&) = delete;
  MemStall& operator=(const MemStall&) = delete;

 private:
  Group* group_ = nullptr;  // null when nested
  const Group* attached_ = nullptr;
};

// The calling thread works for `group` for the scope: PSI counts it as one of the group's (and its
// ancestors') tasks, so that a stall of another thread working for the group is SOME and not
// FULL while this one runs. Scopes nest (the innermost one names the thread's group) and take
// precedence over the thread's attachment; charges are not redirected (that is ScopedAttach's
// job). Cost: one short lock per level of the group's path at each end, off the charge path.
// REQUIRES: the caller holds a reference to `group` for the lifetime of the scope; the scope ends
// on the thread that opened it.
class WorkScope {
 public:
  explicit WorkScope(Group& group) noexcept;
  ~WorkScope();
  WorkScope(const WorkScope&) = delete;
  WorkScope& operator=(const WorkScope&) = delete;

 private:
  Group* group_;
  Group* previous_;  // the enclosing scope's group, or null
};

// The three running averages, as in memory.pressure's avg10, avg60 and avg300.
enum class PsiWindow : uint8_t { k10s, k60s, k300s };

// A snapshot of a group's pressure. avg values are percent in fixed point with 11 fractional
// bits, as the kernel keeps them: kPsiOnePercent (2048) is 1.00 %, 100 % is 204800; the
// memory.pressure figure avg10=0.18 is an avg of about 369. Totals in microseconds.
inline constexpr uint64_t kPsiOnePercent = 2048;
struct PsiStats {
  uint64_t avg[2][3];  // [some/full][10 s, 60 s, 300 s], percent x kPsiOnePercent
  uint64_t total_us[2];

  // The average in percent (0.0 .. 100.0), the number memory.pressure prints.
  double percent(PsiState state, PsiWindow window) const noexcept {
    return static_cast<double>(raw(state, window)) / static_cast<double>(kPsiOnePercent);
  }
  // The same in hundredths of a percent, truncated as memory.pressure truncates (avg10=0.18 is
  // 18): for integer code and exact comparisons with the file.
  uint64_t centipercent(PsiState state, PsiWindow window) const noexcept {
    const uint64_t a = raw(state, window);
    return (a >> 11) * 100 + (((a & (kPsiOnePercent - 1)) * 100) >> 11);
  }
  uint64_t raw(PsiState state, PsiWindow window) const noexcept {
    return avg[state == PsiState::kFull ? 1 : 0][static_cast<int>(window)];
  }
};

// Brings the averages up to now and returns them.
PsiStats psi_stats(Group& group);
// The stall time of a group up to now, in ns ([0] some, [1] full), without folding the averages
// or evaluating triggers: a read that changes nothing, for samplers that must not disturb what
// they sample (a plot that would otherwise make triggers fire at its own sampling times).
void psi_stall_totals(Group& group, uint64_t out_ns[2]) noexcept;
// memory.pressure: "some avg10=A.BB avg60=A.BB avg300=A.BB total=T\nfull ...\n".
std::string format_psi(const PsiStats& stats);

// A trigger on a group's memory pressure, one per handle (one per open memory.pressure file).
// Events go to a callback and/or an eventfd (counter +1 per event; the trigger keeps a duplicate
// of the descriptor). Destroying or reset() removes the trigger; afterwards the callback is not
// called again and none of this trigger's calls is running (it waits for this trigger's calls
// only), unless reset() runs inside a callback of the library (any listener's): then a call
// already running on another thread may complete. REQUIRES: reset() is not called while holding
// a lock that this trigger's callback takes.
//
// Removal (the kernel's memory.pressure file going away with its cgroup: the trigger is
// destroyed, and poll(2) on the open file gives POLLERR|POLLPRI from then on): when the group is
// removed (Controller::remove), the trigger gets one final notification, with removed() already
// true: the eventfd's counter goes up by 1 (the in-process POLLERR|POLLPRI: the reader wakes and
// checks removed()) and the callback is called (it tells the removal by removed() on its handle).
// Then the trigger lets go of the group: no further event or poll comes, and the trigger no longer
// keeps the group dying; the handle stays armed until reset(), which then touches no group (the
// controller may be gone by then). The final notification runs inside Controller::remove(), with
// no library lock held; it is not counted in delivered(). Arming on a removed group fails with
// ENOENT.
class PsiTrigger {
 public:
  using Callback = std::function<void()>;

  PsiTrigger() = default;
  PsiTrigger(PsiTrigger&&) noexcept;
  PsiTrigger& operator=(PsiTrigger&&) noexcept;
  ~PsiTrigger() { reset(); }

  // Arms the trigger. `privileged` (default) accepts any window in (0, 10 s] and evaluates on
  // every state change; unprivileged requires a window that is a multiple of 2 s and evaluates on
  // the averaging grid. 0; EINVAL for a bad spec, no callback and no eventfd, or an eventfd that
  // cannot be duplicated; EBUSY if this handle is already armed; ENOENT for a removed group;
  // EAGAIN if the timer thread of the SystemClock polls cannot be started. On error nothing is
  // registered.
  [[nodiscard]] int arm(Group& group, const PsiTriggerSpec& spec, Callback callback,
                        int eventfd = -1, bool privileged = true);
  // Same with the text of a memory.pressure write (parse_psi_trigger).
  [[nodiscard]] int arm(Group& group, std::string_view text, Callback callback,
                        int eventfd = -1, bool privileged = true);

  void reset() noexcept;
  explicit operator bool() const noexcept { return entry_ != nullptr; }
  // Events delivered so far (the removal notice not included).
  uint64_t delivered() const noexcept;
  // True once the group was removed: the final notification is delivered or being delivered.
  bool removed() const noexcept;

 private:
  // Holds the trigger's reference to the group until its removal (delivery.hpp).
  std::shared_ptr<void> entry_;  // internal::PsiTriggerEntry
};


namespace internal {

// The running averages of one group (exposed for tests). All times in ns.
class PsiAverages {
 public:
  static constexpr uint64_t kPeriodNs = 2'000'000'000;
  static constexpr uint64_t kFixed1 = 2048;                  // 1.0 with 11 fractional bits
  static constexpr uint64_t kDecay[3] = {1677, 1981, 2034};  // 10 s, 60 s, 300 s

  // Starts the grid at `start_ns`: the first update is due one period later.
  void reset(uint64_t start_ns) noexcept;
  uint64_t next_update_ns() const noexcept { return next_ns_; }
  // One aggregator run at `now_ns` (>= next_update_ns()) with the cumulative stall times: folds
  // in missed periods, clamps each sample to the period (the excess is reported later) and
  // updates the averages.
  void update(uint64_t now_ns, const uint64_t total_ns[2]) noexcept;
  // Folds in, in one step, every grid point from next_update_ns() up to `until_ns`, if that is
  // exactly what update() at each of them would do: for each state, either `stalled[s]` (it held
  // through the whole period that ends at next_update_ns() and through every later one, so each
  // reports a full period) or nothing is left to report at next_update_ns() (`total_ns` is the
  // stall time there), and every average already equals that sample (a fixed point of the
  // decay). Returns false, changing nothing, otherwise (or when no grid point is due).
  bool skip_steady(uint64_t until_ns, const bool stalled[2], const uint64_t total_ns[2]) noexcept;
  // The grid point of the last update (the start of the grid before the first one).
  uint64_t last_update_ns() const noexcept { return last_ns_; }
  uint64_t avg(int state, int window) const noexcept { return avg_[state][window]; }
  // Stall time already reported to the averages.
  uint64_t reported(int state) const noexcept { return reported_[state]; }

 private:
  uint64_t next_ns_ = kPeriodNs;
  uint64_t last_ns_ = 0;
  uint64_t reported_[2] = {0, 0};
  uint64_t avg_[2][3] = {};
};

// x^n in fixed point with `frac_bits` fractional bits, rounding each product.
uint64_t fixed_power(uint64_t x, unsigned frac_bits, uint64_t n) noexcept;

// The calling thread changed attachment from `from` to `to` (either may be null). Inside a
// WorkScope the thread stays a task of the scope's group: nothing changes for PSI.
void psi_attach_moved(Group* from, Group* to) noexcept;


}  // namespace internal
}  // namespace memcg
