// The state of one running memcg::http::Server, shared by its parts: the acceptor
// (listener.cpp), the request handlers run by libmicrohttpd's workers (handlers.cpp), the writer
// (writer.cpp) and start/stop (server.cpp). Not installed.
#pragma once

#include <microhttpd.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <sys/stat.h>

#include "memcg/core/admission/budget.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/http/server.hpp"
#include "audit.hpp"
#include "history.hpp"

namespace memcg::http::detail {

using SteadyClock = std::chrono::steady_clock;

// One TCP connection, registered from libmicrohttpd's connection-start notification to its
// close notification (which comes before the descriptor is closed), so the acceptor may
// shutdown(2) a registered descriptor without ever touching a reused one.
struct Conn {
  int fd = -1;
  SteadyClock::time_point deadline{};  // guarded by Impl::conns_mutex
  bool cut = false;                    // shut down once; guarded by Impl::conns_mutex
  bool unix_peer = false;              // came through the Unix socket (set before any request)
  uint32_t uid = 0;                    // its peer's uid (SO_PEERCRED), when unix_peer
};

struct EventStream;  // events_stream.cpp

// One POSTed write, shared by the request that waits for it and the writer thread.
struct WriteJob {
  GroupRef group;
  std::string file, text;
  std::function<int()> action;  // an action (actions.cpp) instead of a file write, when set
  int result = 0;
  bool started = false;  // guarded by Writer::mutex
  bool done = false;     // guarded by Writer::mutex
  std::string old_value; // what the file read before the write (for the audit); guarded by
  bool old_read = false; // Writer::mutex, set before the write runs
};

// The writer thread's state. Shared with the thread, which may outlive the server when stop()
// abandons a write that blocks in an application callback.
struct Writer {
  std::mutex mutex;
  std::condition_variable cv;
  std::shared_ptr<WriteJob> job;  // the write to run or running; guarded by mutex
  bool stopping = false;          // guarded by mutex
  bool exited = false;            // guarded by mutex
};

// Starts the writer thread. Throws std::system_error when it cannot be created.
std::thread start_writer(const std::shared_ptr<Writer>& writer);

struct Impl {
  Impl(Controller& c, ServerOptions o) : ctl(c), options(std::move(o)) {}

  Controller& ctl;
  const ServerOptions options;
  const size_t max_connections = options.threads + options.max_queued;

  // ---- the process budget (actions.cpp): the application's, or the server's own ----
  std::unique_ptr<ProcessBudget> own_budget =
      options.budget ? nullptr : std::make_unique<ProcessBudget>(ctl);
  ProcessBudget* const budget = options.budget ? options.budget : own_budget.get();

  // ---- set by start(), cleared by stop() ----
  MHD_Daemon* daemon = nullptr;
  int listen_fd = -1;         // owned by the acceptor while it runs
  int wake_fd = -1;           // eventfd: wakes the acceptor for stop()
  int family = AF_INET;
  sockaddr_storage bound{};   // the bound address, to bind again after a loss
  socklen_t bound_len = 0;
  std::thread acceptor;
  std::thread writer_thread;
  std::shared_ptr<Writer> writer;
  std::atomic<bool> started{false};
  std::atomic<bool> listening{false};
  std::atomic<bool> stopping{false};
  std::atomic<int> port{0};

  // ---- connections (handlers.cpp registers, listener.cpp enforces deadlines) ----
  std::mutex conns_mutex;
  std::unordered_set<Conn*> conns;  // guarded by conns_mutex
  size_t pending_starts = 0;        // handed over, not registered yet; guarded by conns_mutex
  SteadyClock::time_point last_add{};  // guarded by conns_mutex
  void set_deadline(Conn* c, std::chrono::milliseconds from_now);

  // ---- the page's history and its sampler thread (started and stopped with the server) ----
  History history{options.history_groups, options.history_samples};
  std::thread sampler;
  std::mutex sampler_mutex;
  std::condition_variable sampler_cv;
  bool sampler_stop = false;  // guarded by sampler_mutex
  void sample_loop();

  // ---- the Unix socket (listener.cpp): its descriptor, owned by the acceptor while it runs,
  // and the file it made (removed by stop() only if it is still that one) ----
  int unix_fd = -1;
  dev_t unix_dev = 0;
  ino_t unix_ino = 0;

  // ---- GET /v1/events (events_stream.cpp) ----
  std::mutex streams_mutex;
  std::unordered_set<EventStream*> streams;  // guarded by streams_mutex
  std::atomic<size_t> nr_streams{0};
  // Wakes the streams due for a heartbeat (every stream when `all`: stop() ends them).
  void wake_streams(bool all) noexcept;

  // ---- audit (audit.hpp): every write and action ----
  AuditLog audit{options.audit_records, options.audit_log};

  // ---- answers in flight (generated documents) ----
  std::atomic<size_t> answers_in_flight{0};

  // ---- counters (ServerStats) ----
  std::atomic<uint64_t> accepted{0}, refused{0}, timed_out{0}, accept_errors{0},
      listener_losses{0}, writes_abandoned{0}, streams_opened{0}, streams_refused{0},
      streams_dropped{0}, unix_refused{0};

  // The acceptor's loop (listener.cpp), and its part for the Unix socket.
  void accept_loop();
  void accept_unix(size_t room, SteadyClock::time_point* paused_until);
  // The libmicrohttpd daemon over `options`, or null with errno set (handlers.cpp).
  MHD_Daemon* start_daemon();
};

// Creates, binds and listens on a socket for `addr`; the descriptor, or -errno.
int listen_on(const sockaddr* addr, socklen_t len);
// The Unix socket at `path` (mode 0600; a stale socket file replaced): the descriptor, or -errno
// (EEXIST: a file that is not a socket; EADDRINUSE: a server answers there). Sets dev/ino.
int listen_unix(const std::string& path, dev_t* dev, ino_t* ino);

// GET /v1/events (events_stream.cpp): the stream, or a refusal (400, 404, 503 with a JSON body).
MHD_Result serve_events(Impl& s, MHD_Connection* c);
// A JSON error answer: {"error": message, "status": status}.
MHD_Result reply_json_error(MHD_Connection* c, unsigned status, std::string_view message);

}  // namespace memcg::http::detail
