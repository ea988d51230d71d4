// Scrapes while threads charge: the server's readers (exposition, JSON tree, files) run
// concurrently with charging, knob changes and group creation and removal. Run in the tsan
// preset for the data-race check; here it checks that every scrape succeeds and that the
// counters come back to zero once the chargers are done.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/http/server.hpp"

namespace memcg::http {
namespace {

TEST(HttpConcurrencyTest, ScrapesWhileThreadsCharge) {
  Options opts;
  opts.nr_shards = 2;
  Controller ctl(opts);
  constexpr int kTenants = 4;
  std::vector<GroupRef> tenants(kTenants);
  for (int i = 0; i < kTenants; ++i) {
    ASSERT_EQ(ctl.create("t" + std::to_string(i), &tenants[i]), 0);
    tenants[i]->set_max(uint64_t{256} << 12);  // 256 units: some charges fail at the limit
  }
  ServerOptions so;
  so.threads = 2;
  Server server(ctl, so);
  std::string error;
  ASSERT_EQ(server.start(&error), 0) << error;

  std::atomic<bool> stop{false};
  std::vector<std::thread> chargers;
  for (int c = 0; c < 2; ++c) {
    chargers.emplace_back([&, c] {
      std::vector<int64_t> held(kTenants, 0);
      for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        const int t = static_cast<int>((i + c) % kTenants);
        const int64_t units = static_cast<int64_t>(1 + i % 16);
        if (charged(try_charge(*tenants[t], units, 0))) held[t] += units;
        if (held[t] > 200) {
          uncharge(*tenants[t], held[t]);
          held[t] = 0;
        }
        if (i % 512 == 0) {  // the tree changes under the scrapers too
          GroupRef g;
          const std::string path = "t" + std::to_string(t) + "/tmp" + std::to_string(c);
          if (ctl.create(path, &g) == 0) {
            g.reset();
            EXPECT_EQ(ctl.remove(path), 0);  // no child, no attached thread
          }
          tenants[t]->set_high(i % 1024 == 0 ? kUnlimited : uint64_t{200} << 12);
        }
      }
      for (int t = 0; t < kTenants; ++t) uncharge(*tenants[t], held[t]);
    });
  }

  std::atomic<int> failures{0};
  std::atomic<int> scrapes{0};
  std::vector<std::thread> scrapers;
  for (int s = 0; s < 2; ++s) {
    scrapers.emplace_back([&, s] {
      httplib::Client cli("127.0.0.1", server.port());
      cli.set_read_timeout(30, 0);
      const char* paths[] = {"/metrics", "/v1/groups", "/v1/groups/t1/memory.stat",
                             "/v1/groups/t2/memory.events", "/v1/groups/memory.pressure"};
      for (int i = 0; i < 100; ++i) {
        const char* path = paths[(i + s) % 5];
        auto res = cli.Get(path);
        if (!res || res->status != 200 || res->body.empty()) {
          failures.fetch_add(1);
          continue;
        }
        if (std::string(path) == "/v1/groups" &&
            nlohmann::json::parse(res->body).at("groups").size() < kTenants + 1)
          failures.fetch_add(1);
        scrapes.fetch_add(1);
      }
    });
  }
  for (std::thread& t : scrapers) t.join();
  stop.store(true);
  for (std::thread& t : chargers) t.join();
  server.stop();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(scrapes.load(), 200);
  ctl.stock().drain_all(&ctl.root());
  for (const GroupRef& g : tenants) EXPECT_EQ(g->current(), 0u) << g->path();
}

}  // namespace
}  // namespace memcg::http

namespace memcg::http {
namespace {

// One worker and a queue of one: more clients than that are served in turn (the acceptor waits
// for room), none is dropped; stop() then returns although clients keep idle connections open.
TEST(HttpConcurrencyTest, OneWorkerServesManyClientsInTurn) {
  Controller ctl;
  ASSERT_EQ(ctl.create("a"), 0);
  ServerOptions so;
  so.threads = 1;
  so.max_queued = 1;
  so.keep_alive_timeout = std::chrono::seconds(1);  // an idle kept-alive client holds the worker
  Server server(ctl, so);
  std::string error;
  ASSERT_EQ(server.start(&error), 0) << error;
  std::atomic<int> ok{0};
  std::vector<std::unique_ptr<httplib::Client>> clients;
  for (int c = 0; c < 6; ++c) {
    clients.push_back(std::make_unique<httplib::Client>("127.0.0.1", server.port()));
    clients.back()->set_read_timeout(30, 0);
    clients.back()->set_keep_alive(c % 2 == 0);  // some hold their connection between requests
  }
  std::vector<std::thread> threads;
  for (int c = 0; c < 6; ++c) {
    threads.emplace_back([&, c] {
      for (int i = 0; i < 5; ++i) {
        auto res = clients[c]->Get(i % 2 ? "/v1/groups/a/memory.current" : "/healthz");
        if (res && res->status == 200) ok.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 30);
  const auto t0 = std::chrono::steady_clock::now();
  server.stop();  // the kept-alive connections are idle: stop must not wait for their clients
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_FALSE(server.running());
  // At most the keep-alive timeout of the one connection being served, with a wide margin.
  EXPECT_LT(took, std::chrono::seconds(10));
  std::printf("stop took %lld ms\n",
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
}

}  // namespace
}  // namespace memcg::http
