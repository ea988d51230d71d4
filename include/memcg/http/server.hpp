// memcg::http::Server: a small HTTP endpoint that lets people and monitoring systems watch one
// Controller while the process runs (optional component memcg::http, built on libmicrohttpd).
//
//   GET  /metrics                    the Prometheus text exposition (render_prometheus), content
//                                    type "text/plain; version=0.0.4; charset=utf-8"
//   GET  /v1/groups                  every online group as JSON (render_groups_json, json.hpp)
//   GET  /v1/groups/<path>/<file>    the file's text, byte-identical to read_file(); the root's
//                                    files are /v1/groups/<file>
//   GET  /                           the live page (HTML with inline SVG, no script, no external
//                                    asset): the groups, largest first, 100 a page (`/?page=N`),
//                                    each drawn against min/low/high/max; the history of the
//                                    largest groups (memory.current, PSI some/full, events and
//                                    kills marked; PSI on its own percent axis; a kill's mark
//                                    links to its report); the last OOM reports
//   GET  /group/<path>               one group's page (/group/ for the root): its history and
//                                    events over time, its largest members with their admitted
//                                    sizes, the OOM reports that concern it, its files
//   GET  /oom/<seq>                  one OOM or preemption report as a page
//   GET  /v1/oom                     the recent OOM and preemption reports as JSON (oom_json.hpp)
//   GET  /v1/oom.txt                 the same, one text line a report
//   GET  /healthz                    "ok"
//   POST /v1/groups/<path>/<file>    write_file() with the request body; only when writes are
//                                    enabled, and only with "Authorization: Bearer <token>" (or
//                                    from an allowed uid on the Unix socket)
//   GET  /v1/events                  the controller's event bus as Server-Sent Events
//                                    (Last-Event-ID resumes; ?group=, ?type= filter): docs/http.md
//   GET  /v1/audit                   the recent writes and actions (audit.hpp) as JSON
//
// Statuses: 400 malformed path ("..", ".", empty, or a control character or non-ASCII byte, raw or
// percent-encoded: no path ever leaves the group tree), 404 unknown group or file, 405 method not
// allowed (writes disabled, read-only or write-only file), 401 missing bearer token, 403 wrong
// token, 411 a body without Content-Length (chunked), 413 a body over the size limit, 431 too
// many headers, 503 too many answers in flight. A
// refused write maps write_file()'s error: EINVAL and ERANGE 400, ENOENT 404, EBUSY 409, EAGAIN
// and EINTR 503, anything else 500; the body names the errno ("EBUSY\n"). A refused request
// changes nothing. Answers are whole documents: ranges are never served (Accept-Ranges: none).
//
// Every resource a client can make the server use is bounded by the options below whatever it
// sends (docs/http.md lists each bound and what happens past it): the bytes of the request line
// and headers, their number, the body, connections open at once in total and per peer address,
// the time to send a request and to take its answer, and the answers held at once.
//
// Safety defaults: binds 127.0.0.1 (another address only when ServerOptions::address says so; a
// numeric IPv4 or IPv6 address, never a name to resolve); writes off; responses never compressed.
// There is no TLS: put a proxy in front of it to expose it beyond the host.
//
// Threads: an acceptor (which also enforces the per-request deadlines), `threads` workers that
// multiplex the connections (an idle or slow client holds a connection slot, never a worker), and
// one writer that runs POSTed writes. Reads run no application callback: notifications a read
// would deliver (event listeners, PSI triggers) are left for the threads that normally deliver
// them. A write may reclaim, run application reclaimers and the OOM killer with its kill
// callbacks, on the writer thread; the request waits for it at most read_timeout (then 202).
//
// Charging: the server's threads are never attached to a group (attach.hpp), so with the global
// hook (hook.hpp) linked nothing they allocate is charged to a tenant; start() and stop() make
// their own allocations as the library does (uncharged), so they may be called from an attached
// thread whose group is full. Serving never blocks charging: the charge hot path takes no lock.
//
// Thread safety: start(), stop() and the accessors may be called from any thread; one Server is
// driven by one owner (start and stop are not meant to race each other).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "memcg/http/audit.hpp"

namespace memcg {
class Controller;
class ProcessBudget;  // memcg/core/admission/budget.hpp
}

namespace memcg::http {

namespace detail {
struct Impl;  // src/http/server_impl.hpp
}

struct ServerOptions {
  // Numeric address to bind: "127.0.0.1" (default, loopback only), "::1", "0.0.0.0", ...
  std::string address = "127.0.0.1";
  // TCP port; 0 picks a free one (see Server::port()). 0..65535.
  int port = 0;
  // Worker threads serving the connections. 1..64. Connections are multiplexed: an idle or slow
  // client does not hold a worker; a worker is busy only while it renders an answer.
  size_t threads = 4;
  // Connections open at once, beyond one per worker (threads + max_queued in all). 1..4096. At
  // the limit no connection is accepted: further clients wait in the kernel's listen backlog.
  size_t max_queued = 64;
  // Connections open at once from one peer address. 1..4096. One over it is accepted and closed
  // at once (counted in ServerStats::refused).
  size_t max_connections_per_peer = 16;
  // Bytes of the request line and all header lines of one request together (what a connection
  // buffers for them): past it the request gets 414 or 431 and the connection is closed. Any one
  // line is bounded by it as well. 4 KiB..1 MiB.
  size_t max_header_bytes = 16 * 1024;
  // Header lines of one request; more get 431. 1..1024.
  size_t max_headers = 64;
  // Largest request body accepted; it must declare its length (Content-Length), and a larger
  // one gets 413 before any of it is read. A body of unknown length (any Transfer-Encoding,
  // chunked included) gets 411 whatever its size.
  // 1..1 MiB. Knob writes are a few bytes.
  size_t max_body_bytes = 16 * 1024;
  // Generated documents (/metrics, /v1/groups) being rendered or sent at once; more get 503
  // (with Retry-After). 1..64. What bounds the memory of answers: each holds a whole document
  // (/v1/groups), or the values of every group and a 256 KiB send buffer (/metrics, written
  // while it is sent).
  size_t max_answers_in_flight = 4;
  // A request (line, headers and body) must arrive within read_timeout of the connection's
  // opening or of the previous answer's end; an answer must be taken within write_timeout.
  // Past either the connection is closed. 1 ms..300 s.
  std::chrono::milliseconds read_timeout{5000};
  std::chrono::milliseconds write_timeout{5000};
  // A connection silent for this long is closed: an idle keep-alive connection, or a client that
  // stops sending or reading mid-request. 1..300 s.
  std::chrono::seconds keep_alive_timeout{1};
  // POST /v1/groups/<path>/<file> is served only when true, and then `token` (non-empty, at
  // most 4096 bytes, printable ASCII without spaces) must be given as a bearer token.
  bool allow_writes = false;
  std::string token;
  // The process budget that PUT /v1/budget sets (budget.hpp); null: the server keeps its own.
  // Give the one memcg::host's BindOptions::budget names, so that both hold the root together.
  // REQUIRES: outlives the server.
  ProcessBudget* budget = nullptr;
  // The page's history: every history_interval (100 ms..60 s, on a server thread; the samples
  // carry the controller's clock) memory.current, PSI some/full and the event counts of the
  // history_groups largest groups (1..1024) are added to a ring of history_samples samples
  // (2..3600) per group. Its memory is at most 2 x history_groups x history_samples x 64 bytes
  // plus the paths; history_groups x history_samples is at most 262144 (32 MiB).
  std::chrono::milliseconds history_interval{1000};
  size_t history_groups = 32;
  size_t history_samples = 300;
  // Where docs/operations.md is served (no trailing slash), for the runbook links of a group in
  // trouble on its page: <runbook_base>/operations.md#<alert>. Empty (the default): the page
  // names the runbook's paragraph without linking it. At most 1024 bytes, starting with
  // "https://", "http://" or "/", printable ASCII without spaces, quotes, '<' or '>'.
  std::string runbook_base;

  // ---- GET /v1/events: the event stream (Server-Sent Events, event_bus.hpp) ----
  // Streams open at once; one more gets 503. 1..4096. Each is also a connection (the limits
  // above hold) and a subscription of the controller's event bus.
  size_t max_event_streams = 64;
  // Events a stream may fall behind the newest before it is dropped (its queue): a client that
  // reads nothing is cut once that many events came since it last took one. 1..1000000; the
  // bus's ring capacity (4096 unless the application enabled the bus with other options) if
  // that is less.
  size_t event_stream_lag = 1024;
  // A comment line is sent on a stream silent for this long, so that proxies and clients see it
  // alive. A client that went away is noticed at the next heartbeat or event (a stream with
  // nothing to send is not polled), and gives its place back then. 100 ms..300 s.
  std::chrono::milliseconds event_heartbeat{15000};

  // ---- audit (audit.hpp): GET /v1/audit ----
  // Records kept (the oldest go first). 16..100000.
  size_t audit_records = 1024;
  // Called with each record, outside every lock; may be empty.
  AuditCallback audit_log;
  // Names the token in audit records instead of its fingerprint: printable ASCII without
  // spaces, at most 64 bytes; may be empty.
  std::string token_name;

  // ---- the Unix domain socket: an alternative to TCP and the token ----
  // When set, the server also listens on this path (at most 107 bytes), created with mode 0600.
  // A stale socket file there (no server answers on it) is replaced; any other file, or a live
  // socket, makes start() fail (EEXIST, EADDRINUSE). stop() removes it.
  std::string unix_socket;
  // Peers (SO_PEERCRED) allowed on the Unix socket, by uid; empty: only the process's own
  // effective uid. Another peer is closed at once (ServerStats::unix_refused). An allowed peer's
  // writes need no token (they are allowed when allow_writes is set; then `token` may be empty,
  // and TCP writes are refused with 403).
  std::vector<uint32_t> unix_allowed_uids;
};

// What the server met since start(): monotonic counts, for monitoring and tests.
struct ServerStats {
  uint64_t accepted = 0;        // connections a worker took (counted before it reads them)
  uint64_t refused = 0;         // connections closed at once: over the per-peer limit
                                // (never counted as accepted, not even for a moment)
  uint64_t timed_out = 0;       // connections closed by read_timeout or write_timeout
  uint64_t accept_errors = 0;   // accept() failures (EMFILE, ENFILE, ENOMEM, ENOBUFS, ...)
  uint64_t listener_losses = 0; // the listening socket failed and was closed (see running())
  uint64_t writes_abandoned = 0;  // writes still running when stop() returned
  uint64_t streams_opened = 0;    // GET /v1/events streams started
  uint64_t streams_refused = 0;   // ... refused at max_event_streams (503)
  uint64_t streams_dropped = 0;   // ... dropped by the event bus: fell behind event_stream_lag
  uint64_t unix_refused = 0;      // Unix socket peers whose uid is not allowed
  uint64_t audit_records = 0;     // audit records made
};

class Server {
 public:
  // REQUIRES: `controller` outlives the server (and any write stop() abandoned). Throws
  // std::invalid_argument when an option is out of range (the message names it).
  explicit Server(Controller& controller, ServerOptions options = {});
  // Stops the server if it runs.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds, listens and starts serving on background threads. Returns 0 once connections are
  // accepted, else an errno with `error` (if given) saying what failed: EALREADY when running,
  // EINVAL for an address that is not numeric, EADDRINUSE (or the bind's own errno) when the
  // port cannot be bound, EAGAIN or ENOMEM when a thread or the server's memory cannot be had,
  // EMFILE/ENFILE when descriptors run out. A failed start leaves the server stopped and may be
  // retried. Throws nothing.
  [[nodiscard]] int start(std::string* error = nullptr);
  // Stops accepting, closes every connection (answers being sent are cut), joins the threads.
  // Returns within read_timeout plus one second whatever clients do; a render in progress is
  // waited for. A write still running in an application callback (a reclaimer or an OOM kill
  // callback that blocks) is then left to finish on its own thread (ServerStats::
  // writes_abandoned): the controller must outlive it. Does nothing when stopped. After it
  // returns, no read handler runs and no further write starts.
  void stop();

  // True while started and listening. False after stop(), and while the listening socket is
  // lost (an accept() error that is not about one client or a resource shortage): the server
  // then binds the same address and port again every second and is true again once it could.
  bool running() const noexcept;
  // The bound port while started (the chosen one when options().port was 0), else 0.
  int port() const noexcept;
  const ServerOptions& options() const noexcept;
  // Counts since the last start() (kept after stop()).
  ServerStats stats() const noexcept;

 private:
  std::unique_ptr<detail::Impl> impl_;
};

}  // namespace memcg::http
