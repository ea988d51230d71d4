// GET /metrics (metrics_answer.hpp).
#include "metrics_answer.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "memcg/core/signal/event_bus.hpp"
#include "memcg/files/prometheus.hpp"
#include "answer.hpp"
#include "metrics_query.hpp"
#include "server_impl.hpp"

namespace memcg::http::detail {
namespace {

// GET /metrics, sent while it is written: the values are read when the request is answered
// (PrometheusExposition), its length counted (Content-Length: the connection stays reusable and
// a cut answer is seen as one), and the text written straight into libmicrohttpd's send buffer
// as it sends. The answer holds the values, that buffer and the few KB of a line that did not
// fit, never the whole document, and its place among the answers in flight until it is freed.
// kBlockBytes is the buffer (allocated with the answer): each send() takes up to this much, so
// a 28 MB document goes out in about a hundred sends.
constexpr size_t kBlockBytes = 256 * 1024;

struct StreamedMetrics {
  StreamedMetrics(Controller& ctl, const PrometheusOptions& options) : doc(ctl, options) {}
  PrometheusExposition doc;
  std::string tail;  // the server's own families (event bus, audit), after the document
  size_t tail_pos = 0;
  std::atomic<size_t>* gate = nullptr;
};

// The server's own families: the event bus and its streams, the audit records.
std::string server_metrics(Impl& s) {
  const EventBusStats b = s.ctl.events().stats();
  std::string out =
      "# HELP memcg_events_published_total Events recorded by the event bus.\n"
      "# TYPE memcg_events_published_total counter\n"
      "memcg_events_published_total " + std::to_string(b.published) + "\n"
      "# HELP memcg_event_subscribers Event bus subscriptions (GET /v1/events streams among them).\n"
      "# TYPE memcg_event_subscribers gauge\n"
      "memcg_event_subscribers " + std::to_string(b.subscribers) + "\n"
      "# HELP memcg_event_subscribers_dropped_total Subscriptions dropped, by reason.\n"
      "# TYPE memcg_event_subscribers_dropped_total counter\n";
  for (int i = 1; i < kNumBusDropReasons; ++i)
    out += std::string("memcg_event_subscribers_dropped_total{reason=\"") +
           bus_drop_reason_name(static_cast<BusDropReason>(i)) + "\"} " +
           std::to_string(b.dropped[i]) + "\n";
  out += s.audit.render_metrics();
  return out;
}

// Fills `buf` (libmicrohttpd asks for at most what is left of the announced length).
ssize_t read_metrics(void* cls, uint64_t, char* buf, size_t max) {
  auto* m = static_cast<StreamedMetrics*>(cls);
  size_t n;
  try {
    n = m->doc.read(buf, max);
  } catch (...) {
    // Out of memory: the connection is closed, short of its Content-Length.
    return MHD_CONTENT_READER_END_WITH_ERROR;
  }
  if (n == 0 && m->tail_pos < m->tail.size()) {
    n = std::min(max, m->tail.size() - m->tail_pos);
    std::memcpy(buf, m->tail.data() + m->tail_pos, n);
    m->tail_pos += n;
  }
  if (n == 0) return MHD_CONTENT_READER_END_WITH_ERROR;  // shorter than counted: never
  return static_cast<ssize_t>(n);
}

void free_metrics(void* cls) {
  auto* m = static_cast<StreamedMetrics*>(cls);
  if (m->gate != nullptr) m->gate->fetch_sub(1, std::memory_order_relaxed);
  delete m;
}

}  // namespace

// The exposition, streamed (StreamedMetrics), within max_answers_in_flight; the query chooses
// what it shows (metrics_query.hpp): 400 for a bad query, 404 for a group that does not exist.
MHD_Result serve_metrics(Impl& s, MHD_Connection* c, std::string_view raw_target) {
  PrometheusOptions options;
  std::string why;
  if (parse_metrics_query(raw_target, &options, &why) != 0) return reply(c, 400, why);
  if (const int err = check_prometheus_options(s.ctl, options, &why); err != 0)
    return reply(c, err == ENOENT ? 404 : 400, why);
  if (!take_place(s)) return too_busy(c);
  std::unique_ptr<StreamedMetrics> m;
  uint64_t length;
  try {
    m = std::make_unique<StreamedMetrics>(s.ctl, options);
    m->tail = server_metrics(s);
    length = m->doc.size() + m->tail.size();
  } catch (const std::invalid_argument& e) {  // the group was removed since the check
    s.answers_in_flight.fetch_sub(1, std::memory_order_relaxed);
    return reply(c, 404, e.what());
  } catch (...) {
    s.answers_in_flight.fetch_sub(1, std::memory_order_relaxed);
    throw;
  }
  m->gate = &s.answers_in_flight;
  MHD_Response* r = MHD_create_response_from_callback(length, kBlockBytes, &read_metrics,
                                                      m.get(), &free_metrics);
  if (r == nullptr) {
    free_metrics(m.release());
    return MHD_NO;
  }
  m.release();  // the answer owns it now
  return queue(c, 200, r, kMetricsType, {});
}

}  // namespace memcg::http::detail
