#include "memcg/http/oom_json.hpp"

#include <charconv>
#include <cstdio>
#include <string_view>

#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "json_put.hpp"

namespace memcg::http {
namespace {

using json_out::put_string;
using json_out::put_u64;
using json_out::put_i64;

void key(std::string& out, const char* k) {
  out += '"';
  out += k;
  out += "\":";
}

void put_failed(std::string& out, const std::vector<OomFailure>& v) {
  key(out, "failed");
  out += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += "{\"member\":";
    put_string(out, v[i].member);
    out += ",\"error\":";
    put_string(out, v[i].error);
    out += '}';
  }
  out += ']';
}

void put_consumers(std::string& out, const char* k, const std::vector<OomConsumer>& v) {
  key(out, k);
  out += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += "{\"name\":";
    put_string(out, v[i].name);
    if (!v[i].is_group) {
      out += ",\"group\":";
      put_string(out, v[i].group);
    }
    out += ",\"bytes\":";
    put_u64(out, v[i].bytes);
    out += ",\"admitted_bytes\":";
    put_u64(out, v[i].admitted_bytes);
    out += '}';
  }
  out += ']';
}

}  // namespace

void append_oom_entry_json(std::string& out, const OomLogEntry& e) {
  out += "{\"seq\":";
  put_u64(out, e.seq);
  out += ",\"time_ns\":";
  put_u64(out, e.time_ns);
  out += ",\"wall_time_ns\":";
  put_u64(out, e.wall_ns);
  out += ",\"wall_time\":";
  put_string(out, format_utc(e.wall_ns));
  out += ",\"kind\":";
  put_string(out, oom_log_kind_name(e.kind));
  out += ',';
  if (e.kind == OomLogKind::kOomKill) {
    const OomReport& r = e.oom;
    key(out, "domain");
    put_string(out, r.domain);
    out += ",\"request_units\":";
    put_i64(out, r.request_units);
    out += ",\"request_bytes\":";
    put_i64(out, r.request_units > 0 ? r.request_units << e.unit_shift : r.request_units);
    out += ",\"order\":";
    put_string(out, oom_order_name(r.order));
    out += ",\"decider\":";
    put_string(out, oom_decider_name(r.decider));
    out += ",\"handler\":";
    put_string(out, r.handler);
    out += ",\"reason\":";
    put_string(out, cancel_reason_name(r.reason));
    out += ",\"victim\":";
    put_string(out, r.victim);
    out += ",\"oom_group\":";
    put_string(out, r.oom_group);
    out += ",\"killed\":[";
    for (size_t i = 0; i < r.killed.size(); ++i) {
      if (i) out += ',';
      put_string(out, r.killed[i]);
    }
    out += "],\"spilled\":[";
    for (size_t i = 0; i < r.spilled.size(); ++i) {
      if (i) out += ',';
      put_string(out, r.spilled[i]);
    }
    out += "],\"handlers\":[";
    for (size_t i = 0; i < r.handlers.size(); ++i) {
      const OomHandlerCall& h = r.handlers[i];
      if (i) out += ',';
      out += "{\"handler\":";
      put_string(out, h.handler);
      out += ",\"group\":";
      put_string(out, h.group);
      out += ",\"freed_units\":";
      put_i64(out, h.freed);
      out += ",\"outcome\":";
      put_string(out, h.outcome);
      out += '}';
    }
    out += "],";
    put_failed(out, r.failed);
    out += ",\"candidates\":[";
    for (size_t i = 0; i < r.top.size(); ++i) {
      const OomCandidate& c = r.top[i];
      if (i) out += ',';
      out += "{\"member\":";
      put_string(out, c.member);
      out += ",\"group\":";
      put_string(out, c.group);
      out += ",\"charged_units\":";
      put_i64(out, c.charged);
      out += ",\"score_adj\":";
      put_i64(out, c.score_adj);
      out += ",\"badness\":";
      put_i64(out, c.badness);
      out += ",\"admitted_units\":";
      put_i64(out, c.admitted);
      out += ",\"excess_units\":";
      put_i64(out, c.excess);
      out += '}';
    }
    out += ']';
  } else {
    const PreemptReport& r = e.preempt;
    key(out, "domain");
    put_string(out, r.domain);
    out += ",\"waiter_group\":";
    put_string(out, r.waiter_group);
    out += ",\"decider\":";
    put_string(out, r.by_operator ? "operator" : "waiter");
    out += ",\"priority\":";
    put_string(out, wait_priority_name(r.priority));
    out += ",\"request_units\":";
    put_i64(out, r.request_units);
    out += ",\"shortage_units\":";
    put_i64(out, r.shortage_units);
    out += ",\"asked\":[";
    for (size_t i = 0; i < r.asked.size(); ++i) {
      const PreemptVictim& a = r.asked[i];
      if (i) out += ',';
      out += "{\"member\":";
      put_string(out, a.member);
      out += ",\"group\":";
      put_string(out, a.group);
      out += ",\"priority\":";
      put_string(out, wait_priority_name(a.priority));
      out += ",\"charged_units\":";
      put_i64(out, a.charged);
      out += '}';
    }
    out += "],";
    put_failed(out, r.failed);
  }
  out += ',';
  put_consumers(out, "top_members", e.members);
  out += ',';
  put_consumers(out, "top_groups", e.groups);
  out += '}';
}

std::string render_oom_json(Controller& ctl, uint64_t after) {
  internal::HookBypass bypass;
  OomLog& log = ctl.oom_log();
  const OomLogTotals t = log.totals();
  const std::vector<OomLogEntry> entries = log.snapshot(after);
  std::string out = "{\"version\":1,\"capacity\":";
  put_u64(out, log.capacity());
  out += ",\"last_seq\":";
  put_u64(out, log.last_seq());
  out += ",\"totals\":{\"reports\":";
  put_u64(out, t.reports);
  out += ",\"kills\":";
  put_u64(out, t.kills);
  out += ",\"group_kills\":";
  put_u64(out, t.group_kills);
  // Kept for older readers: the reports in which nothing was done (outcomes.none).
  out += ",\"no_victim\":";
  put_u64(out, t.by_outcome[static_cast<int>(OomOutcome::kNone)]);
  out += ",\"outcomes\":{";
  for (int o = 0; o < kNumOomOutcomes; ++o) {
    if (o) out += ',';
    key(out, oom_outcome_name(static_cast<OomOutcome>(o)));
    put_u64(out, t.by_outcome[o]);
  }
  out += "},\"kill_failures\":";
  put_u64(out, t.kill_failures);
  out += ",\"preemptions\":";
  put_u64(out, t.preemptions);
  out += ",\"preempt_requests\":";
  put_u64(out, t.preempt_asked);
  out += "},\"reports\":[";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i) out += ',';
    append_oom_entry_json(out, entries[i]);
  }
  out += "]}";
  return out;
}

std::string render_oom_text(Controller& ctl, uint64_t after) {
  internal::HookBypass bypass;
  std::string out;
  for (const OomLogEntry& e : ctl.oom_log().snapshot(after)) {
    out += format_oom_log_line(e);
    out += '\n';
  }
  return out;
}

}  // namespace memcg::http
