// GET /metrics: the controller's exposition, then the server's own families, streamed.
#ifndef MEMCG_HTTP_METRICS_ANSWER_HPP_
#define MEMCG_HTTP_METRICS_ANSWER_HPP_

#include <microhttpd.h>

#include <string_view>

namespace memcg::http::detail {

struct Impl;

// `raw_target`: the request's target before decoding, whose query chooses what is shown
// (metrics_query.hpp): 400 for a bad query, 404 for a group that does not exist, 503 when every
// place among max_answers_in_flight is taken.
MHD_Result serve_metrics(Impl& s, MHD_Connection* c, std::string_view raw_target);

}  // namespace memcg::http::detail

#endif  // MEMCG_HTTP_METRICS_ANSWER_HPP_
