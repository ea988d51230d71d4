// The recent OOM and preemption reports (memcg/core/oom/oom_log.hpp) as GET /v1/oom serves them (JSON)
// and GET /v1/oom.txt (one line a report, for a log). Part of the optional component memcg::http.
//
//   {"version": 1, "capacity": 32, "last_seq": 7,
//    "totals": {"reports": 5, "kills": 4, "group_kills": 0, "no_victim": 1,
//               "outcomes": {"kill": 3, "handled": 1, "spilled": 0, "none": 1},
//               "kill_failures": 0, "preemptions": 2, "preempt_requests": 3},
//    (outcomes: the reports by what happened, OomOutcome; they add up to "reports".
//    "no_victim" is outcomes.none, kept for older readers.)
//    "reports": [                                   oldest first
//      {"seq": 6, "time_ns": 1250000000, "kind": "oom_kill",     or "preempt"
//       "wall_time_ns": 1796613901123456789,                      the system's clock (Unix, UTC)
//       "wall_time": "2026-12-07T03:25:01.123Z",
//       "domain": "tenants/a", "request_units": 1, "request_bytes": 4096,
//       "victim": "q1", "oom_group": "", "killed": ["q1"],
//       "failed": [{"member": "q2", "error": "..."}],
//       "candidates": [{"member": "q1", "group": "tenants/a", "charged_units": 10,
//                       "score_adj": 0, "badness": 10}],       the killer's order (top 5)
//       "top_members": [{"name": "q1", "group": "tenants/a", "bytes": 40960,
//                        "admitted_bytes": 32768}],           largest first (5)
//       "top_groups": [{"name": "tenants/a", "bytes": 81920, "admitted_bytes": 32768}]}]}
//   A "preempt" report has "waiter_group", "priority", "shortage_units" and "asked"
//   ([{"member", "group", "priority", "charged_units"}]) instead of the kill fields.
//
// Every string is valid UTF-8: the log keeps its strings so (oom_log.hpp), and the writer
// replaces any byte that is not UTF-8 by U+FFFD all the same.
//
// Thread safety: any thread; reads a snapshot of the ring.
#pragma once

#include <cstdint>
#include <string>

#include "memcg/core/oom/oom_log.hpp"

namespace memcg::http {

// One report as a JSON object (the serializer of every report field).
void append_oom_entry_json(std::string& out, const OomLogEntry& e);
// The document above; reports with seq > `after` only.
std::string render_oom_json(Controller& controller, uint64_t after = 0);
// One format_oom_log_line() per report, oldest first, each ending in a line feed.
std::string render_oom_text(Controller& controller, uint64_t after = 0);

}  // namespace memcg::http
