#include "memcg/files/prometheus.hpp"
#include "memcg/base/internal/hook_bypass.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "memcg/base/events.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/reclaim/vmpressure.hpp"

namespace memcg {

std::string prometheus_escape_label(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string prometheus_escape_help(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

// How the requests on a group's memory.max ended, as memory.wait counts them: the label values
// of memcg_memory_wait_outcomes_total, memory.wait's own keys.
constexpr int kNumWaitOutcomes = 5;
constexpr const char* kWaitOutcomeNames[kNumWaitOutcomes] = {"granted", "timed_out", "cancelled",
                                                             "removed", "never_fits"};

// One group's values, read during the walk and printed family by family afterwards (a family's
// samples must be contiguous). The statistics live in one array for all groups (State::stats).
struct Snapshot {
  std::string label;  // the path, escaped for a label value
  bool root;
  uint64_t current, peak, min, low, high, max;
  uint64_t events[kNumEvents], events_local[kNumEvents];
  uint64_t waiters, queued_bytes;  // memory.wait (non-root groups)
  uint64_t wait_buckets[WaitStats::kBuckets], wait_ns_sum;  // how long charges waited there
  uint64_t wait_outcomes[kNumWaitOutcomes];  // how requests on its memory.max ended (below)
  uint64_t psi_total_ns[2];   // memory.pressure some/full totals
  uint64_t psi_avg[2][3];     // [some/full][10/60/300 s], percent x kPsiOnePercent
  uint64_t vmp_levels[3];     // vmpressure windows of its own reclaim: low, medium, critical
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
  kPsiSeconds,
  kPsiAvg,
  kVmpressure,
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
  kNumFamilies
};

struct FamilyText {
  const char* name;
  const char* type;
  const char* help;
};

constexpr FamilyText kFamilies[kNumFamilies] = {
    {"memcg_memory_current_bytes", "gauge",
     "Memory charged to the group and its descendants (memory.current)."},
    {"memcg_memory_peak_bytes", "gauge",
     "Highest memory.current recorded for the group (memory.peak)."},
    {"memcg_memory_min_bytes", "gauge", "Hard memory protection (memory.min)."},
    {"memcg_memory_low_bytes", "gauge", "Best-effort memory protection (memory.low)."},
    {"memcg_memory_high_bytes", "gauge", "Throttling limit (memory.high); +Inf when unset."},
    {"memcg_memory_max_bytes", "gauge", "Hard limit (memory.max); +Inf when unset."},
    {"memcg_memory_wait_waiters", "gauge",
     "Charges waiting now on the group's memory.max (memory.wait waiters)."},
    {"memcg_memory_wait_queued_bytes", "gauge",
     "Bytes asked by the charges waiting on the group's memory.max (memory.wait queued_bytes)."},
    // How long the charges that queued on the group's memory.max waited (whatever their
    // outcome), on the controller's clock: memory.wait's last/max as a distribution.
    {"memcg_memory_wait_seconds", "histogram",
     "Time charges waited on the group's memory.max before they were granted, timed out, "
     "cancelled or removed (memory.wait)."},
    {"memcg_memory_wait_outcomes_total", "counter",
     "Requests on the group's memory.max by how they ended: granted after waiting, timed out, "
     "cancelled, removed with the group, or refused at once as larger than the limit "
     "(never_fits) (memory.wait)."},
    {"memcg_memory_events_total", "counter",
     "Events of the group and its descendants (memory.events)."},
    {"memcg_memory_events_local_total", "counter",
     "Events of the group itself (memory.events.local)."},
    {"memcg_memory_pressure_stall_seconds_total", "counter",
     "Time some or all of the group's charging threads stalled on memory (memory.pressure total)."},
    {"memcg_memory_pressure_ratio", "gauge",
     "Share of time stalled on memory over the last 10, 60 and 300 seconds (memory.pressure "
     "avg10/avg60/avg300, as a ratio 0..1)."},
    {"memcg_memory_vmpressure_windows_total", "counter",
     "Windows of the group's own reclaim completed, by vmpressure level (low, medium, critical)."},
    {"memcg_oom_reports_total", "counter",
     "OOM killer decisions reported in the controller, by what happened: a kill, an OOM "
     "handler made room, a spill made room, or none of these (outcome: kill, handled, spilled, "
     "none)."},
    {"memcg_oom_decisions_total", "counter",
     "OOM killer decisions reported in the controller, by what ended them: a victim of the "
     "kernel's order or of the excess-over-admission order, an OOM handler, a spill, a kill left "
     "to a preemption in progress, or none."},
    {"memcg_oom_killed_members_total", "counter",
     "Members killed by the OOM killer in the controller."},
    {"memcg_oom_group_kills_total", "counter",
     "OOM kills that killed a whole group (memory.oom.group) in the controller."},
    {"memcg_oom_kill_failures_total", "counter",
     "OOM kills whose kill callback threw (the member was not killed) in the controller."},
    {"memcg_preemptions_total", "counter",
     "Cooperative preemptions in the controller (a waiting charge asked lower classes to give "
     "memory back)."},
    {"memcg_preempt_requests_total", "counter",
     "Members asked to give memory back by cooperative preemptions in the controller."},
    {"memcg_charges_forced_total", "counter",
     "Charges forced past memory.max in the controller (no-fail charges, reclaim recursion)."},
    {"memcg_charges_forced_bytes_total", "counter",
     "Bytes of the charges forced past memory.max in the controller (each charge whole, in "
     "charge units)."},
    {"memcg_charges_failed_total", "counter", "Charges that failed (kNoMem) in the controller."},
    {"memcg_memory_stat_bytes", "gauge",
     "Memory of each kind in the group and its descendants (memory.stat), in bytes."},
    {"memcg_memory_stat_events_total", "counter",
     "Event counts of the group and its descendants (memory.stat)."},
};

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

}  // namespace

// The values read at construction, the text fixed for the whole document (each sample's line
// is `prefix label suffix value`), and where the next piece starts.
struct PrometheusExposition::State {
  const StatRegistry* reg = nullptr;
  int nr_items = 0;
  size_t stride = 0;                  // statistics per group: the registry's, pgscan, pgsteal
  std::vector<Snapshot> groups;
  std::vector<int64_t> stats;         // groups x stride, registry order, then pgscan and pgsteal

  std::string header[kNumFamilies];   // # HELP and # TYPE lines
  std::string prefix[kNumFamilies];   // name{group="
  std::string plain_suffix;           // "}<space>
  std::string event_suffix[kNumEvents];                 // ",event="high"}<space>
  std::string bucket_prefix, bucket_suffix[WaitStats::kBuckets];  // _bucket{group=" / ",le="..."}
  std::string sum_prefix, count_prefix;
  std::vector<std::string> item_suffix;  // per statistic: ",item="name"}<space>
  std::string state_suffix[2];                   // ",state="some"}<space>
  std::string avg_suffix[2][3];                  // ",state="some",window="10s"}<space>
  std::string level_suffix[3];                   // ",level="low"}<space>
  std::string outcome_suffix[kNumOomOutcomes];   // ",outcome="kill"}<space>
  std::string wait_outcome_suffix[kNumWaitOutcomes];  // ",outcome="granted"}<space>
  std::string decider_suffix[kNumOomDeciders];   // ",decider="kernel"}<space>
  ControllerCounts counts;

  int family = 0;           // the family the next piece starts in
  bool header_written = false;  // its # HELP and # TYPE lines
  size_t next_group = 0;    // its next group
  uint64_t length = 0;      // of the whole document; 0 until computed
  std::string spill;        // written by read() past its buffer, not handed over yet
  size_t spill_taken = 0;   // of `spill`, handed over already

  void prepare_text();
  template <typename Sink>
  void write_group(Sink& out, int f, const Snapshot& s, const int64_t* st) const;
};

void PrometheusExposition::State::prepare_text() {
  for (int f = 0; f < kNumFamilies; ++f) {
    const FamilyText& t = kFamilies[f];
    header[f] = std::string("# HELP ") + t.name + ' ' + prometheus_escape_help(t.help) +
                "\n# TYPE " + t.name + ' ' + t.type + '\n';
    prefix[f] = std::string(t.name) + "{group=\"";
  }
  plain_suffix = "\"} ";
  auto keyed = [](const char* key, std::string_view value) {
    return std::string("\",") + key + "=\"" + prometheus_escape_label(value) + "\"} ";
  };
  for (int e = 0; e < kNumEvents; ++e)
    event_suffix[e] = keyed("event", event_name(static_cast<Event>(e)));
  const std::string wait = kFamilies[kWaitSeconds].name;
  bucket_prefix = wait + "_bucket{group=\"";
  sum_prefix = wait + "_sum{group=\"";
  count_prefix = wait + "_count{group=\"";
  for (int i = 0; i < WaitStats::kBuckets; ++i) {
    std::string bound;
    if (kWaitBucketsNs[i] == UINT64_MAX) {
      bound = "+Inf";
    } else {
      Text text{bound};
      put_seconds(text, kWaitBucketsNs[i]);
    }
    bucket_suffix[i] = keyed("le", bound);
  }
  const char* states[2] = {"some", "full"};
  const char* windows[3] = {"10s", "60s", "300s"};
  for (int i = 0; i < 2; ++i) {
    state_suffix[i] = keyed("state", states[i]);
    for (int w = 0; w < 3; ++w)
      avg_suffix[i][w] = std::string("\",state=\"") + states[i] + "\",window=\"" + windows[w] + "\"} ";
  }
  level_suffix[0] = keyed("level", "low");
  level_suffix[1] = keyed("level", "medium");
  level_suffix[2] = keyed("level", "critical");
  for (int o = 0; o < kNumOomOutcomes; ++o)
    outcome_suffix[o] = keyed("outcome", oom_outcome_name(static_cast<OomOutcome>(o)));
  for (int i = 0; i < kNumWaitOutcomes; ++i)
    wait_outcome_suffix[i] = keyed("outcome", kWaitOutcomeNames[i]);
  for (int d = 0; d < kNumOomDeciders; ++d)
    decider_suffix[d] = keyed("decider", oom_decider_name(static_cast<OomDecider>(d)));
  item_suffix.resize(stride);
  for (int i = 0; i < nr_items; ++i) item_suffix[i] = keyed("item", reg->item(i).name);
  item_suffix[nr_items] = keyed("item", "pgscan");
  item_suffix[nr_items + 1] = keyed("item", "pgsteal");
}

// The lines of group `s` (statistics `st`) in family `f`; none where it has no sample.
template <typename Sink>
void PrometheusExposition::State::write_group(Sink& out, int f, const Snapshot& s,
                                              const int64_t* st) const {
  auto start = [&](const std::string& pre, const std::string& suffix) {
    out.put(pre);
    out.put(s.label);
    out.put(suffix);
  };
  auto knob = [&](uint64_t v) {
    start(prefix[f], plain_suffix);
    put_number(out, v);
    out.put('\n');
  };
  auto count = [&](uint64_t v) {  // plain numbers: these never mean "max"
    start(prefix[f], plain_suffix);
    out.u64(v);
    out.put('\n');
  };
  const bool controller_wide = f >= kOomReports && f <= kChargesFailed;
  if (controller_wide && !s.root) return;  // once, with the root's label
  if (s.root && !controller_wide && f != kCurrent && f != kPeak && f != kStatBytes &&
      f != kStatEvents && f != kPsiSeconds && f != kPsiAvg)
    return;  // knobs, waits, events and vmpressure exist only for non-root groups
  switch (f) {
    case kPsiSeconds:
      for (int i = 0; i < 2; ++i) {
        start(prefix[f], state_suffix[i]);
        put_seconds(out, s.psi_total_ns[i]);
        out.put('\n');
      }
      return;
    case kPsiAvg:
      for (int i = 0; i < 2; ++i)
        for (int w = 0; w < 3; ++w) {
          start(prefix[f], avg_suffix[i][w]);
          put_psi_ratio(out, s.psi_avg[i][w]);
          out.put('\n');
        }
      return;
    case kVmpressure:
      for (int i = 0; i < 3; ++i) {
        start(prefix[f], level_suffix[i]);
        out.u64(s.vmp_levels[i]);
        out.put('\n');
      }
      return;
    case kOomReports:
      for (int o = 0; o < kNumOomOutcomes; ++o) {
        start(prefix[f], outcome_suffix[o]);
        out.u64(counts.oom.by_outcome[o]);
        out.put('\n');
      }
      return;
    case kOomDecisions:
      for (int d = 0; d < kNumOomDeciders; ++d) {
        start(prefix[f], decider_suffix[d]);
        out.u64(counts.oom.by_decider[d]);
        out.put('\n');
      }
      return;
    case kOomKilled: return count(counts.oom.kills);
    case kOomGroupKills: return count(counts.oom.group_kills);
    case kOomKillFailures: return count(counts.oom.kill_failures);
    case kPreemptions: return count(counts.oom.preemptions);
    case kPreemptAsked: return count(counts.oom.preempt_asked);
    case kChargesForced: return count(counts.forced);
    case kChargesForcedBytes: return count(counts.forced_bytes);
    case kChargesFailed: return count(counts.failed);
    case kCurrent: return knob(s.current);
    case kPeak: return knob(s.peak);
    case kMin: return knob(s.min);
    case kLow: return knob(s.low);
    case kHigh: return knob(s.high);
    case kMax: return knob(s.max);
    case kWaiters: return count(s.waiters);
    case kQueuedBytes: return count(s.queued_bytes);
    case kWaitSeconds:
      for (int i = 0; i < WaitStats::kBuckets; ++i) {
        start(bucket_prefix, bucket_suffix[i]);
        out.u64(s.wait_buckets[i]);
        out.put('\n');
      }
      start(sum_prefix, plain_suffix);
      put_seconds(out, s.wait_ns_sum);
      out.put('\n');
      start(count_prefix, plain_suffix);
      out.u64(s.wait_buckets[WaitStats::kBuckets - 1]);
      out.put('\n');
      return;
    case kWaitOutcomes:
      for (int i = 0; i < kNumWaitOutcomes; ++i) {
        start(prefix[f], wait_outcome_suffix[i]);
        out.u64(s.wait_outcomes[i]);
        out.put('\n');
      }
      return;
    case kEvents:
    case kEventsLocal:
      for (int e = 0; e < kNumEvents; ++e) {
        start(prefix[f], event_suffix[e]);
        out.u64(f == kEvents ? s.events[e] : s.events_local[e]);
        out.put('\n');
      }
      return;
    case kStatBytes:
    case kStatEvents: {
      const StatKind kind = f == kStatBytes ? StatKind::kState : StatKind::kEvent;
      for (int i = 0; i < nr_items; ++i) {
        if (reg->item(i).kind != kind) continue;
        start(prefix[f], item_suffix[i]);
        out.i64(st[i]);
        out.put('\n');
      }
      if (kind == StatKind::kEvent) {
        for (int i = nr_items; i < nr_items + 2; ++i) {
          start(prefix[f], item_suffix[i]);
          out.i64(st[i]);
          out.put('\n');
        }
      }
      return;
    }
    default: return;
  }
}

PrometheusExposition::PrometheusExposition(Controller& ctl) {
  const StatRegistry& reg = ctl.stats();
  Rstat& rs = ctl.rstat();
  ctl.tick();  // may deliver notifications: before the bypass, so callbacks run as usual
  // The snapshots and the text are the library's memory (internal/lock.hpp).
  internal::HookBypass bypass;
  state_ = std::make_unique<State>();
  State& st = *state_;
  st.reg = &reg;
  st.nr_items = static_cast<int>(reg.size());
  st.stride = static_cast<size_t>(st.nr_items) + 2;
  const int nr_items = st.nr_items;
  // Room for the groups there are now (more may come before the walk): no copy while it grows.
  const size_t expected = ctl.nr_groups() + 16;
  st.groups.reserve(expected);
  st.stats.reserve(expected * st.stride);
  std::vector<GroupRef> refs;  // for the PSI averages, read after the walk
  refs.reserve(expected);
  ctl.walk(
      ctl.root(),
      [&](Group& g) {
        rs.flush_if_needed(g.stat_node());
        Snapshot s;
        s.label = prometheus_escape_label(g.path());
        s.root = g.is_root();
        s.current = g.current();
        s.peak = g.peak();
        s.min = g.min();
        s.low = g.low();
        s.high = g.high();
        s.max = g.max();
        for (int e = 0; e < kNumEvents; ++e) {
          s.events[e] = g.events().get(static_cast<Event>(e));
          s.events_local[e] = g.events_local().get(static_cast<Event>(e));
        }
        const WaitStats w = s.root ? WaitStats{} : wait_stats(g);
        s.waiters = w.waiters;
        s.queued_bytes = w.queued_bytes;
        std::copy(std::begin(w.wait_buckets), std::end(w.wait_buckets), s.wait_buckets);
        s.wait_ns_sum = w.wait_ns_sum;
        const uint64_t outcomes[kNumWaitOutcomes] = {w.granted, w.timed_out, w.cancelled,
                                                     w.removed, w.never_fits};
        std::copy(std::begin(outcomes), std::end(outcomes), s.wait_outcomes);
        psi_stall_totals(g, s.psi_total_ns);
        std::fill(&s.psi_avg[0][0], &s.psi_avg[0][0] + 6, uint64_t{0});
        vmpressure_level_counts(g, s.vmp_levels);
        refs.push_back(GroupRef(&g));
        const size_t at = st.stats.size();
        st.stats.resize(at + st.stride);
        int64_t* v = &st.stats[at];
        for (int i = 0; i < nr_items; ++i) v[i] = g.stat(i);
        v[nr_items] = g.stat(StatRegistry::kPgscanDirect) + g.stat(StatRegistry::kPgscanProactive);
        v[nr_items + 1] =
            g.stat(StatRegistry::kPgstealDirect) + g.stat(StatRegistry::kPgstealProactive);
        st.groups.push_back(std::move(s));
      },
      /*include_dying=*/false);
  // The averages after the walk, outside the tree lock: bringing them up to now may fire
  // memory.pressure triggers (delivered as a memory.pressure read delivers them).
  for (size_t i = 0; i < refs.size() && i < st.groups.size(); ++i) {
    const PsiStats p = psi_stats(*refs[i]);
    for (int k = 0; k < 2; ++k)
      for (int w = 0; w < 3; ++w) st.groups[i].psi_avg[k][w] = p.avg[k][w];
  }
  refs.clear();
  st.counts.oom = ctl.oom_log().totals();
  const ChargeStats cs = charge_stats(ctl);
  st.counts.forced = cs.forced;
  st.counts.forced_bytes = cs.forced_bytes;
  st.counts.failed = cs.failed;
  st.prepare_text();
}

PrometheusExposition::~PrometheusExposition() {
  internal::HookBypass bypass;  // freed as it was allocated: as the library's
  state_.reset();
}

size_t PrometheusExposition::groups() const noexcept { return state_->groups.size(); }

uint64_t PrometheusExposition::size() {
  State& st = *state_;
  if (st.length == 0) {
    Length n;
    for (int f = 0; f < kNumFamilies; ++f) {
      n.put(st.header[f]);
      for (size_t i = 0; i < st.groups.size(); ++i)
        st.write_group(n, f, st.groups[i], &st.stats[i * st.stride]);
    }
    st.length = n.n;
  }
  return st.length;
}

bool PrometheusExposition::next(std::string* out, size_t min_bytes) {
  internal::HookBypass bypass;
  State& st = *state_;
  if (out == nullptr) return false;
  bool appended = false;
  if (st.spill_taken < st.spill.size()) {  // what read() wrote past its buffer comes first
    out->append(st.spill, st.spill_taken, std::string::npos);
    st.spill.clear();
    st.spill_taken = 0;
    appended = true;
    if (out->size() >= min_bytes) return true;
  }
  if (st.family >= kNumFamilies) return appended;
  const size_t n = st.groups.size();
  // Something is appended on every call before the end, even when `*out` is long already.
  const size_t target = std::max(min_bytes, out->size() + 1);
  while (st.family < kNumFamilies && out->size() < target) {
    if (!st.header_written) {
      out->append(st.header[st.family]);
      st.header_written = true;
    }
    // Whole groups until the piece is long enough or the family ends.
    Text text{*out};
    while (st.next_group < n && out->size() < target) {
      st.write_group(text, st.family, st.groups[st.next_group],
                     &st.stats[st.next_group * st.stride]);
      ++st.next_group;
    }
    if (st.next_group == n) {  // else the next piece goes on within this family
      ++st.family;
      st.header_written = false;
      st.next_group = 0;
    }
  }
  return true;
}

size_t PrometheusExposition::read(char* buf, size_t max) {
  internal::HookBypass bypass;
  State& st = *state_;
  if (buf == nullptr) return 0;
  size_t n = std::min(max, st.spill.size() - st.spill_taken);
  std::memcpy(buf, st.spill.data() + st.spill_taken, n);
  st.spill_taken += n;
  if (st.spill_taken < st.spill.size()) return n;
  st.spill.clear();
  st.spill_taken = 0;
  Span span{buf + n, buf + max, st.spill};
  const size_t groups = st.groups.size();
  while (st.family < kNumFamilies && span.p < span.end) {
    if (!st.header_written) {
      span.put(st.header[st.family]);
      st.header_written = true;
    }
    while (st.next_group < groups && span.p < span.end) {
      st.write_group(span, st.family, st.groups[st.next_group],
                     &st.stats[st.next_group * st.stride]);
      ++st.next_group;
    }
    if (st.next_group == groups) {
      ++st.family;
      st.header_written = false;
      st.next_group = 0;
    }
  }
  return static_cast<size_t>(span.p - buf);
}

std::string render_prometheus(Controller& ctl) {
  PrometheusExposition doc(ctl);
  internal::HookBypass bypass;  // the text is the library's memory, as the snapshots are
  std::string out;
  out.reserve(doc.size());
  while (doc.next(&out, SIZE_MAX)) {
  }
  return out;
}

}  // namespace memcg
