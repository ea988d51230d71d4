// The Prometheus exposition's values: every online group's and the controller's, read once at
// construction (prometheus_internal.hpp).
#include "memcg/base/internal/hook_bypass.hpp"

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <string>
#include <string_view>
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "memcg/base/events.hpp"
#include "memcg/core/admission/admission.hpp"
#include "memcg/core/admission/admission_queue.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/signal/trouble.hpp"
#include "memcg/core/reclaim/vmpressure.hpp"
#include "prometheus_internal.hpp"

namespace memcg {

using namespace internal::prom;

namespace {

// `value` for an error sentence: printable ASCII only, at most 80 bytes (it came from outside).
std::string quoted(std::string_view value) {
  std::string out = "'";
  for (size_t i = 0; i < value.size() && i < 80; ++i)
    out += value[i] >= 0x20 && value[i] < 0x7f ? value[i] : '?';
  if (value.size() > 80) out += "...";
  return out + "'";
}

bool is_root_path(std::string_view path) { return path.empty() || path == "/"; }

// One group's values (the statistics into `v`, `nr_items` + 2 of them), PSI averages apart;
// its label only `with_label`.
void read_group(Group& g, int nr_items, bool with_label, Snapshot& s, int64_t* v) {
  if (with_label) s.label = prometheus_escape_label(g.path());
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
  const uint64_t outcomes[kNumWaitOutcomes] = {w.granted, w.timed_out, w.cancelled, w.removed,
                                               w.never_fits};
  std::copy(std::begin(outcomes), std::end(outcomes), s.wait_outcomes);
  psi_stall_totals(g, s.psi_total_ns);
  std::fill(&s.psi_avg[0][0], &s.psi_avg[0][0] + 6, uint64_t{0});
  vmpressure_level_counts(g, s.vmp_levels);
  const AdmitStats a = s.root ? AdmitStats{} : admit_stats(g);
  const uint64_t unit = uint64_t{1} << g.controller().unit_shift();
  s.admit_promised_bytes = static_cast<uint64_t>(std::max<int64_t>(a.promised_units, 0)) * unit;
  s.admit_waits = a.admit_waits;
  s.admit_reclaims = a.admit_reclaims;
  s.admit_reclaimed_bytes = a.admit_reclaimed_units * unit;
  const AdmitQueueStats q = s.root ? AdmitQueueStats{} : admit_queue_stats(g);
  s.queue_items[0] = q.queued;
  s.queue_items[1] = q.running;
  const uint64_t qo[kNumQueueOutcomes] = {q.admitted, q.timed_out, q.cancelled, q.never_fits,
                                          q.refused};
  std::copy(std::begin(qo), std::end(qo), s.queue_outcomes);
  s.queue_tries = q.tries;
  const GroupTrouble trouble = group_trouble(g);
  s.throttled_ns = trouble.throttled_ns;
  std::copy(std::begin(trouble.oom_kills), std::end(trouble.oom_kills), s.oom_kills);
  for (int i = 0; i < nr_items; ++i) v[i] = g.stat(i);
  v[nr_items] = g.stat(StatRegistry::kPgscanDirect) + g.stat(StatRegistry::kPgscanProactive);
  v[nr_items + 1] = g.stat(StatRegistry::kPgstealDirect) + g.stat(StatRegistry::kPgstealProactive);
}

uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// A knob of "(other)": unlimited when any summed group's is.
uint64_t add_knob(uint64_t a, uint64_t b) {
  if (a == kUnlimited || b == kUnlimited) return kUnlimited;
  const uint64_t sum = add_sat(a, b);
  return sum >= kUnlimited ? kUnlimited : sum;
}

template <size_t N>
void add_all(uint64_t (&sum)[N], const uint64_t (&v)[N]) {
  for (size_t i = 0; i < N; ++i) sum[i] = add_sat(sum[i], v[i]);
}

}  // namespace

void internal::prom::add_into(Snapshot& sum, const Snapshot& s) {
  sum.current = add_sat(sum.current, s.current);
  sum.peak = add_sat(sum.peak, s.peak);
  sum.min = add_knob(sum.min, s.min);
  sum.low = add_knob(sum.low, s.low);
  sum.high = add_knob(sum.high, s.high);
  sum.max = add_knob(sum.max, s.max);
  add_all(sum.events, s.events);
  add_all(sum.events_local, s.events_local);
  sum.waiters = add_sat(sum.waiters, s.waiters);
  sum.queued_bytes = add_sat(sum.queued_bytes, s.queued_bytes);
  add_all(sum.wait_buckets, s.wait_buckets);
  sum.wait_ns_sum = add_sat(sum.wait_ns_sum, s.wait_ns_sum);
  add_all(sum.wait_outcomes, s.wait_outcomes);
  add_all(sum.psi_total_ns, s.psi_total_ns);
  add_all(sum.vmp_levels, s.vmp_levels);
  sum.admit_promised_bytes = add_sat(sum.admit_promised_bytes, s.admit_promised_bytes);
  sum.admit_waits = add_sat(sum.admit_waits, s.admit_waits);
  sum.admit_reclaims = add_sat(sum.admit_reclaims, s.admit_reclaims);
  sum.admit_reclaimed_bytes = add_sat(sum.admit_reclaimed_bytes, s.admit_reclaimed_bytes);
  add_all(sum.queue_items, s.queue_items);
  add_all(sum.queue_outcomes, s.queue_outcomes);
  sum.queue_tries = add_sat(sum.queue_tries, s.queue_tries);
  sum.throttled_ns = add_sat(sum.throttled_ns, s.throttled_ns);
  add_all(sum.oom_kills, s.oom_kills);
}

int check_prometheus_options(const Controller& ctl, const PrometheusOptions& o, std::string* why) {
  auto fail = [why](int err, std::string text) {
    if (why != nullptr) *why = std::move(text);
    return err;
  };
  if (o.max_depth < -1 || o.max_depth > PrometheusOptions::kMaxDepth)
    return fail(EINVAL, "depth must be -1 (every level) or 0.." +
                            std::to_string(PrometheusOptions::kMaxDepth));
  for (const std::string& name : o.disabled_families)
    if (family_of(name) < 0)
      return fail(EINVAL, "unknown metric family " + quoted(name) +
                              " (the families are listed in docs/stats.md)");
  if (!is_root_path(o.group) && !ctl.lookup(o.group))
    return fail(ENOENT, "no such group: " + quoted(o.group));
  return 0;
}

PrometheusExposition::PrometheusExposition(Controller& ctl, const PrometheusOptions& opt) {
  std::string why;
  if (check_prometheus_options(ctl, opt, &why) != 0) throw std::invalid_argument(why);
  const GroupRef from = is_root_path(opt.group) ? GroupRef(&ctl.root()) : ctl.lookup(opt.group);
  if (!from) throw std::invalid_argument("no such group: " + quoted(opt.group));
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
  std::fill(std::begin(st.enabled), std::end(st.enabled), true);
  for (const std::string& name : opt.disabled_families) st.enabled[family_of(name)] = false;
  const int nr_items = st.nr_items;
  // The walk only lists the groups (with their usage, to rank them): their values are read
  // after it, outside the tree lock, and only the groups shown get a snapshot and a label; the
  // others are added into "(other)" as they are read. A group removed after the walk is still
  // read (its reference keeps it): the document shows the groups online at the walk.
  struct Seen {
    GroupRef ref;
    uint64_t current;
  };
  std::vector<Seen> seen;
  seen.reserve(ctl.nr_groups() + 16);  // more may come before the walk: rarely a copy
  bool from_online = true;
  ctl.walk(
      *from,
      [&](Group& g) {
        if (&g == from.get()) {
          // Removed since the lookup (the walk still starts at it): nothing to show.
          if (!g.is_online()) {
            from_online = false;
            return;
          }
          // One flush for the whole subtree, proportional to what changed since the last:
          // every group's statistics are then as fresh as a memory.stat read would make them.
          rs.flush(g.stat_node());
        }
        if (opt.max_depth >= 0) {
          int depth = 0;
          for (const Group* p = &g; p != from.get(); p = p->parent())
            if (++depth > opt.max_depth) return;
        }
        seen.push_back({GroupRef(&g), g.current()});
      },
      /*include_dying=*/false);
  if (!from_online) throw std::invalid_argument("no such group: " + quoted(opt.group));

  const size_t n = seen.size();
  const size_t shown = opt.top_k == 0 ? n : std::min(n, opt.top_k);
  std::vector<bool> kept(n, true);
  if (shown < n) {
    // The top_k largest by memory.current, ties to the first in tree order (a parent before its
    // children, whose usage it includes): O(n) to choose them.
    std::vector<uint32_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
    std::nth_element(order.begin(), order.begin() + static_cast<ptrdiff_t>(shown), order.end(),
                     [&](uint32_t a, uint32_t b) {
                       return seen[a].current != seen[b].current
                                  ? seen[a].current > seen[b].current
                                  : a < b;
                     });
    for (size_t i = shown; i < n; ++i) kept[order[i]] = false;
  }
  st.omitted = n - shown;
  st.groups.reserve(shown + (st.omitted != 0 ? 1 : 0));
  st.stats.reserve((shown + 1) * st.stride);
  Snapshot other{}, scratch{};
  other.label = std::string(kOtherLabel);
  other.other = true;
  std::vector<int64_t> other_stats(st.stride, 0), scratch_stats(st.stride);
  for (size_t i = 0; i < n; ++i) {
    Group& g = *seen[i].ref;
    if (!kept[i]) {
      read_group(g, nr_items, /*with_label=*/false, scratch, scratch_stats.data());
      add_into(other, scratch);
      for (size_t k = 0; k < st.stride; ++k) other_stats[k] += scratch_stats[k];
      seen[i].ref = GroupRef();
      continue;
    }
    const size_t at = st.stats.size();
    st.stats.resize(at + st.stride);
    st.groups.emplace_back();
    read_group(g, nr_items, /*with_label=*/true, st.groups.back(), &st.stats[at]);
    // The averages of the groups shown only, outside the tree lock: bringing them up to now
    // may fire memory.pressure triggers (delivered as a memory.pressure read delivers them).
    const PsiStats p = psi_stats(g);
    for (int k = 0; k < 2; ++k)
      for (int w = 0; w < 3; ++w) st.groups.back().psi_avg[k][w] = p.avg[k][w];
  }
  seen.clear();
  if (st.omitted != 0) {
    st.groups.push_back(std::move(other));
    st.stats.insert(st.stats.end(), other_stats.begin(), other_stats.end());
  }
  st.counts.oom = ctl.oom_log().totals();
  const ChargeStats cs = charge_stats(ctl);
  st.counts.forced = cs.forced;
  st.counts.forced_bytes = cs.forced_bytes;
  st.counts.failed = cs.failed;
  st.prepare_text();
}

}  // namespace memcg
