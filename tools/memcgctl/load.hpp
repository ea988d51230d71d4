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
// Depends on memcg's parsers only (no controller), so that it can be fuzzed alone.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "scenario.hpp"

namespace memcgctl {

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
