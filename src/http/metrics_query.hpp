// The query of GET /metrics: which part of the exposition to show (PrometheusOptions). Not
// installed.
//
//   group=<path>      one subtree ("/" or absent: the whole tree), percent-encoded as needed
//   depth=<n>|all     levels below that group (0: the group alone); default all
//   top=<n>|all       the per-group families show the n groups of largest memory.current, the
//                     others summed into group="(other)"; 0 or all: every group; default 1000
//   exclude=<family>  families left out, comma-separated, the parameter repeatable (a scrape
//                     configuration's params list sends it so)
//
// '+' is a plus sign, not a space (group names may hold it). Anything else is refused: an unknown
// or repeated parameter (but exclude), a value that is not a number, a malformed %XX escape or a
// decoded byte outside printable ASCII, so that a typo never silently changes what is shown.
#pragma once

#include <string>
#include <string_view>

#include "memcg/files/prometheus.hpp"

namespace memcg::http::detail {

// Parses the query of `raw_target` (after '?'; none: the defaults) into `*out`. 0, or 400 with
// a sentence for the client in `*why` (and `*out` left as it was).
int parse_metrics_query(std::string_view raw_target, PrometheusOptions* out, std::string* why);

}  // namespace memcg::http::detail
