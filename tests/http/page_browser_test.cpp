// The live pages in a real browser: starts example_kv_cache serving on 127.0.0.1, loads / in
// headless Chromium (Debian's `chromium`), checks the rendered DOM (every group of the example
// named, an SVG chart with data points) and writes a screenshot into the build folder; then
// starts example_query_service (whose runaway queries get OOM-killed), waits for two kills, and
// loads a tenant's group page (its PSI axis in percent, its members, its OOM reports) and one of
// those reports. Skipped only when chromium is not installed. Every step is bounded in time.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string chromium_path() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

// The output of `cmd` (bounded by `timeout`, which the command line carries).
std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

// The body of GET `path` from 127.0.0.1:`port` (HTTP/1.0: the server closes after it), or "".
std::string http_get(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      ssize_t n;
      while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  const size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

// An example, serving on a free port of 127.0.0.1 for at most 180 s (stopped by the test).
struct Example {
  pid_t pid = -1;
  int port = 0;
  explicit Example(const char* bin, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {bin, "--serve", "0", "--seconds", "180"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      ::execv(bin, argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    FILE* f = ::fdopen(fds[0], "r");
    char line[256] = {};
    // "serving on http://127.0.0.1:PORT"
    if (f != nullptr && std::fgets(line, sizeof line, f) != nullptr)
      std::sscanf(line, "serving on http://127.0.0.1:%d", &port);
    if (f != nullptr) std::fclose(f);
  }
  ~Example() {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);
    int status;
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid, &status, WNOHANG) == pid) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
};

TEST(HttpPageBrowserTest, ChromiumRendersEveryGroupAndTheHistory) {
  const std::string chromium = chromium_path();
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (Debian package 'chromium')";
  Example ex(MEMCG_EXAMPLE_BIN);
  ASSERT_GT(ex.pid, 0);
  ASSERT_GT(ex.port, 0) << "the example did not say where it serves";
  // A few history samples (one a second) under the example's load.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  const std::string url = "http://127.0.0.1:" + std::to_string(ex.port) + "/";
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions"
      " --user-data-dir=" MEMCG_BUILD_DIR "/chromium-profile --virtual-time-budget=2000 ";
  const std::string dom = run("timeout 60 " + chromium + flags + "--dump-dom " + url +
                              " 2>/dev/null");
  ASSERT_FALSE(dom.empty()) << "chromium printed no DOM";
  for (const char* g : {"/", "tenants", "tenants/alpha", "tenants/beta", "tenants/gamma"})
    EXPECT_NE(dom.find(std::string("<tr class=\"group\" data-group=\"") + g + "\""),
              std::string::npos) << g;
  // A chart of a tenant with at least two data points on its memory.current line.
  const std::regex chart(R"re(<svg class="history" data-group="tenants[^"]*" data-points="([0-9]+)")re");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dom, m, chart)) << dom.substr(0, 2000);
  EXPECT_GE(std::stoi(m[1].str()), 2);
  const std::regex line(R"re(<polyline class="current"[^>]*points="[0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+)re");
  EXPECT_TRUE(std::regex_search(dom, line));

  const std::string shot = MEMCG_BUILD_DIR "/memcg_page.png";
  std::remove(shot.c_str());
  run("timeout 60 " + chromium + flags + "--hide-scrollbars --window-size=1280,900 --screenshot=" +
      shot + " " + url + " >/dev/null 2>&1");
  EXPECT_EQ(::access(shot.c_str(), R_OK), 0) << "no screenshot at " << shot;
}

TEST(HttpPageBrowserTest, ChromiumRendersAGroupPageAndItsOomReports) {
  const std::string chromium = chromium_path();
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (Debian package 'chromium')";
  Example ex(MEMCG_QUERY_SERVICE_BIN, {"--workers", "4"});
  ASSERT_GT(ex.pid, 0);
  ASSERT_GT(ex.port, 0) << "the query service did not say where it serves";
  // At least two of etl's runaway queries OOM-killed, within 90 s: counted on the victims' group
  // (its memory.events), whichever limit was hit, etl's own or, on a loaded machine, the
  // service's (svc). Each kill's report concerns etl either way (a member of it was the victim).
  // Two come within 2 s on a quiet machine (as with eight busy loops beside it), but a 5 % share
  // of etl's queries is all that makes them: with six tests at once on two cores the service
  // answered 7 queries a second instead of 53, and 40 s once saw only one runaway.
  uint64_t kills = 0;
  for (int i = 0; i < 180 && kills < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const std::string events = http_get(ex.port, "/v1/groups/svc/etl/memory.events");
    const size_t at = events.find("\noom_kill ");
    if (at != std::string::npos) kills = std::stoull(events.substr(at + 10));
  }
  ASSERT_GE(kills, 2u) << http_get(ex.port, "/v1/oom.txt");
  const std::string base = "http://127.0.0.1:" + std::to_string(ex.port);
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions"
      " --user-data-dir=" MEMCG_BUILD_DIR "/chromium-profile --virtual-time-budget=2000 ";
  // The main page puts trouble first: etl (its runaways killed) and adhoc (over its memory.high)
  // are flagged, the first row is one in trouble, and the calm dash comes after both.
  const std::string main = run("timeout 60 " + chromium + flags + "--dump-dom " + base +
                               "/ 2>/dev/null");
  auto status_of = [&](const std::string& g) {
    const std::string row = "<tr class=\"group\" data-group=\"" + g + "\" data-status=\"";
    const size_t at = main.find(row);
    if (at == std::string::npos) return std::string("(no row)");
    const size_t from = at + row.size();
    return main.substr(from, main.find('"', from) - from);
  };
  const std::string etl = status_of("svc/etl"), adhoc = status_of("svc/adhoc");
  EXPECT_NE(etl.find("oom_kill"), std::string::npos) << etl << main.substr(0, 4000);
  EXPECT_NE(adhoc.find("high"), std::string::npos) << adhoc;
  const size_t first_row = main.find("<tr class=\"group\" data-group=\"");
  ASSERT_NE(first_row, std::string::npos);
  EXPECT_NE(main.substr(main.find("data-status=\"", first_row), 16), "data-status=\"ok\"")
      << "the first row is calm";
  if (status_of("svc/dash") == "ok") {
    EXPECT_LT(main.find("data-group=\"svc/etl\""), main.find("data-group=\"svc/dash\""));
    EXPECT_LT(main.find("data-group=\"svc/adhoc\""), main.find("data-group=\"svc/dash\""));
  }
  EXPECT_NE(main.find("<td class=\"status bad\">OOM kills"), std::string::npos);

  const std::string dom = run("timeout 60 " + chromium + flags + "--dump-dom " + base +
                              "/group/svc/etl 2>/dev/null");
  ASSERT_FALSE(dom.empty()) << "chromium printed no DOM";
  EXPECT_NE(dom.find("<h1>group svc/etl</h1>"), std::string::npos) << dom.substr(0, 2000);
  // Its status names its trouble and the runbook of what to do; kills have a colour key.
  EXPECT_NE(dom.find("<span class=\"status bad\" data-status=\"oom_kill\">OOM kills</span>"),
            std::string::npos);
  EXPECT_NE(dom.find("runbook MemcgOomKills"), std::string::npos);
  EXPECT_NE(dom.find("OOM kills (right)</text>"), std::string::npos);
  // The history chart, its PSI axis labelled in percent beside the bytes axis.
  EXPECT_NE(dom.find("<svg class=\"history\" data-group=\"svc/etl\""), std::string::npos);
  for (const char* label : {">PSI %</text>", ">100 %</text>", ">50 %</text>", ">0 %</text>"})
    EXPECT_NE(dom.find(label), std::string::npos) << label;
  EXPECT_NE(dom.find("<svg class=\"events\" data-group=\"svc/etl\""), std::string::npos);
  EXPECT_NE(dom.find("<pre class=\"file\" data-file=\"memory.max\">335544320\n</pre>"),
            std::string::npos);
  EXPECT_NE(dom.find(" in its subtree, "), std::string::npos);  // the member totals
  // At least two of its OOM reports, linked.
  const std::string link = "<a class=\"oom-report\" href=\"/oom/";
  std::vector<std::string> seqs;
  for (size_t at = dom.find(link); at != std::string::npos; at = dom.find(link, at + 1)) {
    const size_t from = at + link.size(), to = dom.find('"', from);
    if (to != std::string::npos) seqs.push_back(dom.substr(from, to - from));
  }
  ASSERT_GE(seqs.size(), 2u) << dom.substr(0, 4000);
  const std::string report = run("timeout 60 " + chromium + flags + "--dump-dom " + base +
                                 "/oom/" + seqs.front() + " 2>/dev/null");
  EXPECT_NE(report.find("<h1>OOM report " + seqs.front() + "</h1>"), std::string::npos)
      << report.substr(0, 2000);
  // Its domain: etl's own limit, or the service's budget (svc) when that was hit first.
  EXPECT_NE(report.find("<tr><th>domain (limit hit)</th><td class=\"name\"><a class=\"group-link\" "
                        "href=\"/group/svc"),
            std::string::npos);
  EXPECT_NE(report.find(" (wall clock, UTC)</td>"), std::string::npos);
  EXPECT_NE(report.find("<table id=\"candidates\">"), std::string::npos);
  EXPECT_NE(report.find("<table id=\"top-members\">"), std::string::npos);

  const std::string shot = MEMCG_BUILD_DIR "/memcg_group_page.png";
  std::remove(shot.c_str());
  run("timeout 60 " + chromium + flags + "--hide-scrollbars --window-size=1100,1000 --screenshot=" +
      shot + " " + base + "/group/svc/etl >/dev/null 2>&1");
  EXPECT_EQ(::access(shot.c_str(), R_OK), 0) << "no screenshot at " << shot;
}

}  // namespace
