// memcg::http::Server against a live server on 127.0.0.1 (an ephemeral port), through a real
// HTTP client: every file byte-identical to read_file(), the JSON tree equal to the controller,
// the exposition equal to render_prometheus() (and accepted by promtool where installed), and
// every refused request refused with its status and without effect.
#include "../promtool.hpp"
#include "memcg/http/server.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/base/events.hpp"
#include "memcg/files/files.hpp"
#include "memcg/http/json.hpp"
#include "memcg/files/prometheus.hpp"
#include "memcg/core/signal/psi.hpp"

namespace memcg::http {
namespace {

constexpr const char* kToken = "s3cret-token";

// A small tree with usage, limits, protection and events in it.
struct Tree {
  Controller ctl;
  GroupRef a, ab, c;
  Tree() {
    EXPECT_EQ(ctl.create("a", &a), 0);
    EXPECT_EQ(ctl.create("a/b", &ab), 0);
    EXPECT_EQ(ctl.create("c", &c), 0);
    a->set_max(64 << 20);
    a->set_low(1 << 20);
    ab->set_high(8 << 20);
    ab->set_min(4096);
    c->set_max(1 << 20);
    EXPECT_TRUE(charged(try_charge(*ab, 300)));
    EXPECT_TRUE(charged(try_charge(*c, 20)));
    ab->raise(Event::kHigh);
    c->raise(Event::kMax);
    c->raise(Event::kMax);
  }
  ~Tree() {
    uncharge(*ab, 300);
    uncharge(*c, 20);
  }
  std::vector<GroupRef> all() { return {GroupRef(&ctl.root()), a, ab, c}; }
};

struct Live {
  explicit Live(Controller& ctl, ServerOptions o = {}) : server(ctl, std::move(o)) {
    std::string error;
    const int err = server.start(&error);
    EXPECT_EQ(err, 0) << error;
    client = std::make_unique<httplib::Client>("127.0.0.1", server.port());
    client->set_connection_timeout(5, 0);
    client->set_read_timeout(10, 0);
    client->set_write_timeout(10, 0);
  }
  Server server;
  std::unique_ptr<httplib::Client> client;
};

std::string url_of(const Group& g, const std::string& file) {
  return g.is_root() ? "/v1/groups/" + file : "/v1/groups/" + g.path() + "/" + file;
}

TEST(HttpServerTest, EveryFileIsByteIdenticalToReadFile) {
  Tree t;
  Live live(t.ctl);
  int compared = 0;
  for (const GroupRef& g : t.all()) {
    for (const std::string& name : file_names(*g)) {
      std::string expected;
      const int err = read_file(*g, name, &expected);
      auto res = live.client->Get(url_of(*g, name));
      ASSERT_TRUE(res) << url_of(*g, name) << ": " << httplib::to_string(res.error());
      if (err == EACCES) {  // write-only (memory.reclaim)
        EXPECT_EQ(res->status, 405) << url_of(*g, name);
        continue;
      }
      ASSERT_EQ(err, 0) << name;
      EXPECT_EQ(res->status, 200) << url_of(*g, name);
      EXPECT_EQ(res->body, expected) << url_of(*g, name);
      EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; charset=utf-8");
      ++compared;
    }
  }
  EXPECT_GT(compared, 30);
}

TEST(HttpServerTest, GroupsJsonMatchesTheController) {
  Tree t;
  Live live(t.ctl);
  auto res = live.client->Get("/v1/groups");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  const nlohmann::json doc = nlohmann::json::parse(res->body);
  EXPECT_EQ(doc.at("version"), 1);
  EXPECT_EQ(doc.at("unit_bytes"), t.ctl.unit_size());
  std::set<std::string> seen;
  for (const nlohmann::json& j : doc.at("groups")) {
    const std::string path = j.at("path");
    seen.insert(path);
    GroupRef g = t.ctl.lookup(path);
    ASSERT_TRUE(g) << path;
    EXPECT_EQ(j.at("current"), g->current()) << path;
    EXPECT_EQ(j.at("peak"), g->peak()) << path;
    const PsiStats ps = psi_stats(*g);
    EXPECT_EQ(j.at("pressure").at("some").at("total_us"), ps.total_us[0]) << path;
    EXPECT_EQ(j.at("pressure").at("full").at("avg10"), 0.0) << path;
    if (g->is_root()) {
      EXPECT_FALSE(j.contains("limits"));
      EXPECT_FALSE(j.contains("events"));
      continue;
    }
    auto bytes = [](uint64_t v) { return v == kUnlimited ? nlohmann::json() : nlohmann::json(v); };
    EXPECT_EQ(j.at("limits").at("max"), bytes(g->max())) << path;
    EXPECT_EQ(j.at("limits").at("high"), bytes(g->high())) << path;
    EXPECT_EQ(j.at("protection").at("min"), g->min()) << path;
    EXPECT_EQ(j.at("protection").at("low"), g->low()) << path;
    for (int e = 0; e < kNumEvents; ++e) {
      const char* name = event_name(static_cast<Event>(e));
      EXPECT_EQ(j.at("events").at(name), g->events().get(static_cast<Event>(e))) << path << name;
      EXPECT_EQ(j.at("events_local").at(name), g->events_local().get(static_cast<Event>(e)))
          << path << name;
    }
  }
  EXPECT_EQ(seen, (std::set<std::string>{"/", "a", "a/b", "c"}));
  // Spot values, independent of the accessors.
  EXPECT_EQ(t.c->max(), uint64_t{1} << 20);
  EXPECT_EQ(doc.at("groups").size(), 4u);
  for (const nlohmann::json& j : doc.at("groups")) {
    if (j.at("path") == "c") {
      EXPECT_EQ(j.at("limits").at("max"), 1 << 20);
      EXPECT_TRUE(j.at("limits").at("high").is_null());
      EXPECT_EQ(j.at("events").at("max"), 2);
      EXPECT_GE(j.at("current"), 20 * 4096);
    }
  }
  EXPECT_EQ(res->body, render_groups_json(t.ctl));
}

TEST(HttpServerTest, MetricsServeTheExposition) {
  Tree t;
  Live live(t.ctl);
  auto res = live.client->Get("/metrics");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  // The controller's exposition, then the server's own families (event bus, audit).
  const std::string doc = render_prometheus(t.ctl);
  EXPECT_EQ(res->body.substr(0, doc.size()), doc);
  EXPECT_EQ(res->body.find("# HELP memcg_events_published_total "), doc.size());
  EXPECT_NE(res->body.find("# TYPE memcg_http_audit_records_total counter\n"), std::string::npos);
  EXPECT_NE(res->body.find("memcg_memory_max_bytes{group=\"c\"} 1048576\n"), std::string::npos);
  // Written while it is sent, with its length announced up front (not chunked).
  EXPECT_EQ(res->get_header_value("Content-Length"), std::to_string(res->body.size()));
  EXPECT_FALSE(res->has_header("Transfer-Encoding"));
  auto head = live.client->Head("/metrics");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->get_header_value("Content-Length"), std::to_string(res->body.size()));
  EXPECT_TRUE(head->body.empty());
  // An HTTP/1.0 client gets the same document, then the connection is closed.
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    timeval tv{10, 0};
    ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(static_cast<uint16_t>(live.server.port()));
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&sin), sizeof sin), 0);
    const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
    ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    std::string answer;
    char buf[65536];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) answer.append(buf, static_cast<size_t>(n));
    ::close(fd);
    EXPECT_EQ(n, 0) << "not closed by the server";
    const size_t end = answer.find("\r\n\r\n");
    ASSERT_NE(end, std::string::npos);
    EXPECT_EQ(answer.rfind("HTTP/1.", 0), 0u);
    EXPECT_EQ(answer.substr(end + 4), res->body);
  }

  // Compression is never applied, whatever the client accepts.
  auto plain = live.client->Get("/metrics", {{"Accept-Encoding", "gzip, deflate, br"}});
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 200);
  EXPECT_FALSE(plain->has_header("Content-Encoding")) << plain->get_header_value("Content-Encoding");
  EXPECT_EQ(plain->body, res->body);

  auto health = live.client->Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");

  if (std::string(MEMCG_PROMTOOL).empty()) {
    GTEST_SKIP() << "promtool is not installed (Debian package 'prometheus')";
  }
  EXPECT_TRUE(testing::promtool_accepts(MEMCG_PROMTOOL, res->body));
}

TEST(HttpServerTest, MalformedAndUnknownPathsAreRefused) {
  Tree t;
  Live live(t.ctl);
  auto status = [&](const std::string& path) {
    auto res = live.client->Get(path);
    return res ? res->status : -1;
  };
  // Traversal, also percent-encoded (httplib decodes before routing), and other malformed paths.
  EXPECT_EQ(status("/v1/groups/a/../memory.max"), 400);
  EXPECT_EQ(status("/v1/groups/a/%2e%2e/c/memory.max"), 400);
  EXPECT_EQ(status("/v1/groups/../../etc/passwd"), 400);
  EXPECT_EQ(status("/v1/groups/./memory.current"), 400);
  EXPECT_EQ(status("/v1/groups/a//memory.current"), 400);
  EXPECT_EQ(status("/v1/groups/a/memory.current%00"), 400);
  EXPECT_EQ(status("/v1/groups/a/"), 400);
  // Unknown group, unknown file, a root-only rule (the root has no memory.max), write-only file.
  EXPECT_EQ(status("/v1/groups/nope/memory.current"), 404);
  EXPECT_EQ(status("/v1/groups/a/b/c/memory.current"), 404);
  EXPECT_EQ(status("/v1/groups/a/memory.nope"), 404);
  EXPECT_EQ(status("/v1/groups/memory.max"), 404);
  EXPECT_EQ(status("/v1/groups/a/memory.reclaim"), 405);
  EXPECT_EQ(status("/nowhere"), 404);
  // The tree is as it was.
  EXPECT_EQ(t.ctl.nr_groups(), 4u);
  EXPECT_EQ(status("/v1/groups/a/memory.max"), 200);
}

TEST(HttpServerTest, WritesAreRefusedWhenDisabled) {
  Tree t;
  Live live(t.ctl);  // default options: writes off
  EXPECT_FALSE(live.server.options().allow_writes);
  httplib::Headers auth = {{"Authorization", std::string("Bearer ") + kToken}};
  auto res = live.client->Post("/v1/groups/a/memory.max", auth, "4096", "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(t.a->max(), uint64_t{64} << 20);
  res = live.client->Put("/v1/groups/a/memory.max", "4096", "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  res = live.client->Delete("/v1/groups/a");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(t.a->max(), uint64_t{64} << 20);
  EXPECT_EQ(t.ctl.nr_groups(), 4u);
}

TEST(HttpServerTest, WritesNeedTheTokenAndMapErrors) {
  Tree t;
  ServerOptions o;
  o.allow_writes = true;
  o.token = kToken;
  o.max_body_bytes = 1024;
  Live live(t.ctl, o);
  const uint64_t before = t.a->max();
  auto post = [&](const std::string& path, const std::string& body, const char* authorization) {
    httplib::Headers h;
    if (authorization != nullptr) h.emplace("Authorization", authorization);
    auto res = live.client->Post(path, h, body, "text/plain");
    EXPECT_TRUE(res) << path;
    return res ? *res : httplib::Response();
  };
  const std::string good = std::string("Bearer ") + kToken;

  httplib::Response r = post("/v1/groups/a/memory.max", "4096", nullptr);
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.get_header_value("WWW-Authenticate"), "Bearer");
  r = post("/v1/groups/a/memory.max", "4096", "Bearer wrong");
  EXPECT_EQ(r.status, 403);
  r = post("/v1/groups/a/memory.max", "4096", "Bearer s3cret-tokenX");
  EXPECT_EQ(r.status, 403);
  r = post("/v1/groups/a/memory.max", "4096", (std::string("Basic ") + kToken).c_str());
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(t.a->max(), before);

  // Too large a body: 413 before any handler runs.
  r = post("/v1/groups/a/memory.max", std::string(64 * 1024, '1'), good.c_str());
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(t.a->max(), before);

  // Errors of write_file, with the errno's name in the body.
  r = post("/v1/groups/a/memory.max", "lots", good.c_str());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, "EINVAL\n");
  r = post("/v1/groups/a/memory.current", "1", good.c_str());
  EXPECT_EQ(r.status, 405);
  r = post("/v1/groups/zz/memory.max", "4096", good.c_str());
  EXPECT_EQ(r.status, 404);
  r = post("/v1/groups/a/memory.zz", "4096", good.c_str());
  EXPECT_EQ(r.status, 404);
  r = post("/v1/groups/a/../c/memory.max", "4096", good.c_str());
  EXPECT_EQ(r.status, 400);
  r = post("/v1/groups/a/memory.pressure", "some 150000 1000000", good.c_str());
  EXPECT_EQ(r.status, 405);
  // memory.reclaim of more than the subtree holds (nothing reclaimable: no reclaimer) is EAGAIN.
  r = post("/v1/groups/c/memory.reclaim", "1G", good.c_str());
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "EAGAIN\n");
  EXPECT_EQ(t.a->max(), before);
  EXPECT_EQ(t.c->max(), uint64_t{1} << 20);

  // And a write that is allowed.
  r = post("/v1/groups/a/memory.max", "8388608", good.c_str());
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(t.a->max(), uint64_t{8} << 20);
  r = post("/v1/groups/a/memory.high", "max", good.c_str());
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(t.a->high(), kUnlimited);
}

// Every address of this machine that is not loopback, IPv4.
std::vector<std::string> external_ipv4() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const auto* sin = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if ((ntohl(sin->sin_addr.s_addr) >> 24) == 127) continue;
    char buf[INET_ADDRSTRLEN];
    if (::inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf)) out.emplace_back(buf);
  }
  ::freeifaddrs(list);
  return out;
}

TEST(HttpServerTest, DefaultBindIsLoopbackOnly) {
  Tree t;
  EXPECT_EQ(ServerOptions().address, "127.0.0.1");
  EXPECT_FALSE(ServerOptions().allow_writes);
  Live live(t.ctl);
  ASSERT_TRUE(live.client->Get("/healthz"));
  const std::vector<std::string> others = external_ipv4();
  if (others.empty()) GTEST_SKIP() << "this machine has no non-loopback IPv4 address";
  for (const std::string& addr : others) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(static_cast<uint16_t>(live.server.port()));
    ASSERT_EQ(::inet_pton(AF_INET, addr.c_str(), &sin.sin_addr), 1);
    const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&sin), sizeof sin);
    const int err = errno;
    ::close(fd);
    EXPECT_EQ(rc, -1) << "the server answered on " << addr;
    EXPECT_EQ(err, ECONNREFUSED) << addr;
  }
}

TEST(HttpServerTest, StartAndStopReportErrors) {
  Tree t;
  Server first(t.ctl);
  std::string error;
  ASSERT_EQ(first.start(&error), 0) << error;
  EXPECT_TRUE(first.running());
  EXPECT_GT(first.port(), 0);
  EXPECT_EQ(first.start(&error), EALREADY);

  // The same port again: an error, not a crash, and the second server stays stopped.
  ServerOptions o;
  o.port = first.port();
  Server second(t.ctl, o);
  EXPECT_EQ(second.start(&error), EADDRINUSE);
  EXPECT_NE(error.find("cannot bind"), std::string::npos) << error;
  EXPECT_FALSE(second.running());
  EXPECT_EQ(second.port(), 0);

  // Names are not resolved.
  ServerOptions named;
  named.address = "localhost";
  Server third(t.ctl, named);
  EXPECT_EQ(third.start(&error), EINVAL);
  EXPECT_FALSE(third.running());

  // Once the first stops, the port is free for the second; stop twice is harmless.
  first.stop();
  first.stop();
  EXPECT_FALSE(first.running());
  EXPECT_EQ(first.port(), 0);
  ASSERT_EQ(second.start(&error), 0) << error;
  httplib::Client c("127.0.0.1", o.port);
  c.set_read_timeout(10, 0);
  auto res = c.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  second.stop();
  // And restarted.
  ASSERT_EQ(first.start(&error), 0) << error;
  first.stop();
}

// A client that connects and sends nothing is disconnected after the keep-alive timeout (1 s),
// one that stops in the middle of its request after the read timeout; either way the worker it
// held serves others again.
TEST(HttpServerTest, SilentClientsAreDisconnectedAfterTheTimeouts) {
  Tree t;
  ServerOptions o;
  o.threads = 1;
  o.read_timeout = std::chrono::milliseconds(200);
  Live live(t.ctl, o);
  for (const char* sent : {"", "GET /metrics HTTP/1.1\r\nHost: x\r\n"}) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    timeval tv{10, 0};  // the test's own bound: far above the server's 200 ms
    ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(static_cast<uint16_t>(live.server.port()));
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&sin), sizeof sin), 0);
    ASSERT_EQ(::send(fd, sent, std::strlen(sent), MSG_NOSIGNAL), static_cast<ssize_t>(std::strlen(sent)));
    const auto t0 = std::chrono::steady_clock::now();
    char buf[256];
    ssize_t n;
    do {
      n = ::recv(fd, buf, sizeof buf, 0);  // an error response (if any), then the close
    } while (n > 0);
    const auto waited = std::chrono::steady_clock::now() - t0;
    ::close(fd);
    EXPECT_EQ(n, 0) << "not closed by the server: " << std::strerror(errno);
    EXPECT_LT(waited, std::chrono::seconds(5));
    // The one worker is free again.
    auto res = live.client->Get("/healthz");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
  }
}

TEST(HttpServerTest, ServesOnIpv6LoopbackWhenAsked) {
  Tree t;
  ServerOptions o;
  o.address = "::1";
  Server server(t.ctl, o);
  std::string error;
  const int err = server.start(&error);
  if (err == EADDRNOTAVAIL || err == EAFNOSUPPORT) GTEST_SKIP() << "no IPv6 loopback: " << error;
  ASSERT_EQ(err, 0) << error;
  httplib::Client client("::1", server.port());
  client.set_read_timeout(10, 0);
  auto res = client.Get("/v1/groups/a/b/memory.min");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "4096\n");
}

TEST(HttpServerTest, OptionsAreChecked) {
  Controller ctl;
  auto bad = [&](auto change) {
    ServerOptions o;
    change(o);
    EXPECT_THROW(Server(ctl, o), std::invalid_argument);
  };
  bad([](ServerOptions& o) { o.port = -1; });
  bad([](ServerOptions& o) { o.port = 65536; });
  bad([](ServerOptions& o) { o.threads = 0; });
  bad([](ServerOptions& o) { o.threads = 65; });
  bad([](ServerOptions& o) { o.max_queued = 0; });
  bad([](ServerOptions& o) { o.max_body_bytes = 0; });
  bad([](ServerOptions& o) { o.max_body_bytes = (1 << 20) + 1; });
  bad([](ServerOptions& o) { o.read_timeout = std::chrono::milliseconds(0); });
  bad([](ServerOptions& o) { o.keep_alive_timeout = std::chrono::seconds(0); });
  bad([](ServerOptions& o) { o.address.clear(); });
  bad([](ServerOptions& o) { o.allow_writes = true; });  // no token
  bad([](ServerOptions& o) {
    o.allow_writes = true;
    o.token = "has space";
  });
  ServerOptions ok;
  ok.allow_writes = true;
  ok.token = kToken;
  EXPECT_NO_THROW(Server(ctl, ok));
}

}  // namespace
}  // namespace memcg::http
