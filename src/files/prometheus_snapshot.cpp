// The Prometheus exposition's values: every online group's and the controller's, read once at
// construction (prometheus_internal.hpp).
#include "memcg/base/internal/hook_bypass.hpp"

#include <algorithm>
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
        const AdmitStats a = s.root ? AdmitStats{} : admit_stats(g);
        const uint64_t unit = uint64_t{1} << g.controller().unit_shift();
        s.admit_promised_bytes = static_cast<uint64_t>(std::max<int64_t>(a.promised_units, 0)) * unit;
        s.admit_waits = a.admit_waits;
        s.admit_reclaims = a.admit_reclaims;
        s.admit_reclaimed_bytes = a.admit_reclaimed_units * unit;
        const AdmitQueueStats q = s.root ? AdmitQueueStats{} : admit_queue_stats(g);
        s.queue_items[0] = q.queued;
        s.queue_items[1] = q.running;
        const uint64_t qo[kNumQueueOutcomes] = {q.admitted, q.timed_out, q.cancelled,
                                                q.never_fits, q.refused};
        std::copy(std::begin(qo), std::end(qo), s.queue_outcomes);
        s.queue_tries = q.tries;
        const GroupTrouble trouble = group_trouble(g);
        s.throttled_ns = trouble.throttled_ns;
        std::copy(std::begin(trouble.oom_kills), std::end(trouble.oom_kills), s.oom_kills);
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

}  // namespace memcg
