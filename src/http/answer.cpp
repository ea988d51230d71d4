// The answers every endpoint sends (answer.hpp).
#include "answer.hpp"

#include <new>
#include <utility>

#include "server_impl.hpp"

namespace memcg::http::detail {
namespace {

struct Answer {
  std::string body;
  std::atomic<size_t>* gate = nullptr;
};

void free_answer(void* cls) {
  auto* a = static_cast<Answer*>(cls);
  if (a->gate != nullptr) a->gate->fetch_sub(1, std::memory_order_relaxed);
  delete a;
}

}  // namespace

MHD_Result queue(MHD_Connection* c, unsigned status, MHD_Response* r, const char* type,
                 std::initializer_list<Header> extra) {
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  // Documents are generated per request: no ranges, ever (a multi-range answer would be many
  // copies of the document).
  MHD_add_response_header(r, MHD_HTTP_HEADER_ACCEPT_RANGES, "none");
  for (const Header& h : extra) MHD_add_response_header(r, h.name, h.value);
  const MHD_Result ok = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ok;
}

MHD_Result send(MHD_Connection* c, unsigned status, std::string body, const char* type,
                std::atomic<size_t>* gate, std::initializer_list<Header> extra) {
  Answer* a = new (std::nothrow) Answer;
  if (a == nullptr) {
    if (gate != nullptr) gate->fetch_sub(1, std::memory_order_relaxed);
    return MHD_NO;
  }
  a->gate = gate;
  a->body = std::move(body);
  MHD_Response* r = MHD_create_response_from_buffer_with_free_callback_cls(
      a->body.size(), a->body.data(), &free_answer, a);
  if (r == nullptr) {
    free_answer(a);
    return MHD_NO;
  }
  return queue(c, status, r, type, extra);
}

MHD_Result reply(MHD_Connection* c, unsigned status, std::string_view text,
                 std::initializer_list<Header> extra) {
  std::string body(text);
  body += '\n';
  return send(c, status, std::move(body), kTextType, nullptr, extra);
}

bool take_place(Impl& s) {
  if (s.answers_in_flight.fetch_add(1, std::memory_order_relaxed) < s.options.max_answers_in_flight)
    return true;
  s.answers_in_flight.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

MHD_Result too_busy(MHD_Connection* c) {
  return reply(c, 503, "too many answers in flight", {{"Retry-After", "1"}});
}

}  // namespace memcg::http::detail
