// memcg::sqlite accounting: page caches and heap charged to the tenant's group, exactly 0 once
// every connection is closed; install, open and bind errors.
#include <sstream>
#include <thread>
#include <vector>

#include "sqlite/sqlite_fixture.hpp"

namespace memcg::sqlite::testing {
namespace {

using SqliteAccounting = SqliteTest;

TEST_F(SqliteAccounting, ChargesExactlyZeroAfterEveryConnectionClosed) {
  std::vector<GroupRef> groups;
  std::vector<Connection> conns;
  for (int i = 0; i < 3; ++i) {
    groups.push_back(make("t" + std::to_string(i)));
    conns.push_back(open("t" + std::to_string(i) + ".db", *groups.back()));
    fill(conns.back(), 2000 * (i + 1));
    EXPECT_EQ(scan(conns.back()), 200 * 2000 * (i + 1));
  }
  for (int i = 0; i < 3; ++i) {
    Group& g = *groups[i];
    EXPECT_GT(engine_->cache_bytes(g), 100 * kKiB) << i;
    EXPECT_GE(cache_stat(g), static_cast<int64_t>(engine_->cache_bytes(g))) << i;
    EXPECT_GT(heap_stat(g), 0) << i;
    EXPECT_GE(g.current(), engine_->cache_bytes(g)) << i;
  }
  EXPECT_EQ(engine_->stats().caches, 3u);  // one main database each (temp not opened)
  for (auto& c : conns) EXPECT_EQ(c.close(), SQLITE_OK);
  ctl_.drain_stocks();
  for (int i = 0; i < 3; ++i) {
    Group& g = *groups[i];
    EXPECT_EQ(g.current(), 0u) << i;
    EXPECT_EQ(cache_stat(g), 0) << i;
    EXPECT_EQ(heap_stat(g), 0) << i;
    EXPECT_EQ(engine_->cache_bytes(g), 0u);
  }
  EXPECT_EQ(engine_->stats().caches, 0u);
}

TEST_F(SqliteAccounting, CacheSizeStaysAnUpperBound) {
  GroupRef g = make("t");
  Connection c = open("t.db", *g);
  fill(c, 20000);  // about 1 000 leaf pages
  ASSERT_EQ(c.exec("PRAGMA cache_size = 50"), SQLITE_OK);
  EXPECT_EQ(scan(c), 200 * 20000);
  const EngineStats s = engine_->stats();
  EXPECT_LE(s.pages, 50u + 8u);  // the bound, plus pages pinned by the scan's cursor
  EXPECT_GT(s.recycled, 500u);
  // Lowering it frees down to the bound at once.
  ASSERT_EQ(c.exec("PRAGMA cache_size = 10"), SQLITE_OK);
  EXPECT_LE(engine_->stats().pages, 10u);
}

TEST_F(SqliteAccounting, OpenUnderARemovedGroupIsAClearError) {
  GroupRef g = make("gone");
  ASSERT_EQ(ctl_.remove(*g), 0);
  Connection c;
  std::string why;
  EXPECT_EQ(Connection::open(dir_.sub("gone.db"), *g, &c, &why), ENOENT);
  EXPECT_NE(why.find("group gone was removed"), std::string::npos) << why;
  EXPECT_FALSE(c.is_open());
  EXPECT_FALSE(std::filesystem::exists(dir_.sub("gone.db")));
  EXPECT_EQ(g->current(), 0u);
}

TEST_F(SqliteAccounting, OpenOfANonDatabaseIsAnErrorAndLeavesNothingCharged) {
  GroupRef g = make("t");
  {
    std::FILE* f = std::fopen(dir_.sub("junk.db").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(std::string(8192, 'x').c_str(), f);
    std::fclose(f);
  }
  Connection c;
  std::string why;
  int src = 0;
  EXPECT_EQ(Connection::open(dir_.sub("junk.db"), *g, &c, &why, SQLITE_OPEN_READWRITE, &src), EIO);
  EXPECT_EQ(src, SQLITE_NOTADB);
  EXPECT_NE(why.find("not a database"), std::string::npos) << why;
  ctl_.drain_stocks();
  EXPECT_EQ(g->current(), 0u);
}

TEST_F(SqliteAccounting, BindMovesAConnectionOpenedElsewhere) {
  GroupRef g = make("t");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir_.sub("plain.db").c_str(), &db), SQLITE_OK);  // fallback: the root
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB);"
                         "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                         "WHERE i < 5000) INSERT INTO t SELECT i, randomblob(200) FROM n;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  ctl_.drain_stocks();
  EXPECT_EQ(g->current(), 0u);
  const uint64_t bytes_before = engine_->stats().cache_bytes;
  ASSERT_GT(bytes_before, 200 * kKiB);
  std::string why;
  ASSERT_EQ(bind(db, *g, &why), 0) << why;
  EXPECT_EQ(engine_->cache_bytes(*g), bytes_before);  // moved, not freed
  EXPECT_GE(g->current(), bytes_before);
  EXPECT_GE(cache_stat(*g), static_cast<int64_t>(bytes_before));
  GroupRef other = make("other");
  ASSERT_EQ(ctl_.remove(*other), 0);
  EXPECT_EQ(bind(db, *other, &why), ENOENT);
  EXPECT_EQ(sqlite3_close(db), SQLITE_OK);
  ctl_.drain_stocks();
  EXPECT_EQ(g->current(), 0u);
  EXPECT_EQ(cache_stat(*g), 0);
}

TEST_F(SqliteAccounting, AttachedThreadChargesItsGroupWithoutAScope) {
  GroupRef g = make("t");
  sqlite3* db = nullptr;
  {
    ScopedAttach attach(*g);
    ASSERT_TRUE(attach.ok());
    ASSERT_EQ(sqlite3_open(dir_.sub("a.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (zeroblob(100000));",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
  }
  EXPECT_GT(engine_->cache_bytes(*g), 50 * kKiB);
  EXPECT_GT(heap_stat(*g), 0);
  EXPECT_EQ(sqlite3_close(db), SQLITE_OK);
  ctl_.drain_stocks();
  EXPECT_EQ(g->current(), 0u);
}

TEST_F(SqliteAccounting, GroupRemovedWhileOpenKeepsValidChargesUntilClose) {
  GroupRef parent = make("p");
  GroupRef g = make("p/t");
  Connection c = open("t.db", *g);
  fill(c, 3000);
  ASSERT_EQ(ctl_.remove(*g), 0);
  EXPECT_GT(parent->current(), 100 * kKiB);  // still counted in the parent
  EXPECT_EQ(scan(c), 200 * 3000);            // and the connection still works
  EXPECT_EQ(c.close(), SQLITE_OK);
  g.reset();
  ctl_.drain_stocks();
  EXPECT_EQ(parent->current(), 0u);
}

TEST(SqliteInstall, RefusedOnceSqliteIsInitializedThenFineAfterShutdown) {
  Controller ctl(sqlite_options());
  ASSERT_EQ(sqlite3_initialize(), SQLITE_OK);
  std::unique_ptr<Engine> engine;
  std::string why;
  EXPECT_EQ(Engine::install(ctl, {}, &engine, &why), EBUSY);
  EXPECT_NE(why.find("SQLITE_MISUSE"), std::string::npos) << why;
  EXPECT_NE(why.find("sqlite3_shutdown"), std::string::npos) << why;
  EXPECT_EQ(engine, nullptr);
  EXPECT_EQ(Engine::current(), nullptr);
  ASSERT_EQ(sqlite3_shutdown(), SQLITE_OK);
  ASSERT_EQ(Engine::install(ctl, {}, &engine, &why), 0) << why;
  std::unique_ptr<Engine> second;
  EXPECT_EQ(Engine::install(ctl, {}, &second, &why), EBUSY);
  EXPECT_NE(why.find("another Engine"), std::string::npos) << why;
  engine.reset();
  // SQLite's own page cache and malloc are back.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1);", nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  EXPECT_EQ(sqlite3_close(db), SQLITE_OK);
  EXPECT_EQ(sqlite3_shutdown(), SQLITE_OK);
}

TEST(SqliteInstall, FallbackGroupTakesUnscopedWork) {
  Controller ctl(sqlite_options());
  GroupRef shared;
  ASSERT_EQ(ctl.create("sqlite_shared", &shared), 0);
  std::unique_ptr<Engine> engine;
  std::string why;
  EngineOptions o;
  o.fallback = shared.get();
  ASSERT_EQ(Engine::install(ctl, o, &engine, &why), 0) << why;
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (zeroblob(50000));",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  EXPECT_GT(shared->current(), 50 * kKiB);
  EXPECT_EQ(sqlite3_close(db), SQLITE_OK);
  engine.reset();  // SQLite's global state goes with the shutdown
  ctl.drain_stocks();
  EXPECT_EQ(shared->current(), 0u);
  GroupRef removed;
  ASSERT_EQ(ctl.create("removed", &removed), 0);
  ASSERT_EQ(ctl.remove(*removed), 0);
  o.fallback = removed.get();
  EXPECT_EQ(Engine::install(ctl, o, &engine, &why), EINVAL);
  EXPECT_EQ(Engine::current(), nullptr);
}

}  // namespace
}  // namespace memcg::sqlite::testing

namespace memcg::sqlite::testing {
namespace {

// The per-tenant figures: memory.stat's sqlite_cache and sqlite_heap lines, and the same items
// in the Prometheus exposition (/metrics of memcg::http serves it).
TEST_F(SqliteAccounting, MemoryStatAndMetricsShowTheTenantsFigures) {
  GroupRef g = make("tenant_a");
  Connection c = open("a.db", *g);
  fill(c, 4000);
  EXPECT_EQ(scan(c), 200 * 4000);
  ctl_.flush_stats();
  std::string stat;
  ASSERT_EQ(read_file(*g, "memory.stat", &stat), 0);
  auto value_of = [&](const std::string& key) -> int64_t {
    const size_t at = stat.find("\n" + key + " ");
    if (at == std::string::npos) return -1;
    return std::stoll(stat.substr(at + key.size() + 2));
  };
  EXPECT_GE(value_of(kCacheKindName), static_cast<int64_t>(engine_->cache_bytes(*g))) << stat;
  EXPECT_GT(value_of(kHeapKindName), 0) << stat;
  const std::string metrics = render_prometheus(ctl_);
  for (const char* item : {kCacheKindName, kHeapKindName}) {
    double value = -1;
    std::istringstream lines(metrics);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("memcg_memory_stat_bytes{", 0) == 0 &&
          line.find(std::string("item=\"") + item + "\"") != std::string::npos &&
          line.find("\"tenant_a\"") != std::string::npos)
        value = std::stod(line.substr(line.rfind(' ') + 1));
    }
    EXPECT_GT(value, 0) << item;
  }
}

}  // namespace
}  // namespace memcg::sqlite::testing
