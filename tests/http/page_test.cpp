// The live page (GET /), the OOM reports over HTTP (/v1/oom, /v1/oom.txt) and the exposition's
// pressure and OOM families, against a live server on 127.0.0.1.
#include "../promtool.hpp"
#include "memcg/http/server.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "memcg/files/prometheus.hpp"
#include "memcg/http/columns.hpp"

namespace memcg::http {
namespace {

void release_all(Member& m) { m.uncharge(m.charged()); }

bool charge_units(Member& m, int64_t units) {
  for (int64_t i = 0; i < units; ++i)
    if (!charged(m.charge(1))) return false;
  return true;
}

Options one_shard() {
  Options o;
  o.nr_shards = 1;
  return o;
}

struct Live {
  explicit Live(Controller& ctl, ServerOptions o = {}) : server(ctl, std::move(o)) {
    std::string error;
    EXPECT_EQ(server.start(&error), 0) << error;
    client = std::make_unique<httplib::Client>("127.0.0.1", server.port());
    client->set_connection_timeout(5, 0);
    client->set_read_timeout(20, 0);
  }
  Server server;
  std::unique_ptr<httplib::Client> client;
};

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// tenants/a (max 100 units) with "big" (60) in tenants/a/q and "small" (30) in tenants/a/r; an
// immune charger past the limit makes the OOM killer kill "big".
struct Oom {
  Controller ctl{one_shard()};
  GroupRef t, a, q, r;
  std::unique_ptr<Member> big, small, charger;
  Oom() {
    EXPECT_EQ(ctl.create("tenants", &t), 0);
    EXPECT_EQ(ctl.create("tenants/a", &a), 0);
    EXPECT_EQ(ctl.create("tenants/a/q", &q), 0);
    EXPECT_EQ(ctl.create("tenants/a/r", &r), 0);
    a->set_max(100 * ctl.unit_size());
    big = std::make_unique<Member>(*q, "big", release_all);
    small = std::make_unique<Member>(*r, "small", release_all);
    charger = std::make_unique<Member>(*r, "charger", release_all, Member::kImmune);
    EXPECT_TRUE(charge_units(*big, 60));
    EXPECT_TRUE(charge_units(*small, 30));
    EXPECT_TRUE(charge_units(*charger, 20));
    EXPECT_TRUE(big->killed());
  }
  ~Oom() {
    charger.reset();
    small.reset();
    big.reset();
  }
};

TEST(HttpPageTest, OomReportsAreServedAsJsonAndText) {
  Oom o;
  Live live(o.ctl);
  auto res = live.client->Get("/v1/oom");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  const nlohmann::json doc = nlohmann::json::parse(res->body);
  EXPECT_EQ(doc.at("version"), 1);
  EXPECT_EQ(doc.at("totals").at("kills"), 1);
  ASSERT_EQ(doc.at("reports").size(), 1u);
  const nlohmann::json& r = doc.at("reports")[0];
  EXPECT_EQ(r.at("kind"), "oom_kill");
  EXPECT_EQ(r.at("domain"), "tenants/a");
  EXPECT_EQ(r.at("victim"), "big");
  // Wall-clock time beside the controller's clock, and the request in bytes.
  EXPECT_GT(r.at("wall_time_ns").get<uint64_t>(), 1'700'000'000'000'000'000u);
  EXPECT_EQ(r.at("wall_time").get<std::string>().size(), 24u) << r.at("wall_time");
  EXPECT_EQ(r.at("request_bytes"), r.at("request_units").get<int64_t>() * 4096);
  EXPECT_EQ(r.at("killed")[0], "big");
  EXPECT_EQ(r.at("candidates")[0].at("member"), "big");
  EXPECT_EQ(r.at("top_members")[0].at("name"), "big");
  EXPECT_EQ(r.at("top_members")[0].at("group"), "tenants/a/q");
  EXPECT_EQ(r.at("top_members")[0].at("bytes"), 60 * o.ctl.unit_size());
  EXPECT_EQ(r.at("top_members")[0].at("admitted_bytes"), 0);
  EXPECT_EQ(r.at("top_groups")[0].at("name"), "tenants/a");
  EXPECT_EQ(r.at("top_groups")[1].at("name"), "tenants/a/q");

  auto text = live.client->Get("/v1/oom.txt");
  ASSERT_TRUE(text);
  ASSERT_EQ(text->status, 200);
  EXPECT_EQ(count(text->body, "\n"), 1u);
  EXPECT_EQ(text->body.rfind("oom_kill seq=1 ", 0), 0u) << text->body;
  EXPECT_NE(text->body.find("victim=big"), std::string::npos) << text->body;
  EXPECT_NE(text->body.find(" at=" + r.at("wall_time").get<std::string>() + " "), std::string::npos)
      << text->body;
  EXPECT_NE(text->body.find(" request=4.0KiB "), std::string::npos) << text->body;
  EXPECT_NE(text->body.find("top_groups=tenants/a:"), std::string::npos) << text->body;
}

TEST(HttpPageTest, ThePageNamesEveryGroupAndDrawsTheHistory) {
  Oom o;
  ServerOptions so;
  so.history_interval = std::chrono::milliseconds(100);
  Live live(o.ctl, so);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // a few samples
  auto res = live.client->Get("/");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/html; charset=utf-8");
  const std::string& page = res->body;
  for (const char* g : {"/", "tenants", "tenants/a", "tenants/a/q", "tenants/a/r"})
    EXPECT_NE(page.find(std::string("<tr class=\"group\" data-group=\"") + g + "\""),
              std::string::npos) << g;
  for (const char* name : kTopColumnNames)
    EXPECT_NE(page.find(std::string("<th>") + name + "</th>"), std::string::npos) << name;
  EXPECT_NE(page.find("<svg class=\"history\" data-group=\"tenants/a\""), std::string::npos);
  EXPECT_NE(page.find("<polyline class=\"current\""), std::string::npos);
  EXPECT_NE(page.find("<line class=\"max\""), std::string::npos);  // tenants/a's usage bar
  EXPECT_NE(page.find("victim=big"), std::string::npos);           // the OOM report
  // Nothing from elsewhere: no script, no external reference.
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("src="), std::string::npos);
  EXPECT_EQ(page.find("http://"), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
}

TEST(HttpPageTest, TenThousandGroupsArePaged) {
  Controller ctl(one_shard());
  for (int i = 0; i < 10'000; ++i) ASSERT_EQ(ctl.create("g" + std::to_string(i)), 0);
  Live live(ctl);
  auto first = live.client->Get("/");
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200);
  EXPECT_EQ(count(first->body, "<tr class=\"group\""), 100u);
  EXPECT_LT(first->body.size(), 400'000u);
  EXPECT_NE(first->body.find("page 1 of 101"), std::string::npos);
  auto last = live.client->Get("/?page=100");
  ASSERT_TRUE(last);
  EXPECT_EQ(count(last->body, "<tr class=\"group\""), 1u);  // 10 001 with the root
  auto beyond = live.client->Get("/?page=99999999999");
  ASSERT_TRUE(beyond);
  EXPECT_EQ(beyond->status, 200);
  EXPECT_NE(beyond->body.find("page 101 of 101"), std::string::npos);
  auto junk = live.client->Get("/?page=x%00");
  ASSERT_TRUE(junk);
  EXPECT_NE(junk->body.find("page 1 of 101"), std::string::npos);
}

TEST(HttpPageTest, PressureAndOomFamiliesPassPromtool) {
  Oom o;
  const std::string text = render_prometheus(o.ctl);
  for (const char* line :
       {"memcg_memory_pressure_stall_seconds_total{group=\"tenants/a\",state=\"some\"} ",
        "memcg_memory_pressure_ratio{group=\"/\",state=\"full\",window=\"300s\"} ",
        "memcg_memory_vmpressure_windows_total{group=\"tenants/a\",level=\"critical\"} ",
        "memcg_oom_reports_total{group=\"/\",outcome=\"kill\"} 1\n",
        "memcg_oom_killed_members_total{group=\"/\"} 1\n",
        "memcg_oom_decisions_total{group=\"/\",decider=\"kernel\"} 1\n",
        "memcg_oom_decisions_total{group=\"/\",decider=\"excess\"} 0\n",
        "memcg_oom_decisions_total{group=\"/\",decider=\"handler\"} 0\n",
        "memcg_oom_decisions_total{group=\"/\",decider=\"none\"} 0\n",
        "memcg_memory_wait_outcomes_total{group=\"tenants/a\",outcome=\"never_fits\"} 0\n",
        "memcg_preemptions_total{group=\"/\"} 0\n", "memcg_charges_forced_total{group=\"/\"} "})
    EXPECT_NE(text.find(line), std::string::npos) << line;
  if (std::string(MEMCG_PROMTOOL).empty())
    GTEST_SKIP() << "promtool is not installed (Debian package 'prometheus')";
  EXPECT_TRUE(memcg::testing::promtool_accepts(MEMCG_PROMTOOL, text));
}

TEST(HttpPageTest, HistoryOptionsAreChecked) {
  Controller ctl;
  auto with = [&](auto set) {
    ServerOptions o;
    set(o);
    Server s(ctl, o);
  };
  EXPECT_THROW(with([](ServerOptions& o) { o.history_interval = std::chrono::milliseconds(99); }),
               std::invalid_argument);
  EXPECT_THROW(with([](ServerOptions& o) { o.history_groups = 0; }), std::invalid_argument);
  EXPECT_THROW(with([](ServerOptions& o) { o.history_samples = 1; }), std::invalid_argument);
  EXPECT_THROW(with([](ServerOptions& o) {
                 o.history_groups = 1024;
                 o.history_samples = 3600;
               }),
               std::invalid_argument);
  EXPECT_NO_THROW(with([](ServerOptions& o) { o.history_groups = 1; }));
}

}  // namespace
}  // namespace memcg::http
