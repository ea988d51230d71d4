// `memcgctl top`: a live table of the groups of a process serving memcg::http (GET /v1/groups),
// refreshed in place on a terminal; one snapshot with `once`.
#pragma once

#include <cstdint>
#include <string>

#include "top_view.hpp"

namespace memcgctl {

struct TopOptions {
  std::string url = "http://127.0.0.1:9180";
  int64_t interval_ms = 1000;
  TopSort sort = TopSort::kCurrent;
  bool once = false;
};

// Runs until interrupted (or one snapshot with `once`). Exit status: 0, 1 when the endpoint
// cannot be reached or answers something else than a group list (with `once`, or at the first
// fetch), 2 for a malformed URL.
int run_top(const TopOptions& options);

}  // namespace memcgctl
