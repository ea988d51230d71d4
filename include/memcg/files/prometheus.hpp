// Prometheus exposition: every group of a controller in the Prometheus text format, version
// 0.0.4, ready to be served on a /metrics endpoint (the library has no HTTP server: hand the
// string to whichever the application uses).
//
// Metric families, each sample labelled with group="<path>" ("/" for the root, else the path
// below the root, "tenants/a"):
//   memcg_memory_current_bytes                      gauge    memory.current (the root too)
//   memcg_memory_peak_bytes                         gauge    all-time memory.peak (the root too)
//   memcg_memory_{min,low,high,max}_bytes           gauge    the knobs; "max" renders as +Inf
//   memcg_memory_events_total{event}                counter  memory.events
//   memcg_memory_events_local_total{event}          counter  memory.events.local
//   memcg_memory_wait_waiters                       gauge    memory.wait waiters
//   memcg_memory_wait_queued_bytes                  gauge    memory.wait queued_bytes
//   memcg_memory_stat_bytes{item}                   gauge    memory.stat state items
//   memcg_memory_stat_events_total{item}            counter  memory.stat event items (pgscan and
//                                                            pgsteal as their sums, as in the file)
// Knobs, events and waits exist only for non-root groups, like their files. Online groups only: a
// removed (dying) group is left out; whatever it still holds is counted in its ancestors.
// Statistics are read as memory.stat reads them: each group is folded first if enough is pending
// for it (and the controller's periodic fold runs if due), so they are as fresh as a memory.stat
// read of that group.
//
// Thread safety: may be called from any thread, concurrently with everything else; the tree lock
// is held in shared mode during the walk, so groups are not created or removed meanwhile. Cost:
// proportional to the number of groups times the number of statistic items.
#pragma once

#include <string>
#include <string_view>

namespace memcg {

class Controller;

// The exposition of every online group of `controller`.
std::string render_prometheus(Controller& controller);

// `value` escaped for a label value of the text format: backslash, double quote and line feed
// become \\, \" and \n.
std::string prometheus_escape_label(std::string_view value);

// `text` escaped for a # HELP line: backslash and line feed become \\ and \n.
std::string prometheus_escape_help(std::string_view text);

}  // namespace memcg
