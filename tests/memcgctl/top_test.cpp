// `memcgctl top`: the table model on its own, then the command against a live memcg::http
// server (an ephemeral loopback port) with --once.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/base/events.hpp"
#include "memcg/http/json.hpp"
#include "memcg/http/server.hpp"
#include "top_view.hpp"

namespace memcgctl {
namespace {

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

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string f; in >> f;) out.push_back(f);
  return out;
}

TEST(TopViewTest, ParsesOptions) {
  int64_t ms = 0;
  EXPECT_TRUE(parse_interval_ms("1s", &ms));
  EXPECT_EQ(ms, 1000);
  EXPECT_TRUE(parse_interval_ms("250ms", &ms));
  EXPECT_EQ(ms, 250);
  EXPECT_TRUE(parse_interval_ms("2.5", &ms));
  EXPECT_EQ(ms, 2500);
  for (const char* bad : {"", "s", "1h", "50ms", "-1s", "1e9", "nan", "1 s"})
    EXPECT_FALSE(parse_interval_ms(bad, &ms)) << bad;
  TopSort s;
  EXPECT_TRUE(parse_top_sort("pressure", &s));
  EXPECT_EQ(s, TopSort::kPressure);
  EXPECT_FALSE(parse_top_sort("size", &s));
  EXPECT_EQ(human_bytes(512), "512B");
  EXPECT_EQ(human_bytes(1536), "1.5K");
  EXPECT_EQ(human_bytes(uint64_t{3} << 30), "3.0G");
  std::vector<TopRow> rows;
  std::string error;
  EXPECT_FALSE(parse_top_rows("{\"groups\": 3}", &rows, &error));
  EXPECT_FALSE(error.empty());
  EXPECT_FALSE(parse_top_rows("not json", &rows, &error));
}

TEST(TopViewTest, RowsComeFromTheJsonAndSort) {
  memcg::Controller ctl;
  memcg::GroupRef a, b;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_EQ(ctl.create("b", &b), 0);
  a->set_max(uint64_t{400} << 12);
  ASSERT_TRUE(memcg::charged(memcg::try_charge(*a, 100)));
  ASSERT_TRUE(memcg::charged(memcg::try_charge(*b, 300)));
  memcg::uncharge(*b, 250);  // b: current 50 units, peak 300
  a->raise(memcg::Event::kHigh);
  std::vector<TopRow> rows;
  std::string error;
  ASSERT_TRUE(parse_top_rows(memcg::http::render_groups_json(ctl), &rows, &error)) << error;
  ASSERT_EQ(rows.size(), 3u);
  sort_top_rows(&rows, TopSort::kPeak);
  EXPECT_EQ(rows[0].path, "/");
  EXPECT_EQ(rows[1].path, "b");
  EXPECT_EQ(rows[2].path, "a");
  EXPECT_EQ(rows[2].max, uint64_t{400} << 12);
  EXPECT_FALSE(rows[1].max.has_value());
  sort_top_rows(&rows, TopSort::kEvents);
  EXPECT_EQ(rows[0].path, "a");
  EXPECT_EQ(rows[0].high_events, 1u);
  memcg::uncharge(*a, 100);
  memcg::uncharge(*b, 50);
}

TEST(TopCommandTest, OncePrintsTheGroupsOfALiveServer) {
  memcg::Controller ctl;
  memcg::GroupRef web, db;
  ASSERT_EQ(ctl.create("web", &web), 0);
  ASSERT_EQ(ctl.create("db", &db), 0);
  web->set_max(uint64_t{4} << 20);                                  // 4 MiB
  ASSERT_TRUE(memcg::charged(memcg::try_charge(*web, 256)));         // 1 MiB: 25 %
  ASSERT_TRUE(memcg::charged(memcg::try_charge(*db, 768)));          // 3 MiB, no limit
  db->raise(memcg::Event::kOom);
  db->raise(memcg::Event::kMax);
  db->raise(memcg::Event::kMax);
  memcg::http::Server server(ctl);
  std::string error;
  ASSERT_EQ(server.start(&error), 0) << error;
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port());

  const Ran r = run("top --once --url " + url);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<std::string> ls = lines(r.out);
  ASSERT_EQ(ls.size(), 5u) << r.out;  // title, header, three groups
  EXPECT_NE(ls[0].find("3 groups"), std::string::npos) << ls[0];
  EXPECT_EQ(fields(ls[1]),
            (std::vector<std::string>{"GROUP", "CURRENT", "%MAX", "PEAK", "MIN", "LOW", "HIGH",
                                      "MAX", "E.HIGH", "E.MAX", "E.OOM", "E.KILL", "SOME10",
                                      "FULL10"}));
  // Sorted by current, largest first: the root (4 MiB or a little more with the stock), db, web.
  EXPECT_EQ(fields(ls[2])[0], "/");
  EXPECT_EQ(fields(ls[3]), (std::vector<std::string>{"db", "3.0M", "-", "3.0M", "0B", "0B", "max",
                                                      "max", "0", "2", "1", "0", "0.00", "0.00"}));
  EXPECT_EQ(fields(ls[4]), (std::vector<std::string>{"web", "1.0M", "25.0", "1.0M", "0B", "0B",
                                                      "max", "4.0M", "0", "0", "0", "0", "0.00",
                                                      "0.00"}));

  const Ran by_events = run("top --once --sort events --url " + url);
  ASSERT_EQ(by_events.status, 0) << by_events.out;
  EXPECT_EQ(fields(lines(by_events.out)[2])[0], "db");

  server.stop();
  memcg::uncharge(*web, 256);
  memcg::uncharge(*db, 768);

  // Nothing listens there any more: an error, exit 1.
  const Ran gone = run("top --once --url " + url);
  EXPECT_EQ(gone.status, 1) << gone.out;
  EXPECT_NE(gone.out.find("cannot reach"), std::string::npos) << gone.out;
  // Malformed arguments: exit 2, nothing fetched.
  EXPECT_EQ(run("top --once --url 127.0.0.1:1").status, 2);
  EXPECT_EQ(run("top --once --url http://127.0.0.1:1/v1").status, 2);
  EXPECT_EQ(run("top --once --sort size").status, 2);
  EXPECT_EQ(run("top --once --interval 0s").status, 2);
}

}  // namespace
}  // namespace memcgctl
