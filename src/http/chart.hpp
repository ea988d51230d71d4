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
// PSI some/full on the right axis (0..100 %, inside the frame: 100 % is drawn below its top
// border), and marks where memory.high / memory.max events and OOM kills happened; an OOM kill's
// mark links to its own report (/oom/<seq>) when `reports` (the OOM log's snapshot) still holds
// one (kill_report), else its class has "dropped" and its title says the report was dropped.
void history_chart(std::string& out, const Series& s, const std::vector<OomLogEntry>& reports);

// The group's events per sample interval as bars, with a colour key: memory.high and memory.max
// events on the left axis, OOM kills on their own right axis (a few kills stay visible beside
// hundreds of max events); kill bars link to their reports as in history_chart.
void events_chart(std::string& out, const Series& s, const std::vector<OomLogEntry>& reports);

// A kill's report is written just after its memory.events count (the same OOM, microseconds
// later): a sample that saw the count may precede the report by this much.
inline constexpr uint64_t kKillReportLagNs = 50'000'000;  // 50 ms

// The kill report of the kills a sample counted in (t0_ns, t1_ns]: the first OOM kill report of
// `reports` that concerns `group` with its time in (t0_ns, t1_ns + kKillReportLagNs]. Null when
// none is kept (the log dropped it): never another interval's report.
const OomLogEntry* kill_report(const std::vector<OomLogEntry>& reports, const std::string& group,
                               uint64_t t0_ns, uint64_t t1_ns);

}  // namespace memcg::http::detail
