// memcg::sqlite across threads: connections closed by another thread than the one that opened
// them, tenants reading under a shared limit while reclaim runs from every charging thread and
// from memory.reclaim writes. Run under ThreadSanitizer and AddressSanitizer.
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "sqlite/sqlite_fixture.hpp"

namespace memcg::sqlite::testing {
namespace {

using SqliteThreads = SqliteTest;

TEST_F(SqliteThreads, CloseFromAnotherThreadUnchargesEverything) {
  GroupRef g = make("t");
  Connection c;
  std::thread opener([&] {
    c = open("t.db", *g);
    fill(c, 3000);
    EXPECT_EQ(scan(c), 200 * 3000);
  });
  opener.join();
  EXPECT_GT(engine_->cache_bytes(*g), 100 * kKiB);
  std::thread closer([&] { EXPECT_EQ(c.close(), SQLITE_OK); });
  closer.join();
  ctl_.drain_stocks();
  EXPECT_EQ(g->current(), 0u);
  EXPECT_EQ(engine_->stats().caches, 0u);
}

TEST_F(SqliteThreads, TenantsReadUnderASharedLimitWhileReclaimRuns) {
  constexpr int kTenants = 4;
  constexpr int kRows = 6000;
  GroupRef parent = make("svc");
  parent->set_max(3 * kMiB);
  std::vector<GroupRef> groups;
  std::vector<Connection> conns;
  for (int i = 0; i < kTenants; ++i) {
    groups.push_back(make("svc/t" + std::to_string(i)));
    conns.push_back(open("t" + std::to_string(i) + ".db", *groups.back()));
    ASSERT_EQ(conns.back().exec("PRAGMA cache_size = -65536"), SQLITE_OK);
    fill(conns.back(), kRows);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < kTenants; ++i) {
    workers.emplace_back([&, i] {
      std::mt19937 rng(i);
      for (int n = 0; n < 300 && !stop.load(); ++n) {
        const std::string sql = "SELECT length(v) FROM t WHERE k = " + std::to_string(1 + rng() % kRows);
        int rc = 0;
        if (query_int(conns[i], sql.c_str(), &rc) != 200 || rc != SQLITE_OK) bad.fetch_add(1);
        if (n % 100 == 0 && scan(conns[i]) != 200 * kRows) bad.fetch_add(1);
      }
    });
  }
  std::thread reclaimer([&] {
    while (!stop.load()) {
      (void)write_file(*groups[0], "memory.reclaim", "256K");  // EAGAIN is fine
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  for (auto& w : workers) w.join();
  stop = true;
  reclaimer.join();
  EXPECT_EQ(bad.load(), 0);
  ctl_.drain_stocks();
  EXPECT_LE(parent->current(), 3 * kMiB + engine_->stats().fetch_forced * 8 * kKiB);
  for (auto& c : conns) {
    EXPECT_EQ(integrity(c), "ok");
    EXPECT_EQ(c.close(), SQLITE_OK);
  }
  ctl_.drain_stocks();
  EXPECT_EQ(parent->current(), 0u);
}

TEST_F(SqliteThreads, BindWhileAnotherTenantsReclaimRuns) {
  GroupRef a = make("a");
  GroupRef b = make("b");
  Connection c = open("c.db", *a);
  fill(c, 4000);
  std::atomic<bool> stop{false};
  std::thread reclaimer([&] {
    while (!stop.load()) {
      (void)write_file(*a, "memory.reclaim", "128K");
      (void)write_file(*b, "memory.reclaim", "128K");
    }
  });
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(scan(c), 200 * 4000);
    ASSERT_EQ(c.rebind(i % 2 == 0 ? *b : *a), 0);
  }
  stop = true;
  reclaimer.join();
  EXPECT_EQ(c.close(), SQLITE_OK);
  ctl_.drain_stocks();
  EXPECT_EQ(a->current(), 0u);
  EXPECT_EQ(b->current(), 0u);
}

}  // namespace
}  // namespace memcg::sqlite::testing
