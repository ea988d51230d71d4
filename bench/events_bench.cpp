// The charge pair (try_charge(1) + uncharge(1) at depth 4, as charge_bench's Pair/memcg) while a
// memcg::http::Server streams the controller's events (GET /v1/events) to 0 or 100 subscribers:
// what the event stream costs the charge path. Both variants run a server on 127.0.0.1 with the
// event bus recording and a thread publishing one event every 5 ms (200 events/s, each sent to
// every stream); Pair/streams:100 also has 100 SSE clients connected, read by one thread. The
// charge pair never touches the bus: the figure shows that the delivery (the notifier thread,
// libmicrohttpd's workers, the clients) does not slow it beyond noise on this 2-CPU machine.
//
// Each run of the benchmark function builds its own scene (controller, server, clients,
// publisher) and tears it down, so the variants never run at once. Compare them in one run with
// repetitions and interleaving (docs/BENCHMARKS.md has the command and the figures).
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_check.hpp"
#include "smoke.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/signal/event_bus.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/http/server.hpp"

namespace memcg::bench {
namespace {

using namespace std::chrono_literals;

int connect_stream(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(port));
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::string req = "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n";
  if (::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0 ||
      ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

struct Scene {
  explicit Scene(int streams) {
    check(ctl.create("a"), "create a");
    check(ctl.create("a/b"), "create a/b");
    check(ctl.create("a/b/c", &leaf), "create a/b/c");
    http::ServerOptions o;
    o.threads = 2;
    o.max_queued = 256;
    o.max_connections_per_peer = 256;
    o.max_event_streams = 256;
    server = std::make_unique<http::Server>(ctl, o);
    check(server->start(), "server start");
    for (int i = 0; i < streams; ++i) {
      const int fd = connect_stream(server->port());
      if (fd < 0) check_failed("connect a stream", "failed");
      fds.push_back(fd);
    }
    for (int i = 0; i < 500 && ctl.events().stats().subscribers < static_cast<size_t>(streams);
         ++i)
      std::this_thread::sleep_for(10ms);
    if (ctl.events().stats().subscribers != static_cast<size_t>(streams))
      check_failed("streams subscribed", "not all of them");
    reader = std::thread([this] {
      std::vector<pollfd> p;
      for (int fd : fds) p.push_back({fd, POLLIN, 0});
      char buf[65536];
      while (!stop.load()) {
        if (p.empty() || ::poll(p.data(), p.size(), 50) <= 0) {
          if (p.empty()) std::this_thread::sleep_for(50ms);
          continue;
        }
        for (pollfd& x : p)
          if (x.revents != 0) {
            const ssize_t n = ::recv(x.fd, buf, sizeof buf, 0);
            if (n > 0) received.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
          }
      }
    });
    publisher = std::thread([this] {
      while (!stop.load()) {
        ctl.events().publish(BusEventType::kAction, "a/b/c", "{\"bench\":1}");
        std::this_thread::sleep_for(5ms);
      }
    });
  }
  ~Scene() {
    stop = true;
    publisher.join();
    reader.join();
    for (int fd : fds) ::close(fd);
    server->stop();
  }
  Controller ctl;
  GroupRef leaf;
  std::unique_ptr<http::Server> server;
  std::vector<int> fds;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> received{0};
  std::thread reader, publisher;
};

void Pair(benchmark::State& state) {
  Scene scene(static_cast<int>(state.range(0)));
  Group& g = *scene.leaf;
  const uint64_t published0 = scene.ctl.events().stats().published;
  for (auto _ : state) {
    benchmark::DoNotOptimize(try_charge(g, 1));
    uncharge(g, 1);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["events"] =
      static_cast<double>(scene.ctl.events().stats().published - published0);
  state.counters["stream_bytes"] = static_cast<double>(scene.received.load());
}
BENCHMARK(Pair)->ArgName("streams")->Arg(0)->Arg(100)->MinTime(min_time(0.5));

}  // namespace
}  // namespace memcg::bench

BENCHMARK_MAIN();
