// `memcgctl top`: the model and the table, apart from the HTTP loop (top.cpp) so that they are
// tested without a server. The input is GET /v1/groups (include/memcg/http/json.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memcgctl {

struct TopRow {
  std::string path;
  uint64_t current = 0;
  uint64_t peak = 0;
  std::optional<uint64_t> max;  // none: the root, or memory.max is "max"
  std::optional<uint64_t> high;  // none: the root, or memory.high is "max"
  uint64_t min = 0, low = 0;
  uint64_t high_events = 0, max_events = 0, oom_events = 0, kill_events = 0;
  double some_avg10 = 0, full_avg10 = 0;  // percent
};

enum class TopSort { kCurrent, kPeak, kPressure, kEvents };

// "current", "peak", "pressure" or "events"; false for anything else.
bool parse_top_sort(const std::string& text, TopSort* out);
// "1s", "500ms", "2.5s" or a plain number of seconds; 100 ms .. 1 h. False otherwise.
bool parse_interval_ms(const std::string& text, int64_t* ms);

// Reads the /v1/groups document. False with `error` set when it is not one.
bool parse_top_rows(const std::string& json, std::vector<TopRow>* rows, std::string* error);
// Largest first; ties by path.
void sort_top_rows(std::vector<TopRow>* rows, TopSort sort);
// "1.5M"-style sizes, 1024-based, as systemd-cgtop prints them; "512B" below 1 KiB.
std::string human_bytes(uint64_t bytes);
// The table: a header line, then one line per row; the columns and their names are the live
// page's (memcg/http/columns.hpp).
std::string format_top_table(const std::vector<TopRow>& rows);

}  // namespace memcgctl
