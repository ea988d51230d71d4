// The SVG plot of a run, written directly (no plotting library): a fixed-size chart, one colour
// per group. The memory panel: solid memory.current, dashed memory.max, dotted memory.high, and
// one marker shape per event kind where a group's local event counter moved. Under it the
// pressure panel: the share of time each group stalled between samples (memory.pressure's
// some solid, full dashed), with markers where a listener was notified or a trigger fired.

#include <fmt/format.h>

#include <algorithm>

#include "memcg/core/tree/group.hpp"
#include "report.hpp"

namespace memcgctl {
namespace {

constexpr double kWidth = 960;
constexpr double kLeft = 90, kRight = 220, kTop = 50;  // margins; legend at right
constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = 440;
// The pressure panel, under the memory panel's time axis.
constexpr double kPressTop = kTop + kPlotH + 50, kPressH = 140;
constexpr double kHeight = kPressTop + kPressH + 60;

// Colour-blind-safe palette (Okabe-Ito, then Tableau), cycled.
constexpr const char* kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00",
                                   "#56B4E9", "#F0E442", "#000000", "#8c564b", "#7f7f7f"};

std::string esc(std::string_view s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&apos;";
        break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') o += c;
    }
  }
  return o;
}

// A limit worth drawing: set, and not far above everything else (so `max` does not flatten the
// chart).
bool finite(uint64_t v) {
  return v != memcg::kUnlimited && v < (uint64_t{1} << 62);
}

// The smallest of 1, 2, 5 × 10^k (in MiB above 1 MiB) that is >= v: a readable axis top.
uint64_t nice_ceiling(uint64_t v) {
  if (v == 0) return uint64_t{1} << 20;
  uint64_t base = 1;
  const uint64_t mib = uint64_t{1} << 20;
  const uint64_t in_mib = (v + mib - 1) / mib;
  while (base * 10 <= in_mib) base *= 10;
  for (uint64_t m : {1, 2, 5, 10})
    if (base * m >= in_mib) return base * m * mib;
  return base * 10 * mib;
}

std::string size_label(uint64_t bytes) {
  const double mib = static_cast<double>(bytes) / (1 << 20);
  if (bytes >= (uint64_t{1} << 30) && bytes % (uint64_t{1} << 30) == 0)
    return fmt::format("{}G", bytes >> 30);
  if (mib == static_cast<double>(static_cast<uint64_t>(mib)))
    return fmt::format("{}M", bytes >> 20);
  return fmt::format("{:.1f}M", mib);
}

std::string time_label(uint64_t ns) {
  if (ns == 0) return "0";
  if (ns % 1'000'000'000 == 0) return fmt::format("{}s", ns / 1'000'000'000);
  if (ns % 1'000'000 == 0) return fmt::format("{}ms", ns / 1'000'000);
  return fmt::format("{:.3f}s", static_cast<double>(ns) / 1e9);
}

// Marker for event e at (x, y), in colour c.
std::string marker(size_t e, double x, double y, const char* c) {
  switch (e) {
    case 0:  // low: triangle down
      return fmt::format(R"(<path d="M{:.1f},{:.1f} l4,-7 l-8,0 z" fill="{}"/>)", x, y + 3.5, c);
    case 1:  // high: diamond
      return fmt::format(R"(<path d="M{:.1f},{:.1f} l4,4 l-4,4 l-4,-4 z" fill="{}"/>)", x, y - 4,
                         c);
    case 2:  // max: circle
      return fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3.5" fill="{}"/>)", x, y, c);
    case 3:  // oom: hollow square
      return fmt::format(
          R"(<rect x="{:.1f}" y="{:.1f}" width="8" height="8" fill="none" stroke="{}" stroke-width="1.5"/>)",
          x - 4, y - 4, c);
    case 4:  // oom_kill: cross
      return fmt::format(
          R"(<path d="M{0:.1f},{1:.1f} l8,8 m0,-8 l-8,8" stroke="{2}" stroke-width="2" fill="none"/>)",
          x - 4, y - 4, c);
    case 5:  // oom_group_kill: filled square
      return fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="8" height="8" fill="{}"/>)", x - 4,
                         y - 4, c);
    default:  // wait: hollow circle
      return fmt::format(
          R"(<circle cx="{:.1f}" cy="{:.1f}" r="3.5" fill="none" stroke="{}" stroke-width="1.5"/>)",
          x, y, c);
  }
}

// A listener notification (triangle up) or a trigger fire (hollow diamond) at (x, y); `name` is
// its tooltip.
std::string signal_marker(bool trigger, double x, double y, const char* c, std::string_view name) {
  const std::string title = name.empty() ? "" : fmt::format("<title>{}</title>", esc(name));
  if (trigger)
    return fmt::format(
        R"(<path d="M{:.1f},{:.1f} l4,4 l-4,4 l-4,-4 z" fill="white" stroke="{}" stroke-width="1.5">{}</path>)",
        x, y - 4, c, title);
  return fmt::format(R"(<path d="M{:.1f},{:.1f} l4,7 l-8,0 z" fill="{}">{}</path>)", x, y - 3.5, c,
                     title);
}

}  // namespace

std::string svg_plot(const Scenario& sc, const RunResult& r) {
  const auto& samples = r.samples;
  const size_t ngroups = r.groups.size();
  const uint64_t t_end = samples.empty() ? 0 : samples.back().time_ns;
  // Over virtual time when the clock moved; over step numbers when it never did.
  const bool by_time = t_end > 0;
  const double x_end = by_time ? static_cast<double>(t_end)
                               : static_cast<double>(std::max<size_t>(1, samples.size() - 1));

  uint64_t y_top = 0;
  for (const Sample& s : samples) {
    for (const GroupSample& g : s.groups) {
      y_top = std::max(y_top, g.current);
      if (finite(g.max)) y_top = std::max(y_top, g.max);
      if (finite(g.high)) y_top = std::max(y_top, g.high);
    }
  }
  y_top = nice_ceiling(y_top + y_top / 20);

  auto xs = [&](const Sample& s) {
    const double v = by_time ? static_cast<double>(s.time_ns) : static_cast<double>(s.step);
    return kLeft + v / x_end * kPlotW;
  };
  auto ys = [&](uint64_t v) {
    return kTop + kPlotH - static_cast<double>(v) / static_cast<double>(y_top) * kPlotH;
  };

  std::string o;
  o += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"sans-serif\" font-size=\"12\">\n",
      kWidth, kHeight);
  o += fmt::format("<title>{}</title>\n", esc(sc.name.empty() ? "memcgctl run" : sc.name));
  o += fmt::format(R"(<rect width="{}" height="{}" fill="white"/>)"
                   "\n",
                   kWidth, kHeight);
  o += fmt::format(R"(<text x="{}" y="28" font-size="15" font-weight="bold">{}</text>)"
                   "\n",
                   kLeft, esc(sc.name.empty() ? "memory.current" : sc.name));

  // Axes, grid and tick labels.
  o += "<g stroke=\"#444\" stroke-width=\"1\">\n";
  o += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}"/>)"
                   "\n",
                   kLeft, kTop, kTop + kPlotH);
  o += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}"/>)"
                   "\n",
                   kLeft, kTop + kPlotH, kLeft + kPlotW);
  o += "</g>\n<g fill=\"#222\">\n";
  constexpr int kTicks = 5;
  for (int i = 0; i <= kTicks; ++i) {
    const uint64_t v = y_top / kTicks * i;
    const double y = ys(v);
    o += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#ddd"/>)"
                     "\n",
                     kLeft, y, kLeft + kPlotW, y);
    o += fmt::format(R"(<text x="{}" y="{:.1f}" text-anchor="end">{}</text>)"
                     "\n",
                     kLeft - 6, y + 4, size_label(v));
  }
  for (int i = 0; i <= kTicks; ++i) {
    const double x = kLeft + kPlotW * i / kTicks;
    const std::string label =
        by_time ? time_label(t_end / kTicks * i)
                : fmt::format("{}", static_cast<uint64_t>(x_end * i / kTicks + 0.5));
    o += fmt::format(R"(<line x1="{0:.1f}" y1="{1}" x2="{0:.1f}" y2="{2}" stroke="#444"/>)"
                     "\n",
                     x, kTop + kPlotH, kTop + kPlotH + 5);
    o += fmt::format(R"(<text x="{:.1f}" y="{}" text-anchor="middle">{}</text>)"
                     "\n",
                     x, kTop + kPlotH + 20, label);
  }
  // The pressure panel's frame, grid (0, 50, 100 %) and time ticks.
  o += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#444"/>)"
                   "\n",
                   kLeft, kPressTop, kPressTop + kPressH);
  o += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="#444"/>)"
                   "\n",
                   kLeft, kPressTop + kPressH, kLeft + kPlotW);
  for (int pct : {0, 50, 100}) {
    const double y = kPressTop + kPressH - kPressH * pct / 100;
    if (pct) {
      o += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#ddd"/>)"
                       "\n",
                       kLeft, y, kLeft + kPlotW, y);
    }
    o += fmt::format(R"(<text x="{}" y="{:.1f}" text-anchor="end">{}%</text>)"
                     "\n",
                     kLeft - 6, y + 4, pct);
  }
  for (int i = 0; i <= kTicks; ++i) {
    const double x = kLeft + kPlotW * i / kTicks;
    o += fmt::format(R"(<line x1="{0:.1f}" y1="{1}" x2="{0:.1f}" y2="{2}" stroke="#444"/>)"
                     "\n",
                     x, kPressTop + kPressH, kPressTop + kPressH + 5);
  }
  o += fmt::format(
      R"svg(<text x="20" y="{:.1f}" text-anchor="middle" transform="rotate(-90 20 {:.1f})">stalled (some solid, full dashed)</text>)svg"
      "\n",
      kPressTop + kPressH / 2, kPressTop + kPressH / 2);
  o += fmt::format(R"(<text x="{:.1f}" y="{}" text-anchor="middle">{}</text>)"
                   "\n",
                   kLeft + kPlotW / 2, kPressTop + kPressH + 30,
                   by_time ? "virtual time" : "step (the virtual clock did not move)");
  o += fmt::format(
      R"svg(<text x="20" y="{:.1f}" text-anchor="middle" transform="rotate(-90 20 {:.1f})">bytes (memory.current; max dashed, high dotted)</text>)svg"
      "\n",
      kTop + kPlotH / 2, kTop + kPlotH / 2);
  o += "</g>\n";

  // Per group: limits first (under), then usage, then event markers.
  for (size_t gi = 0; gi < ngroups; ++gi) {
    const char* color = kColors[gi % std::size(kColors)];
    o += fmt::format("<g id=\"group-{}\">\n", gi);
    auto series = [&](auto value, const char* dash, double width) {
      std::string pts;
      auto flush = [&] {
        if (pts.empty()) return;
        o += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="{}"{} points="{}"/>)"
                         "\n",
                         color, width, dash, pts);
        pts.clear();
      };
      double prev_y = 0;
      for (const Sample& s : samples) {
        const GroupSample& g = s.groups[gi];
        uint64_t v = 0;
        if (!g.online || !value(g, &v)) {
          flush();
          continue;
        }
        const double x = xs(s), y = ys(v);
        // Steps, not slopes: a value holds until the next sample changes it.
        if (!pts.empty()) pts += fmt::format(" {:.1f},{:.1f}", x, prev_y);
        pts += fmt::format("{}{:.1f},{:.1f}", pts.empty() ? "" : " ", x, y);
        prev_y = y;
      }
      flush();
    };
    series(
        [](const GroupSample& g, uint64_t* v) {
          *v = g.max;
          return finite(g.max);
        },
        R"( stroke-dasharray="8 4")", 1.2);
    series(
        [](const GroupSample& g, uint64_t* v) {
          *v = g.high;
          return finite(g.high);
        },
        R"( stroke-dasharray="2 3")", 1.2);
    series(
        [](const GroupSample& g, uint64_t* v) {
          *v = g.current;
          return true;
        },
        "", 2);
    for (size_t si = 1; si < samples.size(); ++si) {
      const GroupSample& g = samples[si].groups[gi];
      const GroupSample& prev = samples[si - 1].groups[gi];
      if (!g.online) continue;
      for (size_t e = 0; e < kEventNames.size(); ++e)
        if (g.events[e] > prev.events[e])
          o += marker(e, xs(samples[si]), ys(g.current), color) + "\n";
    }
    // Pressure: the stall share of each interval between samples, held over the interval.
    for (int state = 0; state < 2; ++state) {
      std::string pts;
      for (size_t si = 1; si < samples.size(); ++si) {
        const Sample& a = samples[si - 1];
        const Sample& b = samples[si];
        const GroupSample &ga = a.groups[gi], &gb = b.groups[gi];
        if (b.time_ns <= a.time_ns || !ga.online || !gb.online) continue;
        const uint64_t stalled = gb.stall_ns[state] - std::min(gb.stall_ns[state], ga.stall_ns[state]);
        const double share = std::min(
            1.0, static_cast<double>(stalled) / static_cast<double>(b.time_ns - a.time_ns));
        const double y = kPressTop + kPressH - share * kPressH;
        pts += fmt::format("{}{:.1f},{:.1f} {:.1f},{:.1f}", pts.empty() ? "" : " ", xs(a), y,
                           xs(b), y);
      }
      if (!pts.empty())
        o += fmt::format(
            R"(<polyline fill="none" stroke="{}" stroke-width="1.5"{} points="{}"/>)"
            "\n",
            color, state ? R"( stroke-dasharray="4 3")" : "", pts);
    }
    o += "</g>\n";
  }

  // Listener notifications and trigger fires, at the top of the pressure panel in the colour of
  // their group (black for the root).
  for (size_t k = 0; k < r.signals.size(); ++k) {
    const SignalInfo& sig = r.signals[k];
    const auto it = std::find(r.groups.begin(), r.groups.end(), sig.group);
    const char* color =
        it == r.groups.end() ? "#000000" : kColors[(it - r.groups.begin()) % std::size(kColors)];
    for (size_t si = 1; si < samples.size(); ++si) {
      const auto& now = samples[si].signals;
      const auto& before = samples[si - 1].signals;
      if (k >= now.size() || (k < before.size() && now[k] <= before[k])) continue;
      if (k >= before.size() && now[k] == 0) continue;
      o += signal_marker(sig.trigger, xs(samples[si]), kPressTop + 8, color, sig.name) + "\n";
    }
  }

  // Legend: groups, then line styles and markers.
  double ly = kTop + 6;
  const double lx = kLeft + kPlotW + 20;
  o += "<g font-size=\"11\">\n";
  for (size_t gi = 0; gi < ngroups; ++gi, ly += 16) {
    o += fmt::format(
        R"(<line x1="{0}" y1="{1:.1f}" x2="{2}" y2="{1:.1f}" stroke="{3}" stroke-width="2"/>)"
        "\n",
        lx, ly, lx + 18, kColors[gi % std::size(kColors)]);
    o += fmt::format(R"(<text x="{}" y="{:.1f}">{}</text>)"
                     "\n",
                     lx + 24, ly + 4, esc(r.groups[gi]));
  }
  // A legend row: a line in `dash` style, then its label.
  auto line_row = [&](const char* dash, const char* label) {
    o += fmt::format(
        R"(<line x1="{0}" y1="{1:.1f}" x2="{2}" y2="{1:.1f}" stroke="#444" stroke-width="1.5"{3}/>)"
        "\n",
        lx, ly, lx + 18, dash);
    o += fmt::format(R"(<text x="{}" y="{:.1f}">{}</text>)"
                     "\n",
                     lx + 24, ly + 4, label);
    ly += 16;
  };
  ly += 8;
  line_row("", "memory.current");
  line_row(R"( stroke-dasharray="8 4")", "memory.max");
  line_row(R"( stroke-dasharray="2 3")", "memory.high");
  ly += 8;
  for (size_t e = 0; e < kEventNames.size(); ++e, ly += 16) {
    o += marker(e, lx + 9, ly, "#444") + "\n";
    o += fmt::format(R"(<text x="{}" y="{:.1f}">event {}</text>)"
                     "\n",
                     lx + 24, ly + 4, kEventNames[e]);
  }
  // The pressure panel's own legend, beside it.
  ly = std::max(ly + 8, kPressTop + 6);
  line_row("", "some: any task stalled");
  line_row(R"( stroke-dasharray="4 3")", "full: every task stalled");
  for (bool trigger : {false, true}) {
    o += signal_marker(trigger, lx + 9, ly, "#444", "") + "\n";
    o += fmt::format(R"(<text x="{}" y="{:.1f}">{}</text>)"
                     "\n",
                     lx + 24, ly + 4, trigger ? "trigger fired" : "listener notified");
    ly += 16;
  }
  o += "</g>\n</svg>\n";
  return o;
}

}  // namespace memcgctl
