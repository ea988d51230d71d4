// The scenario model of `memcgctl run`: what a scenario file (docs/scenarios.md) says, once
// loaded and validated. Every value is already parsed (sizes in bytes, durations in nanoseconds,
// error names as errno values) and every reference checked (groups, caches, members), so that
// running it can only fail where the library itself answers.
//
// Each element keeps the position it came from (1-based line and column) for messages.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/admission/reservation.hpp"

namespace memcgctl {

struct Mark {
  int line = 0;    // 1-based; 0 = unknown
  int column = 0;  // 1-based
};

// Options of the simulated controller (memcg::Options).
struct Config {
  uint64_t unit = 4096;  // bytes, a power of two
  int cpus = 1;          // stock shards
  int64_t batch = 64;    // stock batch in units
  bool recursive_protection = false;
  bool local_events = false;
  // Virtual time a cache takes to give back one unit (by reclaim or a shrink), spent on the
  // thread that frees it: reclaim in a charge then stalls that thread (PSI) while other lanes
  // run. 0 (the default): freeing takes no time.
  uint64_t reclaim_cost_ns = 0;
  // Virtual time a killed, preempted (and releasing) member takes to give its memory back, as a
  // query unwinds its stack before its buffers are freed: counted from the kill, and the release
  // happens no earlier than the next step boundary of the lane the member runs (docs/scenarios.md,
  // "Unwinding"). 0 (the default): at the instant of the kill, as before. A member's `unwind`
  // overrides it.
  uint64_t unwind_ns = 0;
};

// One interface-file write of a `groups` entry or a `set` step.
struct Knob {
  std::string group;
  std::string file;
  std::string value;  // as written; the file's own grammar applies
  Mark mark;          // of the value
};

struct GroupSpec {
  std::string path;  // relative to the root, "A/B"
  std::vector<Knob> knobs;
  Mark mark;
};

// ---- steps --------------------------------------------------------------------------------------

struct SetStep {
  std::vector<Knob> knobs;  // in file order
};

// A raw file write; `expect` is an errno value (0 = ok) when `has_expect`.
struct WriteStep {
  std::string group, file, value;
  bool has_expect = false;
  int expect = 0;
};

struct CacheStep {
  enum class Op { kGrow, kShrink, kDrop };
  std::string name;
  std::string group;  // set when the step names one (required to create the cache)
  Op op = Op::kGrow;
  uint64_t bytes = 0;          // grow/shrink amount
  int referenced_percent = 0;  // when the cache is created
  bool has_referenced = false;
  // When the cache is created: the most it keeps, as an application's LRU cache with a size
  // limit; a `grow` past it gives the oldest units back first (as a shrink does).
  bool has_capacity = false;
  uint64_t capacity = 0;
  // When the cache is created: its growth never runs the OOM killer (kRetryMayFail), as an
  // application's cache whose insertion gives up instead.
  bool never_oom = false;
};

struct MemberStep {
  std::string name, group;
  bool immune = false;
  // Asked to give memory back for a higher-class waiting charge (cooperative preemption,
  // memory.wait.preempt): `release` (the default) gives back everything it holds, as a cancelled
  // query would; `ignore` keeps it (a holder that does not cooperate).
  bool release_on_preempt = true;
  // Its own unwind delay (Config::unwind_ns otherwise).
  bool has_unwind = false;
  uint64_t unwind_ns = 0;
};

struct ChargeStep {
  // kTimedOut: a waiting charge whose time ran out (memcg::WaitStatus::kTimedOut).
  enum class Outcome { kOk, kKilled, kFailed, kTimedOut };
  std::string member;
  uint64_t bytes = 0;
  bool bulk = false;  // the whole size in one library call (else unit by unit)
  // A waiting charge (charge_wait.hpp): one call for the whole size that may wait up to
  // `wait_ns` of virtual time for room instead of failing. Implies bulk.
  bool wait = false;
  uint64_t wait_ns = 0;
  // Its class (`priority: low | normal | high`); kDefault: the group's (memory.wait.priority).
  memcg::WaitPriority priority = memcg::WaitPriority::kDefault;
  bool has_expect = false;
  Outcome expect = Outcome::kOk;
};

// A step of the member's reservation (memcg::Reservation, <memcg/core/admission/reservation.hpp>): the
// admitted memory of one query. A member has one reservation, made at the first `reserve` step
// that runs for it with the member's options (`oom`, `priority`: the loader gives every step of
// a member the same ones) and ended by `release: true`, `release` of the member, a kill, a
// preemption that releases, or the member's exit.
struct ReserveStep {
  enum class Op {
    kReserve,  // reserve(total), or reserve_for(total, wait): the admitted size
    kGrow,     // grow(bytes), or grow_for(bytes, wait)
    kRelease,  // release()
  };
  std::string member;
  Op op = Op::kReserve;
  uint64_t bytes = 0;  // kReserve: the total; kGrow: what it adds
  bool wait = false;   // the waiting form (reserve_for, grow_for), up to wait_ns
  uint64_t wait_ns = 0;
  // kGrow with `wait`: when the wait times out, grow() at once (the OOM killer per `oom`).
  bool grow_on_timeout = false;
  memcg::OomPolicy oom = memcg::OomPolicy::kKernel;
  memcg::WaitPriority priority = memcg::WaitPriority::kDefault;
  // In a lane: statuses (bit 1 << ReserveStatus) after which the lane's iteration ends, as a
  // query gives up when it is killed or its growth is refused. 0: it never ends one.
  uint32_t ends_on = 0;
  bool has_expect = false;
  memcg::ReserveStatus expect = memcg::ReserveStatus::kOk;
};

struct ReleaseStep {
  std::string member;
  bool all = true;
  uint64_t bytes = 0;
};

struct ExitStep {
  std::string member;
};

struct ReclaimStep {
  std::string group;
  std::string size;  // as written: memory.reclaim takes it verbatim
  bool has_expect = false;
  int expect = 0;  // errno value, 0 = ok
};

struct RemoveStep {
  std::string group;
};

struct TickStep {
  uint64_t ns = 0;
};

struct ExpectStep {
  enum class Op { kEq, kLe, kGe, kCloseTo };
  // What is read: a group's file, or a handle opened by a step (by its name).
  enum class Source { kFile, kListener, kTrigger, kPeak, kWatch };
  Source source = Source::kFile;
  std::string handle;            // the handle's name, for every source but kFile
  int level = -1;                // kListener: count only notifications of this level (-1 = all)
  bool removed = false;          // kWatch, kListener, kTrigger: the removal notice alone (0/1)
  std::string group, file, key;  // key empty = the whole file is one value
  // memory.pressure's avgN keys are percentages with two decimals: `value` and the value read
  // are then compared in hundredths of a percent.
  bool hundredths = false;
  Op op = Op::kEq;
  uint64_t value = 0;      // bytes or a plain integer; UINT64_MAX = `max`
  std::string value_text;  // as written, for messages
  uint64_t err = 0;        // close_to's error in percent units
};

struct PrintStep {
  std::string group;  // "all" = every online group
  std::string file;   // empty = memory.current
  std::string key;
};

// A vmpressure listener (vmpressure.hpp) on a group, counting its notifications by level.
struct ListenStep {
  std::string name, group;
  int level = 0;  // memcg::PressureLevel
  int mode = 0;   // memcg::PressureMode
  // A policy: each notification shrinks this cache by `shrink_bytes`, at once, on the thread
  // the library delivers it on (the application's handler). Empty = no action.
  std::string shrink_cache;
  uint64_t shrink_bytes = 0;
};

// A PSI trigger (psi.hpp) on a group's memory pressure, counting how often it fired.
struct TriggerStep {
  std::string name, group;
  std::string spec;  // `some|full STALL_US WINDOW_US`, as written to memory.pressure
};

// A memory.peak handle: opened on a group, reset (a write to it), or closed.
struct PeakStep {
  enum class Op { kOpen, kReset, kClose };
  std::string name, group;
  Op op = Op::kOpen;
};

// A change listener of memory.events (or memory.events.local) of a group (notify.hpp), counting
// the notifications delivered (rate-limited by the library).
struct WatchStep {
  std::string name, group;
  bool local = false;  // memory.events.local
};

struct Step;

// Lanes that run at the same time on the virtual clock, one per member (sim_clock.hpp): each
// lane's steps run in order on a thread attached to its member's group; the block ends when
// every lane has finished. A `tick` in a lane is time the lane spends running.
struct ParallelStep {
  struct Lane {
    std::string member;
    Mark mark;                // of the member's key
    std::vector<Step> steps;  // no `parallel`, and nothing that creates or destroys
    // The lane runs its steps `repeat` times. With `new_member`, each iteration runs as a new
    // member of the lane member's group (named MEMBER#N, with its `immune`, `on_preempt` and
    // `unwind`), which the lane's steps naming MEMBER act on and which exits at the end of the
    // iteration: a worker that runs one query after another.
    uint64_t repeat = 1;
    bool new_member = false;
    // The long form's `iterations`: iteration N runs iterations[N - 1] instead of `steps`
    // (repeat is then their count), so that each query of a worker has its own shape.
    std::vector<std::vector<Step>> iterations;
    // With new_member: the group of each iteration's member ("" = the lane member's), for a
    // worker whose queries belong to different tenants; the lane is attached there for it.
    std::vector<std::string> iteration_groups;
    const std::vector<Step>& steps_of(uint64_t iteration) const {
      return iterations.empty() ? steps : iterations[iteration - 1];
    }
  };
  std::vector<Lane> lanes;  // in file order
};

// An admission queue (docs/scenarios.md, "`queue`"): `workers` lanes, a shared pool, take the
// next admissible item across groups. Each try is one admission without waiting
// (Reservation::reserve_for with a zero timeout) of the item's head of line in its group; a lane
// that finds no admissible item waits, not in any group's admission, until a step of the block
// ends or a deadline passes. Groups are served by weighted fair queueing on their `admit_weight`
// (admissions, not bytes), items within a group by priority then file order, and an item that
// is not admitted within its deadline of its first try is dropped as timed out. An admitted
// item runs its steps as a new member of its group (MEMBER#N, N its 1-based place in `items`),
// which exits at the end, as a lane iteration's member does.
struct QueueStep {
  struct Item {
    std::string group;
    uint64_t bytes = 0;  // the admission's total (the reservation's admitted size)
    memcg::WaitPriority priority = memcg::WaitPriority::kNormal;  // within its group
    uint64_t deadline_ns = 0;                                      // over all tries
    std::vector<Step> steps;  // a lane's rules: nothing that creates or destroys
    Mark mark;
  };
  struct Tenant {
    std::string group;
    uint32_t weight = 100;  // admit_weight: 1..10000, cgroup's cpu.weight range
  };
  std::string member;  // the template of the items' members (immune, on_preempt, unwind)
  size_t workers = 1;
  memcg::OomPolicy oom = memcg::OomPolicy::kKernel;  // of every item's reservation
  std::vector<Tenant> tenants;  // every item's group: `tenants` first, then by first item
  std::vector<Item> items;
};

using StepBody = std::variant<SetStep, WriteStep, CacheStep, MemberStep, ChargeStep, ReleaseStep,
                              ExitStep, ReclaimStep, RemoveStep, TickStep, ExpectStep, PrintStep,
                              ListenStep, TriggerStep, PeakStep, WatchStep, ParallelStep,
                              ReserveStep, QueueStep>;

struct Step {
  std::string kind;  // the step's key: "set", "cache", …
  Mark mark;         // of the key
  StepBody body;
};

struct Scenario {
  std::string name;
  Config config;
  std::vector<GroupSpec> groups;  // in creation order
  std::vector<Step> steps;
  // Units the `charge`, `grow` and `reclaim` steps ask for (the loader's count towards
  // kMaxWorkUnits); the runner adds the units reclaim rotates to it as they happen.
  uint64_t work_units = 0;
};

// Outcome names used in files and reports.
const char* outcome_name(ChargeStep::Outcome o);
const char* op_name(ExpectStep::Op op);
// A ReserveStatus as the library names it (memcg::reserve_status_name, which the loader cannot
// call: it links memcg's parsers only): "ok", "forced", "nomem", ..., "never-fits".
const char* reserve_status_text(memcg::ReserveStatus s);
inline constexpr int kReserveStatusCount = 10;  // kOk .. kNeverFits

// True for files whose content is "key value" lines (memory.events, memory.stat, …).
bool is_keyed_file(std::string_view file);

}  // namespace memcgctl
