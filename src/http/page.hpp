// The live page, GET / (memcg::http::Server): server-rendered HTML with inline SVG, no script and
// no external asset, so it works on a machine with no internet. Not installed.
//
// Sections: the groups (largest memory.current first, kPageRows a page, `?page=N` for the rest),
// each with its usage drawn against min, low, high and max and the columns `memcgctl top` prints
// (kTopColumns); the history of the largest groups (history.hpp): memory.current with high and
// max, PSI some/full, and marks where memory.high / memory.max events and OOM kills happened; the
// last OOM and preemption reports (oom_log.hpp).
#pragma once

#include <cstddef>
#include <string>

#include "history.hpp"

namespace memcg {
class Controller;
}

namespace memcg::http::detail {

inline constexpr size_t kPageRows = 100;      // groups a page
inline constexpr size_t kPageCharts = 8;      // history charts
inline constexpr size_t kPageReports = 10;    // OOM reports shown

// The page `page` (0-based; past the last, the last). `sample_interval_ms`, `history_bytes_cap`:
// stated on the page.
std::string render_page(Controller& ctl, const History& history, size_t page,
                        uint64_t sample_interval_ms, size_t history_bytes_cap);

// `?page=N` of a raw request target: N, or 0 when absent or not a number (capped at 1e6).
size_t page_of_target(const std::string& raw_target);

}  // namespace memcg::http::detail
