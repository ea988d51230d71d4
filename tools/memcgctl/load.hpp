// Loading and validating a scenario file: YAML in, a Scenario out, or the list of what is wrong
// with the file, each with its line and column.
//
// Validation is static and complete before anything runs: the shape of every key, sizes,
// durations, error names, check operators, and every reference (a child after its parent, a
// group, cache or member that exists at that point of the steps, a group removed only once it
// has no children and no members). Values written to interface files whose grammar is known
// (memory.min/low/high/max, memory.swap.high/max, memory.oom.group) are checked with the
// library's own parsers; the runner checks the others through the file interface before the run.
//
// Limits: a scenario must run in bounded time and memory whatever it says, so these are
// refused up front like any other malformed input (validate and run agree):
//   - a file (or text) larger than kMaxScenarioBytes; a file is read no further than that, so a
//     device or pipe that never ends (/dev/zero) is refused, not read for ever;
//   - more than kMaxGroups groups;
//   - ticks and charge waits that add up to more than kMaxVirtualNs of virtual time (the lanes
//     of a `parallel` block are counted one after the other: an upper bound);
//   - a charge `wait` longer than kMaxWaitNs;
//   - a `parallel` block of more than kMaxLanes lanes (each is a thread for the block);
//   - a `queue` of more than kMaxLanes workers, kMaxQueueItems items, kMaxQueueSteps steps or
//     kMaxQueueTenants groups;
//   - a `charge` or `grow` step of more than kMaxStepUnits units (`max` included): each unit is
//     a charge of its own;
//   - `charge`, `grow` and `reclaim` steps that ask for more than kMaxWorkUnits units in all
//     (the units reclaim rotates in `referenced:` caches count too, but only the run can count
//     them: it stops with an error at the step that passes the budget, runner.hpp);
//   - more than kMaxHandles handles open at once;
//   - `print` steps that print more than kMaxPrintedFiles group files in all (a `print` of
//     `all` counts every group online at that step).
//
// Depends on memcg's parsers only (no controller), so that it can be fuzzed alone.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "scenario.hpp"

namespace memcgctl {

// The largest scenario: 1 MiB. Examples are a few KiB; the YAML parser takes about 150 bytes
// of memory per byte of input, so this bounds the parse at ~150 MiB.
inline constexpr uint64_t kMaxScenarioBytes = uint64_t{1} << 20;
// Groups a scenario may declare: 65 534, which with the root are the 65 535 memory cgroups the
// kernel's 16-bit ID space allows. Each costs the library a few KiB and the report a few more.
inline constexpr size_t kMaxGroups = 65534;
// Virtual time the ticks of a scenario may add up to: 100 years of 365 days. Far below where
// the library's clock stops (memcg::Clock::kMaxNs, ~292 years), which leaves room for the
// throttling sleeps that also move virtual time.
inline constexpr uint64_t kMaxVirtualNs = uint64_t{100} * 365 * 86400 * 1'000'000'000;
// Units one `charge` or `grow` step may ask for: 2^24 (64G at the default 4K unit), about two
// seconds of unit-by-unit charging.
inline constexpr uint64_t kMaxStepUnits = uint64_t{1} << 24;
// Units all `charge`, `grow` and `reclaim` steps together may ask for: 2^25 (128G at the 4K
// unit), two full steps, a few seconds of work. A reclaim step counts what it asks for, but no
// more than the charge and grow steps before it asked for (it cannot find more). Counted over
// the whole file, lanes included, whatever the steps would fail or find at run time. The run
// adds the units reclaim rotates (Scenario::work_units is the loader's part).
inline constexpr uint64_t kMaxWorkUnits = uint64_t{1} << 25;
// The longest a waiting charge may wait: one hour of virtual time. The library looks for room
// every 10 ms of it while it waits (360 000 looks for an hour).
inline constexpr uint64_t kMaxWaitNs = uint64_t{3600} * 1'000'000'000;
// The most `config: reclaim_cost` may be: 1 ms of virtual time per unit given back.
inline constexpr uint64_t kMaxReclaimCostNs = 1'000'000;
// Lanes of one `parallel` block: a thread each.
inline constexpr size_t kMaxLanes = 64;
// A lane's `repeat`, and the steps a lane may run in all (repeat × its steps): each step run is
// kept for the report.
inline constexpr uint64_t kMaxLaneRepeat = 100000;
inline constexpr uint64_t kMaxLaneStepRuns = uint64_t{1} << 18;
// A `queue` step: items (each one admission and its steps) and the groups they belong to. Its
// lanes are kMaxLanes at most; its steps kMaxQueueSteps in all (each run once, kept for the
// report), so that a queue costs no more than a block of 4 full lanes. A round of tries takes
// one try per group, so the groups bound the tries a step end may cause.
inline constexpr size_t kMaxQueueItems = 100000;
inline constexpr uint64_t kMaxQueueSteps = uint64_t{1} << 20;
inline constexpr size_t kMaxQueueTenants = 64;
// admit_weight: the range of cgroup's cpu.weight (and of memory.admit.weight); 100 by default.
inline constexpr uint32_t kMinAdmitWeight = 1;
inline constexpr uint32_t kMaxAdmitWeight = 10000;
inline constexpr uint32_t kDefaultAdmitWeight = 100;
// A member's or the config's `unwind` delay.
inline constexpr uint64_t kMaxUnwindNs = uint64_t{3600} * 1'000'000'000;
// Group files all `print` steps together may print: each is kept for the report (memory.stat
// alone is a dozen lines).
inline constexpr uint64_t kMaxPrintedFiles = 65536;
// Handles (`listen`, `trigger`, `peak`, `watch`) open at once: each holds library state (a
// registration, a peak watcher) for the rest of the run.
inline constexpr size_t kMaxHandles = 4096;

// "12", "12.5", "12.34" (0 to 100) in hundredths: memory.pressure's avgN values.
bool parse_hundredths(std::string_view s, uint64_t* v);

struct Diagnostic {
  Mark mark;  // line 0 when the problem is not at a place in the file (unreadable file)
  std::string message;
};

// Parses and validates `text`. True when it is a valid scenario (`out` filled); false with at
// least one entry in `errors`, in the order found.
bool load_scenario(std::string_view text, Scenario* out, std::vector<Diagnostic>* errors);

// load_scenario on the contents of the file at `path`.
bool load_scenario_file(const std::string& path, Scenario* out, std::vector<Diagnostic>* errors);

// "FILE:LINE:COL: message" (or "FILE: message" when there is no line).
std::string format_diagnostic(const std::string& file, const Diagnostic& d);

}  // namespace memcgctl
