// The group tree as JSON, as GET /v1/groups serves it (server.hpp) and `memcgctl top` reads it.
// Part of the optional component memcg::http.
//
//   {"version": 1,
//    "unit_bytes": 4096,
//    "groups": [                          every online group, a parent before its children
//      {"path": "/",                      Group::path(): "/" or "tenants/a"
//       "current": 123, "peak": 456,      bytes (memory.current, memory.peak)
//       "limits": {"high": null, "max": 1048576},       bytes; null = "max" (no limit)
//       "protection": {"min": 0, "low": 0},             bytes (the knobs as set)
//       "events": {"low": 0, "high": 0, "max": 0, "oom": 0, "oom_kill": 0, "oom_group_kill": 0,
//                  "wait": 0, "preempt": 0, "oom_handled": 0, "oom_spill": 0},
//                                                   memory.events (the last four: extensions)
//       "events_local": {...same keys...},
//       "pressure": {"some": {"avg10": 0.0, "avg60": 0.0, "avg300": 0.0, "total_us": 0},
//                    "full": {...}}}]}    averages in percent, rounded as memory.pressure prints
//
// The root has no "limits", "protection", "events" or "events_local" (it has no such files);
// every other group has all of them. Values are read group by group, each as fresh as a read of
// its files; the walk holds the tree lock in shared mode only while it collects the groups.
//
// Thread safety: may be called from any thread, concurrently with everything else. Cost: linear
// in the number of groups (one PSI update per group).
#pragma once

#include <string>

namespace memcg {
class Controller;
}

namespace memcg::http {

// The JSON document above, serialised compactly.
std::string render_groups_json(Controller& controller);

}  // namespace memcg::http
