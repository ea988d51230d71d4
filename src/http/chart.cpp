#include "chart.hpp"

#include <algorithm>

#include "html.hpp"
#include "memcg/core/tree/group.hpp"
#include "oom_page.hpp"

namespace memcg::http::detail {
namespace {

// The plot area of a chart: 560 x 150 with the left axis (bytes, counts) and the right axis
// (PSI percent) outside it.
constexpr double kW = 560, kH = 150, kL = 50, kR = 44, kT = 18, kB = 16;
constexpr double kPw = kW - kL - kR, kPh = kH - kT - kB;

void open_chart(std::string& out, const char* cls, const Series& s) {
  out += "<div class=\"chart\"><svg class=\"";
  out += cls;
  out += "\" data-group=\"";
  esc(out, s.path);
  out += "\" data-points=\"" + std::to_string(s.ring.size()) +
         "\" width=\"560\" height=\"150\" viewBox=\"0 0 560 150\">"
         "<rect x=\"50\" y=\"18\" width=\"466\" height=\"116\" fill=\"#fafafa\" stroke=\"#ccc\"/>";
}

// The time axis under the plot.
void time_axis(std::string& out, uint64_t t0, uint64_t t1) {
  out += "<text x=\"50\" y=\"146\" font-size=\"10\">-";
  fmt(out, "%.0f", static_cast<double>(t1 - t0) / 1e9);
  out += " s</text><text x=\"488\" y=\"146\" font-size=\"10\">now</text>";
}

// What a kill mark's title adds when its report is no longer kept.
constexpr const char* kDroppedNote =
    " (its report was dropped: the OOM log keeps only the latest reports)";

// Opens a link around an OOM kill mark, to the report that concerns the chart's group, if one
// is kept; true when it did (the caller closes it).
bool open_kill_link(std::string& out, const Series& s, const std::vector<OomLogEntry>& reports,
                    uint64_t t0, uint64_t t1) {
  const OomLogEntry* e = kill_report(reports, s.path, t0, t1);
  if (e == nullptr) return false;
  out += "<a class=\"oom-link\" href=\"/oom/" + std::to_string(e->seq) + "\">";
  return true;
}

}  // namespace

const OomLogEntry* kill_report(const std::vector<OomLogEntry>& reports, const std::string& group,
                               uint64_t t0_ns, uint64_t t1_ns) {
  for (const OomLogEntry& e : reports) {  // oldest first
    if (e.kind != OomLogKind::kOomKill || e.oom.killed.empty() || e.time_ns <= t0_ns ||
        !report_concerns(e, group))
      continue;
    // The first one after t0: this interval's, or a later one's (then this one's was dropped).
    if (e.time_ns <= t1_ns || e.time_ns - t1_ns <= kKillReportLagNs) return &e;
    return nullptr;
  }
  return nullptr;
}

void usage_bar(std::string& out, const TopColumns& c) {
  constexpr double kBarW = 160, kBarH = 12;
  double scale = static_cast<double>(c.current);
  for (uint64_t v : {c.min, c.low, c.high, c.max})
    if (v != kUnlimited) scale = std::max(scale, static_cast<double>(v));
  scale = std::max(scale * 1.05, 1.0);
  auto x = [&](uint64_t v) { return kBarW * static_cast<double>(v) / scale; };
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
    fmt(out, "%.0f", kBarH);
    out += "\" stroke-width=\"2\" stroke=\"";
    out += t.color;
    out += "\" x1=\"";
    fmt(out, "%.1f", std::min(x(t.v), kBarW - 1));
    out += "\" x2=\"";
    fmt(out, "%.1f", std::min(x(t.v), kBarW - 1));
    out += "\"/>";
  }
  out += "</svg>";
}

void history_chart(std::string& out, const Series& s, const std::vector<OomLogEntry>& reports) {
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
  auto X = [&](uint64_t t) {
    return kL + kPw * static_cast<double>(t - t0) / static_cast<double>(t1 - t0);
  };
  auto Y = [&](double b) { return kT + kPh - kPh * b / ymax; };
  // PSI inside the frame: 0 % two pixels above its bottom border, 100 % four below its top.
  auto P = [&](uint32_t ppm) {
    return kT + kPh - 2 - (kPh - 6) * static_cast<double>(ppm) / 1e6;
  };
  open_chart(out, "history", s);
  out += "<text x=\"50\" y=\"12\" font-size=\"12\">";
  esc(out, s.path);
  // Left axis: bytes. Right axis: PSI, 0..100 % of the plot's height, with a grid line at 50 %.
  out += "</text><text class=\"mem-axis\" x=\"2\" y=\"26\" font-size=\"10\">";
  out += human_size(static_cast<uint64_t>(ymax));
  out += "</text><text class=\"mem-axis\" x=\"2\" y=\"134\" font-size=\"10\">0</text>"
         "<line x1=\"50\" x2=\"516\" y1=\"77\" y2=\"77\" stroke=\"#eee\"/>"
         "<text class=\"psi-axis\" x=\"520\" y=\"26\" font-size=\"10\" fill=\"#9b59b6\">"
         "100 %</text>"
         "<text class=\"psi-axis\" x=\"520\" y=\"80\" font-size=\"10\" fill=\"#9b59b6\">"
         "50 %</text>"
         "<text class=\"psi-axis\" x=\"520\" y=\"134\" font-size=\"10\" fill=\"#9b59b6\">"
         "0 %</text>"
         "<text class=\"psi-axis-title\" x=\"520\" y=\"12\" font-size=\"10\" fill=\"#9b59b6\">"
         "PSI %</text>";
  time_axis(out, t0, t1);
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
  // Event marks: a tick at the top for memory.high / memory.max events, one lower for OOM kills
  // (a link to the report).
  for (size_t i = 0; i < v.size(); ++i) {
    const Sample& x = v[i];
    const double px = X(x.t_ns);
    auto mark = [&](const char* cls, const char* color, double y0, uint32_t n,
                    const char* note = "") {
      out += std::string("<line class=\"mark ") + cls + "\" stroke=\"" + color +
             "\" stroke-width=\"2\" x1=\"";
      fmt(out, "%.1f", px);
      out += "\" x2=\"";
      fmt(out, "%.1f", px);
      out += "\" y1=\"";
      fmt(out, "%.1f", y0);
      out += "\" y2=\"";
      fmt(out, "%.1f", y0 + 6);
      out += "\"><title>" + std::to_string(n) + " " + cls + note + "</title></line>";
    };
    if (x.ev_high) mark("e-high", "#e08a00", kT, x.ev_high);
    if (x.ev_max) mark("e-max", "#d02020", kT + 6, x.ev_max);
    if (x.ev_kill) {
      const uint64_t prev = i > 0 ? v[i - 1].t_ns : 0;
      const bool linked = open_kill_link(out, s, reports, prev, x.t_ns);
      if (linked) {
        mark("e-kill", "#000", kT + 12, x.ev_kill);
        out += "</a>";
      } else {
        mark("e-kill dropped", "#000", kT + 12, x.ev_kill, kDroppedNote);
      }
    }
  }
  out += "</svg></div>";
}

void events_chart(std::string& out, const Series& s, const std::vector<OomLogEntry>& reports) {
  const std::vector<Sample>& v = s.ring;
  if (v.empty()) return;
  const uint64_t t0 = v.front().t_ns, t1 = std::max(v.back().t_ns, t0 + 1);
  // Limit events on the left axis, kills on their own right axis.
  uint32_t most = 1, most_kills = 1;
  for (const Sample& x : v) {
    most = std::max({most, x.ev_high, x.ev_max});
    most_kills = std::max(most_kills, x.ev_kill);
  }
  auto X = [&](uint64_t t) {
    return kL + kPw * static_cast<double>(t - t0) / static_cast<double>(t1 - t0);
  };
  const double bar = std::max(1.0, std::min(6.0, kPw / static_cast<double>(v.size()) / 3));
  open_chart(out, "events", s);
  out += "<text x=\"50\" y=\"12\" font-size=\"12\">events of ";
  esc(out, s.path);
  out += " per sample</text>"
         // The colour key, top right.
         "<g class=\"key\" font-size=\"10\">"
         "<rect x=\"300\" y=\"4\" width=\"8\" height=\"8\" fill=\"#e08a00\"/>"
         "<text x=\"311\" y=\"12\">high</text>"
         "<rect x=\"345\" y=\"4\" width=\"8\" height=\"8\" fill=\"#d02020\"/>"
         "<text x=\"356\" y=\"12\">max (left axis)</text>"
         "<rect x=\"432\" y=\"4\" width=\"8\" height=\"8\" fill=\"#000\"/>"
         "<text x=\"443\" y=\"12\">OOM kills (right)</text></g>"
         "<text class=\"count-axis\" x=\"2\" y=\"26\" font-size=\"10\">" +
         std::to_string(most) +
         "</text><text class=\"count-axis\" x=\"2\" y=\"134\" font-size=\"10\">0</text>"
         "<text class=\"kill-axis\" x=\"520\" y=\"26\" font-size=\"10\">" +
         std::to_string(most_kills) +
         "</text><text class=\"kill-axis\" x=\"520\" y=\"134\" font-size=\"10\">0</text>";
  time_axis(out, t0, t1);
  for (size_t i = 0; i < v.size(); ++i) {
    const Sample& x = v[i];
    struct Bar { uint32_t n; uint32_t scale; const char* cls; const char* color; };
    int k = 0;
    for (const Bar& b : {Bar{x.ev_high, most, "e-high", "#e08a00"},
                         Bar{x.ev_max, most, "e-max", "#d02020"},
                         Bar{x.ev_kill, most_kills, "e-kill", "#000"}}) {
      // At least 3 px: a count that is not 0 is never a sliver.
      const double h = std::max(3.0, kPh * static_cast<double>(b.n) / b.scale);
      const double left = std::min(X(x.t_ns) + bar * (k++ - 1.5), kW - kR - bar);
      if (b.n == 0) continue;
      const bool kill = b.cls[2] == 'k';
      const uint64_t prev = i > 0 ? v[i - 1].t_ns : 0;
      const bool linked = kill && open_kill_link(out, s, reports, prev, x.t_ns);
      const bool dropped = kill && !linked;
      out += std::string("<rect class=\"bar ") + b.cls + (dropped ? " dropped" : "") +
             "\" fill=\"" + b.color + "\" x=\"";
      fmt(out, "%.1f", left);
      out += "\" width=\"";
      fmt(out, "%.1f", bar);
      out += "\" y=\"";
      fmt(out, "%.1f", kT + kPh - h);
      out += "\" height=\"";
      fmt(out, "%.1f", h);
      out += "\"><title>" + std::to_string(b.n) + " " + b.cls + (dropped ? kDroppedNote : "") +
             "</title></rect>";
      if (linked) out += "</a>";
    }
  }
  out += "</svg></div>";
}

}  // namespace memcg::http::detail
