// The scenario model of `memcgctl run`: what a scenario file (shared/spec/scenario.md) says, once
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
};

struct MemberStep {
  std::string name, group;
  bool immune = false;
};

struct ChargeStep {
  enum class Outcome { kOk, kKilled, kFailed };
  std::string member;
  uint64_t bytes = 0;
  bool has_expect = false;
  Outcome expect = Outcome::kOk;
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
  std::string group, file, key;  // key empty = the whole file is one value
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

using StepBody = std::variant<SetStep, WriteStep, CacheStep, MemberStep, ChargeStep, ReleaseStep,
                              ExitStep, ReclaimStep, RemoveStep, TickStep, ExpectStep, PrintStep>;

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
};

// Outcome names used in files and reports.
const char* outcome_name(ChargeStep::Outcome o);
const char* op_name(ExpectStep::Op op);

// True for files whose content is "key value" lines (memory.events, memory.stat, …).
bool is_keyed_file(std::string_view file);

}  // namespace memcgctl
