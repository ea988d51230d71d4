// The audit of memcg::http::Server (GET /v1/audit, its /metrics counter, the log callback, the
// write event on the bus) and its Unix domain socket (mode 0600, SO_PEERCRED against the allowed
// uids, writes authorised by uid, stale and foreign files at its path). Live servers on
// 127.0.0.1 and in a temporary directory.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../watchdog.hpp"
#include "memcg/core/signal/event_bus.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/http/server.hpp"
#include "sse_client.hpp"

namespace memcg::http {
namespace {

using namespace std::chrono_literals;
using testing::connect_unix;
using testing::read_until_closed;
using testing::send_all;
using testing::status_of;

constexpr const char* kToken = "audit-secret-token-123";

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/memcg-http-XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    EXPECT_NE(d, nullptr);
    path = d != nullptr ? d : "/tmp";
  }
  ~TempDir() {
    ::unlink((path + "/s").c_str());
    ::unlink((path + "/file").c_str());
    ::rmdir(path.c_str());
  }
  std::string sock() const { return path + "/s"; }
  std::string path;
};

struct Records {
  std::mutex mu;
  std::vector<AuditRecord> got;
};

// One request over the Unix socket at `path`: the whole answer, or "" when closed at once.
std::string unix_request(const std::string& path, const std::string& request) {
  const int fd = connect_unix(path);
  if (fd < 0) return "connect failed";
  send_all(fd, request);
  const std::string answer = read_until_closed(fd, 5s);
  ::close(fd);
  return answer;
}

TEST(HttpAuditTest, AWriteIsAuditedWithoutTheToken) {
  memcg::testing::Watchdog dog("audit write", 30s);
  Controller ctl;
  GroupRef a;
  ASSERT_EQ(ctl.create("a", &a), 0);
  Records cb;
  ServerOptions o;
  o.allow_writes = true;
  o.token = kToken;
  o.audit_log = [&](const AuditRecord& r) {
    std::lock_guard<std::mutex> lock(cb.mu);
    cb.got.push_back(r);
  };
  Server server(ctl, o);
  ASSERT_EQ(server.start(), 0);
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(5, 0);
  const httplib::Headers good = {{"Authorization", std::string("Bearer ") + kToken}};
  auto w = c.Post("/v1/groups/a/memory.max", good, "1048576", "text/plain");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->status, 200);
  auto bad = c.Post("/v1/groups/a/memory.max", {{"Authorization", "Bearer nope"}}, "1",
                    "text/plain");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 403);
  auto none = c.Post("/v1/groups/a/memory.high", "2", "text/plain");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  auto einval = c.Post("/v1/groups/a/memory.max", good, "lots", "text/plain");
  ASSERT_TRUE(einval);
  EXPECT_EQ(einval->status, 400);

  auto r = c.Get("/v1/audit");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->body.find(kToken), std::string::npos) << "the token leaked into the audit";
  const auto j = nlohmann::json::parse(r->body);
  ASSERT_EQ(j["records"].size(), 4u);
  EXPECT_EQ(j["total"], 4);
  const auto& w0 = j["records"][0];
  EXPECT_EQ(w0["seq"], 1);
  EXPECT_EQ(w0["method"], "POST");
  EXPECT_EQ(w0["path"], "/v1/groups/a/memory.max");
  EXPECT_EQ(w0["old"], "max\n");
  EXPECT_EQ(w0["new"], "1048576");
  EXPECT_EQ(w0["status"], 200);
  EXPECT_EQ(w0["result"], "ok");
  EXPECT_EQ(w0["peer"].get<std::string>().rfind("127.0.0.1:", 0), 0u) << w0["peer"];
  const std::string fp = w0["token_id"];
  EXPECT_EQ(fp.rfind("fp:", 0), 0u);
  EXPECT_EQ(fp.size(), 11u);
  EXPECT_GT(w0["time_ns"].get<uint64_t>(), uint64_t{1'600'000'000} * 1'000'000'000);
  EXPECT_EQ(j["records"][1]["status"], 403);
  EXPECT_EQ(j["records"][1]["result"], "wrong token");
  EXPECT_NE(j["records"][1]["token_id"], fp);  // another token, another fingerprint
  EXPECT_EQ(j["records"][1]["new"], "");  // refused on its headers: its body is never read
  EXPECT_EQ(j["records"][2]["status"], 401);
  EXPECT_EQ(j["records"][2]["token_id"], "");
  EXPECT_EQ(j["records"][3]["status"], 400);
  EXPECT_EQ(j["records"][3]["token_id"], fp);
  EXPECT_EQ(j["records"][3]["result"], "EINVAL");
  EXPECT_EQ(j["records"][3]["old"], "1048576\n");  // the first write applied, the third did not
  EXPECT_EQ(a->max(), uint64_t{1048576});

  {
    std::lock_guard<std::mutex> lock(cb.mu);
    ASSERT_EQ(cb.got.size(), 4u);
    EXPECT_EQ(cb.got[0].seq, 1u);
    EXPECT_EQ(cb.got[3].status, 400);
    for (const AuditRecord& rec : cb.got) {
      EXPECT_EQ(rec.token_id.find(kToken), std::string::npos);
      EXPECT_EQ(rec.new_value.find(kToken), std::string::npos);
    }
  }
  EXPECT_EQ(server.stats().audit_records, 4u);

  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->body.find(kToken), std::string::npos);
  EXPECT_NE(m->body.find("memcg_http_audit_records_total{status=\"200\"} 1\n"), std::string::npos);
  EXPECT_NE(m->body.find("memcg_http_audit_records_total{status=\"403\"} 1\n"), std::string::npos);
  EXPECT_NE(m->body.find("memcg_http_audit_records_total{status=\"400\"} 1\n"), std::string::npos);

  // The applied write is an event about its group.
  BusFilter f;
  f.types = bus_type_bit(BusEventType::kWrite);
  const std::vector<BusEvent> writes = ctl.events().snapshot(f);
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_EQ(writes[0].group, "a");
  const auto p = nlohmann::json::parse(writes[0].payload);
  EXPECT_EQ(p["file"], "memory.max");
  EXPECT_EQ(p["old"], "max\n");
  EXPECT_EQ(p["new"], "1048576");
  EXPECT_EQ(writes[0].payload.find(kToken), std::string::npos);
}

TEST(HttpAuditTest, TheRingIsBoundedAndValuesAreCapped) {
  memcg::testing::Watchdog dog("audit bounds", 30s);
  Controller ctl;
  GroupRef a;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ServerOptions o;
  o.allow_writes = true;
  o.token = kToken;
  o.token_name = "ops";
  o.audit_records = 16;
  Server server(ctl, o);
  ASSERT_EQ(server.start(), 0);
  httplib::Client c("127.0.0.1", server.port());
  const httplib::Headers good = {{"Authorization", std::string("Bearer ") + kToken}};
  for (int i = 0; i < 20; ++i)
    ASSERT_EQ(c.Post("/v1/groups/a/memory.high", good, std::to_string(4096 * (i + 1)),
                     "text/plain")->status, 200);
  const std::string long_value(4000, '7');
  ASSERT_EQ(c.Post("/v1/groups/a/memory.high", good, long_value, "text/plain")->status, 400);
  const auto j = nlohmann::json::parse(c.Get("/v1/audit")->body);
  ASSERT_EQ(j["records"].size(), 16u);
  EXPECT_EQ(j["total"], 21);
  EXPECT_EQ(j["records"][0]["seq"], 6);
  EXPECT_EQ(j["records"][0]["token_id"], "ops");  // the configured name, not a fingerprint
  const auto& last = j["records"][15];
  EXPECT_EQ(last["new"].get<std::string>().size(), kAuditValueBytes);
  EXPECT_EQ(last["truncated"], true);
}

TEST(HttpUnixSocketTest, ModeIs0600AndAnAllowedUidWritesWithoutAToken) {
  memcg::testing::Watchdog dog("unix allowed", 30s);
  TempDir dir;
  Controller ctl;
  GroupRef a;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ServerOptions o;
  o.allow_writes = true;  // no token: writes only over the Unix socket
  o.unix_socket = dir.sock();
  o.unix_allowed_uids = {::geteuid()};
  Server server(ctl, o);
  std::string error;
  ASSERT_EQ(server.start(&error), 0) << error;
  struct stat st{};
  ASSERT_EQ(::lstat(dir.sock().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);

  std::string answer = unix_request(dir.sock(), "GET /healthz HTTP/1.0\r\n\r\n");
  EXPECT_EQ(status_of(answer), 200) << answer;
  answer = unix_request(dir.sock(),
                        "POST /v1/groups/a/memory.max HTTP/1.0\r\nContent-Length: 4\r\n\r\n8192");
  EXPECT_EQ(status_of(answer), 200) << answer;
  EXPECT_EQ(a->max(), uint64_t{8192});
  // Over TCP the same write is refused: no token is configured.
  httplib::Client c("127.0.0.1", server.port());
  auto tcp = c.Post("/v1/groups/a/memory.max", {{"Authorization", "Bearer x"}}, "1", "text/plain");
  ASSERT_TRUE(tcp);
  EXPECT_EQ(tcp->status, 403);
  EXPECT_EQ(a->max(), uint64_t{8192});
  const auto j = nlohmann::json::parse(c.Get("/v1/audit")->body);
  ASSERT_EQ(j["records"].size(), 2u);
  EXPECT_EQ(j["records"][0]["peer"], "uid:" + std::to_string(::geteuid()));
  EXPECT_EQ(j["records"][0]["token_id"], "");
  EXPECT_EQ(j["records"][0]["status"], 200);
  EXPECT_EQ(j["records"][1]["status"], 403);
  // The event stream works over the Unix socket too.
  testing::SseClient s(connect_unix(dir.sock()), "/v1/events");
  ASSERT_TRUE(s.read_until(5s, [&] { return !s.body().empty(); }));
  ctl.events().publish(BusEventType::kAction, "a", "{}");
  EXPECT_TRUE(s.wait_events(1));
  EXPECT_EQ(server.stats().unix_refused, 0u);

  server.stop();
  EXPECT_NE(::access(dir.sock().c_str(), F_OK), 0) << "stop() leaves the socket file";
}

TEST(HttpUnixSocketTest, AUidNotAllowedIsClosedAtOnce) {
  memcg::testing::Watchdog dog("unix refused", 30s);
  TempDir dir;
  Controller ctl;
  ServerOptions o;
  o.unix_socket = dir.sock();
  // Not the test's own uid (root in CI: 0 is excluded).
  o.unix_allowed_uids = {::geteuid() + 12345};
  Server server(ctl, o);
  ASSERT_EQ(server.start(), 0);
  const std::string answer = unix_request(dir.sock(), "GET /healthz HTTP/1.0\r\n\r\n");
  EXPECT_EQ(answer, "");
  EXPECT_EQ(server.stats().unix_refused, 1u);
  EXPECT_EQ(server.stats().accepted, 0u);
}

TEST(HttpUnixSocketTest, AStaleSocketIsReplacedAnyOtherFileRefused) {
  memcg::testing::Watchdog dog("unix path", 30s);
  TempDir dir;
  Controller ctl;
  ServerOptions o;
  o.unix_socket = dir.sock();
  {
    // A stale socket: bound, then its server gone.
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, dir.sock().c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ::close(fd);
  }
  Server first(ctl, o);
  std::string error;
  ASSERT_EQ(first.start(&error), 0) << error;
  EXPECT_EQ(status_of(unix_request(dir.sock(), "GET /healthz HTTP/1.0\r\n\r\n")), 200);
  // A live one is not taken over.
  Server second(ctl, o);
  EXPECT_EQ(second.start(&error), EADDRINUSE) << error;
  EXPECT_EQ(status_of(unix_request(dir.sock(), "GET /healthz HTTP/1.0\r\n\r\n")), 200);
  first.stop();
  // A file that is not a socket is never removed.
  { std::ofstream(dir.sock()) << "precious"; }
  EXPECT_EQ(second.start(&error), EEXIST);
  EXPECT_NE(error.find("not a socket"), std::string::npos) << error;
  std::ifstream in(dir.sock());
  std::string text;
  in >> text;
  EXPECT_EQ(text, "precious");
  // Bad options.
  ServerOptions bad;
  bad.unix_socket = std::string(200, 'x');
  EXPECT_THROW(Server(ctl, bad), std::invalid_argument);
  bad = {};
  bad.allow_writes = true;  // no token and no Unix socket: writes could never be authorised
  EXPECT_THROW(Server(ctl, bad), std::invalid_argument);
}

}  // namespace
}  // namespace memcg::http
