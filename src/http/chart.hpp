// The page's SVG drawings (GET /, GET /group/<path>): a group's usage bar, its history chart and
// its events over time. Inline SVG, no script. Private to src/http.
#pragma once

#include <string>
#include <vector>

#include "history.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "memcg/http/columns.hpp"

namespace memcg::http::detail {

// A usage bar: current filled, min/low/high/max as ticks, on one scale.
void usage_bar(std::string& out, const TopColumns& c);

// One history chart: memory.current with memory.high and memory.max on the left axis (bytes),
// PSI some/full on the right axis (0..100 %), and marks where memory.high / memory.max events and
// OOM kills happened; an OOM kill's mark links to its report (/oom/<seq>) when `reports` (the
// OOM log's snapshot) still holds one that concerns the group in that interval.
void history_chart(std::string& out, const Series& s, const std::vector<OomLogEntry>& reports);

// The group's events per sample interval as bars: memory.high, memory.max events and OOM kills
// (kill bars link to their reports as in history_chart).
void events_chart(std::string& out, const Series& s, const std::vector<OomLogEntry>& reports);

// The OOM kill report of `reports` that concerns `group` in (t0_ns, t1_ns], else the first one
// that concerns it after t0_ns; null when none does.
const OomLogEntry* kill_report(const std::vector<OomLogEntry>& reports, const std::string& group,
                               uint64_t t0_ns, uint64_t t1_ns);

}  // namespace memcg::http::detail
