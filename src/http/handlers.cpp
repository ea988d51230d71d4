// The request side of memcg::http::Server: libmicrohttpd's callbacks, the request checks (path,
// headers, body, token) and the answers. Runs on libmicrohttpd's worker threads; no exception
// leaves a callback (they are C callbacks): a failure answers 500 or 503, or closes.
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string_view>

#include "memcg/base/internal/defer_callbacks.hpp"
#include "memcg/files/files.hpp"
#include "memcg/files/prometheus.hpp"
#include "memcg/core/signal/event_bus.hpp"
#include "memcg/http/json.hpp"
#include "memcg/http/oom_json.hpp"
#include "actions.hpp"
#include "answer.hpp"
#include "metrics_answer.hpp"
#include "json_put.hpp"
#include "oom_page.hpp"
#include "page.hpp"
#include "server_impl.hpp"
#include "target.hpp"

namespace memcg::http::detail {
namespace {


// kAct: PUT or DELETE, served only on the action paths (actions.hpp).
enum class Method : uint8_t { kRead, kPost, kAct, kOther };

// One request (libmicrohttpd's per-request context): created by the URI callback, which sees
// the raw target before libmicrohttpd decodes it, freed by the completion callback.
struct Request {
  std::string raw_target;  // bounded by max_header_bytes (it was in the connection's buffer)
  std::string path;        // decoded, checked
  int target_status = 0;   // 0, or the status the target earns (400)
  Method method = Method::kOther;
  bool headers_seen = false;
  bool answered = false;   // an answer was queued before the body ended
  std::string body;        // at most max_body_bytes
  size_t body_bytes = 0;   // received, kept or not
  std::string group, file; // of a POST
  std::string verb;        // the method's name, for the action paths
  std::string token_id;    // of a POST: how its token is named in the audit
  std::string audit_body;  // of a POST: the body, kept for the audit once moved to the write
};

// A generated answer: the body lives until libmicrohttpd has sent it or dropped the connection;
// then it gives back its place among the answers in flight (when it took one).
std::string errno_name(int err) {
  const char* name = ::strerrorname_np(err);
  return name != nullptr ? name : "E" + std::to_string(err);
}

int status_for_write_error(int err) {
  switch (err) {
    case EINVAL:
    case ERANGE:
      return 400;
    case ENOENT:
    case ENODEV:  // the group was removed while the write was on its way (files.hpp)
      return 404;
    case EACCES:
      return 405;
    case EBUSY:
      return 409;
    case EAGAIN:
    case EINTR:
      return 503;
    default:
      return 500;
  }
}

Conn* conn_of(MHD_Connection* c) {
  const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return info != nullptr ? static_cast<Conn*>(info->socket_context) : nullptr;
}

// ---- libmicrohttpd's notifications ----

void* on_target(void*, const char* uri, MHD_Connection*) {
  auto* r = new (std::nothrow) Request;
  if (r == nullptr) return nullptr;
  try {
    r->raw_target = uri;
    r->target_status = decode_target(r->raw_target, &r->path);
  } catch (...) {
    delete r;
    return nullptr;
  }
  return r;
}

void on_connection(void* cls, MHD_Connection* c, void** socket_context,
                   MHD_ConnectionNotificationCode code) {
  Impl& s = *static_cast<Impl*>(cls);
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    // Accepted: libmicrohttpd took it past the per-peer limit. Counted here, before the worker
    // reads the request, so that stats() never lags behind an answer a client got, and never
    // counts a connection that was refused (the acceptor counts those).
    s.accepted.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(s.conns_mutex);
      if (s.pending_starts > 0) --s.pending_starts;
    }
    const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    auto* conn = new (std::nothrow) Conn;
    if (conn == nullptr || info == nullptr) {
      // Without a record the connection has no deadline: cut it (its close notification, with
      // a null context, follows).
      delete conn;
      if (info != nullptr) ::shutdown(info->connect_fd, SHUT_RDWR);
      return;
    }
    conn->fd = info->connect_fd;
    conn->deadline = SteadyClock::now() + s.options.read_timeout;
    // Through the Unix socket: the peer is its uid (checked against the allowed ones when
    // accepted, listener.cpp), which authorises its writes instead of the token.
    const MHD_ConnectionInfo* addr = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (addr != nullptr && addr->client_addr != nullptr &&
        addr->client_addr->sa_family == AF_UNIX) {
      ucred cred{};
      socklen_t len = sizeof cred;
      if (::getsockopt(conn->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        delete conn;
        ::shutdown(info->connect_fd, SHUT_RDWR);
        return;
      }
      conn->unix_peer = true;
      conn->uid = cred.uid;
    }
    std::lock_guard<std::mutex> lock(s.conns_mutex);
    try {
      s.conns.insert(conn);
    } catch (...) {
      delete conn;
      ::shutdown(info->connect_fd, SHUT_RDWR);
      return;
    }
    *socket_context = conn;
  } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    auto* conn = static_cast<Conn*>(*socket_context);
    if (conn == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(s.conns_mutex);
      s.conns.erase(conn);
    }
    delete conn;
    *socket_context = nullptr;
  }
}

void on_completed(void* cls, MHD_Connection* c, void** con_cls, MHD_RequestTerminationCode) {
  Impl& s = *static_cast<Impl*>(cls);
  delete static_cast<Request*>(*con_cls);
  *con_cls = nullptr;
  // The next request on the connection must arrive within read_timeout from now.
  if (Conn* conn = conn_of(c)) s.set_deadline(conn, s.options.read_timeout);
}

// ---- the checks before the body ----

// Constant time for the expected token's length: the loop always runs over `expected`, and the
// given token's length only decides the result.
bool same_token(std::string_view given, std::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= static_cast<unsigned char>(g ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0;
}

// "Bearer <token>", the scheme in any case (RFC 9110: auth schemes are case-insensitive).
bool bearer_matches(std::string_view auth, std::string_view token) {
  constexpr std::string_view kScheme = "bearer";
  if (auth.size() <= kScheme.size() || auth[kScheme.size()] != ' ') return false;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if ((auth[i] | 0x20) != kScheme[i]) return false;
  std::string_view rest = auth.substr(kScheme.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\t')) rest.remove_suffix(1);
  return same_token(rest, token);
}

// The token's name in audit records: ServerOptions::token_name for the configured token, else a
// fingerprint of what was shown (never the token); "" when none was.
std::string token_id_of(const Impl& s, const char* auth) {
  if (auth == nullptr) return {};
  std::string_view rest = auth;
  const size_t space = rest.find(' ');
  rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\t')) rest.remove_suffix(1);
  if (!s.options.token_name.empty() && !s.options.token.empty() &&
      bearer_matches(auth, s.options.token))
    return s.options.token_name;
  return token_fingerprint(rest);
}

// Audits the POST `r` answered `status` (audit.hpp).
void audit_post(Impl& s, MHD_Connection* c, const Request& r, unsigned status,
                std::string_view result, std::string old_value = {}) {
  AuditRecord a = audit_request(c, "POST", r.path);
  a.token_id = r.token_id;
  a.old_value = std::move(old_value);
  a.new_value = r.body.empty() ? r.audit_body : r.body;
  a.status = static_cast<int>(status);
  a.result.assign(result);
  s.audit.record(std::move(a));
}

// Audits the action `r` (actions.hpp) answered `status`: the body (or the query) as the new
// value, what it acted on before as the old one.
void audit_action(Impl& s, MHD_Connection* c, const Request& r, unsigned status,
                  std::string_view result, std::string old_value) {
  AuditRecord a = audit_request(c, r.verb, r.path);
  a.token_id = r.token_id;
  a.old_value = std::move(old_value);
  const size_t q = r.raw_target.find('?');
  a.new_value = !r.body.empty() ? r.body.substr(0, kAuditValueBytes + 4)
                : q != std::string::npos ? r.raw_target.substr(q, kAuditValueBytes + 4)
                                         : std::string();
  a.status = static_cast<int>(status);
  a.result.assign(result);
  s.audit.record(std::move(a));
}

// The first call of a request, its headers complete: anything refused on them is answered
// before the body is read. MHD_YES to go on, or the result of the refusal.
MHD_Result check_headers(Impl& s, MHD_Connection* c, Request& r, const char* method,
                         bool* refused) {
  *refused = true;
  const int n = MHD_get_connection_values(c, MHD_HEADER_KIND, nullptr, nullptr);
  if (n < 0 || static_cast<size_t>(n) > s.options.max_headers)
    return reply(c, 431, "too many header lines");
  const std::string_view m = method;
  r.method = m == "GET" || m == "HEAD" ? Method::kRead
             : m == "POST"              ? Method::kPost
             : m == "PUT" || m == "DELETE" ? Method::kAct
                                           : Method::kOther;
  if (r.method == Method::kOther || (r.method == Method::kAct && !is_action_path(r.path)))
    return reply(c, 405, "method not allowed", {{"Allow", "GET, HEAD, POST"}});
  r.verb = m;
  // A body of unknown length (chunked) could only be refused once past the limit, and
  // libmicrohttpd cannot answer in the middle of a body: it is refused before it is read.
  if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding") != nullptr)
    return reply(c, 411, "a request body needs Content-Length");
  if (const char* len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length")) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(len, &end, 10);
    if (errno == 0 && end != len && v > s.options.max_body_bytes)
      return reply(c, 413, "request body too large");
  }
  // Actions (actions.hpp) are authorized as writes are, and their refusals audited the same.
  if (is_acting(m, r.path)) {
    const Conn* conn = conn_of(c);
    const bool by_uid = conn != nullptr && conn->unix_peer;
    const char* auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    r.token_id = by_uid ? std::string() : token_id_of(s, auth);
    auto refuse = [&](unsigned status, std::string_view why,
                      std::initializer_list<Header> extra = {}) {
      audit_action(s, c, r, status, why, {});
      return reply(c, status, why, extra);
    };
    if (!s.options.allow_writes)
      return refuse(405, "writes are disabled", {{"Allow", "GET, HEAD"}});
    if (!by_uid) {
      if (s.options.token.empty()) return refuse(403, "actions only over the Unix socket");
      if (auth == nullptr)
        return refuse(401, "bearer token required", {{"WWW-Authenticate", "Bearer"}});
      if (!bearer_matches(auth, s.options.token)) return refuse(403, "wrong token");
    }
    if (r.target_status != 0) return refuse(400, "invalid path");
  }
  if (r.method == Method::kPost && is_file_target(r.path)) {
    const Conn* conn = conn_of(c);
    const bool by_uid = conn != nullptr && conn->unix_peer;
    const char* auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    r.token_id = by_uid ? std::string() : token_id_of(s, auth);
    // Every refusal of a write is audited too: who tried what.
    auto refuse = [&](unsigned status, std::string_view why,
                      std::initializer_list<Header> extra = {}) {
      audit_post(s, c, r, status, why);
      return reply(c, status, why, extra);
    };
    if (!s.options.allow_writes)
      return refuse(405, "writes are disabled", {{"Allow", "GET, HEAD"}});
    if (!by_uid) {
      if (s.options.token.empty()) return refuse(403, "writes only over the Unix socket");
      if (auth == nullptr)
        return refuse(401, "bearer token required", {{"WWW-Authenticate", "Bearer"}});
      if (!bearer_matches(auth, s.options.token)) return refuse(403, "wrong token");
    }
    if (r.target_status != 0 || !split_file_path(r.path, &r.group, &r.file))
      return refuse(400, "invalid path");
    // memory.pressure and memory.peak keep state per open file (a trigger, a reset point) that
    // a one-shot write would discard at once: refused rather than silently doing nothing.
    if (r.file == "memory.pressure" || r.file == "memory.peak")
      return refuse(405, "per-open-file state: not writable over HTTP", {{"Allow", "GET, HEAD"}});
  }
  *refused = false;
  return MHD_YES;
}

// ---- the answers ----

MHD_Result get_file(Impl& s, MHD_Connection* c, const Request& r) {
  std::string group_path, file;
  if (!split_file_path(r.path, &group_path, &file)) return reply(c, 400, "invalid path");
  GroupRef g = s.ctl.lookup(group_path);
  if (!g) return reply(c, 404, "no such group");
  std::string text;
  if (int err = read_file(*g, file, &text)) {
    // Removed since the lookup: its files are gone (ENOENT at open, ENODEV once open).
    if (err == ENODEV || (err == ENOENT && !g->is_online())) return reply(c, 404, "no such group");
    if (err == ENOENT) return reply(c, 404, "no such file");
    if (err == EACCES) return reply(c, 405, "write-only file", {{"Allow", "POST"}});
    return reply(c, 500, errno_name(err));
  }
  return send(c, 200, std::move(text), kTextType);
}

// A whole generated document, within max_answers_in_flight.
template <typename Render>
MHD_Result document(Impl& s, MHD_Connection* c, const char* type, Render render) {
  if (!take_place(s)) return too_busy(c);
  std::string body;
  try {
    body = render();
  } catch (...) {
    s.answers_in_flight.fetch_sub(1, std::memory_order_relaxed);
    throw;
  }
  return send(c, 200, std::move(body), type, &s.answers_in_flight);
}

// A generated page, within max_answers_in_flight; 404 with `missing` when render() gives "".
template <typename Render>
MHD_Result page_or_404(Impl& s, MHD_Connection* c, const char* missing, Render render) {
  if (!take_place(s)) return too_busy(c);
  std::string body;
  try {
    body = render();
  } catch (...) {
    s.answers_in_flight.fetch_sub(1, std::memory_order_relaxed);
    throw;
  }
  if (body.empty()) {
    s.answers_in_flight.fetch_sub(1, std::memory_order_relaxed);
    return reply(c, 404, missing);
  }
  return send(c, 200, std::move(body), "text/html; charset=utf-8", &s.answers_in_flight);
}

// "/group", "/group/" (the root) or "/group/<path>": the group's path ("" for the root), or
// false for a path with an empty, "." or ".." segment.
bool group_page_path(std::string_view target, std::string* path) {
  constexpr std::string_view kPrefix = "/group/";
  std::string_view rest = target == "/group" ? std::string_view() : target.substr(kPrefix.size());
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  for (size_t start = 0; start < rest.size();) {
    const size_t slash = std::min(rest.find('/', start), rest.size());
    const std::string_view seg = rest.substr(start, slash - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    start = slash + 1;
  }
  path->assign(rest);
  return true;
}

// "/oom/<seq>": seq (1..), or 0 when it is not a number.
uint64_t oom_page_seq(std::string_view target) {
  const std::string_view digits = target.substr(5);
  if (digits.empty() || digits.size() > 19) return 0;
  uint64_t n = 0;
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return 0;
    n = n * 10 + static_cast<uint64_t>(ch - '0');
  }
  return n;
}

MHD_Result serve_read(Impl& s, MHD_Connection* c, const Request& r) {
  // Reads deliver no notification here: they stay for the threads that deliver them.
  internal::DeferCallbacks defer;
  if (r.target_status != 0) return reply(c, 400, "invalid path");
  if (r.path == "/healthz") return reply(c, 200, "ok");
  if (r.path == "/metrics") return serve_metrics(s, c, r.raw_target);
  if (r.path == "/v1/groups")
    return document(s, c, "application/json", [&] { return render_groups_json(s.ctl); });
  if (r.path == "/v1/oom")
    return document(s, c, "application/json", [&] { return render_oom_json(s.ctl); });
  if (r.path == "/v1/events") return serve_events(s, c);
  if (r.path == "/v1/audit")
    return document(s, c, "application/json", [&] { return s.audit.render_json(); });
  if (r.path == "/v1/oom.txt")
    return document(s, c, kTextType, [&] { return render_oom_text(s.ctl); });
  if (r.path == "/")
    return document(s, c, "text/html; charset=utf-8", [&] {
      // A page asked for soon after start shows a point more than the sampler's.
      s.history.sample_if_older(
          s.ctl, static_cast<uint64_t>(s.options.history_interval.count()) * 250'000);
      return render_page(s.ctl, s.history, page_of_target(r.raw_target),
                         static_cast<uint64_t>(s.options.history_interval.count()),
                         2 * s.options.history_groups * s.options.history_samples * 64,
                         sort_of_target(r.raw_target));
    });
  if (r.path == "/group" || r.path.rfind("/group/", 0) == 0) {
    std::string group;
    if (!group_page_path(r.path, &group)) return reply(c, 400, "invalid path");
    return page_or_404(s, c, "no such group", [&] {
      s.history.sample_if_older(
          s.ctl, static_cast<uint64_t>(s.options.history_interval.count()) * 250'000);
      return render_group_page(s.ctl, s.history, group,
                               static_cast<uint64_t>(s.options.history_interval.count()),
                               2 * s.options.history_groups * s.options.history_samples * 64,
                               s.options.runbook_base);
    });
  }
  if (r.path.rfind("/oom/", 0) == 0) {
    const uint64_t seq = oom_page_seq(r.path);
    if (seq == 0) return reply(c, 404, "no such report");
    return page_or_404(s, c, "no such report (the OOM log keeps the most recent ones)",
                       [&] { return render_oom_page(s.ctl, seq); });
  }
  if (is_file_target(r.path)) return get_file(s, c, r);
  return reply(c, 404, "not found");
}

MHD_Result serve_write(Impl& s, MHD_Connection* c, Request& r) {
  if (!is_file_target(r.path)) return reply(c, 404, "not found");
  r.audit_body = r.body.substr(0, kAuditValueBytes + 4);
  GroupRef g = s.ctl.lookup(r.group);
  if (!g) {
    audit_post(s, c, r, 404, "no such group");
    return reply(c, 404, "no such group");
  }
  auto job = std::make_shared<WriteJob>();
  job->group = std::move(g);
  job->file = r.file;
  job->text = std::move(r.body);
  // Audited once answered, with the value the file had before (read by the writer).
  std::string old_value;
  auto answer = [&](unsigned status, std::string_view text,
                    std::initializer_list<Header> extra = {}) {
    audit_post(s, c, r, status, text, old_value);
    if (status == 200 || status == 202) {
      // The write on the event stream, about its group (event_bus.hpp).
      std::string p = "{\"file\":";
      json_out::put_string(p, r.file);
      p += ",\"old\":";
      json_out::put_string(p, old_value.substr(0, kAuditValueBytes));
      p += ",\"new\":";
      json_out::put_string(p, r.audit_body.substr(0, kAuditValueBytes));
      p += ",\"status\":" + std::to_string(status) + "}";
      s.ctl.events().publish(BusEventType::kWrite, r.group == "/" ? "/" : r.group, p);
    }
    return reply(c, status, text, extra);
  };
  Writer& w = *s.writer;
  std::unique_lock<std::mutex> lock(w.mutex);
  if (w.stopping) {
    lock.unlock();
    return answer(503, "the server is stopping");
  }
  if (w.job) {
    lock.unlock();
    return answer(503, "another write is running", {{"Retry-After", "1"}});
  }
  w.job = job;
  w.cv.notify_all();
  const auto until = SteadyClock::now() + s.options.read_timeout;
  w.cv.wait_until(lock, until, [&] { return job->done || w.stopping; });
  if (job->old_read) old_value = job->old_value;  // read before the write started
  if (!job->done) {
    if (!job->started) {  // stopping: it never will
      w.job.reset();
      lock.unlock();
      return answer(503, "the server is stopping");
    }
    lock.unlock();
    return answer(202, "the write is still running");
  }
  lock.unlock();
  const int err = job->result;
  if (err == 0) return answer(200, "ok");
  if (err == ENOENT) return answer(404, "no such file");
  if (err == EACCES) return answer(405, errno_name(err), {{"Allow", "GET, HEAD"}});
  return answer(status_for_write_error(err), errno_name(err));
}

// An action path (actions.hpp): reads are documents within max_answers_in_flight.
MHD_Result serve_action(Impl& s, MHD_Connection* c, const Request& r) {
  ActionAnswer a;
  if (r.method == Method::kRead) {
    if (!take_place(s)) return too_busy(c);
    try {
      a = serve_action_read(s, r.path, r.raw_target);
    } catch (...) {
      s.answers_in_flight.fetch_sub(1, std::memory_order_relaxed);
      throw;
    }
    return send(c, a.status, std::move(a.body), "application/json", &s.answers_in_flight);
  }
  a = serve_action_write(s, r.verb, r.path, r.raw_target, r.body);
  // Audited, and on the event stream when applied (event_bus.hpp), about ActionAnswer::group.
  audit_action(s, c, r, a.status, a.result, a.old_value);
  if (a.status == 200 || a.status == 202) {
    std::string p = "{\"method\":";
    json_out::put_string(p, r.verb);
    p += ",\"path\":";
    json_out::put_string(p, r.path);
    p += ",\"status\":" + std::to_string(a.status) + ",\"result\":";
    json_out::put_string(p, a.result);
    p += '}';
    s.ctl.events().publish(BusEventType::kAction, a.group, p);
  }
  if (a.allow != nullptr)
    return send(c, a.status, std::move(a.body), "application/json", nullptr,
                {{"Allow", a.allow}});
  if (a.retry_after)
    return send(c, a.status, std::move(a.body), "application/json", nullptr,
                {{"Retry-After", "1"}});
  return send(c, a.status, std::move(a.body), "application/json");
}

MHD_Result on_request(void* cls, MHD_Connection* c, const char*, const char* method,
                      const char*, const char* upload, size_t* upload_size, void** con_cls) {
  Impl& s = *static_cast<Impl*>(cls);
  auto* r = static_cast<Request*>(*con_cls);
  if (r == nullptr) return MHD_NO;  // no memory for its record: close
  try {
    if (!r->headers_seen) {
      r->headers_seen = true;
      bool refused = false;
      const MHD_Result res = check_headers(s, c, *r, method, &refused);
      if (refused) r->answered = true;
      return res;
    }
    if (*upload_size != 0) {
      // The body, as it comes (at most its Content-Length); nothing over the limit is kept.
      r->body_bytes += *upload_size;
      if (r->body_bytes > s.options.max_body_bytes) {
        *upload_size = 0;
        // Only a body longer than its Content-Length said (checked before the body) gets here,
        // and libmicrohttpd cannot answer in the middle of a body: close.
        return MHD_NO;
      }
      if (r->method != Method::kRead && !r->answered) r->body.append(upload, *upload_size);
      *upload_size = 0;
      return MHD_YES;
    }
    if (r->answered) return MHD_YES;
    r->answered = true;
    // The answer must be taken within write_timeout.
    if (Conn* conn = conn_of(c)) s.set_deadline(conn, s.options.write_timeout);
    if (r->target_status == 0 && is_action_path(r->path)) return serve_action(s, c, *r);
    return r->method == Method::kPost ? serve_write(s, c, *r) : serve_read(s, c, *r);
  } catch (const std::bad_alloc&) {
    return reply(c, 503, "out of memory");
  } catch (...) {
    return reply(c, 500, "internal error");
  }
}

}  // namespace

void Impl::set_deadline(Conn* c, std::chrono::milliseconds from_now) {
  std::lock_guard<std::mutex> lock(conns_mutex);
  c->deadline = SteadyClock::now() + from_now;
}

MHD_Daemon* Impl::start_daemon() {
  // Suspend and resume: an event stream with nothing to send waits suspended (events_stream.cpp).
  const unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                         MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME;
  const unsigned pool = options.threads > 1 ? static_cast<unsigned>(options.threads) : 0;
  return MHD_start_daemon(
      flags, 0, nullptr, nullptr, &on_request, this,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<size_t>(options.max_header_bytes),
      // The acceptor enforces max_connections; libmicrohttpd's own limit (split evenly among its
      // workers) is a backstop with room for an uneven split.
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned>(2 * max_connections + 8 * options.threads),
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, static_cast<unsigned>(options.max_connections_per_peer),
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(options.keep_alive_timeout.count()),
      MHD_OPTION_THREAD_POOL_SIZE, pool,
      MHD_OPTION_NOTIFY_CONNECTION, &on_connection, this,
      MHD_OPTION_NOTIFY_COMPLETED, &on_completed, this,
      MHD_OPTION_URI_LOG_CALLBACK, &on_target, this,
      MHD_OPTION_END);
}

}  // namespace memcg::http::detail
