#include "top_view.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace memcgctl {

bool parse_top_sort(const std::string& text, TopSort* out) {
  if (text == "current") *out = TopSort::kCurrent;
  else if (text == "peak") *out = TopSort::kPeak;
  else if (text == "pressure") *out = TopSort::kPressure;
  else if (text == "events") *out = TopSort::kEvents;
  else return false;
  return true;
}

bool parse_interval_ms(const std::string& text, int64_t* ms) {
  if (text.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(v) || v < 0) return false;
  const std::string unit(end);
  double scaled;
  if (unit.empty() || unit == "s") scaled = v * 1000;
  else if (unit == "ms") scaled = v;
  else return false;
  if (scaled < 100 || scaled > 3600 * 1000) return false;
  *ms = static_cast<int64_t>(scaled);
  return true;
}

bool parse_top_rows(const std::string& json, std::vector<TopRow>* rows, std::string* error) {
  rows->clear();
  try {
    const nlohmann::json doc = nlohmann::json::parse(json);
    if (doc.at("version").get<int>() != 1) {
      *error = "unsupported /v1/groups version " + doc.at("version").dump();
      return false;
    }
    for (const nlohmann::json& g : doc.at("groups")) {
      TopRow r;
      r.path = g.at("path").get<std::string>();
      r.current = g.at("current").get<uint64_t>();
      r.peak = g.at("peak").get<uint64_t>();
      if (g.contains("limits") && !g.at("limits").at("max").is_null())
        r.max = g.at("limits").at("max").get<uint64_t>();
      if (g.contains("events")) {
        const nlohmann::json& e = g.at("events");
        r.high_events = e.at("high").get<uint64_t>();
        r.max_events = e.at("max").get<uint64_t>();
        r.oom_events = e.at("oom").get<uint64_t>();
      }
      r.some_avg10 = g.at("pressure").at("some").at("avg10").get<double>();
      rows->push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    *error = std::string("not a /v1/groups document: ") + e.what();
    rows->clear();
    return false;
  }
  return true;
}

void sort_top_rows(std::vector<TopRow>* rows, TopSort sort) {
  auto key = [sort](const TopRow& r) -> double {
    switch (sort) {
      case TopSort::kCurrent: return static_cast<double>(r.current);
      case TopSort::kPeak: return static_cast<double>(r.peak);
      case TopSort::kPressure: return r.some_avg10;
      case TopSort::kEvents:
        return static_cast<double>(r.high_events + r.max_events + r.oom_events);
    }
    return 0;
  };
  std::stable_sort(rows->begin(), rows->end(), [&](const TopRow& a, const TopRow& b) {
    const double ka = key(a), kb = key(b);
    if (ka != kb) return ka > kb;
    return a.path < b.path;
  });
}

std::string human_bytes(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + "B";
  static const char kUnits[] = "KMGTPE";
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%c", v, kUnits[u]);
  return buf;
}

std::string format_top_table(const std::vector<TopRow>& rows) {
  size_t width = 4;  // "PATH"
  for (const TopRow& r : rows) width = std::max(width, r.path.size());
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-*s %9s %6s %9s %7s %7s %7s %7s\n", static_cast<int>(width),
                "PATH", "CURRENT", "%MAX", "PEAK", "E.HIGH", "E.MAX", "E.OOM", "SOME10");
  out += line;
  for (const TopRow& r : rows) {
    std::string pct = "-";
    if (r.max) {
      char p[32];
      std::snprintf(p, sizeof p, "%.1f",
                    *r.max == 0 ? 100.0 : 100.0 * static_cast<double>(r.current) /
                                              static_cast<double>(*r.max));
      pct = p;
    }
    const bool root = r.path == "/";
    auto count = [root](uint64_t v) { return root ? std::string("-") : std::to_string(v); };
    std::snprintf(line, sizeof line, "%-*s %9s %6s %9s %7s %7s %7s %7.2f\n",
                  static_cast<int>(width), r.path.c_str(), human_bytes(r.current).c_str(),
                  pct.c_str(), human_bytes(r.peak).c_str(), count(r.high_events).c_str(),
                  count(r.max_events).c_str(), count(r.oom_events).c_str(), r.some_avg10);
    out += line;
  }
  return out;
}

}  // namespace memcgctl
