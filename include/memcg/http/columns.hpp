// The columns of the group table, shared by the live page (GET /) and `memcgctl top`, so that
// both show the same values under the same names. Header-only: memcgctl fills them from
// /v1/groups, the page from the groups themselves.
//
//   GROUP    the group's path ("/" for the root)
//   CURRENT  memory.current            PEAK   memory.peak
//   %MAX     memory.current / memory.max in percent ("-" without a limit)
//   MIN LOW HIGH MAX                   the knobs ("max" when unlimited; "-" for the root)
//   E.HIGH E.MAX E.OOM E.KILL          memory.events high, max, oom, oom_kill
//   SOME10 FULL10                      memory.pressure avg10 (percent)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace memcg::http {

inline constexpr uint64_t kColumnUnlimited = UINT64_MAX;  // memcg::kUnlimited

struct TopColumns {
  std::string path;
  bool root = false;
  uint64_t current = 0, peak = 0;
  uint64_t min = 0, low = 0, high = kColumnUnlimited, max = kColumnUnlimited;
  uint64_t e_high = 0, e_max = 0, e_oom = 0, e_kill = 0;
  double some10 = 0, full10 = 0;  // percent
};

inline constexpr size_t kNumTopColumns = 14;
inline constexpr const char* kTopColumnNames[kNumTopColumns] = {
    "GROUP", "CURRENT", "%MAX", "PEAK", "MIN", "LOW", "HIGH", "MAX",
    "E.HIGH", "E.MAX", "E.OOM", "E.KILL", "SOME10", "FULL10"};

// "1.5M"-style sizes, 1024-based, as systemd-cgtop prints them; "512B" below 1 KiB.
inline std::string human_size(uint64_t bytes) {
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

// The text of column `i` of `c`.
inline std::string top_column_text(const TopColumns& c, size_t i) {
  auto knob = [&](uint64_t v) {
    if (c.root) return std::string("-");
    return v == kColumnUnlimited ? std::string("max") : human_size(v);
  };
  auto count = [&](uint64_t v) { return c.root ? std::string("-") : std::to_string(v); };
  char buf[32];
  switch (i) {
    case 0: return c.path;
    case 1: return human_size(c.current);
    case 2:
      if (c.root || c.max == kColumnUnlimited) return "-";
      std::snprintf(buf, sizeof buf, "%.1f",
                    c.max == 0 ? 100.0
                               : 100.0 * static_cast<double>(c.current) / static_cast<double>(c.max));
      return buf;
    case 3: return human_size(c.peak);
    case 4: return knob(c.min);
    case 5: return knob(c.low);
    case 6: return knob(c.high);
    case 7: return knob(c.max);
    case 8: return count(c.e_high);
    case 9: return count(c.e_max);
    case 10: return count(c.e_oom);
    case 11: return count(c.e_kill);
    case 12: std::snprintf(buf, sizeof buf, "%.2f", c.some10); return buf;
    case 13: std::snprintf(buf, sizeof buf, "%.2f", c.full10); return buf;
    default: return "";
  }
}

}  // namespace memcg::http
