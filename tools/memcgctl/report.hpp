// Reports of a scenario run (docs/scenarios.md, "The report"): the text report, the JSON
// document and the SVG plot. All three are functions of the scenario and its result only (no
// wall time, no paths), so the same scenario gives the same bytes.
#pragma once

#include <string>

#include "run.hpp"
#include "scenario.hpp"

namespace memcgctl {

// One line per printed value (`GROUP FILE[.KEY] VALUE`), one per failed check or step
// (`line L: FAIL …` saying what was expected and what was read), one per note
// (`line L: note: …`), in step order; then a blank line and a table of every group at the end
// (sizes, memory.events counters, 10 s pressure averages), a blank line, and last the line
// `N passed, M failed`.
std::string text_report(const RunResult& result);

// One JSON document: the scenario's name and config, every step with its arguments and result,
// the counts, every group's readable files at the end, and the text report's table ("table").
std::string json_report(const Scenario& scenario, const RunResult& result);

// memory.current of every group over virtual time (or over steps when the clock never moved),
// memory.max and memory.high as dashed lines, markers where event counters moved, axes with
// labels, a legend. A standalone SVG document.
std::string svg_plot(const Scenario& scenario, const RunResult& result);

}  // namespace memcgctl
