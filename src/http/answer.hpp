// The answers every endpoint of memcg::http sends (handlers.cpp, metrics_answer.cpp): a body
// queued with the headers every answer carries, a one-line text reply, and the places among
// ServerOptions::max_answers_in_flight.
#ifndef MEMCG_HTTP_ANSWER_HPP_
#define MEMCG_HTTP_ANSWER_HPP_

#include <microhttpd.h>

#include <atomic>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

namespace memcg::http::detail {

struct Impl;

inline constexpr const char* kMetricsType = "text/plain; version=0.0.4; charset=utf-8";
inline constexpr const char* kTextType = "text/plain; charset=utf-8";

struct Header {
  const char* name;
  const char* value;
};

// Queues `r` with `status` and the headers every answer carries, and drops our reference (the
// answer lives while queued). MHD_NO when it cannot be queued (the connection is then closed).
MHD_Result queue(MHD_Connection* c, unsigned status, MHD_Response* r, const char* type,
                 std::initializer_list<Header> extra);

// Queues `body` with `status`. `gate` (may be null) is released when the answer is freed, here
// on any failure too. MHD_NO when the answer cannot be queued (the connection is then closed).
MHD_Result send(MHD_Connection* c, unsigned status, std::string body, const char* type,
                std::atomic<size_t>* gate = nullptr, std::initializer_list<Header> extra = {});

// `text` and a line feed, as text/plain.
MHD_Result reply(MHD_Connection* c, unsigned status, std::string_view text,
                 std::initializer_list<Header> extra = {});

// A place among max_answers_in_flight, or false when they are all taken.
bool take_place(Impl& s);

// 503 with Retry-After: every place is taken.
MHD_Result too_busy(MHD_Connection* c);

}  // namespace memcg::http::detail

#endif  // MEMCG_HTTP_ANSWER_HPP_
