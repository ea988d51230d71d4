// The Prometheus exposition's pieces shared between its source files (not installed):
// prometheus_snapshot.cpp reads a controller's values into State, prometheus_families.cpp
// prepares the text fixed for the whole document, prometheus.cpp writes the document's lines
// and hands them out in pieces.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "memcg/base/events.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/signal/trouble.hpp"
#include "memcg/files/prometheus.hpp"

namespace memcg::internal::prom {

// How the requests on a group's memory.max ended, as memory.wait counts them: the label values
// of memcg_memory_wait_outcomes_total, memory.wait's own keys.
constexpr int kNumWaitOutcomes = 5;
constexpr const char* kWaitOutcomeNames[kNumWaitOutcomes] = {"granted", "timed_out", "cancelled",
                                                             "removed", "never_fits"};

// How the admission queues' items of a group ended or were admitted (memory.admit.queue): the
// label values of memcg_memory_admit_queue_items_total.
constexpr int kNumQueueOutcomes = 5;
constexpr const char* kQueueOutcomeNames[kNumQueueOutcomes] = {"admitted", "timed_out",
                                                               "cancelled", "never_fits",
                                                               "refused"};

// One group's values, read during the walk and printed family by family afterwards (a family's
// samples must be contiguous). The statistics live in one array for all groups (State::stats).
struct Snapshot {
  std::string label;  // the path, escaped for a label value
  bool root = false;
  bool other = false;  // the sum of the groups top_k left out
  uint64_t current, peak, min, low, high, max;
  uint64_t events[kNumEvents], events_local[kNumEvents];
  uint64_t waiters, queued_bytes;  // memory.wait (non-root groups)
  uint64_t wait_buckets[WaitStats::kBuckets], wait_ns_sum;  // how long charges waited there
  uint64_t wait_outcomes[kNumWaitOutcomes];  // how requests on its memory.max ended (below)
  uint64_t psi_total_ns[2];   // memory.pressure some/full totals
  uint64_t psi_avg[2][3];     // [some/full][10/60/300 s], percent x kPsiOnePercent
  uint64_t vmp_levels[3];     // vmpressure windows of its own reclaim: low, medium, critical
  // Admission (memory.wait's admit_* lines, memory.admit.queue): what admitted reservations
  // under the group were promised beyond their charges, waiting admissions that waited or
  // reclaimed on its limit, and its items in the admission queues.
  uint64_t admit_promised_bytes, admit_waits, admit_reclaims, admit_reclaimed_bytes;
  uint64_t queue_items[2];  // queued, running
  uint64_t queue_outcomes[kNumQueueOutcomes];
  uint64_t queue_tries;
  // memory.high throttling sleeps of its charges, and its members OOM-killed by KillAdmission
  // (trouble.hpp): the group's own.
  uint64_t throttled_ns;
  uint64_t oom_kills[kNumKillAdmissions];
};

// Controller-wide counts, written once with the root's label.
struct ControllerCounts {
  OomLogTotals oom;
  uint64_t forced = 0, forced_bytes = 0, failed = 0;
};

// The families, in the order of the document.
enum Family : int {
  kCurrent,
  kPeak,
  kMin,
  kLow,
  kHigh,
  kMax,
  kWaiters,
  kQueuedBytes,
  kWaitSeconds,
  kWaitOutcomes,
  kEvents,
  kEventsLocal,
  kOomKills,
  kThrottled,
  kPsiSeconds,
  kPsiAvg,
  kVmpressure,
  kAdmitPromised,
  kAdmitWaits,
  kAdmitReclaims,
  kAdmitReclaimedBytes,
  kQueueItems,
  kQueueOutcomes,
  kQueueTries,
  kOomReports,
  kOomDecisions,
  kOomKilled,
  kOomGroupKills,
  kOomKillFailures,
  kPreemptions,
  kPreemptAsked,
  kChargesForced,
  kChargesForcedBytes,
  kChargesFailed,
  kStatBytes,
  kStatEvents,
  kGroupsOmitted,
  kNumFamilies
};

// Families written once for the controller (with group="/"), not once a group.
constexpr bool controller_wide(int f) { return f >= kOomReports && f <= kChargesFailed; }
// Families of the exposition itself, without a group label.
constexpr bool exposition_wide(int f) { return f == kGroupsOmitted; }

// The label of the series that sums the groups top_k left out: parentheses are never in a
// group's name (Controller::valid_name), so no group can have it.
constexpr std::string_view kOtherLabel = "(other)";

// The family named `name`, or -1.
int family_of(std::string_view name) noexcept;

// Adds `s` (the values of a group left out by top_k) into `sum`: counts and bytes add up, a
// knob that is unlimited in either stays unlimited; PSI is summed but not written (a share of
// time summed over groups is no share).
void add_into(Snapshot& sum, const Snapshot& s);

// Where a line goes: Text writes it, Length only counts its bytes (the document's length is
// known before it is written). One formatting code serves both, so they cannot disagree.
struct Text {
  std::string& out;
  void put(std::string_view v) { out.append(v); }
  void put(char c) { out += c; }
  void u64(uint64_t v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, static_cast<size_t>(r.ptr - buf));
  }
  void i64(int64_t v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, static_cast<size_t>(r.ptr - buf));
  }
};

// Writes into a fixed buffer; what does not fit goes to `spill`, to be handed over first next
// time (so a line may be split between two buffers).
struct Span {
  char* p;
  char* const end;
  std::string& spill;
  void put(std::string_view v) {
    const size_t room = static_cast<size_t>(end - p);
    if (v.size() <= room) {
      std::memcpy(p, v.data(), v.size());
      p += v.size();
    } else {
      std::memcpy(p, v.data(), room);
      p = end;
      spill.append(v.data() + room, v.size() - room);
    }
  }
  void put(char c) {
    if (p < end) {
      *p++ = c;
    } else {
      spill += c;
    }
  }
  void u64(uint64_t v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    put(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
  }
  void i64(int64_t v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    put(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
  }
};

struct Length {
  uint64_t n = 0;
  void put(std::string_view v) { n += v.size(); }
  void put(char) { ++n; }
  void u64(uint64_t v) {
    int d = 1;
    for (; v >= 10; v /= 10) ++d;
    n += static_cast<uint64_t>(d);
  }
  void i64(int64_t v) {
    if (v < 0) ++n;
    u64(v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v));
  }
};

// A knob: kUnlimited is +Inf.
template <typename Sink>
void put_number(Sink& out, uint64_t v) {
  if (v == kUnlimited) {
    out.put("+Inf");
  } else {
    out.u64(v);
  }
}

// Nanoseconds as seconds with nine decimals ("0.001000000").
template <typename Sink>
void put_seconds(Sink& out, uint64_t ns) {
  out.u64(ns / 1'000'000'000);
  char frac[10];
  uint64_t f = ns % 1'000'000'000;
  for (int i = 9; i >= 1; --i, f /= 10) frac[i] = static_cast<char>('0' + f % 10);
  frac[0] = '.';
  out.put(std::string_view(frac, sizeof frac));
}

// A ratio 0..1 from a PSI average (percent x kPsiOnePercent), with six decimals.
template <typename Sink>
void put_psi_ratio(Sink& out, uint64_t raw) {
  const uint64_t micro = raw * 10'000 / kPsiOnePercent;  // millionths of 1
  out.u64(micro / 1'000'000);
  char frac[7];
  uint64_t f = micro % 1'000'000;
  for (int i = 6; i >= 1; --i, f /= 10) frac[i] = static_cast<char>('0' + f % 10);
  frac[0] = '.';
  out.put(std::string_view(frac, sizeof frac));
}

}  // namespace memcg::internal::prom

namespace memcg {

// The values read at construction, the text fixed for the whole document (each sample's line
// is `prefix label suffix value`), and where the next piece starts.
struct PrometheusExposition::State {
  const StatRegistry* reg = nullptr;
  int nr_items = 0;
  size_t stride = 0;                  // statistics per group: the registry's, pgscan, pgsteal
  // The groups shown, in tree order, then "(other)" when some were left out.
  std::vector<internal::prom::Snapshot> groups;
  std::vector<int64_t> stats;         // groups x stride, registry order, then pgscan and pgsteal
  size_t omitted = 0;                 // groups of the subtree that top_k left out
  bool enabled[internal::prom::kNumFamilies];  // families not turned off

  std::string header[internal::prom::kNumFamilies];  // # HELP and # TYPE lines
  std::string prefix[internal::prom::kNumFamilies];  // name{group="
  std::string plain_suffix;           // "}<space>
  std::string event_suffix[kNumEvents];                 // ",event="high"}<space>
  std::string queue_state_suffix[2];                    // ",state="queued"}<space>, running
  std::string queue_outcome_suffix[internal::prom::kNumQueueOutcomes];
  std::string bucket_prefix, bucket_suffix[WaitStats::kBuckets];  // _bucket{group=" / ",le="..."}
  std::string sum_prefix, count_prefix;
  std::vector<std::string> item_suffix;  // per statistic: ",item="name"}<space>
  std::string state_suffix[2];                   // ",state="some"}<space>
  std::string avg_suffix[2][3];                  // ",state="some",window="10s"}<space>
  std::string level_suffix[3];                   // ",level="low"}<space>
  std::string outcome_suffix[kNumOomOutcomes];   // ",outcome="kill"}<space>
  std::string wait_outcome_suffix[internal::prom::kNumWaitOutcomes];  // ",outcome="granted"}<sp>
  std::string decider_suffix[kNumOomDeciders];   // ",decider="kernel"}<space>
  std::string admission_suffix[kNumKillAdmissions];  // ",admission="within"}<space>
  internal::prom::ControllerCounts counts;

  int family = 0;           // the family the next piece starts in
  bool header_written = false;  // its # HELP and # TYPE lines
  size_t next_group = 0;    // its next group
  uint64_t length = 0;      // of the whole document; 0 until computed
  std::string spill;        // written by read() past its buffer, not handed over yet
  size_t spill_taken = 0;   // of `spill`, handed over already

  void prepare_text();
  // Moves `family` past the families with no lines (turned off), when a family starts.
  void skip_empty_families() noexcept {
    while (family < internal::prom::kNumFamilies && next_group == 0 && !header_written &&
           rows(family) == 0)
      ++family;
  }
  // The lines of family `f` are written for rows 0 .. rows(f) - 1: one a group for a
  // per-group family, one for the others (0 when the family is turned off).
  size_t rows(int f) const noexcept {
    if (!enabled[f]) return 0;
    if (internal::prom::controller_wide(f) || internal::prom::exposition_wide(f)) return 1;
    return groups.size();
  }
  // Asks for the snapshot a few rows ahead of `row` while this one is written: a family's
  // pass over the groups touches each snapshot once (beyond the cache at thousands of groups),
  // and its first line (the label) is what every line starts with.
  void prefetch_ahead(size_t row) const noexcept {
    constexpr size_t kAhead = 4;
    if (row + kAhead < groups.size()) __builtin_prefetch(&groups[row + kAhead]);
  }
  template <typename Sink>
  void write_row(Sink& out, int f, size_t row) const {
    static const internal::prom::Snapshot kNone{};  // for a row of no group (never read)
    if (row < groups.size()) {
      write_group(out, f, groups[row], &stats[row * stride]);
    } else {
      write_group(out, f, kNone, nullptr);
    }
  }
  template <typename Sink>
  void write_group(Sink& out, int f, const internal::prom::Snapshot& s, const int64_t* st) const;
};

}  // namespace memcg
