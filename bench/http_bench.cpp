// A scrape of a tree of 10 000 groups (root, 10 children, 100 grandchildren, 9 889 leaves, each
// leaf with usage, limits and a few events):
//   RenderPrometheus / RenderGroupsJson   the bodies alone (library calls, no HTTP)
//   HttpGetMetrics / HttpGetGroups        GET /metrics and GET /v1/groups through a live
//                                         memcg::http::Server on 127.0.0.1, with httplib's client
//                                         on a kept-alive connection: render + transfer + parse
//                                         (httplib's client reads 4 KiB at a time, a select() each)
//   RawGetMetrics / RawGetGroups          the same requests from a plain socket reading 256 KiB
//                                         at a time, as a scraper with a large buffer does
// The target is at most 50 ms per scrape (docs/http.md has the figures and the command). The
// scrapes also report proc_cpu_ms: CPU time of the whole process (client and server threads) per
// scrape, which the load of a shared machine changes less than the wall time.
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/base/events.hpp"
#include "memcg/http/json.hpp"
#include "memcg/http/server.hpp"
#include "memcg/files/prometheus.hpp"

namespace memcg {
namespace {

constexpr size_t kGroups = 10'000;

struct Tree {
  Tree() {
    std::vector<GroupRef> level1, level2;
    for (int i = 0; i < 10; ++i) {
      GroupRef g;
      if (ctl.create("c" + std::to_string(i), &g) != 0) std::abort();
      level1.push_back(g);
    }
    for (int i = 0; i < 100; ++i) {
      GroupRef g;
      if (ctl.create(*level1[i % 10], "g" + std::to_string(i), &g) != 0) std::abort();
      level2.push_back(g);
    }
    for (size_t i = 0; ctl.nr_groups() < kGroups; ++i) {
      GroupRef g;
      if (ctl.create(*level2[i % 100], "leaf" + std::to_string(i), &g) != 0) std::abort();
      g->set_max(uint64_t{64} << 20);
      g->set_high(uint64_t{48} << 20);
      if (!charged(try_charge(*g, 1 + static_cast<int64_t>(i % 64)))) std::abort();
      g->raise(Event::kHigh);
      leaves.push_back(g);
      units.push_back(1 + static_cast<int64_t>(i % 64));
    }
  }
  ~Tree() {
    for (size_t i = 0; i < leaves.size(); ++i) uncharge(*leaves[i], units[i]);
  }
  Controller ctl;
  std::vector<GroupRef> leaves;
  std::vector<int64_t> units;
};

// CPU time (user + system) of every thread of the process so far, in ms.
double process_cpu_ms() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

Tree& tree() {
  static Tree* t = new Tree();  // shared by the benchmarks; lives until exit
  return *t;
}

void BM_RenderPrometheus(benchmark::State& state) {
  Tree& t = tree();
  size_t bytes = 0;
  for (auto _ : state) {
    std::string s = render_prometheus(t.ctl);
    bytes = s.size();
    benchmark::DoNotOptimize(s);
  }
  state.counters["groups"] = static_cast<double>(t.ctl.nr_groups());
  state.counters["body_MB"] = static_cast<double>(bytes) / 1e6;
}
BENCHMARK(BM_RenderPrometheus)->Unit(benchmark::kMillisecond);

void BM_RenderGroupsJson(benchmark::State& state) {
  Tree& t = tree();
  size_t bytes = 0;
  for (auto _ : state) {
    std::string s = http::render_groups_json(t.ctl);
    bytes = s.size();
    benchmark::DoNotOptimize(s);
  }
  state.counters["groups"] = static_cast<double>(t.ctl.nr_groups());
  state.counters["body_MB"] = static_cast<double>(bytes) / 1e6;
}
BENCHMARK(BM_RenderGroupsJson)->Unit(benchmark::kMillisecond);

void scrape(benchmark::State& state, const char* path) {
  Tree& t = tree();
  http::Server server(t.ctl);
  std::string error;
  if (server.start(&error) != 0) {
    state.SkipWithError(error.c_str());
    return;
  }
  httplib::Client client("127.0.0.1", server.port());
  client.set_keep_alive(true);
  client.set_read_timeout(60, 0);
  size_t bytes = 0;
  const double cpu0 = process_cpu_ms();
  for (auto _ : state) {
    auto res = client.Get(path);
    if (!res || res->status != 200) {
      state.SkipWithError("the scrape failed");
      break;
    }
    bytes = res->body.size();
  }
  state.counters["proc_cpu_ms"] =
      (process_cpu_ms() - cpu0) / static_cast<double>(std::max<int64_t>(1, state.iterations()));
  state.counters["body_MB"] = static_cast<double>(bytes) / 1e6;
  server.stop();
}

void BM_HttpGetMetrics(benchmark::State& state) { scrape(state, "/metrics"); }
BENCHMARK(BM_HttpGetMetrics)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_HttpGetGroups(benchmark::State& state) { scrape(state, "/v1/groups"); }
BENCHMARK(BM_HttpGetGroups)->Unit(benchmark::kMillisecond)->UseRealTime();

// One GET on a kept-alive connection; the body's size, or 0 on any error.
size_t raw_get(int fd, const char* path, std::vector<char>& buf) {
  const std::string req = std::string("GET ") + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) return 0;
  std::string head;
  size_t have = 0;  // body bytes already read with the head
  for (;;) {
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) return 0;
    head.append(buf.data(), static_cast<size_t>(n));
    const size_t end = head.find("\r\n\r\n");
    if (end != std::string::npos) {
      have = head.size() - end - 4;
      head.resize(end);
      break;
    }
  }
  const size_t cl = head.find("Content-Length: ");
  if (cl == std::string::npos) return 0;
  const size_t length = std::strtoull(head.c_str() + cl + 16, nullptr, 10);
  while (have < length) {
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) return 0;
    have += static_cast<size_t>(n);
  }
  return length;
}

void raw_scrape(benchmark::State& state, const char* path) {
  Tree& t = tree();
  http::Server server(t.ctl);
  std::string error;
  if (server.start(&error) != 0) {
    state.SkipWithError(error.c_str());
    return;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(static_cast<uint16_t>(server.port()));
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&sin), sizeof sin) != 0) {
    state.SkipWithError("cannot connect");
    if (fd >= 0) ::close(fd);
    return;
  }
  std::vector<char> buf(256 * 1024);
  size_t bytes = 0;
  const double cpu0 = process_cpu_ms();
  for (auto _ : state) {
    bytes = raw_get(fd, path, buf);
    if (bytes == 0) {
      state.SkipWithError("the scrape failed");
      break;
    }
  }
  state.counters["proc_cpu_ms"] =
      (process_cpu_ms() - cpu0) / static_cast<double>(std::max<int64_t>(1, state.iterations()));
  ::close(fd);
  state.counters["body_MB"] = static_cast<double>(bytes) / 1e6;
  server.stop();
}

void BM_RawGetMetrics(benchmark::State& state) { raw_scrape(state, "/metrics"); }
BENCHMARK(BM_RawGetMetrics)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_RawGetGroups(benchmark::State& state) { raw_scrape(state, "/v1/groups"); }
BENCHMARK(BM_RawGetGroups)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace memcg

BENCHMARK_MAIN();
