// The live page in a real browser: starts example_kv_cache serving on 127.0.0.1, loads / in
// headless Chromium (Debian's `chromium`), checks the rendered DOM (every group of the example
// named, an SVG chart with data points) and writes a screenshot into the build folder. Skipped
// only when chromium is not installed. Every step is bounded in time.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>

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

// The example, serving on a free port of 127.0.0.1 for at most 90 s.
struct Example {
  pid_t pid = -1;
  int port = 0;
  Example() {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      ::execl(MEMCG_EXAMPLE_BIN, MEMCG_EXAMPLE_BIN, "--serve", "0", "--seconds", "90",
              static_cast<char*>(nullptr));
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
  Example ex;
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

}  // namespace
