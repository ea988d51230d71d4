#include <algorithm>
#include <string>
#include <vector>

#include "chart.hpp"
#include "html.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/members.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "memcg/files/files.hpp"
#include "oom_page.hpp"
#include "page.hpp"

namespace memcg::http::detail {
namespace {

// Its largest members: a table, each with a bar of its charged size (filled) against its
// admitted size (the tick), on one scale for all.
void members_section(std::string& out, Group& g) {
  MemberList list;
  if (largest_members(g, kGroupPageMembers, &list) != 0) return;
  out += "<h2>Members</h2><p id=\"member-totals\">" + std::to_string(list.total) +
         (list.total == 1 ? " member" : " members") + " in its subtree, " +
         human_size(list.bytes) + " charged, " +
         human_size(list.admitted_bytes) + " admitted";
  if (list.total > list.largest.size())
    out += "; the " + std::to_string(list.largest.size()) + " largest";
  out += ".</p>";
  if (list.largest.empty()) return;
  uint64_t scale = 1;
  for (const MemberSize& m : list.largest) scale = std::max({scale, m.bytes, m.admitted_bytes});
  out += "<table id=\"members\"><tr><th>member</th><th>group</th><th>charged</th>"
         "<th>admitted</th><th>past admitted</th><th>charged against admitted</th></tr>";
  for (const MemberSize& m : list.largest) {
    out += "<tr class=\"member\" data-member=\"";
    esc(out, m.name);
    out += "\"><td class=\"name\">";
    esc(out, m.name);
    if (m.killed) out += " (killed)";
    out += "</td><td class=\"name\">";
    group_link(out, m.group);
    out += "</td><td>" + human_size(m.bytes) + "</td><td>" + human_size(m.admitted_bytes) +
           "</td><td>" +
           (m.admitted_bytes > 0 && m.bytes > m.admitted_bytes
                ? human_size(m.bytes - m.admitted_bytes)
                : std::string("-")) +
           "</td><td><svg class=\"member-bar\" width=\"200\" height=\"12\" "
           "viewBox=\"0 0 200 12\"><title>";
    esc(out, m.name);
    out += ": " + human_size(m.bytes) + " charged, " + human_size(m.admitted_bytes) +
           " admitted</title><rect width=\"200\" height=\"12\" fill=\"#eee\"/>"
           "<rect class=\"charged\" height=\"12\" fill=\"#4a7bd0\" width=\"";
    fmt(out, "%.1f", 200.0 * static_cast<double>(m.bytes) / static_cast<double>(scale));
    const double ax = std::min(199.0, 200.0 * static_cast<double>(m.admitted_bytes) /
                                          static_cast<double>(scale));
    out += "\"/><line class=\"admitted\" stroke=\"#2a9d4b\" stroke-width=\"2\" y1=\"0\" "
           "y2=\"12\" x1=\"";
    fmt(out, "%.1f", ax);
    out += "\" x2=\"";
    fmt(out, "%.1f", ax);
    out += "\"/></svg></td></tr>";
  }
  out += "</table>";
}

// Its status, and for each trouble the alert it matches with a link to what to do (the runbook
// under `runbook_base`, or its paragraph named when there is none).
void status_section(std::string& out, uint32_t status, const std::string& runbook_base) {
  out += "<h2>Status</h2>";
  if (status == 0) {
    out += "<p id=\"status\" class=\"status ok\">ok: nothing troubled the group itself in the "
           "last minute</p>";
    return;
  }
  out += "<ul id=\"trouble\">";
  for (const StatusInfo& s : kStatusInfo) {
    if (!(status & s.flag)) continue;
    out += std::string("<li><span class=\"status ") + (s.flag >= kStatusBad ? "bad" : "warn") +
           "\" data-status=\"" + s.key + "\">" + s.text +
           "</span> in the last minute; what to do: ";
    const std::string where = std::string("operations.md#") + s.anchor;
    if (runbook_base.empty()) {
      out += std::string("runbook ") + s.alert + " (docs/" + where + ")";
    } else {
      out += "<a class=\"runbook\" href=\"";
      esc(out, runbook_base + "/" + where);
      out += std::string("\">runbook ") + s.alert + "</a>";
    }
    out += "</li>";
  }
  out += "</ul>";
}

// The OOM reports that concern it, newest first.
void reports_section(std::string& out, const std::vector<OomLogEntry>& entries,
                     const std::string& path) {
  out += "<h2>OOM reports</h2><ul id=\"group-oom\">";
  size_t shown = 0;
  for (size_t i = entries.size(); i > 0 && shown < kPageReports; --i) {
    const OomLogEntry& e = entries[i - 1];
    if (!report_concerns(e, path)) continue;
    ++shown;
    out += "<li><a class=\"oom-report\" href=\"/oom/" + std::to_string(e.seq) + "\">report " +
           std::to_string(e.seq) + "</a> <code>";
    esc(out, format_oom_log_line(e));
    out += "</code></li>";
  }
  if (shown == 0) out += "<li>none kept</li>";
  out += "</ul>";
}

// Its files, as read_file() gives them (a file that cannot be read now is left out).
void files_section(std::string& out, Group& g) {
  out += "<h2>Files</h2>";
  for (const std::string& name : file_names(g)) {
    std::string text;
    if (read_file(g, name, &text) != 0) continue;  // write-only (memory.reclaim), or gone
    out += "<div class=\"files\"><h3>";
    esc(out, name);
    out += "</h3><pre class=\"file\" data-file=\"";
    esc(out, name);
    out += "\">";
    esc(out, text);
    out += "</pre></div>";
  }
}

}  // namespace

std::string render_group_page(Controller& ctl, const History& history, const std::string& path,
                              uint64_t sample_interval_ms, size_t history_bytes_cap,
                              const std::string& runbook_base) {
  internal::HookBypass bypass;  // the page is the library's memory
  GroupRef g = path.empty() || path == "/" ? GroupRef(&ctl.root()) : ctl.lookup(path);
  if (!g || !g->is_online()) return "";
  TopColumns cols = read_top_columns_fast(*g);
  add_pressure_columns(*g, &cols);
  std::string out;
  out.reserve(32768);
  page_start(out, "memcg: " + cols.path, 5);
  out += "<h1>group ";
  esc(out, cols.path);
  out += "</h1><p>";
  page_links(out);
  if (Group* parent = g->parent()) {
    out += " parent: ";
    group_link(out, parent->path());
  }
  const std::vector<GroupRef> children = g->children();
  if (!children.empty()) {
    out += " children:";
    for (size_t i = 0; i < children.size() && i < kGroupPageChildren; ++i) {
      out += ' ';
      group_link(out, children[i]->path());
    }
    if (children.size() > kGroupPageChildren)
      out += " and " + std::to_string(children.size() - kGroupPageChildren) + " more";
  }
  out += "</p><table id=\"groups\">";
  const uint32_t status = history.status(cols.path);
  group_table_header(out);
  group_table_row(out, cols, status);
  out += "</table>";
  status_section(out, status, runbook_base);

  const std::vector<OomLogEntry> entries = ctl.oom_log().snapshot();
  out += "<h2>History and events over time</h2>";
  bool drawn = false;
  for (const Series& s : history.view()) {
    if (s.path != cols.path) continue;
    history_legend(out, sample_interval_ms, history.bytes(), history_bytes_cap);
    history_chart(out, s, entries);
    events_chart(out, s, entries);
    drawn = true;
    break;
  }
  if (!drawn)
    out += "<p>Not sampled: the history follows the largest groups by memory.current.</p>";
  members_section(out, *g);
  reports_section(out, entries, cols.path);
  files_section(out, *g);
  out += "</body></html>\n";
  return out;
}

}  // namespace memcg::http::detail
