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
//   memcg_memory_wait_seconds{le}                   histogram time charges waited on memory.max
//   memcg_memory_wait_outcomes_total{outcome}        counter  memory.wait: how requests on the
//                                                            group's memory.max ended (granted,
//                                                            timed_out, cancelled, removed,
//                                                            never_fits)
//   memcg_memory_oom_kills_total{admission}          counter members of the group killed, by how
//                                                            the victim stood against its admission
//                                                            (within/over/none; trouble.hpp)
//   memcg_memory_high_throttled_seconds_total        counter memory.high throttling sleeps
//   memcg_memory_pressure_stall_seconds_total{state} counter memory.pressure total, some/full
//   memcg_memory_pressure_ratio{state,window}        gauge   memory.pressure avg10/60/300 as 0..1
//   memcg_memory_vmpressure_windows_total{level}     counter windows of the group's own reclaim by
//                                                            vmpressure level (low/medium/critical)
//   memcg_memory_stat_bytes{item}                   gauge    memory.stat state items
//   memcg_memory_stat_events_total{item}            counter  memory.stat event items (pgscan and
//                                                            pgsteal as their sums, as in the file)
//   memcg_exposition_groups_omitted                 gauge    groups left out by top_k (no labels)
// Controller-wide counters, once, with group="/" (from OomLog's totals and charge_stats()):
//   memcg_oom_reports_total{outcome="kill"|"handled"|"spilled"|"none"} (what happened,
//   OomOutcome),
//   memcg_oom_decisions_total{decider="none"|"kernel"|"excess"|"handler"|"spill"|"preempt"}
//   (what ended each reported OOM: OomReport::decider), memcg_oom_killed_members_total,
//   memcg_oom_group_kills_total, memcg_oom_kill_failures_total, memcg_preemptions_total,
//   memcg_preempt_requests_total, memcg_charges_forced_total, memcg_charges_forced_bytes_total
//   (their size), memcg_charges_failed_total.
// Knobs, events, waits and vmpressure exist only for non-root groups, like their files; PSI for
// every group. The PSI averages are brought up to now after the walk (outside the tree lock), so
// a read may deliver memory.pressure triggers as a memory.pressure read does. Online groups only: a
// removed (dying) group is left out; whatever it still holds is counted in its ancestors.
// Statistics are read as memory.stat reads them: each group is folded first if enough is pending
// for it (and the controller's periodic fold runs if due), so they are as fresh as a memory.stat
// read of that group.
//
// Thread safety: may be called from any thread, concurrently with everything else; the tree lock
// is held in shared mode during the walk, which lists the groups online then (and makes one
// statistics flush of the subtree, proportional to what changed since the last one); their values
// are read after it, holding a reference to each. Cost: the values of every group of the chosen
// subtree and depth are read (under 1 us a group: "(other)" needs them), the text is written
// for the groups shown only (about 4.9 KB a group with the built-in statistics).
//
// What is shown (PrometheusOptions, the same as the /metrics query parameters of memcg::http):
// one subtree, down to a depth, the top K groups of it by memory.current for the per-group
// families (the others summed into one series labelled group="(other)"; the gauge
// memcg_exposition_groups_omitted says how many they are), and any families but those turned
// off. The defaults show every group of the tree down to any depth but at most 1 000 of them
// (kDefaultTopK): a 10 000-group controller's scrape is about 5 MB instead of 49 MB.
//
// PrometheusExposition is the same document in pieces, for a server that sends while it renders
// (memcg::http does): the values are read once, at construction, and the text is written a piece
// at a time, so the whole document (3 to 5 KB a group) is never held at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace memcg {

class Controller;

// What an exposition shows. Cardinality is the operator's to bound: a scraper that stores every
// series pays for each group shown, and a process with 10 000 groups is mostly small leaves.
struct PrometheusOptions {
  // Per-group families show at most this many groups by default: about 5 MB of text.
  static constexpr size_t kDefaultTopK = 1000;
  // Deepest `max_depth` accepted (a tree is never that deep; the bound keeps input sane).
  static constexpr int kMaxDepth = 1'000'000;

  // The subtree shown: a group's path as Controller::lookup() takes it; "" or "/" for the root.
  std::string group;
  // Levels below `group` shown: 0 is `group` alone; -1 (the default) is every level.
  int max_depth = -1;
  // The per-group families show the `top_k` groups of largest memory.current (ties go to the
  // group met first in tree order, a parent before its children); the others are summed into
  // one series labelled group="(other)" (no memcg_memory_pressure_* for it: PSI is read as a
  // share of time, which a sum over groups is not). 0 shows every group.
  size_t top_k = kDefaultTopK;
  // Families left out, by name (the names of the list above, e.g. "memcg_memory_stat_bytes").
  std::vector<std::string> disabled_families;
};

// 0 when `options` can be rendered on `controller`; else ENOENT (no such group) or EINVAL (a
// depth below -1 or above kMaxDepth, an unknown family name), with a sentence for the operator
// in `*why` (may be null).
int check_prometheus_options(const Controller& controller, const PrometheusOptions& options,
                             std::string* why);

// The names of the families an exposition can have, in the order of the document.
std::vector<std::string> prometheus_family_names();

// The exposition of the online groups of `controller` that `options` shows. Throws
// std::invalid_argument (what() is check_prometheus_options()'s sentence) when the options are
// not valid, or their group was removed meanwhile.
std::string render_prometheus(Controller& controller, const PrometheusOptions& options = {});

// The same into `*out`, which is cleared first and keeps its capacity: a scraper that passes the
// same string each time writes into memory it touched already (a fresh 5 MB buffer costs more in
// page faults than its text costs to write). The strong guarantee is not given: on a throw,
// `*out` holds nothing useful. REQUIRES: out != nullptr.
void render_prometheus(Controller& controller, const PrometheusOptions& options, std::string* out);

// The exposition of `controller` as render_prometheus() would return it at construction, written
// in pieces. Construction reads every online group's values (the walk render_prometheus() makes,
// notifications included); next() and read() only format them and touch the controller no more,
// so they may run later, on any one thread at a time, for as long as the object lives.
// Memory: the values of the groups shown, held until destruction: 448 bytes a group, 8 more per
// statistic item (12 with the built-in ones) and its path (0.55 MB for the default 1 000, 5.5 MB
// for 10 000 groups shown, against 4.9 and 49 MB of text); while it is constructed, 24 bytes
// more for every group of the subtree (the ranking).
class PrometheusExposition {
 public:
  // Throws std::invalid_argument as render_prometheus() does.
  explicit PrometheusExposition(Controller& controller, const PrometheusOptions& options = {});
  ~PrometheusExposition();
  PrometheusExposition(const PrometheusExposition&) = delete;
  PrometheusExposition& operator=(const PrometheusExposition&) = delete;

  // Appends the next whole lines of the document to `*out` (after a read(), first the rest of
  // the line it split) until it holds at least `min_bytes` or the document ends (a piece
  // overshoots `min_bytes` by at most one group's lines of one family, a few KB); something is
  // appended even when `*out` is that long already. False, with nothing appended, once the
  // document is complete (or when `out` is null): the concatenation of all pieces is the
  // document, byte for byte. Throws std::bad_alloc when `*out` cannot grow; the rest of the
  // document is then lost.
  bool next(std::string* out, size_t min_bytes);

  // Copies the next bytes of the document into `buf`, `max` at most, writing them there
  // directly (what does not fit is kept for the next call, a few KB at most); how many, which is
  // less than `max` only at the end (0 once the document is complete, or when `buf` is null).
  // May be mixed with next(). Throws std::bad_alloc when the kept bytes cannot be stored.
  size_t read(char* buf, size_t max);

  // The document's length in bytes, whatever next() or read() wrote already: counted, not
  // written, the first time (a few ms for 10 000 groups), then remembered.
  uint64_t size();

  // The number of groups shown with their own label (not counting "(other)").
  size_t groups() const noexcept;

  // The number of groups of the subtree and depth asked for that top_k left out (summed into
  // "(other)").
  size_t groups_omitted() const noexcept;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// `value` escaped for a label value of the text format: backslash, double quote and line feed
// become \\, \" and \n.
std::string prometheus_escape_label(std::string_view value);

// `text` escaped for a # HELP line: backslash and line feed become \\ and \n.
std::string prometheus_escape_help(std::string_view text);

}  // namespace memcg
