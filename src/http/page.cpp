#include "page.hpp"

#include <algorithm>
#include <cstdio>
#include <string_view>
#include <vector>

#include "memcg/base/events.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/http/columns.hpp"
#include "chart.hpp"
#include "html.hpp"

namespace memcg::http::detail {

TopColumns read_top_columns_fast(Group& g) {
  TopColumns c;
  c.path = g.path();
  c.root = g.is_root();
  c.current = g.current();
  c.peak = g.peak();
  if (!c.root) {
    c.min = g.min();
    c.low = g.low();
    c.high = g.high();
    c.max = g.max();
    c.e_high = g.events().get(Event::kHigh);
    c.e_max = g.events().get(Event::kMax);
    c.e_oom = g.events().get(Event::kOom);
    c.e_kill = g.events().get(Event::kOomKill);
  }
  return c;
}

void add_pressure_columns(Group& g, TopColumns* c) {
  const PsiStats p = psi_stats(g);
  c->some10 = static_cast<double>(p.centipercent(PsiState::kSome, PsiWindow::k10s)) / 100;
  c->full10 = static_cast<double>(p.centipercent(PsiState::kFull, PsiWindow::k10s)) / 100;
}

void group_table_header(std::string& out) {
  out += "<tr><th>STATUS</th>";
  for (size_t c = 0; c < kNumTopColumns; ++c) {
    out += "<th>";
    esc(out, kTopColumnNames[c]);
    out += "</th>";
  }
  out += "<th>usage against min, low, high, max</th></tr>";
}

namespace {

// The status cell: its flags in words, red for trouble, orange for warnings.
void status_cell(std::string& out, uint32_t status) {
  const char* cls = status >= kStatusBad ? "bad" : status != 0 ? "warn" : "ok";
  out += "<td class=\"status ";
  out += cls;
  out += "\">";
  if (status == 0) out += "ok";
  bool first = true;
  for (const StatusInfo& s : kStatusInfo) {
    if (!(status & s.flag)) continue;
    if (!first) out += ", ";
    first = false;
    out += s.text;
  }
  out += "</td>";
}

}  // namespace

void status_legend(std::string& out) {
  out += "<p class=\"legend\">STATUS: what troubled the group itself in the last minute: "
         "<span class=\"status bad\">OOM kills, PSI full (5 %), waits timing out</span>"
         "<span class=\"status warn\">memory.max events, PSI some (20 %), memory.high "
         "events</span><span class=\"status ok\">ok</span> (a group's page says what to do)."
         "</p>";
}

void group_table_row(std::string& out, const TopColumns& c, uint32_t status) {
  out += "<tr class=\"group\" data-group=\"";
  esc(out, c.path);
  out += "\" data-status=\"" + status_keys(status) + "\">";
  status_cell(out, status);
  out += "<td>";
  group_link(out, c.path);
  out += "</td>";
  for (size_t k = 1; k < kNumTopColumns; ++k) {
    out += "<td>";
    esc(out, top_column_text(c, k));
    out += "</td>";
  }
  out += "<td>";
  usage_bar(out, c);
  out += "</td></tr>";
}

void history_legend(std::string& out, uint64_t sample_interval_ms, size_t bytes, size_t cap) {
  out += "<p class=\"legend\">Sampled every " + std::to_string(sample_interval_ms) +
         " ms on the controller's clock; " + std::to_string(bytes / 1024) +
         " KiB held (capped at " + std::to_string(cap / 1024) +
         " KiB). <span style=\"color:#4a7bd0\">&#9632; memory.current (left axis)</span>"
         "<span style=\"color:#e08a00\">- - memory.high</span>"
         "<span style=\"color:#d02020\">- - memory.max</span>"
         "<span style=\"color:#9b59b6\">&#9632; PSI some (right axis, %)</span>"
         "<span style=\"color:#5b2c6f\">&#9632; PSI full (right axis, %)</span>"
         "<span>ticks: high / max events, OOM kills (linked to their reports)</span></p>";
}

namespace {

struct Row {
  TopColumns cols;
  GroupRef ref;
  uint32_t status = 0;
};

}  // namespace

bool sort_of_target(const std::string& raw) {
  const size_t q = raw.find('?');
  if (q == std::string::npos) return false;
  std::string_view rest = std::string_view(raw).substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    if (rest.substr(0, amp) == "sort=usage") return true;
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return false;
}

size_t page_of_target(const std::string& raw) {
  const size_t q = raw.find('?');
  if (q == std::string::npos) return 0;
  std::string_view rest = std::string_view(raw).substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view kv = rest.substr(0, amp);
    if (kv.substr(0, 5) == "page=") {
      size_t n = 0;
      for (char c : kv.substr(5)) {
        if (c < '0' || c > '9') return 0;
        n = std::min<size_t>(n * 10 + static_cast<size_t>(c - '0'), 1'000'000);
      }
      return n;
    }
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return 0;
}

std::string render_page(Controller& ctl, const History& history, size_t page,
                        uint64_t sample_interval_ms, size_t history_bytes_cap, bool by_usage) {
  internal::HookBypass bypass;  // the page is the library's memory
  std::vector<Row> rows;
  rows.reserve(ctl.nr_groups() + 16);
  ctl.walk(
      ctl.root(), [&](Group& g) { rows.push_back({read_top_columns_fast(g), GroupRef(&g)}); },
      /*include_dying=*/false);
  for (Row& r : rows) r.status = history.status(r.cols.path);
  std::sort(rows.begin(), rows.end(), [by_usage](const Row& a, const Row& b) {
    if (!by_usage && a.status != b.status) return a.status > b.status;  // trouble first
    return a.cols.current != b.cols.current ? a.cols.current > b.cols.current
                                            : a.cols.path < b.cols.path;  // paths are unique
  });
  const size_t pages = std::max<size_t>(1, (rows.size() + kPageRows - 1) / kPageRows);
  page = std::min(page, pages - 1);
  const size_t first = page * kPageRows, last = std::min(rows.size(), first + kPageRows);
  // PSI averages only for the rows shown (bringing them up to now costs a lock each), outside
  // the tree lock.
  for (size_t i = first; i < last; ++i) add_pressure_columns(*rows[i].ref, &rows[i].cols);

  std::string out;
  out.reserve(8192 + (last - first) * 900);
  page_start(out, "memcg", 5);
  out += "<h1>memcg</h1><p>";
  out += std::to_string(rows.size()) + " groups; page " + std::to_string(page + 1) + " of " +
         std::to_string(pages) + " (" + std::to_string(kPageRows) + " a page, " +
         (by_usage ? "largest memory.current first"
                   : "trouble first, then largest memory.current") +
         "; a group's name opens its page). ";
  const std::string sort = by_usage ? "&amp;sort=usage" : "";
  if (page > 0)
    out += "<a id=\"prev\" href=\"/?page=" + std::to_string(page - 1) + sort + "\">previous</a> ";
  if (page + 1 < pages)
    out += "<a id=\"next\" href=\"/?page=" + std::to_string(page + 1) + sort + "\">next</a> ";
  out += by_usage ? "<a id=\"sort-status\" href=\"/\">trouble first</a> "
                  : "<a id=\"sort-usage\" href=\"/?sort=usage\">largest first</a> ";
  page_links(out);
  out += "</p><h2>Groups</h2>";
  status_legend(out);
  out += "<table id=\"groups\">";
  group_table_header(out);
  for (size_t i = first; i < last; ++i) group_table_row(out, rows[i].cols, rows[i].status);
  out += "</table>";

  const std::vector<Series> series = history.view();
  const std::vector<OomLogEntry> entries = ctl.oom_log().snapshot();
  out += "<h2>History</h2>";
  history_legend(out, sample_interval_ms, history.bytes(), history_bytes_cap);
  for (size_t i = 0; i < series.size() && i < kPageCharts; ++i)
    history_chart(out, series[i], entries);

  out += "<h2>OOM reports</h2><pre id=\"oom\">";
  if (entries.empty()) out += "none";
  const size_t from = entries.size() > kPageReports ? entries.size() - kPageReports : 0;
  for (size_t i = entries.size(); i > from; --i) {
    out += "<a href=\"/oom/" + std::to_string(entries[i - 1].seq) + "\">";
    esc(out, format_oom_log_line(entries[i - 1]));
    out += "</a>\n";
  }
  out += "</pre></body></html>\n";
  return out;
}

}  // namespace memcg::http::detail
