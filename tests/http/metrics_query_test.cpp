// GET /metrics with a query (group, depth, top, exclude) against a live server on 127.0.0.1:
// each answer is render_prometheus() with the same options, byte for byte (and accepted by
// promtool where installed); every bad query is refused with 400 (404 for a group that does not
// exist) and a sentence saying what is wrong, and changes nothing.
#include "../promtool.hpp"
#include "memcg/http/server.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <string>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/files/prometheus.hpp"

namespace memcg::http {
namespace {

struct Tree {
  Controller ctl;
  std::vector<GroupRef> groups;
  Tree() {
    for (const char* path : {"a", "a/b", "a/b/c", "d", "e+f"}) {
      GroupRef g;
      EXPECT_EQ(ctl.create(path, &g), 0);
      groups.push_back(g);
    }
    EXPECT_TRUE(charged(try_charge(*groups[2], 30)));
    EXPECT_TRUE(charged(try_charge(*groups[3], 10)));
  }
  ~Tree() {
    uncharge(*groups[2], 30);
    uncharge(*groups[3], 10);
  }
};

struct Live {
  explicit Live(Controller& ctl) : server(ctl) {
    std::string error;
    EXPECT_EQ(server.start(&error), 0) << error;
    client = std::make_unique<httplib::Client>("127.0.0.1", server.port());
    client->set_connection_timeout(5, 0);
    client->set_read_timeout(10, 0);
    client->set_url_encode(false);  // the targets below are sent as written
  }
  Server server;
  std::unique_ptr<httplib::Client> client;
};

// The controller's exposition within a /metrics answer: the server appends its own families
// (the event bus, the audit records) after it, whatever the query chose.
std::string controller_part(const std::string& body) {
  const size_t at = body.find("# HELP memcg_events_published_total ");
  EXPECT_NE(at, std::string::npos) << "the server's own families are missing";
  return at == std::string::npos ? body : body.substr(0, at);
}

TEST(HttpMetricsQueryTest, QueryChoosesWhatIsShown) {
  Tree t;
  Live live(t.ctl);
  struct Case {
    const char* target;
    PrometheusOptions options;
  };
  PrometheusOptions sub;
  sub.group = "a";
  sub.max_depth = 1;
  PrometheusOptions top1;
  top1.top_k = 1;
  PrometheusOptions every;
  every.top_k = 0;
  PrometheusOptions off;
  off.disabled_families = {"memcg_memory_stat_bytes", "memcg_memory_peak_bytes",
                           "memcg_charges_failed_total"};
  PrometheusOptions plus;
  plus.group = "e+f";
  PrometheusOptions encoded;
  encoded.group = "a/b";
  const std::vector<Case> cases = {
      {"/metrics", {}},
      {"/metrics?", {}},
      {"/metrics?group=a&depth=1", sub},
      {"/metrics?depth=1&group=%61", sub},
      {"/metrics?top=1", top1},
      {"/metrics?top=all", every},
      {"/metrics?top=0&depth=all", every},
      {"/metrics?exclude=memcg_memory_stat_bytes,memcg_memory_peak_bytes"
       "&exclude=memcg_charges_failed_total",
       off},
      {"/metrics?group=e+f", plus},
      {"/metrics?group=a%2Fb&", encoded},
  };
  for (const Case& c : cases) {
    auto res = live.client->Get(c.target);
    ASSERT_TRUE(res) << c.target;
    EXPECT_EQ(res->status, 200) << c.target << ": " << res->body;
    EXPECT_EQ(controller_part(res->body), render_prometheus(t.ctl, c.options)) << c.target;
  }
  auto res = live.client->Get("/metrics?top=1");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("memcg_memory_current_bytes{group=\"(other)\"}"), std::string::npos);
  EXPECT_NE(res->body.find("memcg_exposition_groups_omitted 5\n"), std::string::npos);
  if (std::string(MEMCG_PROMTOOL).find("NOTFOUND") == std::string::npos &&
      std::string(MEMCG_PROMTOOL) != "") {
    EXPECT_TRUE(testing::promtool_accepts(MEMCG_PROMTOOL, res->body));
  }
  auto head = live.client->Head("/metrics?group=a&depth=1");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  auto get = live.client->Get("/metrics?group=a&depth=1");
  ASSERT_TRUE(get);
  EXPECT_EQ(controller_part(get->body), render_prometheus(t.ctl, sub));
  EXPECT_EQ(head->get_header_value("Content-Length"), std::to_string(get->body.size()));
}

TEST(HttpMetricsQueryTest, BadQueriesAreRefusedAndChangeNothing) {
  Tree t;
  Live live(t.ctl);
  const std::string before = render_prometheus(t.ctl);
  struct Case {
    const char* target;
    int status;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"/metrics?depth=-1", 400, "depth must be a number"},
      {"/metrics?depth=x", 400, "depth must be a number"},
      {"/metrics?depth=1000001", 400, "depth must be a number"},
      {"/metrics?depth=", 400, "depth must be a number"},
      {"/metrics?top=1e3", 400, "top must be a number"},
      {"/metrics?top=99999999999999999999", 400, "top must be a number"},
      {"/metrics?top=-5", 400, "top must be a number"},
      {"/metrics?top=1&top=2", 400, "'top' given twice"},
      {"/metrics?group=a&group=d", 400, "'group' given twice"},
      {"/metrics?group", 400, "'group' has no value"},
      {"/metrics?group=%zz", 400, "malformed %XX escape"},
      {"/metrics?group=a%0Ab", 400, "malformed %XX escape"},
      {"/metrics?group=a%2", 400, "malformed %XX escape"},
      {"/metrics?limit=5", 400, "unknown query parameter 'limit'"},
      {"/metrics?exclude=memcg_nope", 400, "unknown metric family 'memcg_nope'"},
      {"/metrics?exclude=memcg_memory_peak_bytes,,memcg_nope", 400, "unknown metric family"},
      {"/metrics?group=nope", 404, "no such group: 'nope'"},
      {"/metrics?group=a/../d", 404, "no such group"},
  };
  for (const Case& c : cases) {
    auto res = live.client->Get(c.target);
    ASSERT_TRUE(res) << c.target;
    EXPECT_EQ(res->status, c.status) << c.target << ": " << res->body;
    EXPECT_NE(res->body.find(c.says), std::string::npos) << c.target << ": " << res->body;
    EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; charset=utf-8") << c.target;
  }
  EXPECT_EQ(t.ctl.nr_groups(), 6u);
  auto res = live.client->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(controller_part(res->body), before);
}

}  // namespace
}  // namespace memcg::http
