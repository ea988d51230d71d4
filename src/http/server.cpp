#include "memcg/http/server.hpp"

#include <arpa/inet.h>
#include <httplib.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <vector>

#include "memcg/core/controller.hpp"
#include "memcg/files/files.hpp"
#include "memcg/http/json.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/files/prometheus.hpp"

namespace memcg::http {
namespace {

constexpr const char* kMetricsType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kTextType = "text/plain; charset=utf-8";
constexpr const char* kGroupsPrefix = "/v1/groups/";

// A fixed set of workers over a bounded queue. httplib's own pool (0.11) queues without limit;
// here the acceptor waits while the queue is full, so a flood of connections backs up into the
// kernel's listen backlog instead of into memory.
class BoundedPool final : public httplib::TaskQueue {
 public:
  BoundedPool(size_t threads, size_t max_queued) : max_queued_(max_queued) {
    workers_.reserve(threads);
    for (size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~BoundedPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mutex_);
    space_.wait(lock, [&] { return queue_.size() < max_queued_ || stopping_; });
    if (stopping_) {
      // Only reached if the acceptor outlives shutdown(), which httplib does not do; serving
      // the connection here still closes it properly.
      lock.unlock();
      fn();
      return;
    }
    queue_.push_back(std::move(fn));
    ready_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_ && workers_.empty()) return;
      stopping_ = true;
    }
    ready_.notify_all();
    space_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [&] { return !queue_.empty() || stopping_; });
        if (queue_.empty()) return;  // stopping, and every queued connection was served
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      space_.notify_one();
      fn();
    }
  }

  const size_t max_queued_;
  std::mutex mutex_;
  std::condition_variable ready_, space_;
  std::deque<std::function<void()>> queue_;  // guarded by mutex_
  bool stopping_ = false;                    // guarded by mutex_
  std::vector<std::thread> workers_;
};

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

void reply(httplib::Response& res, int status, std::string body) {
  res.status = status;
  body += '\n';
  res.set_content(std::move(body), kTextType);
}

// "/v1/groups/<group path>/<file>" split into the group's path ("/" for the root) and the file
// name. False for anything that could name something outside the tree: empty, "." or ".."
// segments, control characters or bytes outside ASCII (httplib has already decoded %XX).
bool split_file_path(std::string_view path, std::string* group, std::string* file) {
  if (path.substr(0, std::strlen(kGroupsPrefix)) != kGroupsPrefix) return false;
  std::string_view rest = path.substr(std::strlen(kGroupsPrefix));
  if (rest.empty()) return false;
  for (char c : rest)
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e) return false;
  size_t start = 0;
  for (;;) {
    const size_t slash = rest.find('/', start);
    const std::string_view seg =
        rest.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  const size_t last = rest.rfind('/');
  if (last == std::string_view::npos) {
    *group = "/";
    *file = std::string(rest);
  } else {
    *group = std::string(rest.substr(0, last));
    *file = std::string(rest.substr(last + 1));
  }
  return true;
}

// Token comparison whose time does not depend on where the first difference is.
bool same_token(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = a.size() < b.size() ? a.size() : b.size();
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool numeric_address(const std::string& address) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, address.c_str(), buf) == 1 ||
         ::inet_pton(AF_INET6, address.c_str(), buf) == 1;
}

void check_options(const ServerOptions& o) {
  auto fail = [](const char* what) { throw std::invalid_argument(what); };
  if (o.address.empty()) fail("memcg::http::ServerOptions::address is empty");
  if (o.port < 0 || o.port > 65535) fail("memcg::http::ServerOptions::port is not in 0..65535");
  if (o.threads < 1 || o.threads > 64) fail("memcg::http::ServerOptions::threads is not in 1..64");
  if (o.max_queued < 1 || o.max_queued > 4096)
    fail("memcg::http::ServerOptions::max_queued is not in 1..4096");
  if (o.max_body_bytes < 1 || o.max_body_bytes > (size_t{1} << 20))
    fail("memcg::http::ServerOptions::max_body_bytes is not in 1..1048576");
  if (o.read_timeout.count() < 1 || o.write_timeout.count() < 1)
    fail("memcg::http::ServerOptions read_timeout and write_timeout must be positive");
  if (o.keep_alive_timeout.count() < 1 || o.keep_alive_timeout.count() > 300)
    fail("memcg::http::ServerOptions::keep_alive_timeout is not in 1..300 s");
  if (o.allow_writes) {
    if (o.token.empty() || o.token.size() > 4096)
      fail("memcg::http::ServerOptions::token must be 1..4096 bytes when writes are allowed");
    for (char c : o.token)
      if (c <= 0x20 || c > 0x7e)
        fail("memcg::http::ServerOptions::token must be printable ASCII without spaces");
  }
}

}  // namespace

struct Server::Impl {
  Impl(Controller& c, ServerOptions o) : ctl(c), options(std::move(o)) {}

  void route(httplib::Server& svr);
  void get_file(const httplib::Request& req, httplib::Response& res);
  void post_file(const httplib::Request& req, httplib::Response& res);

  Controller& ctl;
  const ServerOptions options;
  std::unique_ptr<httplib::Server> svr;
  std::thread thread;
  std::atomic<bool> listening_done{false};
  std::atomic<int> port{0};
  std::atomic<bool> running{false};
};

void Server::Impl::route(httplib::Server& s) {
  // Responses are never compressed. httplib compresses text whenever the client accepts it, and
  // picks brotli at its highest quality when offered: with curl --compressed, the 10 KB
  // exposition of five groups took 13-15 ms against under 1 ms uncompressed, a cost any client
  // could ask for on every request, growing with the body (20 MB at 10 000 groups). The Request is httplib's own non-const object, seen
  // here through a const reference, so dropping the header before the handlers run is defined.
  s.set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
    const_cast<httplib::Request&>(req).headers.erase("Accept-Encoding");
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) { reply(res, 200, "ok"); });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_prometheus(ctl), kMetricsType);
  });
  s.Get("/v1/groups", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_groups_json(ctl), "application/json");
  });
  s.Get("/v1/groups/.*",
        [this](const httplib::Request& req, httplib::Response& res) { get_file(req, res); });
  s.Post("/v1/groups/.*",
         [this](const httplib::Request& req, httplib::Response& res) { post_file(req, res); });
  // Other methods on the served paths are refused as such rather than as unknown paths.
  auto refuse = [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Allow", "GET, HEAD, POST");
    reply(res, 405, "method not allowed");
  };
  s.Put(".*", refuse);
  s.Patch(".*", refuse);
  s.Delete(".*", refuse);
}

void Server::Impl::get_file(const httplib::Request& req, httplib::Response& res) {
  std::string group_path, file;
  if (!split_file_path(req.path, &group_path, &file)) return reply(res, 400, "invalid path");
  GroupRef g = ctl.lookup(group_path);
  if (!g) return reply(res, 404, "no such group");
  std::string text;
  if (int err = read_file(*g, file, &text)) {
    if (err == ENOENT) return reply(res, 404, "no such file");
    if (err == EACCES) {
      res.set_header("Allow", "POST");
      return reply(res, 405, "write-only file");
    }
    return reply(res, 500, errno_name(err));
  }
  res.set_content(std::move(text), kTextType);
}

void Server::Impl::post_file(const httplib::Request& req, httplib::Response& res) {
  if (!options.allow_writes) {
    res.set_header("Allow", "GET, HEAD");
    return reply(res, 405, "writes are disabled");
  }
  const std::string auth = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.empty()) {
    res.set_header("WWW-Authenticate", "Bearer");
    return reply(res, 401, "bearer token required");
  }
  if (auth.compare(0, kBearer.size(), kBearer) != 0 ||
      !same_token(std::string_view(auth).substr(kBearer.size()), options.token))
    return reply(res, 403, "wrong token");

  std::string group_path, file;
  if (!split_file_path(req.path, &group_path, &file)) return reply(res, 400, "invalid path");
  // memory.pressure and memory.peak keep state per open file (a trigger, a reset point) that
  // a one-shot write would discard at once: refused rather than silently doing nothing.
  if (file == "memory.pressure" || file == "memory.peak") {
    res.set_header("Allow", "GET, HEAD");
    return reply(res, 405, "per-open-file state: not writable over HTTP");
  }
  GroupRef g = ctl.lookup(group_path);
  if (!g) return reply(res, 404, "no such group");
  if (int err = write_file(*g, file, req.body)) {
    if (err == ENOENT) return reply(res, 404, "no such file");
    if (err == EACCES) res.set_header("Allow", "GET, HEAD");
    return reply(res, status_for_write_error(err), errno_name(err));
  }
  reply(res, 200, "ok");
}

Server::Server(Controller& controller, ServerOptions options) {
  check_options(options);
  internal::HookBypass bypass;  // the server's structures are the library's (hook.hpp)
  impl_ = std::make_unique<Impl>(controller, std::move(options));
}

Server::~Server() { stop(); }

int Server::start(std::string* error) {
  auto fail = [&](int err, std::string what) {
    if (error != nullptr) *error = std::move(what);
    return err;
  };
  if (impl_->svr) return fail(EALREADY, "the server is already running");
  const ServerOptions& o = impl_->options;
  if (!numeric_address(o.address))
    return fail(EINVAL, "'" + o.address + "' is not a numeric IPv4 or IPv6 address");

  internal::HookBypass bypass;
  auto svr = std::make_unique<httplib::Server>();
  const size_t threads = o.threads, max_queued = o.max_queued;
  svr->new_task_queue = [threads, max_queued] { return new BoundedPool(threads, max_queued); };
  svr->set_payload_max_length(o.max_body_bytes);
  svr->set_read_timeout(o.read_timeout);
  svr->set_write_timeout(o.write_timeout);
  svr->set_keep_alive_timeout(o.keep_alive_timeout.count());
  svr->set_keep_alive_max_count(100);
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which would let a second server
  // (of any program of this user) bind the same port and take a share of the connections.
  svr->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  impl_->route(*svr);

  errno = 0;
  int port = o.port;
  bool bound;
  if (port == 0) {
    port = svr->bind_to_any_port(o.address);
    bound = port > 0;
  } else {
    bound = svr->bind_to_port(o.address, port);
  }
  if (!bound) {
    const int err = errno != 0 ? errno : EADDRINUSE;
    return fail(err, "cannot bind " + o.address + ":" + std::to_string(o.port) + ": " +
                         std::strerror(err));
  }
  httplib::Server* raw = svr.get();
  impl_->listening_done.store(false);
  impl_->thread = std::thread([raw, impl = impl_.get()] {
    raw->listen_after_bind();
    impl->listening_done.store(true);
  });
  // stop() is a no-op in httplib until the accept loop runs: wait for it, so that a stop() right
  // after start() cannot be lost. The socket already listens, so no client is refused meanwhile.
  while (!raw->is_running() && !impl_->listening_done.load())
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  if (!raw->is_running()) {  // the accept loop gave up at once
    impl_->thread.join();
    return fail(EIO, "the server stopped as soon as it started");
  }
  impl_->svr = std::move(svr);
  impl_->port.store(port);
  impl_->running.store(true);
  return 0;
}

void Server::stop() {
  if (!impl_ || !impl_->svr) return;
  internal::HookBypass bypass;
  impl_->running.store(false);
  impl_->port.store(0);
  impl_->svr->stop();
  impl_->thread.join();
  impl_->svr.reset();
}

bool Server::running() const noexcept { return impl_->running.load(); }
int Server::port() const noexcept { return impl_->port.load(); }
const ServerOptions& Server::options() const noexcept { return impl_->options; }

}  // namespace memcg::http
