// GET /v1/events against hostile clients on loopback (the cases of hostile_test.cpp for the event
// stream): a subscriber that reads nothing, a flood of stream requests from many peers, huge and
// malformed Last-Event-ID headers. Each case checks the answer, that the library keeps serving
// charges, that a well-behaved client (127.0.0.1) is served, that memory stays bounded, and that
// stop() returns in time while the attack goes on.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "../watchdog.hpp"
#include "hostile_client.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/signal/event_bus.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/http/server.hpp"

namespace memcg::http {
namespace {

using namespace std::chrono_literals;
using testing::Clock;
using testing::connect_from;
using testing::read_until_closed;
using testing::rss_bytes;
using testing::send_all;
using testing::status_of;

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
  o.read_timeout = 1500ms;
  o.write_timeout = 1500ms;
  o.keep_alive_timeout = 1s;
  o.max_event_streams = 4;
  o.event_stream_lag = 256;
  o.event_heartbeat = 200ms;
  return o;
}

// A server, a group charged and uncharged by a thread all along, and the resident set before.
struct Fixture {
  Controller ctl;
  GroupRef g;
  std::unique_ptr<Server> server;
  std::atomic<bool> stop_charging{false};
  std::atomic<uint64_t> charges{0};
  std::thread charger;
  size_t rss_before = 0;

  Fixture() {
    EXPECT_EQ(ctl.create("g", &g), 0);
    server = std::make_unique<Server>(ctl, hostile_options());
    std::string error;
    EXPECT_EQ(server->start(&error), 0) << error;
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(well_behaved_ok());
    rss_before = rss_bytes();
    charger = std::thread([this] {
      while (!stop_charging.load()) {
        if (charged(try_charge(*g, 4))) uncharge(*g, 4);
        charges.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  ~Fixture() {
    stop_charging = true;
    charger.join();
    server->stop();
  }
  bool well_behaved_ok() {
    httplib::Client c("127.0.0.1", server->port());
    c.set_connection_timeout(2, 0);
    c.set_read_timeout(3, 0);
    auto a = c.Get("/healthz");
    return a && a->status == 200;
  }
  // Charges go on: more of them within 200 ms.
  bool charging() {
    const uint64_t before = charges.load();
    std::this_thread::sleep_for(200ms);
    return charges.load() > before;
  }
  void expect_memory_bounded(size_t bounds) {
    const size_t now = rss_bytes();
    EXPECT_LE(now > rss_before ? now - rss_before : 0, bounds + kSlack);
  }
  void expect_stop_bounded() {
    const auto t0 = Clock::now();
    server->stop();
    EXPECT_LE(Clock::now() - t0, hostile_options().read_timeout + 1s);
  }
};

uint64_t dropped(const Controller& ctl, BusDropReason r) {
  return const_cast<Controller&>(ctl).events().stats().dropped[static_cast<int>(r)];
}

TEST(HttpHostileEventsTest, AStreamThatReadsNothingIsDroppedWhileChargesGoOn) {
  memcg::testing::Watchdog dog("silent stream", 60s);
  Fixture f;
  // A tiny receive window, set before the handshake: the server's sends stall at once.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  const int small = 2048;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(f.server->port()));
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst), 0);
  ASSERT_TRUE(send_all(fd, "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n"));
  // Then it reads nothing. Events of 1 KB come until the bus drops it (its queue: 256 events).
  const std::string payload = "{\"pad\":\"" + std::string(1000, 'p') + "\"}";
  const auto end = Clock::now() + 20s;
  while (f.server->stats().streams_dropped == 0 && Clock::now() < end) {
    for (int i = 0; i < 100; ++i) f.ctl.events().publish(BusEventType::kAction, "g", payload);
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(f.server->stats().streams_dropped, 1u);
  EXPECT_EQ(dropped(f.ctl, BusDropReason::kLagging), 1u);
  EXPECT_TRUE(f.charging());
  EXPECT_TRUE(f.well_behaved_ok());
  // The ring's bound (4096 events of 1 KB) and the stream's buffers, nothing per event sent.
  f.expect_memory_bounded(size_t{8} << 20);
  // Its connection is cut at write_timeout and its subscription ends.
  const auto until = Clock::now() + 10s;
  while (f.ctl.events().stats().subscribers != 0 && Clock::now() < until)
    std::this_thread::sleep_for(20ms);
  EXPECT_EQ(f.ctl.events().stats().subscribers, 0u);
  ::close(fd);
  f.expect_stop_bounded();
}

TEST(HttpHostileEventsTest, AFloodOfStreamsFromManyPeersIsBounded) {
  memcg::testing::Watchdog dog("stream flood", 60s);
  Fixture f;
  std::deque<int> open;
  size_t most = 0;
  char peer[32];
  for (int i = 0; i < 1000; ++i) {
    std::snprintf(peer, sizeof peer, "127.0.0.%d", 2 + i % 10);
    const int fd = connect_from(f.server->port(), peer);
    if (fd >= 0) {
      send_all(fd, "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n");
      open.push_back(fd);
    }
    if (open.size() > 48) {
      ::close(open.front());
      open.pop_front();
    }
    most = std::max(most, f.ctl.events().stats().subscribers);
    if (i % 100 == 0) f.ctl.events().publish(BusEventType::kAction, "g", "{}");
  }
  EXPECT_LE(most, hostile_options().max_event_streams);
  EXPECT_GT(f.server->stats().streams_refused, 0u);  // 503 with a JSON body
  EXPECT_TRUE(f.charging());
  EXPECT_TRUE(f.well_behaved_ok());
  f.expect_memory_bounded(size_t{4} << 20);
  f.expect_stop_bounded();
  for (int fd : open) ::close(fd);
}

TEST(HttpHostileEventsTest, HugeOrMalformedLastEventIdIsRefused) {
  memcg::testing::Watchdog dog("last event id", 60s);
  Fixture f;
  auto ask = [&](const std::string& value) {
    const int fd = connect_from(f.server->port(), "127.0.0.2");
    EXPECT_GE(fd, 0);
    send_all(fd, "GET /v1/events HTTP/1.1\r\nHost: x\r\nConnection: close\r\nLast-Event-ID: " +
                     value + "\r\n\r\n");
    const std::string got = read_until_closed(fd, 3s);
    ::close(fd);
    return got;
  };
  for (const std::string& v : {std::string(12000, '9'), std::string("1e9"), std::string("0x1"),
                               std::string("12345678901234567890123"), std::string("\x01\x02")}) {
    const std::string got = ask(v);
    EXPECT_EQ(status_of(got), 400) << v.substr(0, 20);
    EXPECT_NE(got.find("{\"error\":\"Last-Event-ID is not an event id"), std::string::npos);
  }
  // Past the header bound: refused before any handler runs.
  EXPECT_EQ(status_of(ask(std::string(20000, '9'))), 431);
  EXPECT_EQ(f.server->stats().streams_opened, 0u);
  EXPECT_EQ(f.ctl.events().stats().subscribers, 0u);
  EXPECT_TRUE(f.charging());
  EXPECT_TRUE(f.well_behaved_ok());
}

}  // namespace
}  // namespace memcg::http
