// `memcgctl remote` against a live memcg::http server in this process (an ephemeral loopback
// port): every command, human-readable and --json, the token from a file, refusals with exit
// status 1 and the server's error, a malformed command line with 2.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/http/server.hpp"

namespace memcgctl {
namespace {

using nlohmann::json;

struct Ran {
  int status;
  std::string out;
};

Ran run(const std::string& args) {
  const std::string cmd = std::string(MEMCGCTL_BIN) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, ""};
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

class Cache final : public memcg::Reclaimer {
 public:
  Cache(memcg::Group& g, int64_t units) : g_(g), left_(units) {
    EXPECT_EQ(memcg::try_charge(g, units), memcg::ChargeStatus::kOk);
    reg_ = memcg::ReclaimerRegistration(g, *this);
  }
  ~Cache() override {
    reg_.reset();
    memcg::uncharge_direct(g_, left_.load());
  }
  int64_t reclaimable() const noexcept override { return left_.load(); }
  memcg::ReclaimResult reclaim(int64_t n, int) override {
    const int64_t freed = std::min(n, left_.load());
    left_ -= freed;
    memcg::uncharge_direct(g_, freed);
    return {freed, freed};
  }

 private:
  memcg::Group& g_;
  std::atomic<int64_t> left_;
  memcg::ReclaimerRegistration reg_;
};

struct Live {
  Live() {
    EXPECT_EQ(ctl.create("tenants", &tenants), 0);
    EXPECT_EQ(ctl.create("tenants/a", &a), 0);
    EXPECT_EQ(ctl.create("cache", &cache_g), 0);
    a->set_max(64 << 20);
    memcg::http::ServerOptions o;
    o.allow_writes = true;
    o.token = "remote-token";
    server = std::make_unique<memcg::http::Server>(ctl, o);
    std::string error;
    EXPECT_EQ(server->start(&error), 0) << error;
    url = "http://127.0.0.1:" + std::to_string(server->port());
    char tmpl[] = "/tmp/memcgctl_token_XXXXXX";
    const int fd = ::mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    ::close(fd);
    token_file = tmpl;
    std::ofstream(token_file) << "remote-token\n";
  }
  ~Live() {
    server->stop();
    std::remove(token_file.c_str());
  }
  std::string cmd(const std::string& rest, bool token = true) const {
    return "remote " + url + (token ? " --token-file " + token_file : "") + " " + rest;
  }
  memcg::Controller ctl;
  memcg::GroupRef tenants, a, cache_g;
  std::unique_ptr<memcg::http::Server> server;
  std::string url, token_file;
};

TEST(MemcgctlRemote, ReadsGroupsMembersMemoryAndBudget) {
  Live live;
  std::atomic<int> calls{0};
  memcg::Member q(*live.a, "etl-query", [&](memcg::Member& self) {
    calls.fetch_add(1);
    self.uncharge(self.charged());
  });
  ASSERT_EQ(q.charge(50), memcg::ChargeStatus::kOk);

  Ran r = run(live.cmd("groups", false));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("GROUP"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tenants/a"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("64.0M"), std::string::npos) << r.out;

  r = run(live.cmd("get tenants/a memory.max", false));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "67108864\n");

  r = run(live.cmd("members"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("etl-query"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("running"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kernel(50)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 members"), std::string::npos) << r.out;

  r = run(live.cmd("--json members --group tenants"));
  ASSERT_EQ(r.status, 0) << r.out;
  json j = json::parse(r.out);
  ASSERT_EQ(j["members"].size(), 1u);
  EXPECT_EQ(j["members"][0]["id"], q.id());

  r = run(live.cmd("memory"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("RECLAIMABLE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tenants"), std::string::npos) << r.out;

  r = run(live.cmd("budget"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("state       none"), std::string::npos) << r.out;
  EXPECT_EQ(calls.load(), 0);
}

TEST(MemcgctlRemote, ActsWithTheToken) {
  Live live;
  std::atomic<int> calls{0};
  std::atomic<bool> operator_reason{false};
  memcg::Member q(*live.a, "runaway", [&](memcg::Member& self) {
    calls.fetch_add(1);
    operator_reason.store(memcg::Member::cancel_reason() == memcg::CancelReason::kOperator);
    self.uncharge(self.charged());
  });
  ASSERT_EQ(q.charge(10), memcg::ChargeStatus::kOk);
  Cache cache(*live.cache_g, 400);
  live.ctl.drain_stocks();
  const std::string id = std::to_string(q.id());

  // Without the token: refused, nothing done.
  Ran r = run(live.cmd("kill " + id, false));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("401"), std::string::npos) << r.out;
  EXPECT_EQ(calls.load(), 0);

  r = run(live.cmd("set tenants/a memory.high 32M"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(live.a->high(), 32u << 20);

  r = run(live.cmd("kill " + id + " --deadline-ms 1000"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("runaway"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gone, memory given back"), std::string::npos) << r.out;
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(operator_reason.load());
  r = run(live.cmd("kill " + id));  // idempotent
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(calls.load(), 1);

  r = run(live.cmd("kill 999999"));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("404 no such member"), std::string::npos) << r.out;

  // The budget: set, followed to reached, cleared.
  const uint64_t target = live.ctl.root().current() - 100 * 4096;
  r = run(live.cmd("--json budget " + std::to_string(target)));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(json::parse(r.out)["target_bytes"], target);
  for (int i = 0; i < 500; ++i) {
    r = run(live.cmd("--json budget"));
    if (json::parse(r.out)["state"] != "reaching") break;
  }
  EXPECT_EQ(json::parse(r.out)["state"], "reached") << r.out;
  r = run(live.cmd("budget"));
  EXPECT_NE(r.out.find("state       reached"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reclaimed"), std::string::npos) << r.out;
  r = run(live.cmd("budget 0"));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("400"), std::string::npos) << r.out;
  r = run(live.cmd("budget clear"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(live.ctl.root().max(), memcg::kUnlimited);
  r = run(live.cmd("budget lots"));
  EXPECT_EQ(r.status, 2) << r.out;
}

TEST(MemcgctlRemote, RefusalsAndMalformedCommandLines) {
  Live live;
  EXPECT_EQ(run("remote ftp://x groups").status, 2);
  EXPECT_EQ(run("remote " + live.url).status, 2);  // no command
  Ran r = run("remote http://127.0.0.1:1 groups");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("cannot connect"), std::string::npos) << r.out;
  r = run(live.cmd("get tenants/a memory.nope", false));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("404"), std::string::npos) << r.out;
  r = run(live.cmd("events --type nonsense --max 1"));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("400"), std::string::npos) << r.out;
  r = run(live.cmd("--token-file /nonexistent/file members"));
  EXPECT_EQ(r.status, 2) << r.out;
}

// Over the Unix socket: the peer's uid is the credential, no token.
TEST(MemcgctlRemote, OverTheUnixSocketWithoutAToken) {
  memcg::Controller ctl;
  memcg::GroupRef a;
  ASSERT_EQ(ctl.create("a", &a), 0);
  std::atomic<int> calls{0};
  memcg::Member q(*a, "q", [&](memcg::Member& self) {
    calls.fetch_add(1);
    self.uncharge(self.charged());
  });
  ASSERT_EQ(q.charge(5), memcg::ChargeStatus::kOk);
  char dir[] = "/tmp/memcgctl_sock_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string sock = std::string(dir) + "/http.sock";
  memcg::http::ServerOptions o;
  o.allow_writes = true;
  o.unix_socket = sock;
  memcg::http::Server server(ctl, o);
  std::string error;
  ASSERT_EQ(server.start(&error), 0) << error;
  Ran r = run("remote unix:" + sock + " members");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(" q "), std::string::npos) << r.out;
  r = run("remote unix:" + sock + " kill " + std::to_string(q.id()));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(calls.load(), 1);
  r = run("remote unix:" + sock + " --json audit");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("uid:"), std::string::npos) << r.out;
  server.stop();
  ::rmdir(dir);
}

// `events` follows the stream and, after a disconnect (the server restarted on the same port),
// resumes with Last-Event-ID: an event published while it was away is printed, none twice.
TEST(MemcgctlRemote, EventsFollowTheStreamAndResumeAfterADisconnect) {
  Live live;
  const int port = live.server->port();
  const std::string cmd = std::string(MEMCGCTL_BIN) + " " +
                          live.cmd("events --type group_created --max 3", false) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::thread reader([&] {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
  });
  // Until the client is subscribed, an event it did not ask to resume from is not sent.
  auto subscribed = [&] { return live.server->stats().accepted >= 1; };
  for (int i = 0; i < 500 && !subscribed(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(live.ctl.create("ev1"), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  live.server->stop();  // the stream ends: the client resumes a second later
  ASSERT_EQ(live.ctl.create("ev2"), 0);  // published while it is away
  memcg::http::ServerOptions o;
  o.port = port;
  o.allow_writes = true;
  o.token = "remote-token";
  live.server = std::make_unique<memcg::http::Server>(live.ctl, o);
  std::string error;
  int err = EADDRINUSE;
  for (int i = 0; i < 100 && err != 0; ++i) {
    err = live.server->start(&error);
    if (err != 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(err, 0) << error;
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_EQ(live.ctl.create("ev3"), 0);
  reader.join();
  const int st = ::pclose(p);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  const size_t e1 = out.find("ev1"), e2 = out.find("ev2"), e3 = out.find("ev3");
  EXPECT_NE(e1, std::string::npos) << out;
  EXPECT_NE(e2, std::string::npos) << out;
  EXPECT_NE(e3, std::string::npos) << out;
  EXPECT_LT(e1, e2) << out;
  EXPECT_LT(e2, e3) << out;
  EXPECT_NE(out.find("resuming after event"), std::string::npos) << out;
  EXPECT_EQ(out.find("ev1", e1 + 1), std::string::npos) << "printed twice: " << out;
}

}  // namespace
}  // namespace memcgctl
