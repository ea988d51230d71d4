// GET /v1/events: the controller's event bus (memcg/core/signal/event_bus.hpp) as Server-Sent
// Events. One subscription per stream; libmicrohttpd pulls the text through a content reader.
//
// A stream with nothing to send suspends its connection (libmicrohttpd then neither polls nor
// times it out) and is resumed by one of: the bus's notifier (new events, or the stream dropped),
// the acceptor's tick (a heartbeat is due), or stop() (every stream ends). `woken` closes the
// race between a reader that found nothing and a wake that came before it suspended: both run
// under the stream's mutex, and a reader that sees `woken` looks again instead of suspending.
//
// Lifetimes: the stream belongs to its answer and is freed by libmicrohttpd's free callback, which
// first closes the subscription (no wake runs or starts after) and unregisters the stream from
// the server (the acceptor's and stop()'s wakes run under streams_mutex), so nothing touches the
// connection once it may be gone. A suspended connection is never freed: libmicrohttpd keeps it
// until it is resumed.
#include <microhttpd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <new>
#include <string_view>

#include "json_put.hpp"
#include "memcg/core/signal/event_bus.hpp"
#include "server_impl.hpp"

namespace memcg::http::detail {

struct EventStream {
  Impl* server = nullptr;
  MHD_Connection* connection = nullptr;
  std::unique_ptr<Subscription> sub;
  std::mutex mu;
  bool suspended = false;  // guarded by mu
  bool woken = false;      // guarded by mu
  SteadyClock::time_point last_sent{};  // guarded by mu
  // The reader's own (only libmicrohttpd's worker of this connection touches them).
  std::string out;
  size_t out_pos = 0;
  bool ending = false;  // the last text is queued: end after it
  std::vector<BusEvent> batch;
  // The subscription for the notifier's eye (set once subscribe() returned), and whether its
  // drop was counted (by the notifier's wake, or by the reader, whichever sees it first).
  std::atomic<Subscription*> watched{nullptr};
  std::atomic<bool> counted_drop{false};

  void count_drop() noexcept {
    if (!counted_drop.exchange(true)) server->streams_dropped.fetch_add(1, std::memory_order_relaxed);
  }

  // Resumes the connection if it is suspended; a reader about to suspend looks again instead.
  void wake() noexcept {
    if (Subscription* w = watched.load(std::memory_order_acquire); w != nullptr && w->dropped())
      count_drop();  // a client that reads nothing never runs the reader again
    std::lock_guard<std::mutex> lock(mu);
    woken = true;
    if (suspended) {
      suspended = false;
      MHD_resume_connection(connection);
    }
  }
};

namespace {

constexpr size_t kStreamBlockBytes = 16 * 1024;  // libmicrohttpd's send buffer for a stream
constexpr size_t kBatchEvents = 64;              // events formatted per reader call at most

void put_event(std::string& out, const BusEvent& e) {
  out += "id: ";
  json_out::put_u64(out, e.id);
  out += "\nevent: ";
  out += bus_event_type_name(e.type);
  out += "\ndata: {\"id\":";
  json_out::put_u64(out, e.id);
  out += ",\"type\":\"";
  out += bus_event_type_name(e.type);
  out += "\",\"group\":";
  json_out::put_string(out, e.group);
  out += ",\"time_ns\":";
  json_out::put_u64(out, e.time_ns);
  out += ",\"data\":";
  out += e.payload;  // one JSON object on one line (EventBus::publish checks)
  out += "}\n\n";
}

size_t copy_out(EventStream& st, char* buf, size_t max) {
  const size_t n = std::min(max, st.out.size() - st.out_pos);
  std::memcpy(buf, st.out.data() + st.out_pos, n);
  st.out_pos += n;
  return n;
}

ssize_t read_stream(void* cls, uint64_t, char* buf, size_t max) {
  auto& st = *static_cast<EventStream*>(cls);
  Impl& s = *st.server;
  try {
    for (int round = 0;; ++round) {
      if (st.out_pos < st.out.size()) {
        // The client took what came before: the next text must be taken within write_timeout.
        const MHD_ConnectionInfo* info =
            MHD_get_connection_info(st.connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        if (info != nullptr && info->socket_context != nullptr)
          s.set_deadline(static_cast<Conn*>(info->socket_context), s.options.write_timeout);
        return static_cast<ssize_t>(copy_out(st, buf, max));
      }
      st.out.clear();
      st.out_pos = 0;
      if (st.ending || s.stopping.load()) return MHD_CONTENT_READER_END_OF_STREAM;
      if (st.sub->dropped()) {
        st.count_drop();
        st.out = ": dropped (";
        st.out += bus_drop_reason_name(st.sub->drop_reason());
        st.out += "): resume with Last-Event-ID\n\n";
        st.ending = true;
        continue;
      }
      st.batch.clear();
      if (st.sub->take(&st.batch, kBatchEvents, kStreamBlockBytes) != 0) {
        for (const BusEvent& e : st.batch) put_event(st.out, e);
        std::lock_guard<std::mutex> lock(st.mu);
        st.last_sent = SteadyClock::now();
        continue;
      }
      std::lock_guard<std::mutex> lock(st.mu);
      if (SteadyClock::now() - st.last_sent >= s.options.event_heartbeat) {
        st.out = ": heartbeat\n\n";
        st.last_sent = SteadyClock::now();
        continue;
      }
      if (st.woken || s.stopping.load()) {  // a wake came since the take: look again
        st.woken = false;
        continue;
      }
      // Nothing to send: suspended until a wake. Its deadline waits for the heartbeat.
      st.suspended = true;
      MHD_suspend_connection(st.connection);
      const MHD_ConnectionInfo* info =
          MHD_get_connection_info(st.connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
      if (info != nullptr && info->socket_context != nullptr)
        s.set_deadline(static_cast<Conn*>(info->socket_context),
                       std::chrono::duration_cast<std::chrono::milliseconds>(
                           s.options.event_heartbeat + s.options.write_timeout));
      return 0;
    }
  } catch (...) {  // out of memory: the stream ends; the client resumes with Last-Event-ID
    return MHD_CONTENT_READER_END_WITH_ERROR;
  }
}

void free_stream(void* cls) {
  auto* st = static_cast<EventStream*>(cls);
  Impl& s = *st->server;
  st->sub->close();  // no wake runs or starts after this
  {
    std::lock_guard<std::mutex> lock(s.streams_mutex);
    s.streams.erase(st);
  }
  s.nr_streams.fetch_sub(1, std::memory_order_relaxed);
  delete st;
}

// "", or digits of a value in 0..UINT64_MAX: the id. False for anything else (a sign, spaces,
// 21 digits, a number past 2^64 - 1).
bool parse_event_id(std::string_view text, uint64_t* out) {
  *out = 0;
  if (text.size() > 20) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

// "a,b,c" of event type names: their bits; false (with the bad name) for an unknown or empty one.
bool parse_types(std::string_view text, uint32_t* mask, std::string* bad) {
  *mask = 0;
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view name = text.substr(0, comma);
    BusEventType t;
    if (!parse_bus_event_type(name, &t)) {
      bad->assign(name.substr(0, 64));
      return false;
    }
    *mask |= bus_type_bit(t);
    if (comma == std::string_view::npos) return true;
    text.remove_prefix(comma + 1);
  }
}

}  // namespace

MHD_Result reply_json_error(MHD_Connection* c, unsigned status, std::string_view message) {
  std::string body = "{\"error\":";
  json_out::put_string(body, message);
  body += ",\"status\":";
  json_out::put_u64(body, status);
  body += "}\n";
  MHD_Response* r = MHD_create_response_from_buffer(body.size(), body.data(), MHD_RESPMEM_MUST_COPY);
  if (r == nullptr) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
  if (status == 503) MHD_add_response_header(r, "Retry-After", "1");
  const MHD_Result ok = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ok;
}

MHD_Result serve_events(Impl& s, MHD_Connection* c) {
  BusFilter filter;
  if (s.stopping.load()) return reply_json_error(c, 503, "the server is stopping");
  if (const char* group = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "group")) {
    filter.subtree = group;
    if (!bus_subtree_valid(filter.subtree)) return reply_json_error(c, 400, "invalid group path");
    if (!s.ctl.lookup(filter.subtree)) return reply_json_error(c, 404, "no such group");
  }
  if (const char* types = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "type")) {
    std::string bad;
    if (!parse_types(types, &filter.types, &bad))
      return reply_json_error(c, 400, "unknown event type '" + bad + "'");
  }
  uint64_t after = 0;
  const char* id_header = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID");
  const char* id_arg = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "last_event_id");
  if (id_header != nullptr && !parse_event_id(id_header, &after))
    return reply_json_error(c, 400, "Last-Event-ID is not an event id (decimal, below 2^64)");
  if (id_header == nullptr && id_arg != nullptr && !parse_event_id(id_arg, &after))
    return reply_json_error(c, 400, "last_event_id is not an event id (decimal, below 2^64)");

  if (s.nr_streams.fetch_add(1, std::memory_order_relaxed) >= s.options.max_event_streams) {
    s.nr_streams.fetch_sub(1, std::memory_order_relaxed);
    s.streams_refused.fetch_add(1, std::memory_order_relaxed);
    return reply_json_error(c, 503, "too many event streams");
  }
  auto* st = new (std::nothrow) EventStream;
  if (st == nullptr) {
    s.nr_streams.fetch_sub(1, std::memory_order_relaxed);
    return reply_json_error(c, 503, "out of memory");
  }
  st->server = &s;
  st->connection = c;
  st->last_sent = SteadyClock::now();
  int err;
  try {
    err = s.ctl.events().subscribe(filter, after, s.options.event_stream_lag,
                                   [st] { st->wake(); }, &st->sub);
  } catch (...) {
    err = ENOMEM;
  }
  if (err != 0) {
    delete st;
    s.nr_streams.fetch_sub(1, std::memory_order_relaxed);
    if (err == EINVAL) return reply_json_error(c, 400, "invalid group path");
    if (err == EAGAIN) {
      s.streams_refused.fetch_add(1, std::memory_order_relaxed);
      return reply_json_error(c, 503, "too many event subscribers");
    }
    return reply_json_error(c, 503, "out of memory");
  }
  st->watched.store(st->sub.get(), std::memory_order_release);
  // The first text: the client sees the answer's headers at once and knows how soon to retry.
  st->out = ": memcg events\nretry: 1000\n\n";
  {
    std::lock_guard<std::mutex> lock(s.streams_mutex);
    try {
      s.streams.insert(st);
    } catch (...) {
      free_stream(st);  // (not listed: erase is a no-op)
      return reply_json_error(c, 503, "out of memory");
    }
  }
  MHD_Response* r =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, kStreamBlockBytes, &read_stream, st,
                                        &free_stream);
  if (r == nullptr) {
    free_stream(st);
    return MHD_NO;
  }
  s.streams_opened.fetch_add(1, std::memory_order_relaxed);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  MHD_add_response_header(r, "X-Accel-Buffering", "no");
  const MHD_Result ok = MHD_queue_response(c, 200, r);
  MHD_destroy_response(r);
  return ok;
}

void Impl::wake_streams(bool all) noexcept {
  const SteadyClock::time_point now = SteadyClock::now();
  std::lock_guard<std::mutex> lock(streams_mutex);
  for (EventStream* st : streams) {
    if (!all) {
      std::lock_guard<std::mutex> l(st->mu);
      if (!st->suspended || now - st->last_sent < options.event_heartbeat) continue;
    }
    st->wake();
  }
}

}  // namespace memcg::http::detail
