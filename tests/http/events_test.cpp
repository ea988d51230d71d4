// GET /v1/events of memcg::http::Server over a real socket on 127.0.0.1: the SSE framing, ids in
// order, resuming with Last-Event-ID (header or query), the gap event, filters, heartbeats, the
// refusals (400/404/503 with a JSON body), the stream bound, and streams ended by stop().
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "../watchdog.hpp"
#include "memcg/core/signal/event_bus.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/http/server.hpp"
#include "sse_client.hpp"

namespace memcg::http {
namespace {

using namespace std::chrono_literals;
using testing::connect_from;
using testing::SseClient;

struct Live {
  explicit Live(ServerOptions o = {}, EventBusOptions bus = {}) {
    EXPECT_EQ(ctl.events().enable(bus), 0);
    EXPECT_EQ(ctl.create("a", &a), 0);
    EXPECT_EQ(ctl.create("a/b", &ab), 0);
    EXPECT_EQ(ctl.create("c", &c), 0);
    o.threads = 2;
    server = std::make_unique<Server>(ctl, std::move(o));
    std::string error;
    EXPECT_EQ(server->start(&error), 0) << error;
  }
  ~Live() { server->stop(); }
  std::unique_ptr<SseClient> stream(const std::string& target, const std::string& headers = "") {
    auto s = std::make_unique<SseClient>(connect_from(server->port()), target, headers);
    EXPECT_TRUE(s->sent());
    // The stream is open once its first text (a comment) came.
    EXPECT_TRUE(s->read_until(5s, [&] { return !s->body().empty() || s->closed(); }));
    return s;
  }
  uint64_t publish(const char* group, int i) {
    return ctl.events().publish(BusEventType::kAction, group, "{\"i\":" + std::to_string(i) + "}");
  }
  Controller ctl;
  GroupRef a, ab, c;
  std::unique_ptr<Server> server;
};

TEST(HttpEventsTest, EventsArriveInOrderWithIdEventAndDataLines) {
  memcg::testing::Watchdog dog("events in order", 30s);
  Live live;
  auto s = live.stream("/v1/events");
  EXPECT_EQ(s->status(), 200);
  EXPECT_NE(s->head().find("Content-Type: text/event-stream"), std::string::npos) << s->head();
  EXPECT_NE(s->head().find("chunked"), std::string::npos);
  const uint64_t first = live.publish("a", 0);
  for (int i = 1; i < 5; ++i) live.publish("a/b", i);
  GroupRef d;
  ASSERT_EQ(live.ctl.create("c/d", &d), 0);  // the library's own event
  ASSERT_TRUE(s->wait_events(6));
  const auto& ev = s->events();
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(ev[i].id, std::to_string(first + i));
    EXPECT_EQ(ev[i].event, "action");
    const auto j = nlohmann::json::parse(ev[i].data);
    EXPECT_EQ(j["id"], first + i);
    EXPECT_EQ(j["type"], "action");
    EXPECT_EQ(j["group"], i == 0 ? "a" : "a/b");
    EXPECT_EQ(j["data"]["i"], i);
    EXPECT_GT(j["time_ns"].get<uint64_t>(), 0u);
  }
  EXPECT_EQ(ev[5].event, "group_created");
  EXPECT_EQ(nlohmann::json::parse(ev[5].data)["group"], "c/d");
  EXPECT_EQ(live.server->stats().streams_opened, 1u);
}

TEST(HttpEventsTest, LastEventIdResumesFromTheHeaderOrTheQuery) {
  memcg::testing::Watchdog dog("resume", 30s);
  Live live;
  uint64_t ids[10];
  for (int i = 0; i < 10; ++i) ids[i] = live.publish("a", i);
  auto h = live.stream("/v1/events", "Last-Event-ID: " + std::to_string(ids[6]) + "\r\n");
  ASSERT_TRUE(h->wait_events(3));
  EXPECT_EQ(h->events()[0].id, std::to_string(ids[7]));
  EXPECT_EQ(h->events()[2].id, std::to_string(ids[9]));
  auto q = live.stream("/v1/events?last_event_id=" + std::to_string(ids[8]));
  ASSERT_TRUE(q->wait_events(1));
  EXPECT_EQ(q->events()[0].id, std::to_string(ids[9]));
  // The header wins over the query, as a browser's EventSource sends the header on reconnect.
  auto both = live.stream("/v1/events?last_event_id=" + std::to_string(ids[0]),
                          "Last-Event-ID: " + std::to_string(ids[8]) + "\r\n");
  ASSERT_TRUE(both->wait_events(1));
  EXPECT_EQ(both->events()[0].id, std::to_string(ids[9]));
  // Nothing more came for them.
  EXPECT_FALSE(both->wait_events(2, 200ms));
}

TEST(HttpEventsTest, AGapTheRingCannotFillIsAnEvent) {
  memcg::testing::Watchdog dog("gap", 30s);
  EventBusOptions small;
  small.capacity = 16;
  Live live({}, small);
  const uint64_t first = live.publish("a", 0);
  uint64_t last = first;
  for (int i = 1; i < 50; ++i) last = live.publish("a", i);
  auto s = live.stream("/v1/events", "Last-Event-ID: " + std::to_string(first) + "\r\n");
  ASSERT_TRUE(s->wait_events(17));
  EXPECT_EQ(s->events()[0].event, "gap");
  const auto gap = nlohmann::json::parse(s->events()[0].data)["data"];
  EXPECT_EQ(gap["first_missed"], first + 1);
  EXPECT_EQ(gap["last_missed"], last - 16);
  EXPECT_EQ(s->events()[0].id, std::to_string(last - 16));
  EXPECT_EQ(s->events()[1].id, std::to_string(last - 15));
  EXPECT_EQ(s->events()[16].id, std::to_string(last));
}

TEST(HttpEventsTest, FiltersByGroupSubtreeAndType) {
  memcg::testing::Watchdog dog("filters", 30s);
  Live live;
  auto s = live.stream("/v1/events?group=a&type=action,budget");
  live.publish("c", 0);
  live.publish("a/b", 1);
  live.ctl.events().publish(BusEventType::kBudget, "a", "{\"i\":2}");
  live.ctl.events().publish(BusEventType::kWrite, "a", "{\"i\":3}");
  live.publish("/", 4);
  live.publish("a", 5);
  ASSERT_TRUE(s->wait_events(3));
  EXPECT_EQ(nlohmann::json::parse(s->events()[0].data)["data"]["i"], 1);
  EXPECT_EQ(s->events()[1].event, "budget");
  EXPECT_EQ(nlohmann::json::parse(s->events()[2].data)["data"]["i"], 5);
  EXPECT_FALSE(s->wait_events(4, 200ms));
}

TEST(HttpEventsTest, BadRequestsGetAJsonErrorAndNoStream) {
  memcg::testing::Watchdog dog("refusals", 30s);
  Live live;
  httplib::Client c("127.0.0.1", live.server->port());
  c.set_read_timeout(5, 0);
  struct Case {
    std::string target;
    httplib::Headers headers;
    int status;
  } cases[] = {
      {"/v1/events", {{"Last-Event-ID", "abc"}}, 400},
      {"/v1/events", {{"Last-Event-ID", "-1"}}, 400},
      {"/v1/events", {{"Last-Event-ID", "1 2"}}, 400},
      {"/v1/events", {{"Last-Event-ID", "18446744073709551616"}}, 400},  // 2^64
      {"/v1/events", {{"Last-Event-ID", std::string(8000, '9')}}, 400},  // huge
      {"/v1/events?last_event_id=0x10", {}, 400},
      {"/v1/events?type=action,nope", {}, 400},
      {"/v1/events?type=", {}, 400},
      {"/v1/events?group=a/../c", {}, 400},
      {"/v1/events?group=a%20b", {}, 400},
      {"/v1/events?group=zz", {}, 404},
  };
  for (const Case& k : cases) {
    auto r = c.Get(k.target.c_str(), k.headers);
    ASSERT_TRUE(r) << k.target;
    EXPECT_EQ(r->status, k.status) << k.target;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json") << k.target;
    const auto j = nlohmann::json::parse(r->body);
    EXPECT_EQ(j["status"], k.status);
    EXPECT_FALSE(j["error"].get<std::string>().empty());
  }
  EXPECT_EQ(live.server->stats().streams_opened, 0u);
  EXPECT_EQ(live.ctl.events().stats().subscribers, 0u);
  // The largest id is accepted: an id this bus never gave resumes with a gap.
  auto s = live.stream("/v1/events", "Last-Event-ID: 18446744073709551615\r\n");
  ASSERT_TRUE(s->wait_events(1));
  EXPECT_EQ(s->events()[0].event, "gap");
}

TEST(HttpEventsTest, StreamsAreBoundedAndTheRestGet503) {
  memcg::testing::Watchdog dog("stream bound", 30s);
  ServerOptions o;
  o.max_event_streams = 2;
  o.event_heartbeat = 100ms;  // a client gone is noticed at the next heartbeat (or event)
  Live live(o);
  auto s1 = live.stream("/v1/events");
  auto s2 = live.stream("/v1/events");
  auto s3 = live.stream("/v1/events");
  EXPECT_EQ(s1->status(), 200);
  EXPECT_EQ(s2->status(), 200);
  ASSERT_TRUE(s3->wait_closed(5s) || s3->status() == 503);
  EXPECT_EQ(s3->status(), 503);
  EXPECT_NE(s3->body().find("\"too many event streams\""), std::string::npos) << s3->body();
  EXPECT_EQ(live.server->stats().streams_refused, 1u);
  // A stream that ends gives its place back.
  s1.reset();
  bool served = false;
  for (int i = 0; i < 100 && !served; ++i) {
    auto again = live.stream("/v1/events");
    served = again->status() == 200;
    if (!served) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(served);
}

TEST(HttpEventsTest, HeartbeatsKeepASilentStreamAlive) {
  memcg::testing::Watchdog dog("heartbeat", 30s);
  ServerOptions o;
  o.event_heartbeat = 200ms;
  o.write_timeout = 300ms;
  o.keep_alive_timeout = 1s;
  Live live(o);
  auto s = live.stream("/v1/events");
  ASSERT_TRUE(s->read_until(5s, [&] { return s->heartbeats() >= 3; }));
  EXPECT_FALSE(s->closed());  // past write_timeout and keep_alive_timeout, alive
  live.publish("a", 1);
  ASSERT_TRUE(s->wait_events(1));
}

TEST(HttpEventsTest, StopEndsEveryStreamCleanly) {
  memcg::testing::Watchdog dog("stop", 30s);
  Live live;
  std::vector<std::unique_ptr<SseClient>> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(live.stream("/v1/events"));
  live.publish("a", 1);
  for (auto& s : streams) ASSERT_TRUE(s->wait_events(1));
  const auto t0 = std::chrono::steady_clock::now();
  live.server->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  for (auto& s : streams) EXPECT_TRUE(s->wait_closed(5s));
  EXPECT_EQ(live.ctl.events().stats().subscribers, 0u);
  // A subscriber of the bus in the process is unaffected by the server.
  std::unique_ptr<Subscription> sub;
  EXPECT_EQ(live.ctl.events().subscribe({}, 0, 0, nullptr, &sub), 0);
}

TEST(HttpEventsTest, HttplibClientFollowsTheChunkedStream) {
  memcg::testing::Watchdog dog("httplib", 30s);
  Live live;
  std::thread producer([&] {
    std::this_thread::sleep_for(200ms);
    for (int i = 0; i < 3; ++i) live.publish("a", i);
  });
  httplib::Client c("127.0.0.1", live.server->port());
  c.set_read_timeout(5, 0);
  std::string got;
  auto r = c.Get("/v1/events", [&](const char* data, size_t n) {
    got.append(data, n);
    size_t events = 0;
    for (size_t p = 0; (p = got.find("\nevent: action\n", p)) != std::string::npos; ++p) ++events;
    return events < 3;  // then the client hangs up
  });
  producer.join();
  EXPECT_NE(got.find("\"i\":2"), std::string::npos) << got;
  // The server saw the client go: its subscription ends.
  for (int i = 0; i < 200 && live.ctl.events().stats().subscribers != 0; ++i) {
    live.publish("a", 100 + i);  // writing to a closed connection is how it is noticed
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(live.ctl.events().stats().subscribers, 0u);
}

}  // namespace
}  // namespace memcg::http
