#include "page.hpp"

#include <algorithm>
#include <cstdio>
#include <string_view>
#include <vector>

#include "memcg/base/events.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/controller.hpp"
#include "memcg/core/oom_log.hpp"
#include "memcg/core/psi.hpp"
#include "memcg/http/columns.hpp"

namespace memcg::http::detail {
namespace {

void esc(std::string& out, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
}

void fmt(std::string& out, const char* f, double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, f, v);
  out += buf;
}

struct Row {
  TopColumns cols;
  GroupRef ref;
};

// The columns but the pressure, read under the tree lock.
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

const char kStyle[] =
    "body{font-family:sans-serif;margin:16px;color:#222}"
    "table{border-collapse:collapse;font-size:12px}"
    "th,td{padding:2px 6px;text-align:right;border-bottom:1px solid #ddd}"
    "th:first-child,td:first-child{text-align:left}"
    "pre{background:#f6f6f6;padding:6px;font-size:12px;white-space:pre-wrap}"
    ".chart{margin:4px 12px 12px 0;display:inline-block;vertical-align:top}"
    ".legend span{margin-right:10px;font-size:11px}";

// A usage bar: current filled, min/low/high/max as ticks, on one scale.
void usage_bar(std::string& out, const TopColumns& c) {
  constexpr double kW = 160, kH = 12;
  double scale = static_cast<double>(c.current);
  for (uint64_t v : {c.min, c.low, c.high, c.max})
    if (v != kUnlimited) scale = std::max(scale, static_cast<double>(v));
  scale = std::max(scale * 1.05, 1.0);
  auto x = [&](uint64_t v) { return kW * static_cast<double>(v) / scale; };
  out += "<svg class=\"usage\" width=\"160\" height=\"12\" viewBox=\"0 0 160 12\">"
         "<rect width=\"160\" height=\"12\" fill=\"#eee\"/><rect height=\"12\" fill=\"#4a7bd0\" "
         "width=\"";
  fmt(out, "%.1f", x(c.current));
  out += "\"/>";
  struct Tick { uint64_t v; const char* color; const char* name; bool protection; };
  for (const Tick& t : {Tick{c.min, "#2a9d4b", "min", true}, Tick{c.low, "#2ab0b0", "low", true},
                        Tick{c.high, "#e08a00", "high", false},
                        Tick{c.max, "#d02020", "max", false}}) {
    if (c.root || t.v == kUnlimited || (t.protection && t.v == 0)) continue;  // nothing set
    out += "<line class=\"";
    out += t.name;
    out += "\" y1=\"0\" y2=\"";
    fmt(out, "%.0f", kH);
    out += "\" stroke-width=\"2\" stroke=\"";
    out += t.color;
    out += "\" x1=\"";
    fmt(out, "%.1f", std::min(x(t.v), kW - 1));
    out += "\" x2=\"";
    fmt(out, "%.1f", std::min(x(t.v), kW - 1));
    out += "\"/>";
  }
  out += "</svg>";
}

// One history chart: memory.current (left scale), PSI some/full (0..100 % of the height), the
// limits, and the event marks.
void chart(std::string& out, const Series& s) {
  constexpr double kW = 560, kH = 150, kL = 50, kR = 10, kT = 18, kB = 16;
  const double pw = kW - kL - kR, ph = kH - kT - kB;
  const std::vector<Sample>& v = s.ring;
  if (v.empty()) return;
  const uint64_t t0 = v.front().t_ns, t1 = std::max(v.back().t_ns, t0 + 1);
  double ymax = 1;
  for (const Sample& x : v) {
    ymax = std::max(ymax, static_cast<double>(x.current));
    if (x.high != kUnlimited) ymax = std::max(ymax, static_cast<double>(x.high));
    if (x.max != kUnlimited) ymax = std::max(ymax, static_cast<double>(x.max));
  }
  ymax *= 1.05;
  auto X = [&](uint64_t t) { return kL + pw * static_cast<double>(t - t0) / static_cast<double>(t1 - t0); };
  auto Y = [&](double b) { return kT + ph - ph * b / ymax; };
  auto P = [&](uint32_t ppm) { return kT + ph - ph * static_cast<double>(ppm) / 1e6; };
  out += "<div class=\"chart\"><svg class=\"history\" data-group=\"";
  esc(out, s.path);
  out += "\" data-points=\"" + std::to_string(v.size()) +
         "\" width=\"560\" height=\"150\" viewBox=\"0 0 560 150\">"
         "<rect x=\"50\" y=\"18\" width=\"500\" height=\"116\" fill=\"#fafafa\" stroke=\"#ccc\"/>"
         "<text x=\"50\" y=\"12\" font-size=\"12\">";
  esc(out, s.path);
  out += "</text><text x=\"2\" y=\"26\" font-size=\"10\">";
  out += human_size(static_cast<uint64_t>(ymax));
  out += "</text><text x=\"2\" y=\"134\" font-size=\"10\">0</text>"
         "<text x=\"50\" y=\"146\" font-size=\"10\">-";
  fmt(out, "%.0f", static_cast<double>(t1 - t0) / 1e9);
  out += " s</text><text x=\"520\" y=\"146\" font-size=\"10\">now</text>";
  // The limits as steps over time.
  auto limit_line = [&](bool high, const char* color) {
    std::string pts;
    for (const Sample& x : v) {
      const uint64_t l = high ? x.high : x.max;
      if (l == kUnlimited) continue;
      fmt(pts, "%.1f,", X(x.t_ns));
      fmt(pts, "%.1f ", Y(static_cast<double>(l)));
    }
    if (pts.empty()) return;
    out += std::string("<polyline class=\"") + (high ? "high" : "max") +
           "\" fill=\"none\" stroke-dasharray=\"4 3\" stroke=\"" + color + "\" points=\"" + pts +
           "\"/>";
  };
  limit_line(true, "#e08a00");
  limit_line(false, "#d02020");
  auto line = [&](const char* cls, const char* color, auto y) {
    out += std::string("<polyline class=\"") + cls + "\" fill=\"none\" stroke=\"" + color +
           "\" stroke-width=\"1.5\" points=\"";
    for (const Sample& x : v) {
      fmt(out, "%.1f,", X(x.t_ns));
      fmt(out, "%.1f ", y(x));
    }
    out += "\"/>";
  };
  line("psi-some", "#9b59b6", [&](const Sample& x) { return P(x.some_ppm); });
  line("psi-full", "#5b2c6f", [&](const Sample& x) { return P(x.full_ppm); });
  line("current", "#4a7bd0", [&](const Sample& x) { return Y(static_cast<double>(x.current)); });
  // Event marks: a tick at the top for memory.high / memory.max events, a cross for OOM kills.
  for (const Sample& x : v) {
    const double px = X(x.t_ns);
    auto mark = [&](const char* cls, const char* color, double y0, uint32_t n) {
      out += std::string("<line class=\"mark ") + cls + "\" stroke=\"" + color +
             "\" stroke-width=\"2\" x1=\"";
      fmt(out, "%.1f", px);
      out += "\" x2=\"";
      fmt(out, "%.1f", px);
      out += "\" y1=\"";
      fmt(out, "%.1f", y0);
      out += "\" y2=\"";
      fmt(out, "%.1f", y0 + 6);
      out += "\"><title>" + std::to_string(n) + " " + cls + "</title></line>";
    };
    if (x.ev_high) mark("e-high", "#e08a00", kT, x.ev_high);
    if (x.ev_max) mark("e-max", "#d02020", kT + 6, x.ev_max);
    if (x.ev_kill) mark("e-kill", "#000", kT + 12, x.ev_kill);
  }
  out += "</svg></div>";
}

}  // namespace

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
                        uint64_t sample_interval_ms, size_t history_bytes_cap) {
  internal::HookBypass bypass;  // the page is the library's memory
  std::vector<Row> rows;
  rows.reserve(ctl.nr_groups() + 16);
  ctl.walk(
      ctl.root(), [&](Group& g) { rows.push_back({read_top_columns_fast(g), GroupRef(&g)}); },
      /*include_dying=*/false);
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {  // paths are unique
    return a.cols.current != b.cols.current ? a.cols.current > b.cols.current
                                            : a.cols.path < b.cols.path;
  });
  const size_t pages = std::max<size_t>(1, (rows.size() + kPageRows - 1) / kPageRows);
  page = std::min(page, pages - 1);
  const size_t first = page * kPageRows, last = std::min(rows.size(), first + kPageRows);
  // PSI averages only for the rows shown (bringing them up to now costs a lock each), outside
  // the tree lock.
  for (size_t i = first; i < last; ++i) add_pressure_columns(*rows[i].ref, &rows[i].cols);

  std::string out;
  out.reserve(8192 + (last - first) * 900);
  out += "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>memcg</title>"
         "<meta http-equiv=\"refresh\" content=\"5\"><style>";
  out += kStyle;
  out += "</style></head><body><h1>memcg</h1><p>";
  out += std::to_string(rows.size()) + " groups; page " + std::to_string(page + 1) + " of " +
         std::to_string(pages) + " (" + std::to_string(kPageRows) +
         " a page, largest memory.current first). ";
  if (page > 0) out += "<a id=\"prev\" href=\"/?page=" + std::to_string(page - 1) + "\">previous</a> ";
  if (page + 1 < pages) out += "<a id=\"next\" href=\"/?page=" + std::to_string(page + 1) + "\">next</a> ";
  out += "<a href=\"/metrics\">/metrics</a> <a href=\"/v1/groups\">/v1/groups</a> "
         "<a href=\"/v1/oom\">/v1/oom</a> <a href=\"/v1/oom.txt\">/v1/oom.txt</a></p>"
         "<h2>Groups</h2><table id=\"groups\"><tr>";
  for (size_t c = 0; c < kNumTopColumns; ++c) {
    out += "<th>";
    esc(out, kTopColumnNames[c]);
    out += "</th>";
  }
  out += "<th>usage against min, low, high, max</th></tr>";
  for (size_t i = first; i < last; ++i) {
    const TopColumns& c = rows[i].cols;
    out += "<tr class=\"group\" data-group=\"";
    esc(out, c.path);
    out += "\">";
    for (size_t k = 0; k < kNumTopColumns; ++k) {
      out += "<td>";
      esc(out, top_column_text(c, k));
      out += "</td>";
    }
    out += "<td>";
    usage_bar(out, c);
    out += "</td></tr>";
  }
  out += "</table>";

  const std::vector<Series> series = history.view();
  out += "<h2>History</h2><p class=\"legend\">Sampled every " +
         std::to_string(sample_interval_ms) + " ms on the controller's clock; " +
         std::to_string(history.bytes() / 1024) + " KiB held (capped at " +
         std::to_string(history_bytes_cap / 1024) +
         " KiB). <span style=\"color:#4a7bd0\">&#9632; memory.current</span>"
         "<span style=\"color:#e08a00\">- - memory.high</span>"
         "<span style=\"color:#d02020\">- - memory.max</span>"
         "<span style=\"color:#9b59b6\">&#9632; PSI some</span>"
         "<span style=\"color:#5b2c6f\">&#9632; PSI full</span>"
         "<span>ticks: high / max events, OOM kills</span></p>";
  for (size_t i = 0; i < series.size() && i < kPageCharts; ++i) chart(out, series[i]);

  out += "<h2>OOM reports</h2><pre id=\"oom\">";
  std::vector<OomLogEntry> entries = ctl.oom_log().snapshot();
  if (entries.empty()) out += "none";
  const size_t from = entries.size() > kPageReports ? entries.size() - kPageReports : 0;
  for (size_t i = entries.size(); i > from; --i) {
    esc(out, format_oom_log_line(entries[i - 1]));
    out += '\n';
  }
  out += "</pre></body></html>\n";
  return out;
}

}  // namespace memcg::http::detail
