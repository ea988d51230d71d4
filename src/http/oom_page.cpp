#include "oom_page.hpp"

#include <string_view>

#include "html.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/http/columns.hpp"

namespace memcg::http::detail {
namespace {

void row(std::string& out, const char* key, std::string_view value) {
  out += "<tr><th>";
  out += key;
  out += "</th><td class=\"name\">";
  esc(out, value);
  out += "</td></tr>";
}

void row_group(std::string& out, const char* key, std::string_view group) {
  out += "<tr><th>";
  out += key;
  out += "</th><td class=\"name\">";
  if (group.empty()) {
    out += "-";
  } else {
    group_link(out, group);
  }
  out += "</td></tr>";
}

void cell(std::string& out, std::string_view text) {
  out += "<td class=\"name\">";
  esc(out, text);
  out += "</td>";
}

void cell_group(std::string& out, std::string_view group) {
  out += "<td class=\"name\">";
  group_link(out, group);
  out += "</td>";
}

void cell_num(std::string& out, const std::string& text) { out += "<td>" + text + "</td>"; }

std::string units_text(int64_t units, unsigned shift) {
  return units <= 0 ? std::to_string(units)
                    : human_size(static_cast<uint64_t>(units) << shift);
}

void list_row(std::string& out, const char* key, const std::vector<std::string>& names) {
  out += "<tr><th>";
  out += key;
  out += "</th><td class=\"name\">";
  if (names.empty()) out += "-";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += ", ";
    esc(out, names[i]);
  }
  out += "</td></tr>";
}

// The largest consumers at the decision, as a table with a bar each: charged (filled) and
// admitted (the tick).
void consumers(std::string& out, const char* id, const char* what,
               const std::vector<OomConsumer>& v) {
  out += std::string("<h2>") + what + "</h2><table id=\"" + id +
         "\"><tr><th>name</th><th>group</th><th>size</th><th>admitted</th>"
         "<th>size against admitted</th></tr>";
  uint64_t scale = 1;
  for (const OomConsumer& c : v) scale = std::max({scale, c.bytes, c.admitted_bytes});
  for (const OomConsumer& c : v) {
    out += "<tr>";
    cell(out, c.name);
    cell_group(out, c.group);
    cell_num(out, human_size(c.bytes));
    cell_num(out, human_size(c.admitted_bytes));
    out += "<td><svg class=\"consumer\" width=\"160\" height=\"12\" viewBox=\"0 0 160 12\">"
           "<title>";
    esc(out, c.name);
    out += "</title><rect width=\"160\" height=\"12\" fill=\"#eee\"/>"
           "<rect height=\"12\" fill=\"#4a7bd0\" width=\"";
    fmt(out, "%.1f", 160.0 * static_cast<double>(c.bytes) / static_cast<double>(scale));
    out += "\"/><line stroke=\"#2a9d4b\" stroke-width=\"2\" y1=\"0\" y2=\"12\" x1=\"";
    const double ax = std::min(159.0, 160.0 * static_cast<double>(c.admitted_bytes) /
                                          static_cast<double>(scale));
    fmt(out, "%.1f", ax);
    out += "\" x2=\"";
    fmt(out, "%.1f", ax);
    out += "\"/></svg></td></tr>";
  }
  if (v.empty()) out += "<tr><td>none</td></tr>";
  out += "</table>";
}

}  // namespace

bool path_within(std::string_view path, std::string_view group) {
  if (group == "/") return true;
  return path.size() >= group.size() && path.substr(0, group.size()) == group &&
         (path.size() == group.size() || path[group.size()] == '/');
}

bool report_concerns(const OomLogEntry& e, std::string_view group) {
  const bool kill = e.kind == OomLogKind::kOomKill;
  const std::string& domain = kill ? e.oom.domain : e.preempt.domain;
  if (path_within(domain, group)) return true;   // the limit hit is in the group's subtree
  if (!path_within(group, domain)) return false;  // another subtree altogether
  for (const OomConsumer& c : e.members)
    if (path_within(c.group, group)) return true;
  if (kill) {
    for (const OomCandidate& c : e.oom.top)
      if (path_within(c.group, group)) return true;
  } else {
    if (path_within(e.preempt.waiter_group, group)) return true;
    for (const PreemptVictim& a : e.preempt.asked)
      if (path_within(a.group, group)) return true;
  }
  return false;
}

std::string render_oom_page(Controller& ctl, uint64_t seq) {
  internal::HookBypass bypass;  // the page is the library's memory
  const std::vector<OomLogEntry> entries = ctl.oom_log().snapshot(seq > 0 ? seq - 1 : 0);
  const OomLogEntry* e = nullptr;
  for (const OomLogEntry& x : entries)
    if (x.seq == seq) e = &x;
  if (e == nullptr) return "";
  const unsigned shift = ctl.unit_shift();
  std::string out;
  out.reserve(16384);
  const std::string title = "OOM report " + std::to_string(seq);
  page_start(out, title, 0);
  out += "<h1>";
  esc(out, title);
  out += "</h1><p>";
  page_links(out);
  out += "</p><table id=\"report\">";
  row(out, "kind", oom_log_kind_name(e->kind));
  char t[32];
  std::snprintf(t, sizeof t, "%.3f s", static_cast<double>(e->time_ns) / 1e9);
  row(out, "time", format_utc(e->wall_ns) + " (wall clock, UTC)");
  row(out, "time (controller's clock)", t);
  if (e->kind == OomLogKind::kOomKill) {
    const OomReport& r = e->oom;
    row_group(out, "domain (limit hit)", r.domain);
    row(out, "request", units_text(r.request_units, shift));
    row(out, "decider", oom_decider_name(r.decider));
    row(out, "order", oom_order_name(r.order));
    row(out, "reason", cancel_reason_name(r.reason));
    row(out, "victim", r.victim.empty() ? "-" : r.victim);
    row_group(out, "oom.group killed", r.oom_group);
    list_row(out, "killed", r.killed);
    list_row(out, "spilled", r.spilled);
    row(out, "handler", r.handler.empty() ? "-" : r.handler);
    out += "</table><h2>Candidates, in the killer's order</h2><table id=\"candidates\"><tr>"
           "<th>member</th><th>group</th><th>charged</th><th>admitted</th><th>excess</th>"
           "<th>score_adj</th><th>badness</th></tr>";
    for (const OomCandidate& c : r.top) {
      out += "<tr>";
      cell(out, c.member);
      cell_group(out, c.group);
      cell_num(out, units_text(c.charged, shift));
      cell_num(out, units_text(c.admitted, shift));
      cell_num(out, units_text(c.excess, shift));
      cell_num(out, std::to_string(c.score_adj));
      cell_num(out, std::to_string(c.badness));
      out += "</tr>";
    }
    out += "</table>";
    if (!r.handlers.empty()) {
      out += "<h2>OOM handlers called</h2><table id=\"handlers\"><tr><th>handler</th>"
             "<th>group</th><th>freed</th><th>outcome</th></tr>";
      for (const OomHandlerCall& h : r.handlers) {
        out += "<tr>";
        cell(out, h.handler);
        cell_group(out, h.group);
        cell_num(out, units_text(h.freed, shift));
        cell(out, h.outcome);
        out += "</tr>";
      }
      out += "</table>";
    }
  } else {
    const PreemptReport& r = e->preempt;
    row_group(out, "domain (limit hit)", r.domain);
    row_group(out, "waiter's group", r.waiter_group);
    row(out, "waiter's priority", wait_priority_name(r.priority));
    row(out, "request", units_text(r.request_units, shift));
    row(out, "shortage", units_text(r.shortage_units, shift));
    out += "</table><h2>Asked to give memory back</h2><table id=\"asked\"><tr><th>member</th>"
           "<th>group</th><th>priority</th><th>charged</th></tr>";
    for (const PreemptVictim& a : r.asked) {
      out += "<tr>";
      cell(out, a.member);
      cell_group(out, a.group);
      cell(out, wait_priority_name(a.priority));
      cell_num(out, units_text(a.charged, shift));
      out += "</tr>";
    }
    out += "</table>";
  }
  const std::vector<OomFailure>& failed =
      e->kind == OomLogKind::kOomKill ? e->oom.failed : e->preempt.failed;
  if (!failed.empty()) {
    out += "<h2>Callbacks that threw</h2><table id=\"failed\"><tr><th>member</th><th>error</th>"
           "</tr>";
    for (const OomFailure& f : failed) {
      out += "<tr>";
      cell(out, f.member);
      cell(out, f.error);
      out += "</tr>";
    }
    out += "</table>";
  }
  consumers(out, "top-members", "Largest members then (charged, admitted)", e->members);
  consumers(out, "top-groups", "Largest groups then (memory.current, admitted below)", e->groups);
  out += "<h2>As one line (/v1/oom.txt)</h2><pre>";
  esc(out, format_oom_log_line(*e));
  out += "</pre></body></html>\n";
  return out;
}

}  // namespace memcg::http::detail
