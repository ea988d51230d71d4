// The Prometheus exposition's families: their names, types and help, and the text of their
// lines fixed for the whole document (prometheus_internal.hpp).
#include <string>
#include <string_view>
#include <vector>

#include "memcg/base/events.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "memcg/core/signal/trouble.hpp"
#include "prometheus_internal.hpp"

namespace memcg {

using namespace internal::prom;

namespace {

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
    {"memcg_memory_oom_kills_total", "counter",
     "Members of the group itself killed by the OOM killer, by how the victim stood against its "
     "admission when chosen: within its admitted size or expected peak (a well-behaved member), "
     "over it (a runaway), or none (it admitted nothing)."},
    {"memcg_memory_high_throttled_seconds_total", "counter",
     "Time the group's own charges slept throttled over memory.high (the penalty sleeps)."},
    {"memcg_memory_pressure_stall_seconds_total", "counter",
     "Time some or all of the group's charging threads stalled on memory (memory.pressure total)."},
    {"memcg_memory_pressure_ratio", "gauge",
     "Share of time stalled on memory over the last 10, 60 and 300 seconds (memory.pressure "
     "avg10/avg60/avg300, as a ratio 0..1)."},
    {"memcg_memory_vmpressure_windows_total", "counter",
     "Windows of the group's own reclaim completed, by vmpressure level (low, medium, critical)."},
    {"memcg_memory_admit_promised_bytes", "gauge",
     "Memory promised to admitted reservations under the group beyond what they charged: "
     "their expected peaks not reached yet (memory.wait admit_promised_bytes)."},
    {"memcg_memory_admit_waits_total", "counter",
     "Waiting admissions that slept because their expected peak did not fit on the group's "
     "memory.max (memory.wait admit_waits)."},
    {"memcg_memory_admit_reclaims_total", "counter",
     "Waiting admissions that reclaimed on the group's memory.max to fit their expected peak "
     "(memory.wait admit_reclaims)."},
    {"memcg_memory_admit_reclaimed_bytes_total", "counter",
     "Bytes those admissions reclaimed on the group (memory.wait admit_reclaimed_bytes)."},
    {"memcg_memory_admit_queue_items", "gauge",
     "The group's admission queue items now: waiting for admission or running "
     "(memory.admit.queue queued, running)."},
    {"memcg_memory_admit_queue_items_total", "counter",
     "The group's admission queue items by outcome: admitted, or completed timed out, "
     "cancelled, never fitting or refused (memory.admit.queue)."},
    {"memcg_memory_admit_queue_tries_total", "counter",
     "Admission tries of the group's admission queue items, admitted or not (memory.admit.queue "
     "tries)."},
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
    {"memcg_exposition_groups_omitted", "gauge",
     "Groups of the subtree and depth asked for that this exposition left out of the per-group "
     "families (top K by memory.current): their values are summed into group=\"(other)\"."},
};

}  // namespace

std::vector<std::string> prometheus_family_names() {
  std::vector<std::string> names;
  names.reserve(kNumFamilies);
  for (const FamilyText& t : kFamilies) names.emplace_back(t.name);
  return names;
}

int internal::prom::family_of(std::string_view name) noexcept {
  for (int f = 0; f < kNumFamilies; ++f)
    if (name == kFamilies[f].name) return f;
  return -1;
}

void PrometheusExposition::State::prepare_text() {
  for (int f = 0; f < kNumFamilies; ++f) {
    const FamilyText& t = kFamilies[f];
    header[f] = std::string("# HELP ") + t.name + ' ' + prometheus_escape_help(t.help) +
                "\n# TYPE " + t.name + ' ' + t.type + '\n';
    prefix[f] = std::string(t.name) + (exposition_wide(f) ? " " : "{group=\"");
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
  queue_state_suffix[0] = keyed("state", "queued");
  queue_state_suffix[1] = keyed("state", "running");
  for (int i = 0; i < kNumQueueOutcomes; ++i)
    queue_outcome_suffix[i] = keyed("outcome", kQueueOutcomeNames[i]);
  for (int o = 0; o < kNumOomOutcomes; ++o)
    outcome_suffix[o] = keyed("outcome", oom_outcome_name(static_cast<OomOutcome>(o)));
  for (int i = 0; i < kNumWaitOutcomes; ++i)
    wait_outcome_suffix[i] = keyed("outcome", kWaitOutcomeNames[i]);
  for (int d = 0; d < kNumOomDeciders; ++d)
    decider_suffix[d] = keyed("decider", oom_decider_name(static_cast<OomDecider>(d)));
  for (int a = 0; a < kNumKillAdmissions; ++a)
    admission_suffix[a] = keyed("admission", kill_admission_name(static_cast<KillAdmission>(a)));
  item_suffix.resize(stride);
  for (int i = 0; i < nr_items; ++i) item_suffix[i] = keyed("item", reg->item(i).name);
  item_suffix[nr_items] = keyed("item", "pgscan");
  item_suffix[nr_items + 1] = keyed("item", "pgsteal");
}

}  // namespace memcg
