// GET /oom/<seq>: one OOM or preemption report of the OOM log as a page (who was killed or asked,
// why, the killer's candidates, the largest members and groups then), linked from the OOM marks
// of the charts and from the group pages. Private to src/http.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "memcg/core/oom/oom_log.hpp"

namespace memcg {
class Controller;
}

namespace memcg::http::detail {

// Whether `path` is `group` or below it ("/" is above everything).
bool path_within(std::string_view path, std::string_view group);

// Whether a report concerns `group`: the limit hit was in the group's subtree, or the group is
// below the limit hit and one of the report's candidates, members, groups or asked members is in
// its subtree.
bool report_concerns(const OomLogEntry& e, std::string_view group);

// The page of report `seq`, or "" when the log does not hold it (never was, or dropped).
std::string render_oom_page(Controller& ctl, uint64_t seq);

}  // namespace memcg::http::detail
