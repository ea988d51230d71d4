// memcg::http::Server where resources run short or a callback could run on its threads: a
// thread that cannot be created fails start() (no crash), a lost listening socket is reported
// and bound again, reads deliver no notification on server threads, a write blocked in an
// application callback does not hold stop(), and the token and path rules.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <atomic>
#include <cerrno>
#include <dirent.h>
#include <fstream>
#include <string>
#include <thread>

#include "../watchdog.hpp"
#include "hostile_client.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/signal/notify.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/http/server.hpp"

namespace memcg::http {
namespace {

using namespace std::chrono_literals;
using testing::Clock;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// The process's mapped size, in bytes.
size_t vm_size() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmSize:", 0) == 0) return std::stoul(line.substr(7)) * 1024;
  return 0;
}

// In a child process whose address space has room for a few MiB but no thread stack (8 MiB):
// start() must return an error, not throw or terminate. The child's exit code tells.
TEST(HttpLimitsTest, ThreadCreationFailureIsAnErrorFromStart) {
  if (kSanitized) GTEST_SKIP() << "sanitizers reserve the address space: no RLIMIT_AS here";
  memcg::testing::Watchdog dog("thread creation failure", 60s);
  Controller ctl;
  Server server(ctl);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit old{};
    if (::getrlimit(RLIMIT_AS, &old) != 0) ::_exit(10);
    rlimit rl{vm_size() + (4u << 20), old.rlim_max};  // the soft limit only: raised again below
    if (::setrlimit(RLIMIT_AS, &rl) != 0) ::_exit(10);
    std::string error;
    const int err = server.start(&error);
    if (err == 0) ::_exit(11);                          // started although threads cannot be had
    if (server.running() || error.empty()) ::_exit(12);  // the failure left state behind
    // A failed start may be retried: with room again it succeeds.
    if (::setrlimit(RLIMIT_AS, &old) != 0) ::_exit(13);
    if (server.start(&error) != 0) ::_exit(14);
    server.stop();
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// The descriptor of the socket listening on `port` in this process, or -1.
int listening_fd(int port) {
  DIR* d = ::opendir("/proc/self/fd");
  int found = -1;
  while (dirent* e = ::readdir(d)) {
    const int fd = std::atoi(e->d_name);
    sockaddr_in a{};
    socklen_t len = sizeof a;
    int listening = 0;
    socklen_t ol = sizeof listening;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 && a.sin_family == AF_INET &&
        ntohs(a.sin_port) == port &&
        ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol) == 0 && listening)
      found = fd;
  }
  ::closedir(d);
  return found;
}

bool healthy(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2, 0);
  auto r = c.Get("/healthz");
  return r && r->status == 200;
}

TEST(HttpLimitsTest, ALostListenerIsReportedAndBoundAgain) {
  memcg::testing::Watchdog dog("listener loss", 60s);
  Controller ctl;
  Server server(ctl);
  ASSERT_EQ(server.start(), 0);
  const int port = server.port();
  ASSERT_TRUE(healthy(port));
  const int fd = listening_fd(port);
  ASSERT_GE(fd, 0);
  // A listening socket shut down for reading makes accept() fail with EINVAL: the error that
  // ended cpp-httplib's accept loop for good.
  ASSERT_EQ(::shutdown(fd, SHUT_RD), 0);
  const auto t0 = Clock::now();
  while (server.stats().listener_losses == 0 && Clock::now() - t0 < 3s)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(server.stats().listener_losses, 1u);
  EXPECT_GE(server.stats().accept_errors, 1u);
  while (!server.running() && Clock::now() - t0 < 5s) std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(server.running()) << "the listener was not bound again";
  EXPECT_EQ(server.port(), port);
  EXPECT_TRUE(healthy(port));
  server.stop();
  EXPECT_FALSE(server.running());
}

// A reclaimer whose reclaim() blocks until released (at most 10 s): an application callback that
// a memory.reclaim write runs.
struct BlockingReclaimer final : Reclaimer {
  std::atomic<bool> release{false}, entered{false}, returned{false};
  int64_t reclaimable() const noexcept override { return 1000; }
  ReclaimResult reclaim(int64_t, int) override {
    entered = true;
    const auto end = Clock::now() + 10s;
    while (!release && Clock::now() < end) std::this_thread::sleep_for(5ms);
    returned = true;
    return {};
  }
};

TEST(HttpLimitsTest, StopIsBoundedWhileAWriteBlocksInACallback) {
  memcg::testing::Watchdog dog("blocked write", 60s);
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("a", &g), 0);
  ASSERT_TRUE(charged(try_charge(*g, 100)));
  BlockingReclaimer blocker;
  ReclaimerRegistration reg(*g, blocker);
  ServerOptions o;
  o.allow_writes = true;
  o.token = "t0k3n";
  o.read_timeout = 1000ms;
  Server server(ctl, o);
  ASSERT_EQ(server.start(), 0);
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(5, 0);
  auto r = c.Post("/v1/groups/a/memory.reclaim", {{"Authorization", "Bearer t0k3n"}}, "4096",
                  "text/plain");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 202) << r->body;  // the write runs on; the request did not wait for it
  EXPECT_TRUE(blocker.entered);
  // Another write meanwhile is refused, not queued behind it.
  auto r2 = c.Post("/v1/groups/a/memory.high", {{"Authorization", "Bearer t0k3n"}}, "max",
                   "text/plain");
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->status, 503);
  const auto t0 = Clock::now();
  server.stop();
  const auto took = Clock::now() - t0;
  EXPECT_LE(took, o.read_timeout + 1s)
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
  EXPECT_EQ(server.stats().writes_abandoned, 1u);
  EXPECT_FALSE(blocker.returned);
  blocker.release = true;
  while (!blocker.returned) std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(200ms);  // the abandoned write drops its group reference
  reg.reset();
  uncharge(*g, 100);
}

TEST(HttpLimitsTest, ReadsDeliverNoNotificationOnServerThreads) {
  memcg::testing::Watchdog dog("deferred notifications", 60s);
  ManualClock clock;
  Options opts;
  opts.clock = &clock;
  Controller ctl(opts);
  GroupRef g;
  ASSERT_EQ(ctl.create("a", &g), 0);
  std::atomic<int> calls{0};
  std::atomic<bool> on_test_thread{true};
  const std::thread::id me = std::this_thread::get_id();
  std::unique_ptr<EventListener> listener;
  ASSERT_EQ(EventListener::open(*g, EventsFile::kEvents,
                                [&](Group&, EventsFile) {
                                  ++calls;
                                  if (std::this_thread::get_id() != me) on_test_thread = false;
                                },
                                &listener),
            0);
  g->raise(Event::kMax);  // notified at once
  g->raise(Event::kMax);  // within 10 ms: deferred to the end of the interval
  ASSERT_EQ(calls.load(), 1);
  clock.advance(20'000'000);
  Server server(ctl);
  ASSERT_EQ(server.start(), 0);
  httplib::Client c("127.0.0.1", server.port());
  for (const char* path : {"/v1/groups/a/memory.events", "/v1/groups/a/memory.stat", "/metrics", "/v1/groups",
                           "/v1/groups/a/memory.pressure"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path;
  }
  EXPECT_EQ(calls.load(), 1) << "a read over HTTP delivered the deferred notification";
  ctl.tick();  // where it is normally delivered with this clock
  EXPECT_EQ(calls.load(), 2);
  EXPECT_TRUE(on_test_thread.load());
  server.stop();
}

TEST(HttpLimitsTest, BearerSchemeIsCaseInsensitiveAndTheTokenExact) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("a", &g), 0);
  ServerOptions o;
  o.allow_writes = true;
  o.token = "abc123";
  Server server(ctl, o);
  ASSERT_EQ(server.start(), 0);
  httplib::Client c("127.0.0.1", server.port());
  auto post = [&](const std::string& auth) {
    auto r = c.Post("/v1/groups/a/memory.high", {{"Authorization", auth}}, "1M", "text/plain");
    return r ? r->status : -1;
  };
  EXPECT_EQ(post("bearer abc123"), 200);
  EXPECT_EQ(post("BEARER abc123"), 200);
  EXPECT_EQ(post("Bearer abc123"), 200);
  EXPECT_EQ(post("Bearer abc12"), 403);    // a prefix
  EXPECT_EQ(post("Bearer abc1234"), 403);  // longer
  EXPECT_EQ(post("Bearer "), 403);
  EXPECT_EQ(post("Basic abc123"), 403);
  EXPECT_EQ(post("Bearerabc123"), 403);
  EXPECT_EQ(g->high(), uint64_t{1} << 20);
}

TEST(HttpLimitsTest, EveryControlCharacterInAPathIs400) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("a", &g), 0);
  Server server(ctl);
  ASSERT_EQ(server.start(), 0);
  // Percent-encoded: every control character, DEL, and bytes outside ASCII.
  httplib::Client c("127.0.0.1", server.port());
  for (int b = 0; b < 256; ++b) {
    if (b > 0x20 && b < 0x7f) continue;
    char esc[4];
    std::snprintf(esc, sizeof esc, "%%%02X", b);
    for (const std::string& path : {"/v1/groups/a/memory.max" + std::string(esc),
                                    "/v1/groups/a" + std::string(esc) + "/memory.max",
                                    "/metrics" + std::string(esc)}) {
      auto r = c.Get(path);
      ASSERT_TRUE(r) << path;
      EXPECT_EQ(r->status, 400) << path;
    }
  }
  // Malformed escapes.
  for (const char* path : {"/v1/groups/a/memory.max%", "/v1/groups/a/memory.max%4", "/v1/%zz"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 400) << path;
  }
  // Raw control characters in the request line, through a raw socket.
  for (int b = 1; b < 0x20; ++b) {
    if (b == '\r' || b == '\n' || b == '\t') continue;  // line structure: the parser's business
    const int fd = testing::connect_from(server.port());
    ASSERT_GE(fd, 0);
    const std::string req = std::string("GET /v1/groups/a/memory.max") + static_cast<char>(b) +
                            "x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    ASSERT_TRUE(testing::send_all(fd, req));
    const std::string answer = testing::read_until_closed(fd, 3s);
    EXPECT_EQ(testing::status_of(answer), 400) << "byte " << b;
    ::close(fd);
  }
  auto ok = c.Get("/v1/groups/a/memory.max");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

}  // namespace
}  // namespace memcg::http
