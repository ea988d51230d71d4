// The scenario runner's state (run.hpp is its interface): one Runner performs one scenario on
// its own controller and virtual clock, and keeps the result.
//
// Its parts, one file per concern:
//   run.cpp           the run: set-up, sampling for the plot, the final files
//   run_steps.cpp     steps that change state: set, write, cache, member, charge, release, exit,
//                     reclaim, remove, tick
//   run_parallel.cpp  the lanes of a `parallel` block
//   run_queue.cpp     a `queue` step: an admission queue served by a pool of lanes
//   run_checks.cpp    expect, print
//   run_handles.cpp   listen, trigger, peak, watch
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "memcg/alloc/lru_cache.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/base/errors.hpp"
#include "memcg/core/charge/attach.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/signal/notify.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/signal/pressure.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/admission/reservation.hpp"
#include "memcg/core/reclaim/vmpressure.hpp"
#include "memcg/files/files.hpp"
#include "memcg/files/parse.hpp"
#include "run.hpp"
#include "sim_clock.hpp"
#include "values.hpp"

namespace memcgctl::detail {

// An errno in the words of the interface files, or the system's for others.
std::string error_text(int err);

memcg::Options controller_options(const Config& c, memcg::Clock* clock);

// Inside an application handler the library calls (a listener's `shrink` policy): the library
// may hold that registration's call lock there, so the handler must not park its lane on the
// clock (another lane notified by the same listener would block on the lock while the parked
// one holds it). Time a handler spends is owed instead and paid at the end of the step.
extern thread_local constinit int tl_in_handler;
extern thread_local constinit uint64_t tl_owed_ns;

// On a lane's thread whose iterations run as new members: the lane's member name and the
// iteration's member (Runner::member_state).
struct MemberState;
struct QueueState;  // run_queue.cpp
extern thread_local constinit const std::string* tl_lane_name;
extern thread_local constinit MemberState* tl_lane_state;

// A member of the scenario: the library's Member plus what the kill callback did to it.
// Its flags are touched only by lanes (one runs at a time: the clock's scheduler orders them)
// and by the top-level thread between blocks.
struct MemberState {
  std::unique_ptr<memcg::Member> member;
  bool killed = false;
  uint64_t preempted = 0;  // requests to give memory back (cooperative preemption)
  uint64_t reported_preempts = 0;
  // What an iteration's new member copies (ParallelStep::Lane::new_member).
  bool immune = false;
  bool release_on_preempt = true;
  uint64_t unwind_ns = 0;  // the unwind delay (Config::unwind_ns)
  // A lane runs as this member now: a kill or a preemption that releases leaves the release to
  // that lane's next step boundary, no earlier than release_due_ns (docs/scenarios.md,
  // "Unwinding"). Otherwise the callback releases at once.
  bool lane_running = false;
  bool release_pending = false;
  uint64_t release_due_ns = 0;
  // Its reservation (`reserve` steps), made at the first one; destroyed before the member (it
  // charges through it). While a `reserve` step is inside a library call (in_reserve_call), a
  // release from the kill callback or another lane cannot touch the reservation: it uncharges
  // the member and leaves the reservation `stale`, ended as soon as the call returns.
  std::unique_ptr<memcg::Reservation> reservation;
  bool in_reserve_call = false;
  bool reservation_stale = false;
  // A `reserve` step's `ends_on` matched: the lane's iteration ends after that step.
  bool end_iteration = false;
};

// The handles of `listen`, `trigger`, `peak` and `watch` steps, with what they counted.
// A listener's or trigger's counts include the library's removal notice when its group is
// removed (given at the listener's own level); `removed` counts that notice alone (0 or 1).
struct ListenerState {
  memcg::PressureListener listener;
  std::array<uint64_t, 3> by_level{};  // notifications received, by memcg::PressureLevel
  int64_t shrunk = 0;                  // units its `shrink` policy freed
  uint64_t removed = 0;
};
struct TriggerState {
  memcg::PsiTrigger trigger;
  uint64_t fired = 0;
  uint64_t removed = 0;
};
struct WatchState {
  std::unique_ptr<memcg::EventListener> listener;
  uint64_t notified = 0;  // every notification, the removal notice included
  uint64_t removed = 0;   // removal notices (the kernel's IN_DELETE_SELF): 0 or 1
};

class Runner {
 public:
  Runner(const Scenario& s, const RunOptions& o)
      : s_(s), opts_(o), ctl_(controller_options(s.config, &clock_)), unit_(s.config.unit) {}

  ~Runner() {
    // Members, caches and handles hold charges and group references: gone before the controller.
    listeners_.clear();
    triggers_.clear();
    peaks_.clear();
    watches_.clear();
    members_.clear();
    caches_.clear();
  }

  RunResult run();

 private:
  // ---- set-up and sampling (run.cpp)
  // -----------------------------------------------------------------------------------
  void malformed(Mark m, std::string message) {
    r_.malformed = true;
    r_.error = {m, std::move(message)};
  }

  // Every knob write of the scenario, tried through the file interface on a scratch controller
  // (non-blocking, so that nothing is reclaimed): a file the library lacks or a value it rejects
  // is reported before anything runs.
  bool preflight();
  bool create_groups();
  bool write_knob(const Knob& k);

  // The end of a step (on the thread that ran it): the simulation's return to user space.
  // memory.high work that a charge deferred on this thread runs now, never in a later step or a
  // later run (a throttling sleep in a lane lets the other lanes run meanwhile).
  void finish_step(StepResult* res);

  // ---- sampling --------------------------------------------------------------------------
  // Samples at every `sample_stride_`-th sampling point (the end of a step, top-level or in a
  // lane), and whenever `force`d.
  void sample(size_t step, bool force);

  // Halves the samples kept (every other one stays, the first always) and the sampling rate from
  // now on, so that memory stays within kMaxPlotValues however many steps there are. Event
  // counters only grow, so a marker still shows at the next sample kept.
  void thin_samples();

  // The final files show the end state exactly: statistics still pending in per-CPU counters
  // and stock slots are folded first (a memory.stat read alone may lag by the published bound).
  void collect_final();

  // The library's periodic work (the 2 s statistics fold) on the virtual clock.
  void on_tick() { ctl_.tick(); }

  // ---- steps (run_steps.cpp)
  // ------------------------------------------------------------------------------------
  int64_t units_of(uint64_t bytes) const {
    if (bytes == UINT64_MAX) return ctl_.max_units();
    return static_cast<int64_t>(bytes / unit_ + (bytes % unit_ != 0));
  }

  memcg::GroupRef group(const std::string& path, StepResult* res);
  // Performs one step (top-level or of a lane); false when the scenario turned out malformed,
  // which stops the run: a rejected knob, or the work budget exhausted by the step.
  bool perform(const Step& st, StepResult* res);

  // The work budget (load.hpp, kMaxWorkUnits): what the steps ask for, counted by the loader,
  // plus the units reclaim rotated in the caches so far. Rotations cannot be counted from the
  // file, so they are counted as they happen: the run stops with an error at the step that
  // exhausted the budget (within a `charge` or `grow` step, at the first unit charge after it).
  bool within_work_budget() const noexcept {
    return s_.work_units + rotated_.load(std::memory_order_relaxed) <= kMaxWorkUnits;
  }
  bool perform_body(const Step&, const SetStep& set, StepResult* res);
  bool perform_body(const Step&, const WriteStep& w, StepResult* res);
  bool perform_body(const Step&, const CacheStep& c, StepResult* res);
  bool perform_body(const Step&, const MemberStep& m, StepResult* res);
  // A member of `g` with its kill callback (also for a lane iteration's new member).
  std::unique_ptr<MemberState> make_member(memcg::Group& g, const std::string& name, bool immune,
                                           bool release_on_preempt, uint64_t unwind_ns);
  // The member a step names: inside a lane whose iterations run as new members, the lane's
  // member name means the iteration's member.
  MemberState& member_state(const std::string& name);
  // On the member's own lane: a release left pending by a kill or a preemption happens now,
  // after the lane has waited (running) until its unwind delay is over. True if it released.
  bool unwind(MemberState& st);
  void report_kills(StepResult* res);
  bool perform_body(const Step&, const ChargeStep& c, StepResult* res);
  bool perform_body(const Step&, const ReleaseStep& r, StepResult* res);
  bool perform_body(const Step&, const ReserveStep& r, StepResult* res);
  // Gives back everything the member holds, its reservation included (see MemberState).
  static void release_all(MemberState& st);
  bool perform_body(const Step&, const ExitStep& x, StepResult* res);
  bool perform_body(const Step&, const ReclaimStep& r, StepResult* res);
  bool perform_body(const Step&, const RemoveStep& r, StepResult* res);
  bool perform_body(const Step&, const TickStep& t, StepResult*);

  // ---- parallel (run_parallel.cpp)
  // ---------------------------------------------------------------------------------
  bool perform_body(const Step&, const ParallelStep& p, StepResult* res);

  // ---- queue (run_queue.cpp) --------------------------------------------------------------------
  bool perform_body(const Step&, const QueueStep& q, StepResult* res);
  // A round of tries on a free lane: the head of each group with queued items, in fair order,
  // until one is admitted (its index) or none is (SIZE_MAX). Items past their deadline end.
  size_t queue_take(const QueueStep& q, QueueState& qs);
  bool queue_held_back(const QueueStep& q, QueueState& qs, size_t x);
  void queue_catch_up(QueueState& qs, size_t k, const memcg::Group* level);
  // Runs admitted item `i` on `lane`; false when the scenario turned out malformed.
  bool queue_run_item(const QueueStep& q, QueueState& qs, size_t i, size_t lane, StepResult* res,
                      uint64_t* unwound);
  // Ends item `i` with `status`: its member exits (what it holds goes back).
  void queue_end_item(QueueState& qs, size_t i, memcg::ReserveStatus status);
  // Wakes one idle lane of the queue (or all) to try again.
  void queue_wake(QueueState& qs, bool all);

  // ---- checks and output (run_checks.cpp) -------------------------------------------------------
  // Reads GROUP FILE[.KEY]: 0 and the value text, or an error with `why` set.
  int read_value(memcg::Group& g, const std::string& file, const std::string& key,
                 std::string* value, std::string* why);

  // The value an `expect` on a handle reads.
  bool handle_value(const ExpectStep& x, uint64_t* v, std::string* text, std::string* why);
  static std::string source_text(const ExpectStep& x);

  // memory.pressure's KIND.FIELD ("some.avg10", "full.total"): the field of the KIND line.
  static bool pressure_field(const std::string& content, const std::string& key,
                             std::string* value);
  bool perform_body(const Step&, const ExpectStep& x, StepResult* res);
  bool perform_body(const Step&, const PrintStep& p, StepResult* res);
  // ---- handles (run_handles.cpp) ----------------------------------------------------------------
  bool perform_body(const Step&, const ListenStep& l, StepResult* res);
  bool perform_body(const Step&, const TriggerStep& t, StepResult* res);
  bool perform_body(const Step&, const PeakStep& p, StepResult* res);
  bool perform_body(const Step&, const WatchStep& w, StepResult* res);

  // A listener's or trigger's count, for the plot (handles stay open to the end of the run).
  struct SignalRef {
    const std::array<uint64_t, 3>* by_level;
    const uint64_t* fired;
    uint64_t count() const {
      return fired ? *fired : (*by_level)[0] + (*by_level)[1] + (*by_level)[2];
    }
  };

  const Scenario& s_;
  const RunOptions& opts_;
  SimClock clock_;
  memcg::Controller ctl_;
  const uint64_t unit_;
  std::map<std::string, std::unique_ptr<memcg::LruCache>> caches_;
  std::map<std::string, int64_t> cache_capacity_;  // units, of the caches created with one
  std::set<std::string> cache_never_oom_;          // caches created with `oom: never`
  std::map<std::string, std::unique_ptr<MemberState>> members_;
  std::map<std::string, std::unique_ptr<ListenerState>> listeners_;
  std::map<std::string, std::unique_ptr<TriggerState>> triggers_;
  std::map<std::string, std::unique_ptr<memcg::File>> peaks_;
  std::map<std::string, std::unique_ptr<WatchState>> watches_;
  std::set<std::string> reported_kills_;
  RunResult r_;
  size_t max_sample_rows_ = 3;  // samples kept at most (kMaxPlotValues over the groups)
  size_t sample_stride_ = 1;    // sampling points sampled: every sample_stride_-th, and the last
  uint64_t points_ = 0;         // sampling points so far
  size_t current_index_ = 0;    // the top-level step running (1-based)
  std::vector<SignalRef> signal_refs_;    // in RunResult::signals order
  std::vector<StepResult> lane_results_;  // of the running `parallel` block
  std::atomic<uint64_t> rotated_{0};      // units reclaim rotated in every cache (the budget)
};

}  // namespace memcgctl::detail
