// The actions of memcg::http against a live server on 127.0.0.1: /v1/members (list, one member,
// kill, preempt with the "operator" reason, idempotence, deadlines), /v1/memory, /v1/budget
// (bad input, 202 then reached, concurrent requests), each refusal with its status and a JSON
// error body, and nothing changed by a refused request.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/admission/budget.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/signal/event_bus.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/http/server.hpp"

namespace memcg::http {
namespace {

using nlohmann::json;

constexpr const char* kToken = "act-token";
constexpr uint64_t kUnit = 4096;

struct Live {
  explicit Live(Controller& ctl, bool writes = true, ServerOptions o = {}) : server(ctl, opts(o, writes)) {
    std::string error;
    EXPECT_EQ(server.start(&error), 0) << error;
    client = std::make_unique<httplib::Client>("127.0.0.1", server.port());
    client->set_read_timeout(10, 0);
  }
  static ServerOptions opts(ServerOptions o, bool writes) {
    o.allow_writes = writes;
    o.token = kToken;
    return o;
  }
  httplib::Headers auth() const { return {{"Authorization", std::string("Bearer ") + kToken}}; }
  httplib::Response get(const std::string& path) {
    auto r = client->Get(path);
    EXPECT_TRUE(r) << path;
    return r ? *r : httplib::Response();
  }
  httplib::Response post(const std::string& path, const std::string& body = "",
                         bool with_token = true) {
    auto r = client->Post(path, with_token ? auth() : httplib::Headers{}, body, "application/json");
    EXPECT_TRUE(r) << path;
    return r ? *r : httplib::Response();
  }
  httplib::Response put(const std::string& path, const std::string& body, bool with_token = true) {
    auto r = client->Put(path, with_token ? auth() : httplib::Headers{}, body, "application/json");
    EXPECT_TRUE(r) << path;
    return r ? *r : httplib::Response();
  }
  httplib::Response del(const std::string& path) {
    auto r = client->Delete(path, auth());
    EXPECT_TRUE(r) << path;
    return r ? *r : httplib::Response();
  }
  Server server;
  std::unique_ptr<httplib::Client> client;
};

// A JSON error body: {"error": "...", "status": N}.
void expect_error(const httplib::Response& r, int status) {
  EXPECT_EQ(r.status, status) << r.body;
  const json j = json::parse(r.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.body;
  EXPECT_TRUE(j.contains("error")) << r.body;
  EXPECT_EQ(j.value("status", 0), status) << r.body;
  EXPECT_EQ(r.get_header_value("Content-Type"), "application/json");
}

// A member that records its callbacks; releases on a kill when `release`, on a request when
// `give_back`.
struct Query {
  Query(Group& g, const char* name, int64_t units, bool release = true, bool give_back = true)
      : m(g, name, [this, release, give_back](Member& self) {
          {
            std::lock_guard<std::mutex> lock(mu);
            reasons.push_back(Member::cancel_reason());
            killed.push_back(self.killed());
          }
          if (self.killed() ? release : give_back) self.uncharge(self.charged());
        }) {
    for (int64_t i = 0; i < units; ++i) EXPECT_TRUE(charged(m.charge(1)));
  }
  ~Query() { m.uncharge(m.charged()); }
  size_t calls() {
    std::lock_guard<std::mutex> lock(mu);
    return reasons.size();
  }
  std::mutex mu;
  std::vector<CancelReason> reasons;
  std::vector<bool> killed;
  Member m;
};

std::string member_path(const Member& m, const char* verb = nullptr) {
  std::string p = "/v1/members/" + std::to_string(m.id());
  if (verb) p += std::string("/") + verb;
  return p;
}

TEST(HttpActions, MembersAreListedWithTheirVictimKeys) {
  Controller ctl;
  GroupRef a, b;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_EQ(ctl.create("b", &b), 0);
  Query small(*a, "small", 3), big(*b, "big \"q\"", 9);
  Live live(ctl, false);
  httplib::Response r = live.get("/v1/members");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["total"], 2);
  ASSERT_EQ(j["members"].size(), 2u);
  const json& first = j["members"][0];
  EXPECT_EQ(first["name"], "big \"q\"");
  EXPECT_EQ(first["id"], big.m.id());
  EXPECT_EQ(first["group"], "b");
  EXPECT_EQ(first["charged_bytes"], 9 * kUnit);
  EXPECT_EQ(first["state"], "running");
  EXPECT_EQ(first["priority"], "normal");
  EXPECT_EQ(first["victim_rank"], 1);
  EXPECT_EQ(first["victim_key"]["order"], "kernel");
  EXPECT_EQ(first["victim_key"]["tuple"], json::array({9}));
  EXPECT_EQ(j["members"][1]["victim_rank"], 2);
  // One group's subtree.
  r = live.get("/v1/members?group=a");
  ASSERT_EQ(r.status, 200) << r.body;
  j = json::parse(r.body);
  EXPECT_EQ(j["group"], "a");
  ASSERT_EQ(j["members"].size(), 1u);
  EXPECT_EQ(j["members"][0]["name"], "small");
  expect_error(live.get("/v1/members?group=nope"), 404);
  expect_error(live.get("/v1/members?group=%01"), 400);
  // One member.
  r = live.get(member_path(small.m));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["name"], "small");
  expect_error(live.get("/v1/members/999999"), 404);
  expect_error(live.get("/v1/members/0"), 404);
  expect_error(live.get("/v1/members/abc"), 404);
  expect_error(live.get("/v1/members/99999999999999999999999"), 404);
}

TEST(HttpActions, ActionsTakeTheTokenLikeWrites) {
  Controller ctl;
  GroupRef a;
  ASSERT_EQ(ctl.create("a", &a), 0);
  Query q(*a, "q", 4);
  {
    Live off(ctl, false);
    EXPECT_EQ(off.post(member_path(q.m, "kill")).status, 405);
    EXPECT_EQ(off.put("/v1/budget", "1048576").status, 405);
  }
  Live live(ctl);
  EXPECT_EQ(live.post(member_path(q.m, "kill"), "", false).status, 401);
  auto r = live.client->Post(member_path(q.m, "kill"), {{"Authorization", "Bearer nope"}}, "",
                             "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(live.put("/v1/budget", "1048576", false).status, 401);
  EXPECT_EQ(q.calls(), 0u);
  EXPECT_FALSE(q.m.killed());
  EXPECT_EQ(ctl.root().max(), kUnlimited);
  // The reads need none.
  EXPECT_EQ(live.get("/v1/members").status, 200);
  EXPECT_EQ(live.get("/v1/budget").status, 200);
  EXPECT_EQ(live.get("/v1/memory").status, 200);
  // Wrong methods.
  EXPECT_EQ(live.post("/v1/memory").status, 405);
  EXPECT_EQ(live.put(member_path(q.m, "kill"), "").status, 405);
  EXPECT_EQ(live.post(member_path(q.m)).status, 405);
  EXPECT_EQ(live.get(member_path(q.m, "kill")).status, 405);
  expect_error(live.post(member_path(q.m, "explode")), 404);
}

TEST(HttpActions, KillIsIdempotentAndTheMemberSeesOperator) {
  Controller ctl;
  GroupRef a;
  ASSERT_EQ(ctl.create("a", &a), 0);
  Query q(*a, "q", 6);
  Live live(ctl);
  httplib::Response r = live.post(member_path(q.m, "kill"));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["released"], true);
  EXPECT_EQ(j["member"]["state"], "gone");
  ASSERT_EQ(q.calls(), 1u);
  EXPECT_EQ(q.reasons[0], CancelReason::kOperator);
  EXPECT_TRUE(q.killed[0]);
  // Again: the same answer, no second callback.
  r = live.post(member_path(q.m, "kill"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["member"]["state"], "gone");
  EXPECT_EQ(q.calls(), 1u);
  EXPECT_EQ(json::parse(live.get(member_path(q.m)).body)["state"], "gone");
  // The OOM log: decider "operator".
  j = json::parse(live.get("/v1/oom").body);
  bool found = false;
  for (const json& e : j["reports"])
    if (e.value("decider", "") == "operator" && e.value("reason", "") == "operator") found = true;
  EXPECT_TRUE(found) << j.dump();
  // An unknown member: 404, a JSON error.
  expect_error(live.post("/v1/members/424242/kill"), 404);
  // Audited (never the token), and on the event stream.
  j = json::parse(live.get("/v1/audit").body);
  ASSERT_GE(j["records"].size(), 3u) << j.dump();
  const json& first_kill = j["records"][0];
  EXPECT_EQ(first_kill["method"], "POST");
  EXPECT_EQ(first_kill["path"], member_path(q.m, "kill"));
  EXPECT_EQ(first_kill["status"], 200);
  EXPECT_EQ(first_kill["old"], "state=running");
  EXPECT_EQ(first_kill["result"], "released");
  EXPECT_EQ(j.dump().find(kToken), std::string::npos);
  EXPECT_EQ(j["records"][2]["status"], 404);
  BusFilter actions;
  actions.types = bus_type_bit(BusEventType::kAction);
  const std::vector<BusEvent> events = ctl.events().snapshot(actions);
  ASSERT_EQ(events.size(), 2u);  // the two kills answered 200; the 404 is not an action applied
  EXPECT_NE(events[0].payload.find("/kill"), std::string::npos) << events[0].payload;
  EXPECT_EQ(events[0].group, "a");  // about the member's group: ?group=a streams it
  BusFilter elsewhere = actions;
  elsewhere.subtree = "b";
  EXPECT_TRUE(ctl.events().snapshot(elsewhere).empty());
}

TEST(HttpActions, ADeadlineSaysWhenTheMemoryWasNotGivenBack) {
  Controller ctl;
  GroupRef a;
  ASSERT_EQ(ctl.create("a", &a), 0);
  Query slow(*a, "slow", 5, /*release=*/false);
  Live live(ctl);
  expect_error(live.post(member_path(slow.m, "kill") + "?deadline_ms=abc"), 400);
  expect_error(live.post(member_path(slow.m, "kill") + "?deadline_ms=999999999"), 400);
  expect_error(live.post(member_path(slow.m, "kill"), "{\"deadline_ms\": [1]}"), 400);
  EXPECT_EQ(slow.calls(), 0u);  // refused: nothing done
  const auto t0 = std::chrono::steady_clock::now();
  httplib::Response r = live.post(member_path(slow.m, "kill") + "?deadline_ms=80");
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(r.status, 202) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["released"], false);
  EXPECT_EQ(j["deadline_passed"], true);
  EXPECT_EQ(j["member"]["state"], "killing");
  EXPECT_GE(took, std::chrono::milliseconds(80));
  EXPECT_EQ(json::parse(live.get(member_path(slow.m)).body)["state"], "killing");
  // Released meanwhile (on another thread): within the deadline this time, in the JSON body.
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    slow.m.uncharge(slow.m.charged());
  });
  r = live.post(member_path(slow.m, "kill"), "{\"deadline_ms\": 3000}");
  later.join();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["released"], true);
  EXPECT_EQ(slow.calls(), 1u);
}

TEST(HttpActions, PreemptAsksForMemoryBack) {
  Controller ctl;
  GroupRef a;
  ASSERT_EQ(ctl.create("a", &a), 0);
  Query q(*a, "q", 4, true, /*give_back=*/false);
  Live live(ctl);
  httplib::Response r = live.post(member_path(q.m, "preempt") + "?deadline_ms=20");
  ASSERT_EQ(r.status, 202) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["member"]["state"], "preempting");
  EXPECT_EQ(j["deadline_passed"], true);
  ASSERT_EQ(q.calls(), 1u);
  EXPECT_EQ(q.reasons[0], CancelReason::kOperator);
  EXPECT_FALSE(q.killed[0]);
  EXPECT_FALSE(q.m.killed());
  r = live.post(member_path(q.m, "preempt"));  // asked already: not again
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(q.calls(), 1u);
  q.m.uncharge(4);
  r = live.post(member_path(q.m, "preempt"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["member"]["state"], "running");
}

// A cache that gives back whatever reclaim asks.
class Cache final : public Reclaimer {
 public:
  Cache(Group& g, int64_t units) : g_(g), left_(units) {
    EXPECT_EQ(try_charge(g, units), ChargeStatus::kOk);
    reg_ = ReclaimerRegistration(g, *this);
  }
  ~Cache() override {
    reg_.reset();
    uncharge_direct(g_, left_.load());
  }
  int64_t reclaimable() const noexcept override { return left_.load(); }
  ReclaimResult reclaim(int64_t n, int) override {
    const int64_t freed = std::min(n, left_.load());
    left_ -= freed;
    uncharge_direct(g_, freed);
    return {freed, freed};
  }

 private:
  Group& g_;
  std::atomic<int64_t> left_;
  ReclaimerRegistration reg_;
};

TEST(HttpActions, MemoryIsOneDocumentForAnArbiter) {
  Controller ctl;
  GroupRef a, b, ab;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_EQ(ctl.create("a/x", &ab), 0);
  ASSERT_EQ(ctl.create("b", &b), 0);
  a->set_max(64 << 20);
  b->set_min(1 << 20);
  Cache cache(*ab, 100);
  Query q(*b, "q", 10);
  ctl.drain_stocks();
  Live live(ctl);
  httplib::Response r = live.get("/v1/memory");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_TRUE(j["capacity_bytes"].is_null());
  EXPECT_EQ(j["capacity_from"], "root");
  EXPECT_EQ(j["used_bytes"], ctl.root().current());
  EXPECT_EQ(j["reclaimable_bytes"], 100 * kUnit);
  EXPECT_EQ(j["promised_bytes"], 0);
  EXPECT_EQ(j["waiting_bytes"], 0);
  ASSERT_EQ(j["groups"].size(), 2u);  // top-level groups only
  for (const json& g : j["groups"]) {
    if (g["group"] == "a") {
      EXPECT_EQ(g["capacity_bytes"], 64u << 20);
      EXPECT_EQ(g["used_bytes"], 100 * kUnit);
      EXPECT_EQ(g["reclaimable_bytes"], 100 * kUnit);
    } else {
      EXPECT_EQ(g["group"], "b");
      EXPECT_EQ(g["used_bytes"], 10 * kUnit);
      EXPECT_EQ(g["reclaimable_bytes"], 0);
      EXPECT_EQ(g["protected_min_bytes"], 1u << 20);
    }
  }
  // With a budget: the capacity is the budget's.
  ASSERT_EQ(live.put("/v1/budget", std::to_string(512 * kUnit)).status, 202);
  j = json::parse(live.get("/v1/memory").body);
  EXPECT_EQ(j["capacity_bytes"], 512 * kUnit);
  EXPECT_EQ(j["capacity_from"], "budget");
}

TEST(HttpActions, BudgetBadInputGetsAClearStatus) {
  Controller ctl;
  Live live(ctl);
  expect_error(live.put("/v1/budget", "0"), 400);
  expect_error(live.put("/v1/budget", "18446744073709551616"), 400);  // 2^64
  expect_error(live.put("/v1/budget", "99999999999999999999999999"), 400);
  expect_error(live.put("/v1/budget", "18446744073709551615"), 400);  // above any limit
  expect_error(live.put("/v1/budget", "-5"), 400);
  expect_error(live.put("/v1/budget", "12MB"), 400);
  expect_error(live.put("/v1/budget", ""), 400);
  expect_error(live.put("/v1/budget", "{\"bytes\": 1.5}"), 400);
  expect_error(live.put("/v1/budget", "{\"bytes\": \"1\"}"), 400);
  expect_error(live.put("/v1/budget", "{\"force\": true}"), 400);
  expect_error(live.put("/v1/budget", "{\"bytes\": 4096, \"force\": 1}"), 400);
  expect_error(live.put("/v1/budget", "{\"bytes\": 4096"), 400);
  expect_error(live.put("/v1/budget", "{\"bytes\": {\"a\": 1}}"), 400);
  httplib::Response r = live.put("/v1/budget", "100");
  expect_error(r, 400);
  EXPECT_NE(r.body.find("unit"), std::string::npos) << r.body;
  expect_error(live.del("/v1/budget"), 404);
  EXPECT_EQ(ctl.root().max(), kUnlimited);
  EXPECT_EQ(json::parse(live.get("/v1/budget").body)["state"], "none");
}

TEST(HttpActions, BudgetIsReachedAndConcurrentRequestsAreRefused) {
  Controller ctl;
  GroupRef a, s;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_EQ(ctl.create("s", &s), 0);
  ASSERT_EQ(set_wait_priority(*s, WaitPriority::kHigh), 0);
  Cache cache(*a, 300);
  Query stubborn(*s, "stubborn", 50, false, false);
  ctl.drain_stocks();
  Live live(ctl);
  httplib::Response r = live.put("/v1/budget", "{\"bytes\": " + std::to_string(200 * kUnit) + "}");
  ASSERT_EQ(r.status, 202) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["target_bytes"], 200 * kUnit);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (json::parse(live.get("/v1/budget").body)["state"] == "reaching" &&
         std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  j = json::parse(live.get("/v1/budget").body);
  EXPECT_EQ(j["state"], "reached") << j.dump();
  EXPECT_GT(j["done"]["reclaimed_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["done"]["killed"], 0);
  EXPECT_LE(ctl.root().current(), 200 * kUnit);
  EXPECT_EQ(ctl.root().max(), 200 * kUnit);

  // One the process cannot reach (the high class is never asked): it stays reaching for a while;
  // requests meanwhile get 409, one of several concurrent ones 202.
  r = live.put("/v1/budget", std::to_string(20 * kUnit));
  ASSERT_EQ(r.status, 202) << r.body;
  std::atomic<int> accepted{0}, conflict{0}, other{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      httplib::Client c("127.0.0.1", live.server.port());
      auto res = c.Put("/v1/budget", live.auth(), std::to_string(30 * kUnit), "text/plain");
      if (!res) {
        ++other;
      } else if (res->status == 409 && res->body.find("\"error\"") != std::string::npos) {
        ++conflict;
      } else if (res->status == 202) {
        ++accepted;
      } else {
        ++other;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(conflict.load(), 4);
  EXPECT_EQ(accepted.load() + other.load(), 0);
  EXPECT_EQ(json::parse(live.get("/v1/budget").body)["target_bytes"], 20 * kUnit);
  // Removed: the root's limit is the outside one again; the charge path served meanwhile.
  r = live.del("/v1/budget");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["state"], "none");
  EXPECT_EQ(ctl.root().max(), kUnlimited);
  EXPECT_EQ(stubborn.calls(), 0u);
  EXPECT_TRUE(charged(try_charge(*a, 10)));
  uncharge(*a, 10);
}

}  // namespace
}  // namespace memcg::http
