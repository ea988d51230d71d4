// The Prometheus exposition: its lines, family by family, and the document handed out in pieces
// (prometheus_internal.hpp has the parts: the values read at construction in
// prometheus_snapshot.cpp, the text fixed for the document in prometheus_families.cpp).
#include "memcg/files/prometheus.hpp"
#include "memcg/base/internal/hook_bypass.hpp"

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <string>

#include "prometheus_internal.hpp"

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

using namespace internal::prom;

// The lines of group `s` (statistics `st`) in family `f`; none where it has no sample.
template <typename Sink>
void PrometheusExposition::State::write_group(Sink& out, int f, const Snapshot& s,
                                              const int64_t* st) const {
  // Controller-wide families carry the root's label whichever groups are shown.
  const std::string_view label = controller_wide(f) ? std::string_view("/") : s.label;
  auto start = [&](const std::string& pre, const std::string& suffix) {
    out.put(pre);
    out.put(label);
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
  auto labeled = [&](const std::string* suffixes, const uint64_t* values, int n) {
    for (int i = 0; i < n; ++i) {
      start(prefix[f], suffixes[i]);
      out.u64(values[i]);
      out.put('\n');
    }
  };
  if (f == kGroupsOmitted) {  // no labels: the prefix is the name and a space
    out.put(prefix[f]);
    out.u64(omitted);
    out.put('\n');
    return;
  }
  if (s.root && !controller_wide(f) && f != kCurrent && f != kPeak && f != kStatBytes &&
      f != kStatEvents && f != kPsiSeconds && f != kPsiAvg)
    return;  // knobs, waits, events, vmpressure and admission exist only for non-root groups
  switch (f) {
    case kPsiSeconds:
      if (s.other) return;  // read as a share of time (rate), which a sum is not
      for (int i = 0; i < 2; ++i) {
        start(prefix[f], state_suffix[i]);
        put_seconds(out, s.psi_total_ns[i]);
        out.put('\n');
      }
      return;
    case kPsiAvg:
      if (s.other) return;  // a sum of shares is no share
      for (int i = 0; i < 2; ++i)
        for (int w = 0; w < 3; ++w) {
          start(prefix[f], avg_suffix[i][w]);
          put_psi_ratio(out, s.psi_avg[i][w]);
          out.put('\n');
        }
      return;
    case kVmpressure: return labeled(level_suffix, s.vmp_levels, 3);
    case kOomKills: return labeled(admission_suffix, s.oom_kills, kNumKillAdmissions);
    case kThrottled:
      start(prefix[f], plain_suffix);
      put_seconds(out, s.throttled_ns);
      out.put('\n');
      return;
    case kAdmitPromised: return count(s.admit_promised_bytes);
    case kAdmitWaits: return count(s.admit_waits);
    case kAdmitReclaims: return count(s.admit_reclaims);
    case kAdmitReclaimedBytes: return count(s.admit_reclaimed_bytes);
    case kQueueItems: return labeled(queue_state_suffix, s.queue_items, 2);
    case kQueueOutcomes: return labeled(queue_outcome_suffix, s.queue_outcomes, kNumQueueOutcomes);
    case kQueueTries: return count(s.queue_tries);
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
    case kWaitOutcomes: return labeled(wait_outcome_suffix, s.wait_outcomes, kNumWaitOutcomes);
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

PrometheusExposition::~PrometheusExposition() {
  internal::HookBypass bypass;  // freed as it was allocated: as the library's
  state_.reset();
}

size_t PrometheusExposition::groups() const noexcept {
  return state_->groups.size() - (state_->omitted != 0 ? 1 : 0);
}

size_t PrometheusExposition::groups_omitted() const noexcept { return state_->omitted; }

uint64_t PrometheusExposition::size() {
  State& st = *state_;
  if (st.length == 0) {
    Length n;
    // Group by group: the sum does not depend on the order, and each group's values are then
    // read once, in a row, instead of once a family (34 passes over 5 MB at 10 000 groups
    // missed the cache on every group).
    bool per_group[kNumFamilies];
    for (int f = 0; f < kNumFamilies; ++f) {
      const size_t rows = st.rows(f);
      per_group[f] = rows != 0 && !controller_wide(f) && !exposition_wide(f);
      if (rows == 0) continue;
      n.put(st.header[f]);
      if (!per_group[f])
        for (size_t i = 0; i < rows; ++i) st.write_row(n, f, i);
    }
    for (size_t i = 0; i < st.groups.size(); ++i)
      for (int f = 0; f < kNumFamilies; ++f)
        if (per_group[f]) st.write_row(n, f, i);
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
  st.skip_empty_families();
  if (st.family >= kNumFamilies) return appended;
  // Something is appended on every call before the end, even when `*out` is long already.
  const size_t target = std::max(min_bytes, out->size() + 1);
  while (st.family < kNumFamilies && out->size() < target) {
    const size_t n = st.rows(st.family);
    if (!st.header_written) {
      out->append(st.header[st.family]);
      st.header_written = true;
    }
    // Whole groups until the piece is long enough or the family ends.
    Text text{*out};
    while (st.next_group < n && out->size() < target) {
      st.prefetch_ahead(st.next_group);
      st.write_row(text, st.family, st.next_group);
      ++st.next_group;
    }
    if (st.next_group == n) {  // else the next piece goes on within this family
      ++st.family;
      st.header_written = false;
      st.next_group = 0;
      st.skip_empty_families();
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
  st.skip_empty_families();
  while (st.family < kNumFamilies && span.p < span.end) {
    const size_t rows = st.rows(st.family);
    if (!st.header_written) {
      span.put(st.header[st.family]);
      st.header_written = true;
    }
    while (st.next_group < rows && span.p < span.end) {
      st.prefetch_ahead(st.next_group);
      st.write_row(span, st.family, st.next_group);
      ++st.next_group;
    }
    if (st.next_group == rows) {
      ++st.family;
      st.header_written = false;
      st.next_group = 0;
      st.skip_empty_families();
    }
  }
  return static_cast<size_t>(span.p - buf);
}

void render_prometheus(Controller& ctl, const PrometheusOptions& options, std::string* out) {
  PrometheusExposition doc(ctl, options);
  internal::HookBypass bypass;  // the text is the library's memory, as the snapshots are
  out->clear();
  out->reserve(doc.size());  // its length is counted first: no copy while it grows
  while (doc.next(out, SIZE_MAX)) {
  }
}

std::string render_prometheus(Controller& ctl, const PrometheusOptions& options) {
  std::string out;
  render_prometheus(ctl, options, &out);
  return out;
}

}  // namespace memcg
