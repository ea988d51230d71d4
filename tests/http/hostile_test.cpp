// memcg::http::Server against hostile clients on loopback: each case checks that the server's
// memory stays within a few MiB over its configured bounds, what it answers, that a
// well-behaved client (another peer address) is served meanwhile, and that stop() returns within
// read_timeout plus a second while the attack goes on. Short timeouts keep every case fast.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../watchdog.hpp"
#include "hostile_client.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/files/prometheus.hpp"
#include "memcg/http/server.hpp"

namespace memcg::http {
namespace {

using namespace std::chrono_literals;
using testing::Attacker;
using testing::Clock;
using testing::connect_from;
using testing::read_until_closed;
using testing::rss_bytes;
using testing::send_all;
using testing::status_of;

constexpr const char* kToken = "hostile-test-token";
constexpr const char* kAttacker = "127.0.0.2";
// Growth of the resident set allowed over the configured bounds (allocator arenas, stacks; more
// under sanitizers, whose quarantine keeps freed blocks resident).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr size_t kSlack = 32u << 20;
#else
constexpr size_t kSlack = 8u << 20;
#endif

ServerOptions hostile_options() {
  ServerOptions o;
  o.threads = 2;
  o.max_queued = 30;  // 32 connections at once
  o.max_connections_per_peer = 8;
  o.max_header_bytes = 16 * 1024;
  o.max_headers = 64;
  o.max_body_bytes = 16 * 1024;
  o.max_answers_in_flight = 4;
  o.read_timeout = 1500ms;
  o.write_timeout = 1500ms;
  o.keep_alive_timeout = 1s;
  o.allow_writes = true;
  o.token = kToken;
  return o;
}

// A tree of 200 groups (an exposition of some 400 KB) served with the options above.
struct Fixture {
  Controller ctl;
  std::vector<GroupRef> groups;
  std::unique_ptr<Server> server;
  size_t rss_before = 0;
  size_t document = 0;

  Fixture() {
    for (int i = 0; i < 200; ++i) {
      GroupRef g;
      EXPECT_EQ(ctl.create("g" + std::to_string(i), &g), 0);
      groups.push_back(g);
    }
    server = std::make_unique<Server>(ctl, hostile_options());
    std::string error;
    EXPECT_EQ(server->start(&error), 0) << error;
    document = render_prometheus(ctl).size();
    // Warm up: the allocator's arenas and the workers' first answers.
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(well_behaved_ok());
    rss_before = rss_bytes();
  }

  int port() const { return server->port(); }

  // A well-behaved client on 127.0.0.1: two reads, answered in full.
  bool well_behaved_ok() {
    httplib::Client c("127.0.0.1", server->port());
    c.set_connection_timeout(2, 0);
    c.set_read_timeout(3, 0);
    auto a = c.Get("/healthz");
    auto b = c.Get("/v1/groups/g1/memory.max");
    return a && a->status == 200 && a->body == "ok\n" && b && b->status == 200 &&
           b->body == "max\n";
  }

  void expect_memory_bounded(size_t bounds, const char* what) {
    const size_t now = rss_bytes();
    const size_t grown = now > rss_before ? now - rss_before : 0;
    EXPECT_LE(grown, bounds + kSlack) << what << ": RSS grew by " << grown << " bytes";
  }

  // stop() while `attack` runs: within read_timeout plus one second.
  void expect_stop_bounded(std::unique_ptr<Attacker> attack) {
    std::this_thread::sleep_for(300ms);
    const auto t0 = Clock::now();
    server->stop();
    const auto took = Clock::now() - t0;
    EXPECT_LE(took, hostile_options().read_timeout + 1s)
        << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
    EXPECT_FALSE(server->running());
    attack->stop();
  }
};

// What one hostile connection got back.
struct Outcome {
  std::atomic<int> status{-1};
  std::atomic<size_t> sent{0};
  std::atomic<bool> closed{false};
};

// One connection from the attacker's address that sends `head` and then `filler` over and over
// (up to `limit` bytes) and reads what the server answers.
std::unique_ptr<Attacker> endless(int port, std::string head, std::string filler, size_t limit,
                                  Outcome* out) {
  return std::make_unique<Attacker>(8s, [=, first = true, fd = -1]() mutable {
    if (first) {
      first = false;
      fd = connect_from(port, kAttacker);
      if (fd < 0 || !send_all(fd, head)) {
        out->closed = true;
        return false;
      }
      out->sent += head.size();
    }
    if (out->sent < limit && send_all(fd, filler)) {
      out->sent += filler.size();
      return true;
    }
    bool closed = false;
    const std::string answer = read_until_closed(fd, 3s, &closed);
    out->status = status_of(answer);
    out->closed = closed;
    ::close(fd);
    return false;
  });
}

void wait_done(const Attacker& a, std::chrono::seconds limit) {
  const auto end = Clock::now() + limit;
  while (!a.done() && Clock::now() < end) std::this_thread::sleep_for(20ms);
}

constexpr size_t kFlood = 64u << 20;  // what an endless sender tries to push
const std::string kFiller(64 * 1024, 'a');

TEST(HttpHostileTest, EndlessHeaderLineIsCutAtTheHeaderBound) {
  memcg::testing::Watchdog dog("endless header line", 60s);
  Fixture f;
  Outcome o;
  auto attack = endless(f.port(), "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Long: ", kFiller, kFlood, &o);
  EXPECT_TRUE(f.well_behaved_ok());
  wait_done(*attack, 10s);
  EXPECT_TRUE(attack->done());
  EXPECT_TRUE(o.status == 431 || o.status == 0) << o.status;
  EXPECT_TRUE(o.closed);
  EXPECT_LT(o.sent, kFlood) << "the server kept reading an endless header line";
  f.expect_memory_bounded(0, "endless header line");
  EXPECT_TRUE(f.well_behaved_ok());
  Outcome o2;
  f.expect_stop_bounded(endless(f.port(), "GET / HTTP/1.1\r\nX: ", kFiller, kFlood, &o2));
}

TEST(HttpHostileTest, EndlessRequestLineIsCutAtTheHeaderBound) {
  memcg::testing::Watchdog dog("endless request line", 60s);
  Fixture f;
  Outcome o;
  auto attack = endless(f.port(), "GET /", kFiller, kFlood, &o);
  EXPECT_TRUE(f.well_behaved_ok());
  wait_done(*attack, 10s);
  EXPECT_TRUE(attack->done());
  EXPECT_TRUE(o.status == 414 || o.status == 431 || o.status == 400 || o.status == 0) << o.status;
  EXPECT_TRUE(o.closed);
  EXPECT_LT(o.sent, kFlood) << "the server kept reading an endless request line";
  f.expect_memory_bounded(0, "endless request line");
  EXPECT_TRUE(f.well_behaved_ok());
  Outcome o2;
  f.expect_stop_bounded(endless(f.port(), "GET /", kFiller, kFlood, &o2));
}

std::string chunked_post() {
  return std::string("POST /v1/groups/g1/memory.high HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") +
         kToken + "\r\nTransfer-Encoding: chunked\r\n\r\n";
}

TEST(HttpHostileTest, EndlessChunkedBodyIsRefusedBeforeItIsRead) {
  memcg::testing::Watchdog dog("endless chunked body", 60s);
  Fixture f;
  Outcome o;
  const std::string chunk = "10000\r\n" + kFiller + "\r\n";
  auto attack = endless(f.port(), chunked_post(), chunk, kFlood, &o);
  EXPECT_TRUE(f.well_behaved_ok());
  wait_done(*attack, 10s);
  EXPECT_TRUE(attack->done());
  EXPECT_EQ(o.status, 411);  // Length Required: the size is checked before a body is read
  EXPECT_TRUE(o.closed);
  EXPECT_LT(o.sent, kFlood);
  EXPECT_EQ(f.groups[1]->high(), kUnlimited) << "a refused write changed the knob";
  f.expect_memory_bounded(0, "endless chunked body");
  EXPECT_TRUE(f.well_behaved_ok());
  Outcome o2;
  f.expect_stop_bounded(endless(f.port(), chunked_post(), chunk, kFlood, &o2));
}

TEST(HttpHostileTest, EndlessContentLengthBodyGets413) {
  memcg::testing::Watchdog dog("endless content-length body", 60s);
  Fixture f;
  for (const char* method : {"POST", "GET"}) {
    Outcome o;
    const std::string head = std::string(method) +
                             " /v1/groups/g1/memory.high HTTP/1.1\r\nHost: x\r\nAuthorization: "
                             "Bearer " + kToken + "\r\nContent-Length: 1000000000000\r\n\r\n";
    auto attack = endless(f.port(), head, kFiller, kFlood, &o);
    EXPECT_TRUE(f.well_behaved_ok());
    wait_done(*attack, 10s);
    EXPECT_TRUE(attack->done());
    EXPECT_EQ(o.status, 413) << method;
    EXPECT_TRUE(o.closed) << method;
    EXPECT_LT(o.sent, kFlood) << method;
  }
  // A body within the declared length but over the limit, sent in one go.
  {
    Outcome o;
    const std::string head = std::string("POST /v1/groups/g1/memory.high HTTP/1.1\r\nHost: x\r\n"
                                         "Authorization: Bearer ") + kToken +
                             "\r\nContent-Length: 16385\r\n\r\n" + std::string(16385, '1');
    auto attack = endless(f.port(), head, "", 0, &o);
    wait_done(*attack, 10s);
    EXPECT_EQ(o.status, 413);
  }
  EXPECT_EQ(f.groups[1]->high(), kUnlimited);
  f.expect_memory_bounded(0, "endless content-length body");
  Outcome o2;
  f.expect_stop_bounded(endless(
      f.port(), "PUT / HTTP/1.1\r\nContent-Length: 100000000000\r\n\r\n", kFiller, kFlood, &o2));
}

TEST(HttpHostileTest, ManyHeadersGet431) {
  memcg::testing::Watchdog dog("many headers", 60s);
  Fixture f;
  // Short lines: within the header bytes for the first hundred, over max_headers at once.
  std::string head = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 100; ++i) head += "X" + std::to_string(i) + ": 1\r\n";
  {
    Outcome o;
    auto attack = endless(f.port(), head + "\r\n", "", 0, &o);
    wait_done(*attack, 10s);
    EXPECT_EQ(o.status, 431);
  }
  // Endless short header lines: cut at the header bytes.
  Outcome o;
  std::string lines;
  for (int i = 0; i < 4096; ++i) lines += "X: 1\r\n";
  auto attack = endless(f.port(), "GET /healthz HTTP/1.1\r\n", lines, kFlood, &o);
  EXPECT_TRUE(f.well_behaved_ok());
  wait_done(*attack, 10s);
  EXPECT_TRUE(o.status == 431 || o.status == 0) << o.status;
  EXPECT_TRUE(o.closed);
  EXPECT_LT(o.sent, kFlood);
  f.expect_memory_bounded(0, "many headers");
  EXPECT_TRUE(f.well_behaved_ok());
  Outcome o2;
  f.expect_stop_bounded(endless(f.port(), "GET / HTTP/1.1\r\n", lines, kFlood, &o2));
}

// One header line every 300 ms: never silent for the inactivity timeout, so only the whole
// request's deadline (read_timeout) ends it.
std::unique_ptr<Attacker> slow_headers(int port, Outcome* out, Clock::time_point* closed_at) {
  return std::make_unique<Attacker>(20s, [=, fd = -1, n = 0]() mutable {
    if (fd < 0) {
      fd = connect_from(port, kAttacker);
      if (fd < 0 || !send_all(fd, "GET /healthz HTTP/1.1\r\n")) return false;
    }
    bool closed = false;
    read_until_closed(fd, 300ms, &closed);
    if (closed || !send_all(fd, "X" + std::to_string(n++) + ": 1\r\n")) {
      *closed_at = Clock::now();
      out->closed = true;
      ::close(fd);
      return false;
    }
    return true;
  });
}

TEST(HttpHostileTest, SlowHeadersAreCutAtTheReadTimeout) {
  memcg::testing::Watchdog dog("slow headers", 60s);
  Fixture f;
  Outcome o;
  Clock::time_point closed_at{};
  const auto t0 = Clock::now();
  auto attack = slow_headers(f.port(), &o, &closed_at);
  EXPECT_TRUE(f.well_behaved_ok());
  wait_done(*attack, 10s);
  ASSERT_TRUE(o.closed);
  const auto lived = closed_at - t0;
  EXPECT_GE(lived, 1200ms);
  EXPECT_LE(lived, hostile_options().read_timeout + 700ms)
      << std::chrono::duration_cast<std::chrono::milliseconds>(lived).count() << " ms";
  EXPECT_GE(f.server->stats().timed_out, 1u);
  EXPECT_TRUE(f.well_behaved_ok());
  Outcome o2;
  Clock::time_point unused{};
  f.expect_stop_bounded(slow_headers(f.port(), &o2, &unused));
}

// `n` connections from the attacker's address that send nothing; the count still open after
// `hold`, and after `hold` + `more`.
std::unique_ptr<Attacker> idle_connections(int port, int n, std::vector<int>* fds) {
  return std::make_unique<Attacker>(10s, [=]() {
    for (int i = 0; i < n; ++i) {
      const int fd = connect_from(port, kAttacker);
      if (fd >= 0) fds->push_back(fd);
    }
    return false;
  });
}

int still_open(const std::vector<int>& fds) {
  int open = 0;
  for (int fd : fds) {
    pollfd p{fd, POLLIN, 0};
    char c;
    if (::poll(&p, 1, 0) == 0 || (::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0)) ++open;
  }
  return open;
}

TEST(HttpHostileTest, ManyIdleConnectionsAreLimitedPerPeerAndClosed) {
  memcg::testing::Watchdog dog("many idle connections", 60s);
  Fixture f;
  constexpr int kIdle = 200;
  const ServerStats before = f.server->stats();
  uint64_t accepted = 0, refused = 0;
  auto taken = [&] {  // by the server: accepted (held) or refused (closed at once)
    const ServerStats st = f.server->stats();
    accepted = st.accepted - before.accepted;
    refused = st.refused - before.refused;
    return accepted + refused;
  };
  std::vector<int> fds;
  const auto t0 = Clock::now();
  const auto give_up = t0 + 15s;
  for (int i = 0; i < kIdle; ++i) {
    // At most 64 not taken yet: the listen backlog (128) never overflows, where a connection
    // would wait for the kernel's handshake retransmission (1 s, then 3 s, 7 s) whatever the
    // server does.
    while (taken() + 64 <= static_cast<uint64_t>(i) && Clock::now() < give_up)
      std::this_thread::sleep_for(1ms);
    const int fd = connect_from(f.port(), kAttacker);
    ASSERT_GE(fd, 0) << i;
    fds.push_back(fd);
  }
  while (taken() < static_cast<uint64_t>(kIdle) && Clock::now() < give_up)
    std::this_thread::sleep_for(10ms);
  const auto took = Clock::now() - t0;
  ASSERT_EQ(accepted + refused, static_cast<uint64_t>(kIdle))
      << accepted << " accepted, " << refused << " refused: not every connection was taken";
  EXPECT_LE(still_open(fds), 8) << "over max_connections_per_peer";
  // At most 8 held at once, and an idle one is held for keep_alive_timeout (1 s) at least: so
  // no more than 8 were accepted per started second of the attack (8 when the connections came
  // within a second, as they do unless the machine is loaded), and every other one was refused.
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(took).count();
  const uint64_t held_at_most = 8 * static_cast<uint64_t>(1 + seconds);
  EXPECT_LE(accepted, held_at_most) << "in " << seconds << " s";
  EXPECT_GE(refused, kIdle - held_at_most) << "in " << seconds << " s";
  EXPECT_TRUE(f.well_behaved_ok());
  std::this_thread::sleep_for(hostile_options().read_timeout + 500ms);
  EXPECT_EQ(still_open(fds), 0) << "idle connections outlived the timeouts";
  for (int fd : fds) ::close(fd);
  f.expect_memory_bounded(0, "many idle connections");
  std::vector<int> fds2;
  f.expect_stop_bounded(idle_connections(f.port(), 50, &fds2));
  for (int fd : fds2) ::close(fd);
}

// A connection over the per-peer limit is refused and never counted as accepted, not even for
// the moment libmicrohttpd takes to refuse it: stats() read all along while 10000 connections are
// refused never shows more accepted than the 8 held ones. (A provisional count taken back on
// refusal was once read as 9 accepted and 191 refused of 200, all within a second.)
TEST(HttpHostileTest, ARefusedConnectionIsNeverSeenAsAccepted) {
  memcg::testing::Watchdog dog("a refused connection seen as accepted", 60s);
  Controller ctl;
  ServerOptions o = hostile_options();
  o.read_timeout = 30s;  // the held connections stay held for the whole test
  o.keep_alive_timeout = 30s;
  Server server(ctl, o);
  std::string error;
  ASSERT_EQ(server.start(&error), 0) << error;
  std::vector<int> held;
  for (int i = 0; i < 8; ++i) {
    const int fd = connect_from(server.port(), kAttacker);
    ASSERT_GE(fd, 0) << i;
    held.push_back(fd);
  }
  const auto give_up = Clock::now() + 10s;
  while (server.stats().accepted < 8 && Clock::now() < give_up) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(server.stats().accepted, 8u);
  std::atomic<bool> stop_reading{false};
  uint64_t most = 0, reads = 0;
  std::thread reader([&] {
    while (!stop_reading.load()) {
      most = std::max(most, server.stats().accepted);
      ++reads;
    }
  });
  constexpr uint64_t kOver = 10000;  // about 0.6 s; a few seconds on a loaded machine
  uint64_t connected = 0;
  const auto loop_give_up = Clock::now() + 30s;
  for (uint64_t i = 0; i < kOver && Clock::now() < loop_give_up; ++i) {
    // At most 64 not taken yet, as above: the listen backlog never overflows.
    while (server.stats().refused + 64 <= i && Clock::now() < loop_give_up)
      std::this_thread::sleep_for(1ms);
    const int fd = connect_from(server.port(), kAttacker);
    if (fd < 0) break;
    ++connected;
    // Closed with a reset: no TIME_WAIT keeps its port, so that thousands of connections (and
    // repeated runs) never make the kernel search long for a free port in bind().
    const linger reset{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    ::close(fd);
  }
  while (server.stats().refused < connected && Clock::now() < loop_give_up)
    std::this_thread::sleep_for(1ms);
  stop_reading.store(true);
  reader.join();
  const ServerStats st = server.stats();
  EXPECT_EQ(connected, kOver);
  EXPECT_EQ(st.refused, kOver);
  EXPECT_EQ(st.accepted, 8u);
  EXPECT_EQ(most, 8u) << "of " << reads << " reads of stats()";
  EXPECT_EQ(still_open(held), 8);
  for (int fd : held) ::close(fd);
}

TEST(HttpHostileTest, RangesAreIgnoredTheWholeDocumentIsSent) {
  memcg::testing::Watchdog dog("many ranges", 60s);
  Fixture f;
  std::string ranges = "bytes=0-10";
  for (int i = 0; i < 1000; ++i) ranges += ",0-10";
  httplib::Client c("127.0.0.1", f.port());
  c.set_read_timeout(5, 0);
  auto res = c.Get("/metrics", {{"Range", ranges}});
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Accept-Ranges"), "none");
  EXPECT_FALSE(res->has_header("Content-Range"));
  EXPECT_GE(res->body.size(), f.document - 4096);  // the whole exposition (values move a little)
  EXPECT_LE(res->body.size(), f.document + 4096);
  f.expect_memory_bounded(4 * f.document, "many ranges");
}

// Connections from the attacker's address, as fast as it can, each asking for /metrics and
// reading nothing: the answers in flight are bounded, the rest is refused.
std::unique_ptr<Attacker> flood(int port, std::vector<int>* fds) {
  return std::make_unique<Attacker>(3s, [=]() {
    const int fd = connect_from(port, kAttacker);
    if (fd >= 0) {
      send_all(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
      fds->push_back(fd);
    }
    return fds->size() < 2000;
  });
}

TEST(HttpHostileTest, ConnectionFloodOverTheLimitIsRefused) {
  memcg::testing::Watchdog dog("connection flood", 60s);
  Fixture f;
  std::vector<int> fds;
  auto attack = flood(f.port(), &fds);
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(f.well_behaved_ok());
  wait_done(*attack, 10s);
  EXPECT_TRUE(f.well_behaved_ok());
  const ServerStats st = f.server->stats();
  EXPECT_GT(st.refused, 0u);
  EXPECT_GT(st.accepted, 0u);
  f.expect_memory_bounded(4 * f.document, "connection flood");
  for (int fd : fds) ::close(fd);
  std::vector<int> fds2;
  f.expect_stop_bounded(flood(f.port(), &fds2));
  for (int fd : fds2) ::close(fd);
}

// The action endpoints (members, budget) take the same bounds as the writes: an endless or
// over-size body gets 413 before it is read, and bad requests from several connections at once
// each get a clear status and a JSON error while charges go on; nothing is acted on.
TEST(HttpHostileTest, TheActionsTakeTheSameBoundsAndRefuseBadInput) {
  memcg::testing::Watchdog dog("actions under attack", 60s);
  Fixture f;
  for (const char* target : {"PUT /v1/budget", "POST /v1/members/1/kill",
                             "POST /v1/members/1/preempt"}) {
    Outcome o;
    const std::string head = std::string(target) + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                             kToken + "\r\nContent-Length: 1000000000000\r\n\r\n";
    auto attack = endless(f.port(), head, kFiller, kFlood, &o);
    wait_done(*attack, 10s);
    EXPECT_EQ(o.status, 413) << target;
    EXPECT_TRUE(o.closed) << target;
    EXPECT_LT(o.sent, kFlood) << target;
  }
  // Bad requests, four connections at a time, while a tenant charges and uncharges.
  std::atomic<bool> charging{true};
  std::atomic<uint64_t> charged{0};
  std::thread tenant([&] {
    while (charging.load()) {
      if (try_charge(*f.groups[0], 16) == ChargeStatus::kOk) {
        uncharge(*f.groups[0], 16);
        charged.fetch_add(1, std::memory_order_relaxed);
      }
    }
  });
  const std::vector<std::pair<std::string, int>> bad = {
      {"PUT /v1/budget", 400},                       // body "0" below
      {"POST /v1/members/999999/kill", 404},         // an id never given
      {"POST /v1/members/nonsense/preempt", 404},    // a malformed id
      {"POST /v1/members/1/explode", 404},           // an unknown verb
  };
  const std::vector<std::string> budget_bodies = {"0", "18446744073709551616", "-1", "{\"bytes\":",
                                                  std::string(4000, '9')};
  std::atomic<int> wrong{0}, answered{0}, cut{0};
  // Four clients of one peer while the flood's connections may still be cleaned up: one may be
  // over max_connections_per_peer for a moment, and libmicrohttpd then closes it unanswered.
  // Such a close is not an answer; each must show in ServerStats::refused (checked below).
  const uint64_t refused_before = f.server->stats().refused;
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      for (int i = 0; i < 25; ++i) {
        const auto& [target, want] = bad[static_cast<size_t>(i + c) % bad.size()];
        const std::string body =
            target == "PUT /v1/budget" ? budget_bodies[static_cast<size_t>(i) % budget_bodies.size()]
                                       : "";
        const int fd = connect_from(f.port(), kAttacker);
        if (fd < 0) continue;  // over the per-peer limit for a moment: not an answer
        const std::string request = target + " HTTP/1.0\r\nAuthorization: Bearer " + kToken +
                                    "\r\nContent-Length: " + std::to_string(body.size()) +
                                    "\r\n\r\n" + body;
        bool closed = false;
        const bool sent = send_all(fd, request);
        const std::string answer = sent ? read_until_closed(fd, 3s, &closed) : "";
        ::close(fd);
        if (answer.empty() && (closed || !sent)) {
          cut.fetch_add(1);
          continue;
        }
        answered.fetch_add(1);
        if (status_of(answer) != want || answer.find("\"error\"") == std::string::npos) {
          wrong.fetch_add(1);
          ADD_FAILURE() << target << " body " << body.substr(0, 24) << ": " << answer.substr(0, 200);
        }
      }
    });
  for (auto& t : clients) t.join();
  charging.store(false);
  tenant.join();
  EXPECT_GT(answered.load(), 50);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(static_cast<uint64_t>(cut.load()), f.server->stats().refused - refused_before)
      << "connections closed unanswered that the per-peer limit did not refuse";
  EXPECT_GT(charged.load(), 0u);  // the charge path went on meanwhile
  EXPECT_EQ(f.ctl.root().max(), kUnlimited);  // no budget was set
  EXPECT_TRUE(f.well_behaved_ok());
  f.expect_memory_bounded(0, "actions under attack");
  Outcome o;
  f.expect_stop_bounded(endless(
      f.port(), "PUT /v1/budget HTTP/1.1\r\nContent-Length: 100000000000\r\n\r\n", kFiller,
      kFlood, &o));
}

}  // namespace
}  // namespace memcg::http
