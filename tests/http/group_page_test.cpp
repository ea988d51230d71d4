// The group page (GET /group/<path>), the OOM report page (GET /oom/<seq>), the OOM marks'
// links, and names escaped through HTML, SVG and JSON, against a live server on 127.0.0.1.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/members.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/http/server.hpp"

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
  std::string get(const std::string& path, int want = 200) {
    auto res = client->Get(path);
    EXPECT_TRUE(res) << path;
    if (!res) return "";
    EXPECT_EQ(res->status, want) << path << ": " << res->body;
    return res->body;
  }
  Server server;
  std::unique_ptr<httplib::Client> client;
};

// A name with every character that means something in HTML, SVG or JSON, non-ASCII text, a
// control character and a byte that is not UTF-8.
const std::string kNastyName = "q<b>&amp;\"'\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\x01\xFF";
// How esc() writes it.
const std::string kNastyHtml =
    "q&lt;b&gt;&amp;amp;&quot;&#39;\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xEF\xBF\xBD\xEF\xBF\xBD";
// Its printable part, as every page shows it (the one-line form of a report, /v1/oom.txt, turns
// control characters into '_').
const std::string kNastyHtmlText =
    "q&lt;b&gt;&amp;amp;&quot;&#39;\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";
// What a JSON parser reads back: the bytes that are not UTF-8 (and only they) as U+FFFD.
const std::string kNastyJson = "q<b>&amp;\"'\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\x01\xEF\xBF\xBD";

// t:a@b+c.d-e_f (max 100 units) holds "big" (60, the nasty name in the escaping test) in its
// child q and "small" (30) in its child r; an immune charger past the limit gets "big" killed.
struct Tree {
  Controller ctl{one_shard()};
  GroupRef t, q, r;
  std::unique_ptr<Member> big, small, charger;
  explicit Tree(const std::string& big_name = "big") {
    EXPECT_EQ(ctl.create("t:a@b+c.d-e_f", &t), 0);
    EXPECT_EQ(ctl.create(*t, "q", &q), 0);
    EXPECT_EQ(ctl.create(*t, "r", &r), 0);
    t->set_max(100 * ctl.unit_size());
    big = std::make_unique<Member>(*q, big_name, release_all);
    small = std::make_unique<Member>(*r, "small", release_all);
    charger = std::make_unique<Member>(*r, "charger", release_all, Member::kImmune);
    EXPECT_TRUE(charge_units(*big, 60));
    EXPECT_TRUE(charge_units(*small, 30));
  }
  void oom() {
    EXPECT_TRUE(charge_units(*charger, 20));
    EXPECT_TRUE(big->killed());
  }
  ~Tree() {
    charger.reset();
    small.reset();
    big.reset();
  }
};

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(HttpGroupPageTest, ShowsFilesHistoryMembersAndReports) {
  Tree tree;
  ServerOptions so;
  so.history_interval = std::chrono::milliseconds(100);
  Live live(tree.ctl, so);
  // A page asked for samples when the last sample is older than a quarter of the interval: the
  // series are primed before the kill and sampled after it, whatever the sampler's thread does.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  live.get("/");
  tree.oom();  // the kill shows as a mark of the next interval
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string page = live.get("/group/t:a@b+c.d-e_f");
  EXPECT_NE(page.find("<h1>group t:a@b+c.d-e_f</h1>"), std::string::npos);
  EXPECT_NE(page.find("<tr class=\"group\" data-group=\"t:a@b+c.d-e_f\" data-status=\""),
            std::string::npos);
  // Its children and parent link to their pages.
  EXPECT_NE(page.find("href=\"/group/t:a@b+c.d-e_f/q\""), std::string::npos);
  EXPECT_NE(page.find("href=\"/group/\">/</a>"), std::string::npos);
  // Files, as read_file() gives them.
  EXPECT_NE(page.find("data-file=\"memory.max\">409600\n</pre>"), std::string::npos) << page;
  EXPECT_NE(page.find("data-file=\"memory.events\">low 0\n"), std::string::npos);
  EXPECT_EQ(page.find("data-file=\"memory.reclaim\""), std::string::npos);  // write-only
  // History with the PSI axis in percent, and the events over time.
  EXPECT_NE(page.find("<svg class=\"history\" data-group=\"t:a@b+c.d-e_f\""), std::string::npos);
  EXPECT_NE(page.find("<text class=\"psi-axis\" x=\"520\" y=\"26\" font-size=\"10\" "
                      "fill=\"#9b59b6\">100 %</text>"),
            std::string::npos);
  EXPECT_NE(page.find("<svg class=\"events\" data-group=\"t:a@b+c.d-e_f\""), std::string::npos);
  // The kill's mark and bar link to report 1.
  EXPECT_EQ(count(page, "<a class=\"oom-link\" href=\"/oom/1\"><line class=\"mark e-kill\""), 1u)
      << page;
  EXPECT_EQ(count(page, "<a class=\"oom-link\" href=\"/oom/1\"><rect class=\"bar e-kill\""), 1u);
  // Members by size, with their admitted sizes: the killed one has given its memory back.
  const size_t small_row = page.find("<tr class=\"member\" data-member=\"small\">");
  const size_t big_row = page.find("<tr class=\"member\" data-member=\"big\">");
  ASSERT_NE(small_row, std::string::npos) << page;
  ASSERT_NE(big_row, std::string::npos) << page;
  EXPECT_LT(small_row, big_row);
  EXPECT_NE(page.find("3 members in its subtree"), std::string::npos);
  // Its OOM reports.
  EXPECT_NE(page.find("<a class=\"oom-report\" href=\"/oom/1\">report 1</a>"), std::string::npos);
  // A child's page lists the report too (its member was the victim); nothing else does.
  EXPECT_NE(live.get("/group/t:a@b+c.d-e_f/q").find("href=\"/oom/1\""), std::string::npos);
  // Same rules as the main page: nothing from elsewhere.
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("src="), std::string::npos);
  EXPECT_EQ(page.find("http://"), std::string::npos);

  // The main page links the kill's mark, the group's name and the report.
  const std::string main = live.get("/");
  EXPECT_NE(main.find("<a class=\"oom-link\" href=\"/oom/1\"><line class=\"mark e-kill\""),
            std::string::npos);
  EXPECT_NE(main.find("<a class=\"group-link\" href=\"/group/t:a@b+c.d-e_f\">"),
            std::string::npos);
  EXPECT_NE(main.find("<a href=\"/oom/1\">oom_kill seq=1 "), std::string::npos);

  // The report's page.
  const std::string report = live.get("/oom/1");
  EXPECT_NE(report.find("<h1>OOM report 1</h1>"), std::string::npos);
  EXPECT_NE(report.find("Z (wall clock, UTC)</td>"), std::string::npos) << report;
  EXPECT_NE(report.find("<tr><th>victim</th><td class=\"name\">big</td></tr>"), std::string::npos)
      << report;
  EXPECT_NE(report.find("<table id=\"candidates\">"), std::string::npos);
  EXPECT_NE(report.find("<table id=\"top-members\">"), std::string::npos);
  EXPECT_NE(report.find("<a class=\"group-link\" href=\"/group/t:a@b+c.d-e_f/q\">"),
            std::string::npos);
}

TEST(HttpGroupPageTest, AKillTickLinksOnlyItsOwnReportElseSaysItWasDropped) {
  Tree tree;
  ServerOptions so;
  so.history_interval = std::chrono::milliseconds(100);
  Live live(tree.ctl, so);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  live.get("/");
  tree.oom();  // report 1: big killed
  std::this_thread::sleep_for(std::chrono::milliseconds(350));  // a few samples later
  ASSERT_EQ(oom_log(tree.ctl).set_capacity(1), 0);
  tree.big.reset();  // the victim is gone
  // The charger takes what small holds: small killed, report 2, which pushes report 1 out.
  EXPECT_TRUE(charge_units(*tree.charger, 60));
  EXPECT_TRUE(tree.small->killed());
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const std::string page = live.get("/group/t:a@b+c.d-e_f");
  // The second kill's tick and bar link report 2; the first kill's say that theirs was dropped
  // and link nothing (not report 2, the first kept after them).
  EXPECT_EQ(count(page, "<a class=\"oom-link\" href=\"/oom/2\"><line class=\"mark e-kill\""), 1u)
      << page;
  EXPECT_EQ(count(page, "<a class=\"oom-link\" href=\"/oom/2\"><rect class=\"bar e-kill\""), 1u);
  EXPECT_EQ(count(page, "<line class=\"mark e-kill dropped\""), 1u) << page;
  EXPECT_EQ(count(page, "<rect class=\"bar e-kill dropped\""), 1u) << page;
  EXPECT_NE(page.find("its report was dropped"), std::string::npos);
  EXPECT_EQ(page.find("href=\"/oom/1\""), std::string::npos);
  // The events chart's colour key names what each colour is, and kills have their own axis.
  EXPECT_NE(page.find("<g class=\"key\""), std::string::npos);
  EXPECT_NE(page.find("OOM kills (right)</text>"), std::string::npos);
  EXPECT_NE(page.find("<text class=\"kill-axis\""), std::string::npos);
}

// The y coordinates of the polyline of class `cls` in `page`.
std::vector<double> polyline_ys(const std::string& page, const std::string& cls) {
  std::vector<double> ys;
  const size_t at = page.find("<polyline class=\"" + cls + "\"");
  if (at == std::string::npos) return ys;
  const size_t from = page.find("points=\"", at) + 8, to = page.find('"', from);
  const std::string pts = page.substr(from, to - from);
  for (size_t c = pts.find(','); c != std::string::npos; c = pts.find(',', c + 1))
    ys.push_back(std::stod(pts.substr(c + 1)));
  return ys;
}

TEST(HttpGroupPageTest, PsiAtAHundredPercentStaysOffTheFrame) {
  Tree tree;
  ServerOptions so;
  so.history_interval = std::chrono::milliseconds(100);
  Live live(tree.ctl, so);
  {
    MemStall stall(*tree.t);  // the only task of t stalls: some and full at 100 %
    std::this_thread::sleep_for(std::chrono::milliseconds(450));
  }
  const std::string page = live.get("/group/t:a@b+c.d-e_f");
  for (const char* cls : {"psi-some", "psi-full"}) {
    const std::vector<double> ys = polyline_ys(page, cls);
    ASSERT_GE(ys.size(), 3u) << cls << page;
    double top = 1e9;
    for (double y : ys) top = std::min(top, y);
    // The frame's top border is y = 18, its bottom y = 134: the line stays between them.
    EXPECT_LT(top, 30) << cls << ": no sample near 100 %";
    EXPECT_GE(top, 20) << cls << ": drawn on the top border";
    for (double y : ys) EXPECT_LE(y, 132) << cls;
  }
}

TEST(HttpGroupPageTest, UnknownGroupsAndReportsAreRefused) {
  Tree tree;
  tree.oom();
  Live live(tree.ctl);
  EXPECT_NE(live.get("/group/").find("<h1>group /</h1>"), std::string::npos);
  EXPECT_NE(live.get("/group").find("<h1>group /</h1>"), std::string::npos);
  EXPECT_NE(live.get("/group/t:a@b+c.d-e_f/q/").find("<h1>group t:a@b+c.d-e_f/q</h1>"),
            std::string::npos);
  live.get("/group/nope", 404);
  live.get("/group/t:a@b+c.d-e_f/../t:a@b+c.d-e_f", 400);
  live.get("/group/t:a@b+c.d-e_f//q", 400);
  live.get("/group/%3Cb%3E", 404);  // a name no group can have
  live.get("/group/%FF", 400);       // not ASCII: refused as every path is
  live.get("/oom/2", 404);
  live.get("/oom/0", 404);
  live.get("/oom/x", 404);
  live.get("/oom/99999999999999999999", 404);
  EXPECT_NE(live.get("/oom/1").find("OOM report 1"), std::string::npos);
}

TEST(HttpGroupPageTest, NamesAreEscapedInHtmlSvgAndJson) {
  Tree tree(kNastyName);
  ServerOptions so;
  so.history_interval = std::chrono::milliseconds(100);
  Live live(tree.ctl, so);
  // Before the kill: the member on the group page, in its row, its attribute and its bar's
  // SVG title.
  const std::string before = live.get("/group/t:a@b+c.d-e_f");
  EXPECT_NE(before.find("<tr class=\"member\" data-member=\"" + kNastyHtml + "\">"),
            std::string::npos) << before;
  EXPECT_NE(before.find("<td class=\"name\">" + kNastyHtml + "</td>"), std::string::npos);
  EXPECT_NE(before.find("<title>" + kNastyHtml + ": 240.0K charged"), std::string::npos);
  tree.oom();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (const std::string path : {"/", "/group/t:a@b+c.d-e_f", "/group/t:a@b+c.d-e_f/q",
                                 "/oom/1"}) {
    const std::string page = live.get(path);
    EXPECT_NE(page.find(kNastyHtmlText), std::string::npos) << path;
    EXPECT_EQ(page.find("q<b>"), std::string::npos) << path;   // never raw
    EXPECT_EQ(page.find("\x01"), std::string::npos) << path;
    EXPECT_EQ(page.find("\xFF"), std::string::npos) << path;
  }
  EXPECT_NE(live.get("/group/t:a@b+c.d-e_f").find(kNastyHtml), std::string::npos);
  const std::string report = live.get("/oom/1");
  EXPECT_NE(report.find("<title>" + kNastyHtml + "</title>"), std::string::npos);  // SVG
  EXPECT_NE(report.find("<tr><th>victim</th><td class=\"name\">" + kNastyHtml + "</td></tr>"),
            std::string::npos);
  // JSON: parses, and gives the name back (the byte that is not UTF-8 as U+FFFD).
  nlohmann::json doc;
  ASSERT_NO_THROW(doc = nlohmann::json::parse(live.get("/v1/oom"))) << live.get("/v1/oom");
  const nlohmann::json& r = doc.at("reports").at(0);
  EXPECT_EQ(r.at("victim").get<std::string>(), kNastyJson);
  EXPECT_EQ(r.at("killed").at(0).get<std::string>(), kNastyJson);
  EXPECT_EQ(r.at("top_groups").at(0).at("name").get<std::string>(), "t:a@b+c.d-e_f");
  ASSERT_NO_THROW(doc = nlohmann::json::parse(live.get("/v1/groups")));
  EXPECT_EQ(doc.at("groups").at(1).at("path").get<std::string>(), "t:a@b+c.d-e_f");
}

TEST(LargestMembersTest, LargestFirstBoundedWithTotals) {
  Tree tree;
  MemberList list;
  EXPECT_EQ(largest_members(*tree.t, 1, nullptr), EINVAL);
  EXPECT_EQ(largest_members(*tree.t, kMaxListedMembers + 1, &list), EINVAL);
  EXPECT_TRUE(list.largest.empty());  // unchanged
  ASSERT_EQ(largest_members(*tree.t, 2, &list), 0);
  EXPECT_EQ(list.total, 3u);
  EXPECT_EQ(list.bytes, 90 * tree.ctl.unit_size());
  ASSERT_EQ(list.largest.size(), 2u);
  EXPECT_EQ(list.largest[0].name, "big");
  EXPECT_EQ(list.largest[0].group, "t:a@b+c.d-e_f/q");
  EXPECT_EQ(list.largest[0].bytes, 60 * tree.ctl.unit_size());
  EXPECT_EQ(list.largest[1].name, "small");
  ASSERT_EQ(largest_members(*tree.r, 10, &list), 0);  // a subtree: its own members only
  ASSERT_EQ(list.largest.size(), 2u);
  EXPECT_EQ(list.largest[0].name, "small");
  EXPECT_EQ(list.largest[1].name, "charger");  // 0 bytes, listed after
  ASSERT_EQ(largest_members(tree.ctl.root(), 0, &list), 0);
  EXPECT_TRUE(list.largest.empty());
  EXPECT_EQ(list.total, 3u);
}

}  // namespace
}  // namespace memcg::http
