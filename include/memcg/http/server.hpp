// memcg::http::Server: a small HTTP endpoint that lets people and monitoring systems watch one
// Controller while the process runs (optional component memcg::http, built on cpp-httplib).
//
//   GET  /metrics                    the Prometheus text exposition (render_prometheus), content
//                                    type "text/plain; version=0.0.4; charset=utf-8"
//   GET  /v1/groups                  every online group as JSON (render_groups_json, json.hpp)
//   GET  /v1/groups/<path>/<file>    the file's text, byte-identical to read_file(); the root's
//                                    files are /v1/groups/<file>
//   GET  /healthz                    "ok"
//   POST /v1/groups/<path>/<file>    write_file() with the request body; only when writes are
//                                    enabled, and only with "Authorization: Bearer <token>"
//
// Statuses: 400 malformed path ("..", ".", empty or control characters: no path ever leaves the
// group tree), 404 unknown group or file, 405 method not allowed (writes disabled, read-only or
// write-only file), 401 missing bearer token, 403 wrong token, 413 body over the size limit. A
// refused write maps write_file()'s error: EINVAL and ERANGE 400, ENOENT 404, EBUSY 409, EAGAIN
// and EINTR 503, anything else 500; the body names the errno ("EBUSY\n"). A refused request
// changes nothing.
//
// Safety defaults: binds 127.0.0.1 (another address only when ServerOptions::address says so; a
// numeric IPv4 or IPv6 address, never a name to resolve); a fixed number of worker threads with a
// bounded queue of accepted connections (when it is full the acceptor waits, and further clients
// wait in the kernel's backlog); a request body limit; read, write and keep-alive timeouts; writes
// off; responses are never compressed (compressing a large exposition costs far more CPU than
// rendering it, and a client could ask for it on every request). There is no TLS: put a proxy in
// front of it to expose it beyond the host.
//
// Charging: the server's threads are never attached to a group (attach.hpp), so with the global
// hook (hook.hpp) linked nothing they allocate is charged to a tenant; start() and stop() make
// their own allocations as the library does (uncharged), so they may be called from an attached
// thread whose group is full. Serving never blocks charging: the charge hot path takes no lock;
// requests read through the file layer and render_prometheus(), which take the tree lock in
// shared mode and per-group locks of the slow paths (PSI), as any other reader does.
//
// Thread safety: start(), stop() and the accessors may be called from any thread; one Server is
// driven by one owner (start and stop are not meant to race each other).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

namespace memcg {
class Controller;
}

namespace memcg::http {

struct ServerOptions {
  // Numeric address to bind: "127.0.0.1" (default, loopback only), "::1", "0.0.0.0", ...
  std::string address = "127.0.0.1";
  // TCP port; 0 picks a free one (see Server::port()). 0..65535.
  int port = 0;
  // Worker threads serving connections. 1..64. A connection holds its worker for as long as it
  // is kept alive, idle time included (see keep_alive_timeout).
  size_t threads = 4;
  // Accepted connections waiting for a worker before the acceptor stops accepting. 1..4096.
  size_t max_queued = 64;
  // Largest request body accepted; larger ones get 413. 1..1 MiB. Knob writes are a few bytes.
  size_t max_body_bytes = 16 * 1024;
  // How long a worker waits for a request's bytes, and for the client to take the response.
  std::chrono::milliseconds read_timeout{5000};
  std::chrono::milliseconds write_timeout{5000};
  // An idle keep-alive connection is closed after this long. 1..300 s. Short by default: an
  // idle connection keeps a worker from serving others, and scrapers come back every few
  // seconds at most (memcgctl top's default interval is 1 s).
  std::chrono::seconds keep_alive_timeout{1};
  // POST /v1/groups/<path>/<file> is served only when true, and then `token` (non-empty, at
  // most 4096 bytes, printable ASCII without spaces) must be given as a bearer token.
  bool allow_writes = false;
  std::string token;
};

class Server {
 public:
  // REQUIRES: `controller` outlives the server. Throws std::invalid_argument when an option is
  // out of range (the message names it).
  explicit Server(Controller& controller, ServerOptions options = {});
  // Stops the server if it runs.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds, listens and starts serving on a background thread. Returns 0 once connections are
  // accepted, else an errno with `error` (if given) saying what failed: EALREADY when running,
  // EINVAL for an address that is not numeric, EADDRINUSE (or the bind's own errno) when the
  // port cannot be bound. A failed start leaves the server stopped and may be retried.
  // Throws only what the system throws when out of resources (std::bad_alloc, std::system_error
  // when a thread cannot be created).
  int start(std::string* error = nullptr);
  // Stops accepting, lets the requests being served finish (bounded by the timeouts), joins the
  // threads. Does nothing when stopped. After it returns, no handler runs.
  void stop();

  bool running() const noexcept;
  // The bound port while running (the chosen one when options().port was 0), else 0.
  int port() const noexcept;
  const ServerOptions& options() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memcg::http
