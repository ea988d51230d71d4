// Running a scenario: the real library, driven on a virtual clock, one thread at a time.
//
// The runner creates a memcg::Controller on a ManualClock with the scenario's options (the
// library's own reclaim driver and OOM killer act as its policies), creates the groups and writes
// their knobs through the file interface, then performs the steps in order. `cache` objects are
// memcg::LruCache, `member` objects memcg::Member. For the plot, it samples each group's usage,
// limits and event counters after every step (RunOptions::sample), keeping at most
// kMaxPlotValues group samples: past that, every other sample is dropped and only every 2nd (4th,
// ...) step is sampled from then on; the first and the last step are always kept. Nothing is
// faked: a file the library does not have reads as ENOENT, and that is reported as a failure.
//
// Determinism: one thread runs at a time, pinned to one CPU for the run (so per-CPU stock shards
// are chosen the same way every time), virtual time only; the same scenario gives the same
// result. The lanes of a `parallel` block are threads of their own (attached to their members'
// groups), scheduled one at a time on virtual time by SimClock (sim_clock.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "load.hpp"
#include "scenario.hpp"
#include "values.hpp"

namespace memcgctl {

// Group samples a run keeps for the plot (about 80 bytes each): a plot is ~650 pixels wide, so
// even a few hundred samples per group are more than it can show.
inline constexpr size_t kMaxPlotValues = size_t{1} << 18;

// The events sampled for plot markers, in memory.events order (memcg::Event).
inline constexpr std::array<const char*, 7> kEventNames = {
    "low", "high", "max", "oom", "oom_kill", "oom_group_kill", "wait"};

struct StepResult {
  const Step* step = nullptr;
  size_t index = 0;      // 1-based, in the scenario's top-level steps
  // A step of a `parallel` lane: the lane's member and the step's place in the lane (1-based).
  // Lane steps are reported after their block, in the order they ran.
  std::string lane;
  size_t lane_step = 0;
  uint64_t time_ns = 0;  // virtual time after the step
  // A check: an `expect` step, or a step's `expect` field.
  bool checked = false;
  bool passed = true;
  // The step could not do what it says (a file the library lacks, a group that vanished).
  bool failed = false;
  std::string message;             // for a failed check or step: what was expected, what happened
  std::vector<std::string> lines;  // values printed by a `print` step
  std::vector<std::string> notes;  // what else the text report says (a cache that stopped growing)
  Json detail = Json::object();    // step-specific results for --json
};

struct GroupSample {
  bool online = false;
  uint64_t current = 0, high = 0, max = 0;  // bytes; memcg::kUnlimited for max
  std::array<uint64_t, kEventNames.size()> events{};
  // Stall time so far (memory.pressure's some/full totals, ns), read without evaluating
  // triggers: sampling for the plot changes nothing the scenario checks.
  uint64_t stall_ns[2] = {0, 0};
};

// A listener or trigger for the plot's markers, in the order they were opened.
struct SignalInfo {
  std::string name;
  std::string group;
  bool trigger = false;  // else a vmpressure listener
};

struct Sample {
  size_t step = 0;  // 0 = before the first step
  uint64_t time_ns = 0;
  std::vector<GroupSample> groups;  // in RunResult::groups order
  // Notifications received / fires so far, in RunResult::signals order (those opened yet).
  std::vector<uint64_t> signals;
};

struct FinalFile {
  std::string name;
  int error = 0;  // read result
  std::string content;
};

struct FinalGroup {
  std::string path;
  std::vector<FinalFile> files;  // every readable file, in memcg::file_names order
};

struct RunResult {
  // Set when the scenario turned out malformed while running (a knob value the library rejects):
  // exit status 2, and nothing below is meaningful.
  bool malformed = false;
  Diagnostic error;

  std::vector<StepResult> steps;
  int passed = 0;
  int failed = 0;
  std::vector<std::string> groups;       // every declared group, in declaration order
  std::vector<Sample> samples;           // empty unless RunOptions::sample
  std::vector<SignalInfo> signals;       // listeners and triggers opened, for the plot
  std::vector<FinalGroup> final_groups;  // the root and every online group at the end
};

struct RunOptions {
  // Called after each step (index, total, virtual time), e.g. to show progress.
  std::function<void(size_t, size_t, uint64_t)> on_step;
  // Sample the groups for the plot (RunResult::samples); only svg_plot() needs them.
  bool sample = true;
};

RunResult run_scenario(const Scenario& scenario, const RunOptions& options = {});

}  // namespace memcgctl
