#include "top.hpp"

#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

namespace memcgctl {
namespace {

const char* sort_name(TopSort s) {
  switch (s) {
    case TopSort::kCurrent: return "current";
    case TopSort::kPeak: return "peak";
    case TopSort::kPressure: return "pressure";
    case TopSort::kEvents: return "events";
  }
  return "?";
}

// scheme://host[:port] with nothing after it (a trailing '/' is allowed).
bool valid_url(std::string url) {
  if (!url.empty() && url.back() == '/') url.pop_back();
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return false;
  const std::string s = url.substr(0, scheme);
  if (s != "http" && s != "https") return false;
  const std::string rest = url.substr(scheme + 3);
  return !rest.empty() && rest.find('/') == std::string::npos;
}

// One fetch: the rows, or false with `error`.
bool fetch(httplib::Client& client, std::vector<TopRow>* rows, std::string* error) {
  auto res = client.Get("/v1/groups");
  if (!res) {
    *error = "cannot reach the endpoint: " + httplib::to_string(res.error());
    return false;
  }
  if (res->status != 200) {
    *error = "GET /v1/groups answered " + std::to_string(res->status);
    return false;
  }
  return parse_top_rows(res->body, rows, error);
}

}  // namespace

int run_top(const TopOptions& o) {
  if (!valid_url(o.url)) {
    std::cerr << "memcgctl top: '" << o.url << "' is not a URL of the form http://HOST:PORT\n";
    return 2;
  }
  std::string base = o.url;
  if (base.back() == '/') base.pop_back();
  httplib::Client client(base);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(10, 0);
  const bool tty = ::isatty(STDOUT_FILENO) == 1;

  std::vector<TopRow> rows;
  std::string error;
  for (bool first = true;; first = false) {
    const bool ok = fetch(client, &rows, &error);
    if (!ok && (o.once || first)) {
      std::cerr << "memcgctl top: " << base << ": " << error << "\n";
      return 1;
    }
    std::string frame;
    if (tty && !o.once) frame += "\x1b[H\x1b[2J";  // home, clear: redraw in place
    char head[256];
    const std::time_t now = std::time(nullptr);
    char when[32];
    std::strftime(when, sizeof when, "%H:%M:%S", std::localtime(&now));
    std::snprintf(head, sizeof head, "memcg top  %s  %s  %zu groups  sorted by %s\n", base.c_str(),
                  when, rows.size(), sort_name(o.sort));
    frame += head;
    if (!ok) frame += "(last fetch failed: " + error + "; showing the previous values)\n";
    sort_top_rows(&rows, o.sort);
    frame += format_top_table(rows);
    std::fwrite(frame.data(), 1, frame.size(), stdout);
    std::fflush(stdout);
    if (o.once) return 0;
    if (!tty) std::fputc('\n', stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(o.interval_ms));
  }
}

}  // namespace memcgctl
