// The groups' status on the pages (src/http/status.hpp): rows flagged with what troubled the
// group itself in the last minute, trouble first (or largest first with ?sort=usage), PSI flags on
// the group in trouble and not its ancestors, and the runbook linked from a group in trouble.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/http/server.hpp"

namespace memcg::http {
namespace {

// One shard and no per-CPU stock batching: usage moves by what is charged, so that "high" goes
// over its memory.high by the few units the test charges (no throttling sleep).
Options one_shard() {
  Options o;
  o.nr_shards = 1;
  o.batch = 1;
  return o;
}

void release_all(Member& m) { m.uncharge(m.charged()); }

bool charge_units(Member& m, int64_t units) {
  for (int64_t i = 0; i < units; ++i)
    if (!charged(m.charge(1))) return false;
  return true;
}

// The data-status of the row of `group` in `page` ("" when there is no row).
std::string row_status(const std::string& page, const std::string& group) {
  const std::string row = "<tr class=\"group\" data-group=\"" + group + "\" data-status=\"";
  const size_t at = page.find(row);
  if (at == std::string::npos) return "";
  const size_t from = at + row.size();
  return page.substr(from, page.find('"', from) - from);
}

size_t row_at(const std::string& page, const std::string& group) {
  return page.find("<tr class=\"group\" data-group=\"" + group + "\"");
}

// calm (the largest, nothing happens to it), killed (a member OOM-killed), high (a little over
// its memory.high), p/c (stalls) under p.
struct Scene {
  Controller ctl{one_shard()};
  GroupRef calm, killed, high, p, c;
  std::unique_ptr<Member> victim, charger;
  Scene() {
    EXPECT_EQ(ctl.create("calm", &calm), 0);
    EXPECT_EQ(ctl.create("killed", &killed), 0);
    EXPECT_EQ(ctl.create("high", &high), 0);
    EXPECT_EQ(ctl.create("p", &p), 0);
    EXPECT_EQ(ctl.create("p/c", &c), 0);
    killed->set_max(20 * ctl.unit_size());
    high->set_high(100 * ctl.unit_size());
    EXPECT_TRUE(charged(try_charge(*calm, 200)));
    EXPECT_TRUE(charged(try_charge(*high, 96)));  // just under its memory.high
  }
  void trouble() {
    victim = std::make_unique<Member>(*killed, "victim", release_all);
    charger = std::make_unique<Member>(*killed, "charger", release_all, Member::kImmune);
    EXPECT_TRUE(charge_units(*victim, 15));
    EXPECT_TRUE(charge_units(*charger, 10));  // past the limit: the victim is killed
    EXPECT_TRUE(victim->killed());
    // A few units over high: events, and a penalty too small to sleep.
    for (int i = 0; i < 6; ++i) EXPECT_TRUE(charged(try_charge(*high, 1)));
    MemStall stall(*c);  // p/c's only task stalls: some and full there, and in p and the root
    std::this_thread::sleep_for(std::chrono::milliseconds(350));
  }
  ~Scene() {
    charger.reset();
    victim.reset();
    ctl.drain_stocks();
    uncharge(*calm, 200);
    uncharge(*high, 102);
  }
};

struct Live {
  Live(Controller& ctl, ServerOptions o) : server(ctl, std::move(o)) {
    std::string error;
    EXPECT_EQ(server.start(&error), 0) << error;
    client = std::make_unique<httplib::Client>("127.0.0.1", server.port());
    client->set_read_timeout(20, 0);
  }
  std::string get(const std::string& path) {
    auto res = client->Get(path);
    EXPECT_TRUE(res && res->status == 200) << path;
    return res ? res->body : "";
  }
  Server server;
  std::unique_ptr<httplib::Client> client;
};

ServerOptions fast(std::string runbook_base = "") {
  ServerOptions so;
  so.history_interval = std::chrono::milliseconds(100);
  so.runbook_base = std::move(runbook_base);
  return so;
}

// The flags of a row less PSI's: the kill's own reclaim and OOM path is a stall of the group's
// one task, and a slow build (TSan) can spend more than 5 % of a sample interval there, so the
// killed group may be flagged for PSI as well.
std::string without_psi(const std::string& flags) {
  std::string out;
  size_t at = 0;
  while (at <= flags.size()) {
    const size_t end = std::min(flags.find(' ', at), flags.size());
    const std::string flag = flags.substr(at, end - at);
    if (flag != "psi_full" && flag != "psi_some") out += (out.empty() ? "" : " ") + flag;
    at = end + 1;
  }
  return out;
}

TEST(HttpStatusTest, RowsAreFlaggedAndTroubleComesFirst) {
  Scene s;
  Live live(s.ctl, fast());
  live.get("/");  // primes every group's counts
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  s.trouble();
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const std::string page = live.get("/");
  EXPECT_EQ(without_psi(row_status(page, "killed")), "oom_kill max") << page;
  EXPECT_EQ(row_status(page, "high"), "high");
  EXPECT_EQ(row_status(page, "calm"), "ok");
  // The stall is p/c's: its ancestors, whose stall time includes it, are not flagged for it.
  EXPECT_EQ(row_status(page, "p/c"), "psi_full psi_some");
  EXPECT_EQ(row_status(page, "p"), "ok");
  EXPECT_EQ(row_status(page, "/"), "ok");
  EXPECT_NE(page.find("<td class=\"status bad\">OOM kills, "), std::string::npos);
  EXPECT_NE(page.find("memory.max events</td><td><a class=\"group-link\" href=\"/group/killed\">"),
            std::string::npos);
  EXPECT_NE(page.find("<p class=\"legend\">STATUS:"), std::string::npos);
  // Trouble first: killed (kills), p/c (PSI full), high (high events), then the calm ones by size.
  ASSERT_NE(row_at(page, "killed"), std::string::npos);
  EXPECT_LT(row_at(page, "killed"), row_at(page, "p/c"));
  EXPECT_LT(row_at(page, "p/c"), row_at(page, "high"));
  EXPECT_LT(row_at(page, "high"), row_at(page, "calm"));
  EXPECT_NE(page.find("<a id=\"sort-usage\" href=\"/?sort=usage\">"), std::string::npos);
  // ?sort=usage: the largest first, flags kept.
  const std::string by_usage = live.get("/?sort=usage");
  EXPECT_LT(row_at(by_usage, "/"), row_at(by_usage, "calm"));
  EXPECT_LT(row_at(by_usage, "calm"), row_at(by_usage, "killed"));
  EXPECT_EQ(without_psi(row_status(by_usage, "killed")), "oom_kill max");
  EXPECT_NE(by_usage.find("<a id=\"sort-status\" href=\"/\">"), std::string::npos);
}

TEST(HttpStatusTest, AGroupInTroubleLinksItsRunbooks) {
  Scene s;
  Live live(s.ctl, fast("https://docs.example/memcg"));
  Live plain(s.ctl, fast());  // without a base
  live.get("/");
  plain.get("/");
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  s.trouble();
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const std::string page = live.get("/group/killed");
  EXPECT_NE(page.find("<span class=\"status bad\" data-status=\"oom_kill\">OOM kills</span>"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("<a class=\"runbook\" href=\"https://docs.example/memcg/operations.md"
                      "#memcgoomkills\">runbook MemcgOomKills</a>"),
            std::string::npos);
  EXPECT_NE(page.find("href=\"https://docs.example/memcg/operations.md#memcgusagenearmax\""),
            std::string::npos);
  EXPECT_NE(live.get("/group/calm").find("<p id=\"status\" class=\"status ok\">ok"),
            std::string::npos);

  // Without a base the paragraph is named, not linked (the pages link nothing outside).
  const std::string named = plain.get("/group/high");
  EXPECT_NE(named.find("runbook MemcgHighBreached (docs/operations.md#memcghighbreached)"),
            std::string::npos)
      << named;
  EXPECT_EQ(named.find("https://"), std::string::npos);
}

TEST(HttpStatusTest, TheRunbookBaseIsChecked) {
  Controller ctl;
  auto make = [&](const char* base) {
    ServerOptions o;
    o.runbook_base = base;
    Server server(ctl, o);
  };
  for (const char* bad : {"ftp://x", "docs", "https://a b", "https://x\"onload=", "/<x>"})
    EXPECT_THROW(make(bad), std::invalid_argument) << bad;
  EXPECT_NO_THROW(make("/docs"));
  EXPECT_NO_THROW(make("https://docs.example/memcg"));
}

}  // namespace
}  // namespace memcg::http
