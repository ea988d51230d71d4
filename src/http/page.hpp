// The live pages (memcg::http::Server): server-rendered HTML with inline SVG, no script and no
// external asset, so they work on a machine with no internet. Not installed.
//
// GET /: the groups, trouble first (by status, status.hpp; then largest memory.current first;
// `?sort=usage`: largest memory.current first), kPageRows a page (`?page=N` for the rest), each
// flagged with its status and with its usage drawn against min, low, high and max and the
// columns `memcgctl top` prints (kTopColumns), its name linking to its page; the history of the largest groups (history.hpp):
// memory.current with high and max on a bytes axis, PSI some/full on a percent axis, and marks
// where memory.high / memory.max events and OOM kills happened (a kill's mark links to its
// report); the last OOM and preemption reports (oom_log.hpp), each linking to its page.
//
// GET /group/<path> (the root: /group/): one group: its row, its status with the runbook of each
// of its troubles (ServerOptions::runbook_base), its history and events over time,
// its largest members by size with their admitted sizes (members.hpp), the OOM reports that
// concern it, and its files. GET /oom/<seq>: one report (oom_page.hpp).
#pragma once

#include <cstddef>
#include <string>

#include "history.hpp"
#include "memcg/http/columns.hpp"

namespace memcg {
class Controller;
class Group;
}

namespace memcg::http::detail {

inline constexpr size_t kPageRows = 100;      // groups a page
inline constexpr size_t kPageCharts = 8;      // history charts
inline constexpr size_t kPageReports = 10;    // OOM reports shown
inline constexpr size_t kGroupPageMembers = 50;   // members listed on a group's page
inline constexpr size_t kGroupPageChildren = 100;  // children linked from a group's page

// The page `page` (0-based; past the last, the last). `sample_interval_ms`, `history_bytes_cap`:
// stated on the page.
// `by_usage`: largest memory.current first, else trouble first.
std::string render_page(Controller& ctl, const History& history, size_t page,
                        uint64_t sample_interval_ms, size_t history_bytes_cap,
                        bool by_usage = false);

// A group's page: "" when no online group has that path.
std::string render_group_page(Controller& ctl, const History& history, const std::string& path,
                              uint64_t sample_interval_ms, size_t history_bytes_cap,
                              const std::string& runbook_base = "");

// The pieces both pages use: a group's columns (but the pressure) read under the tree lock, its
// pressure columns read after it, the table's header and a group's row, the history's legend.
TopColumns read_top_columns_fast(Group& g);
void add_pressure_columns(Group& g, TopColumns* c);
// The table's first column is the status (status.hpp).
void group_table_header(std::string& out);
void group_table_row(std::string& out, const TopColumns& c, uint32_t status);
// The colour key of the status column.
void status_legend(std::string& out);
void history_legend(std::string& out, uint64_t sample_interval_ms, size_t bytes, size_t cap);

// `?page=N` of a raw request target: N, or 0 when absent or not a number (capped at 1e6).
size_t page_of_target(const std::string& raw_target);
// `?sort=usage` of a raw request target: true; anything else (`status`, absent): false.
bool sort_of_target(const std::string& raw_target);

}  // namespace memcg::http::detail
