// memcg::http::Server: options, start and stop. The parts: listener.cpp (acceptor and
// deadlines), handlers.cpp (requests), writer.cpp (writes), target.cpp (paths).
#include "memcg/http/server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <system_error>

#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/signal/event_bus.hpp"
#include "server_impl.hpp"

namespace memcg::http {
namespace {

// The numeric address with its port, or false when it is not a numeric IPv4 or IPv6 address.
bool parse_address(const std::string& address, int port, sockaddr_storage* out, socklen_t* len) {
  *out = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(out);
  if (::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(out);
  if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

void check_options(const ServerOptions& o) {
  auto fail = [](const char* what) { throw std::invalid_argument(what); };
  auto within = [](size_t v, size_t lo, size_t hi) { return v >= lo && v <= hi; };
  if (o.address.empty()) fail("memcg::http::ServerOptions::address is empty");
  if (o.port < 0 || o.port > 65535) fail("memcg::http::ServerOptions::port is not in 0..65535");
  if (!within(o.threads, 1, 64)) fail("memcg::http::ServerOptions::threads is not in 1..64");
  if (!within(o.max_queued, 1, 4096))
    fail("memcg::http::ServerOptions::max_queued is not in 1..4096");
  if (!within(o.max_connections_per_peer, 1, 4096))
    fail("memcg::http::ServerOptions::max_connections_per_peer is not in 1..4096");
  if (!within(o.max_header_bytes, 4096, size_t{1} << 20))
    fail("memcg::http::ServerOptions::max_header_bytes is not in 4096..1048576");
  if (!within(o.max_headers, 1, 1024))
    fail("memcg::http::ServerOptions::max_headers is not in 1..1024");
  if (!within(o.max_body_bytes, 1, size_t{1} << 20))
    fail("memcg::http::ServerOptions::max_body_bytes is not in 1..1048576");
  if (!within(o.max_answers_in_flight, 1, 64))
    fail("memcg::http::ServerOptions::max_answers_in_flight is not in 1..64");
  constexpr int64_t kMaxMs = 300'000;
  if (o.read_timeout.count() < 1 || o.read_timeout.count() > kMaxMs ||
      o.write_timeout.count() < 1 || o.write_timeout.count() > kMaxMs)
    fail("memcg::http::ServerOptions read_timeout and write_timeout are not in 1 ms..300 s");
  if (o.keep_alive_timeout.count() < 1 || o.keep_alive_timeout.count() > 300)
    fail("memcg::http::ServerOptions::keep_alive_timeout is not in 1..300 s");
  if (o.history_interval.count() < 100 || o.history_interval.count() > 60'000)
    fail("memcg::http::ServerOptions::history_interval is not in 100 ms..60 s");
  if (!within(o.history_groups, 1, 1024))
    fail("memcg::http::ServerOptions::history_groups is not in 1..1024");
  if (!within(o.history_samples, 2, 3600))
    fail("memcg::http::ServerOptions::history_samples is not in 2..3600");
  if (o.history_groups * o.history_samples > 262'144)
    fail("memcg::http::ServerOptions history_groups x history_samples is over 262144");
  if (o.allow_writes) {
    // Over the Unix socket writes are authorised by the peer's uid: the token may be empty.
    if ((o.token.empty() && o.unix_socket.empty()) || o.token.size() > 4096)
      fail("memcg::http::ServerOptions::token must be 1..4096 bytes when writes are allowed");
    for (char c : o.token)
      if (c <= 0x20 || c > 0x7e)
        fail("memcg::http::ServerOptions::token must be printable ASCII without spaces");
  }
  if (!within(o.max_event_streams, 1, 4096))
    fail("memcg::http::ServerOptions::max_event_streams is not in 1..4096");
  if (!within(o.event_stream_lag, 1, 1'000'000))
    fail("memcg::http::ServerOptions::event_stream_lag is not in 1..1000000");
  if (o.event_heartbeat.count() < 100 || o.event_heartbeat.count() > kMaxMs)
    fail("memcg::http::ServerOptions::event_heartbeat is not in 100 ms..300 s");
  if (!within(o.audit_records, 16, 100'000))
    fail("memcg::http::ServerOptions::audit_records is not in 16..100000");
  if (o.token_name.size() > 64)
    fail("memcg::http::ServerOptions::token_name is over 64 bytes");
  for (char c : o.token_name)
    if (c <= 0x20 || c > 0x7e)
      fail("memcg::http::ServerOptions::token_name must be printable ASCII without spaces");
  if (o.unix_socket.size() > 107)
    fail("memcg::http::ServerOptions::unix_socket is over 107 bytes");
  if (o.unix_socket.find('\0') != std::string::npos)
    fail("memcg::http::ServerOptions::unix_socket holds a NUL byte");
}

// Undoes what a start() did, in the order that keeps stop() bounded: no new connection, no new
// write, every connection closed (libmicrohttpd joins its workers, each inside one bounded
// handler at most), then the writer, waited for one second at most.
void teardown(detail::Impl& s) {
  s.stopping.store(true);
  s.listening.store(false);
  s.port.store(0);
  if (s.acceptor.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(s.wake_fd, &one, sizeof one);
    s.acceptor.join();
  }
  if (s.listen_fd >= 0) ::close(s.listen_fd);
  s.listen_fd = -1;
  if (s.unix_fd >= 0) {
    ::close(s.unix_fd);
    // Removed only if the path is still the socket this server made.
    struct stat st{};
    if (::lstat(s.options.unix_socket.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) &&
        st.st_dev == s.unix_dev && st.st_ino == s.unix_ino)
      ::unlink(s.options.unix_socket.c_str());
  }
  s.unix_fd = -1;
  if (s.sampler.joinable()) {
    {
      std::lock_guard<std::mutex> lock(s.sampler_mutex);
      s.sampler_stop = true;
    }
    s.sampler_cv.notify_all();
    s.sampler.join();
  }
  if (s.writer) {
    std::lock_guard<std::mutex> lock(s.writer->mutex);
    s.writer->stopping = true;
    s.writer->cv.notify_all();
  }
  // Event streams end (`stopping` is set: a resumed stream ends, none suspends again), and none
  // stays suspended: libmicrohttpd must not be stopped with a suspended connection.
  s.wake_streams(true);
  if (s.daemon != nullptr) MHD_stop_daemon(s.daemon);
  s.daemon = nullptr;
  if (s.writer_thread.joinable()) {
    bool exited;
    {
      std::unique_lock<std::mutex> lock(s.writer->mutex);
      exited = s.writer->cv.wait_for(lock, std::chrono::seconds(1),
                                     [&] { return s.writer->exited; });
    }
    if (exited) {
      s.writer_thread.join();
    } else {
      // A write blocked in an application callback: it finishes on its own thread, which
      // shares the writer's state, and takes no further write.
      s.writer_thread.detach();
      s.writes_abandoned.fetch_add(1, std::memory_order_relaxed);
    }
  }
  s.writer.reset();
  if (s.wake_fd >= 0) ::close(s.wake_fd);
  s.wake_fd = -1;
  s.started.store(false);
  s.stopping.store(false);
}

}  // namespace

namespace detail {
void Impl::sample_loop() {
  std::unique_lock<std::mutex> lock(sampler_mutex);
  while (!sampler_stop) {
    lock.unlock();
    try {
      history.sample(ctl);
    } catch (...) {  // out of memory: this sample is skipped
    }
    lock.lock();
    sampler_cv.wait_for(lock, options.history_interval, [&] { return sampler_stop; });
  }
}
}  // namespace detail

Server::Server(Controller& controller, ServerOptions options) {
  check_options(options);
  internal::HookBypass bypass;  // the server's structures are the library's (hook.hpp)
  impl_ = std::make_unique<detail::Impl>(controller, std::move(options));
}

Server::~Server() { stop(); }

int Server::start(std::string* error) {
  detail::Impl& s = *impl_;
  auto fail = [&](int err, std::string what) {
    teardown(s);
    if (error != nullptr) *error = std::move(what);
    return err;
  };
  if (s.started.load()) {
    if (error != nullptr) *error = "the server is already running";
    return EALREADY;
  }
  const ServerOptions& o = s.options;
  sockaddr_storage addr;
  socklen_t len;
  if (!parse_address(o.address, o.port, &addr, &len)) {
    if (error != nullptr) *error = "'" + o.address + "' is not a numeric IPv4 or IPv6 address";
    return EINVAL;
  }
  internal::HookBypass bypass;
  s.started.store(true);
  try {
    s.accepted = s.refused = s.timed_out = s.accept_errors = s.listener_losses = 0;
    s.writes_abandoned = s.streams_opened = s.streams_refused = s.streams_dropped = 0;
    s.unix_refused = 0;
    s.wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s.wake_fd < 0) {
      const int err = errno;
      return fail(err, std::string("cannot create an eventfd: ") + std::strerror(err));
    }
    const int fd = detail::listen_on(reinterpret_cast<const sockaddr*>(&addr), len);
    if (fd < 0)
      return fail(-fd, "cannot bind " + o.address + ":" + std::to_string(o.port) + ": " +
                           std::strerror(-fd));
    s.listen_fd = fd;
    if (!o.unix_socket.empty()) {
      const int ufd = detail::listen_unix(o.unix_socket, &s.unix_dev, &s.unix_ino);
      if (ufd < 0)
        return fail(-ufd, "cannot listen on " + o.unix_socket + ": " + std::strerror(-ufd) +
                              (ufd == -EEXIST ? " (a file that is not a socket is there)" : ""));
      s.unix_fd = ufd;
    }
    // The event stream's ring records from now on, so that a client can resume after a
    // reconnect (GET /v1/events); the application's options hold if it enabled the bus first.
    (void)s.ctl.events().enable();
    sockaddr_storage bound{};
    socklen_t bound_len = sizeof bound;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len);
    s.bound = bound;
    s.bound_len = bound_len;
    const int port = ntohs(bound.ss_family == AF_INET6
                               ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                               : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
    s.writer = std::make_shared<detail::Writer>();
    s.writer_thread = detail::start_writer(s.writer);
    errno = 0;
    s.daemon = s.start_daemon();
    if (s.daemon == nullptr) {
      const int err = errno != 0 ? errno : EAGAIN;
      return fail(err, std::string("cannot start the HTTP workers: ") + std::strerror(err));
    }
    {
      std::lock_guard<std::mutex> lock(s.sampler_mutex);
      s.sampler_stop = false;
    }
    s.sampler = std::thread([&s] { s.sample_loop(); });
    s.acceptor = std::thread([&s] { s.accept_loop(); });
    s.port.store(port);
    s.listening.store(true);
    return 0;
  } catch (const std::system_error& e) {
    const int err = e.code().value() != 0 ? e.code().value() : EAGAIN;
    return fail(err, std::string("cannot create a server thread: ") + e.what());
  } catch (const std::bad_alloc&) {
    return fail(ENOMEM, "out of memory while starting the server");
  }
}

void Server::stop() {
  if (!impl_ || !impl_->started.load()) return;
  internal::HookBypass bypass;
  teardown(*impl_);
}

bool Server::running() const noexcept { return impl_->started.load() && impl_->listening.load(); }
int Server::port() const noexcept { return impl_->port.load(); }
const ServerOptions& Server::options() const noexcept { return impl_->options; }

ServerStats Server::stats() const noexcept {
  const detail::Impl& s = *impl_;
  ServerStats st;
  st.accepted = s.accepted.load(std::memory_order_relaxed);
  st.refused = s.refused.load(std::memory_order_relaxed);
  st.timed_out = s.timed_out.load(std::memory_order_relaxed);
  st.accept_errors = s.accept_errors.load(std::memory_order_relaxed);
  st.listener_losses = s.listener_losses.load(std::memory_order_relaxed);
  st.writes_abandoned = s.writes_abandoned.load(std::memory_order_relaxed);
  st.streams_opened = s.streams_opened.load(std::memory_order_relaxed);
  st.streams_refused = s.streams_refused.load(std::memory_order_relaxed);
  st.streams_dropped = s.streams_dropped.load(std::memory_order_relaxed);
  st.unix_refused = s.unix_refused.load(std::memory_order_relaxed);
  st.audit_records = s.audit.total();
  return st;
}

}  // namespace memcg::http
