#include "top_view.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "memcg/http/columns.hpp"

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
      if (g.contains("limits") && !g.at("limits").at("high").is_null())
        r.high = g.at("limits").at("high").get<uint64_t>();
      if (g.contains("protection")) {
        r.min = g.at("protection").at("min").get<uint64_t>();
        r.low = g.at("protection").at("low").get<uint64_t>();
      }
      if (g.contains("events")) {
        const nlohmann::json& e = g.at("events");
        r.high_events = e.at("high").get<uint64_t>();
        r.max_events = e.at("max").get<uint64_t>();
        r.oom_events = e.at("oom").get<uint64_t>();
        r.kill_events = e.at("oom_kill").get<uint64_t>();
      }
      r.some_avg10 = g.at("pressure").at("some").at("avg10").get<double>();
      r.full_avg10 = g.at("pressure").at("full").at("avg10").get<double>();
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

std::string human_bytes(uint64_t bytes) { return memcg::http::human_size(bytes); }

std::string format_top_table(const std::vector<TopRow>& rows) {
  using memcg::http::kNumTopColumns;
  std::vector<std::vector<std::string>> cells;
  cells.reserve(rows.size());
  for (const TopRow& r : rows) {
    memcg::http::TopColumns c;
    c.path = r.path;
    c.root = r.path == "/";
    c.current = r.current;
    c.peak = r.peak;
    c.min = r.min;
    c.low = r.low;
    c.high = r.high.value_or(memcg::http::kColumnUnlimited);
    c.max = r.max.value_or(memcg::http::kColumnUnlimited);
    c.e_high = r.high_events;
    c.e_max = r.max_events;
    c.e_oom = r.oom_events;
    c.e_kill = r.kill_events;
    c.some10 = r.some_avg10;
    c.full10 = r.full_avg10;
    std::vector<std::string> row;
    for (size_t k = 0; k < kNumTopColumns; ++k) row.push_back(memcg::http::top_column_text(c, k));
    cells.push_back(std::move(row));
  }
  size_t width[kNumTopColumns];
  for (size_t k = 0; k < kNumTopColumns; ++k) {
    width[k] = std::string(memcg::http::kTopColumnNames[k]).size();
    for (const auto& row : cells) width[k] = std::max(width[k], row[k].size());
  }
  // The group left-aligned, the numbers right-aligned, one space apart.
  auto line = [&](auto text_of) {
    std::string out;
    for (size_t k = 0; k < kNumTopColumns; ++k) {
      const std::string t = text_of(k);
      if (k) out += ' ';
      if (k == 0) {
        out += t;
        if (kNumTopColumns > 1) out.append(width[k] - t.size(), ' ');
      } else {
        out.append(width[k] - t.size(), ' ');
        out += t;
      }
    }
    out += '\n';
    return out;
  };
  std::string out = line([](size_t k) { return std::string(memcg::http::kTopColumnNames[k]); });
  for (const auto& row : cells) out += line([&](size_t k) { return row[k]; });
  return out;
}

}  // namespace memcgctl
