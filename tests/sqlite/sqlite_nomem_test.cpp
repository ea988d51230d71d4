// memcg::sqlite refusals: a heap charge refused is SQLITE_NOMEM for that statement only; the
// database stays consistent (PRAGMA integrity_check), other tenants are untouched.
#include <atomic>
#include <thread>

#include "sqlite/sqlite_fixture.hpp"

namespace memcg::sqlite::testing {
namespace {

using SqliteNomem = SqliteTest;

// SQLite's own malloc-failure method (its test harness fails the Nth allocation, then every one
// after): for each N, a write transaction under the fault, then the database must be sound and
// hold either all of the transaction or none of it.
TEST_F(SqliteNomem, EveryAllocationFailureLeavesTheDatabaseSound) {
  GroupRef g = make("t");
  Connection c = open("t.db", *g);
  fill(c, 500);
  int nomems = 0, oks = 0;
  for (int n = 0; n < 400; n += 3) {
    engine_->set_heap_fault(n, /*persistent=*/true);
    const int rc = c.exec(
        "BEGIN; INSERT INTO t SELECT k + (SELECT max(k) FROM t), randomblob(300) FROM t "
        "WHERE k <= 50;"
        "UPDATE t SET v = randomblob(100) WHERE k % 7 = 0; COMMIT;");
    engine_->set_heap_fault(-1);
    if (rc != SQLITE_OK) {
      ++nomems;
      EXPECT_TRUE(rc == SQLITE_NOMEM || rc == SQLITE_IOERR_NOMEM) << n << ": " << rc << " " << sqlite3_errmsg(c.handle());
      (void)c.exec("ROLLBACK");  // may already be rolled back
    } else {
      ++oks;
    }
    ASSERT_EQ(integrity(c), "ok") << "after a fault at allocation " << n;
    const int64_t added = query_int(c, "SELECT count(*) FROM t WHERE k > 500");
    ASSERT_EQ(added, 50 * oks) << "a transaction half applied at " << n;
  }
  EXPECT_GT(nomems, 10);
  EXPECT_GT(oks, 0);
  EXPECT_GT(engine_->stats().heap_refusals, 10u);
  EXPECT_EQ(c.close(), SQLITE_OK);
  ctl_.drain_stocks();
  EXPECT_EQ(g->current(), 0u);
}

TEST_F(SqliteNomem, ATenantAtItsLimitGetsNomemAndTheOtherTenantIsUntouched) {
  GroupRef a = make("a");
  GroupRef b = make("b");
  Connection ca = open("a.db", *a);
  Connection cb = open("b.db", *b);
  fill(ca, 5000);
  fill(cb, 5000);
  a->set_max(512 * kKiB);
  // group_concat builds one string of about 1 MiB: the heap refuses past the limit.
  std::atomic<bool> stop{false};
  std::atomic<int> b_ok{0}, b_bad{0};
  std::thread other([&] {
    while (!stop.load()) {
      int rc = 0;
      const int64_t len = query_int(cb, "SELECT length(group_concat(hex(v))) FROM t", &rc);
      (rc == SQLITE_OK && len > 0 ? b_ok : b_bad).fetch_add(1);
    }
  });
  int nomem = 0;
  for (int i = 0; i < 5; ++i) {
    int rc = 0;
    (void)query_int(ca, "SELECT length(group_concat(hex(v))) FROM t", &rc);
    if (rc == SQLITE_NOMEM) ++nomem;
  }
  while (b_ok.load() < 3) std::this_thread::yield();
  stop = true;
  other.join();
  EXPECT_EQ(nomem, 5);
  EXPECT_EQ(b_bad.load(), 0);
  EXPECT_GT(engine_->stats().heap_refusals, 0u);
  EXPECT_LE(a->current(), 512 * kKiB + 64 * kKiB);
  // Small statements still run within the limit, and the database is sound.
  EXPECT_EQ(query_int(ca, "SELECT count(*) FROM t"), 5000);
  a->set_max(kUnlimited);
  EXPECT_EQ(integrity(ca), "ok");
  EXPECT_GT(query_int(ca, "SELECT length(group_concat(hex(v))) FROM t"), 1000000);
}

TEST_F(SqliteNomem, AnInMemoryDatabaseStopsAtItsGroupsMax) {
  GroupRef g = make("t");
  Connection c;
  std::string why;
  ASSERT_EQ(Connection::open(":memory:", *g, &c, &why), 0) << why;
  g->set_max(1 * kMiB);
  ASSERT_EQ(c.exec("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB)"), SQLITE_OK);
  int rc = SQLITE_OK;
  int rows = 0;
  for (; rows < 10000 && rc == SQLITE_OK; ++rows)
    rc = c.exec("INSERT INTO t VALUES (NULL, randomblob(1000))");
  EXPECT_TRUE(rc == SQLITE_NOMEM || rc == SQLITE_FULL) << rc;
  EXPECT_LT(rows, 2000);
  ctl_.drain_stocks();
  EXPECT_LE(g->current(), 1 * kMiB + 64 * kKiB);
  g->set_max(kUnlimited);  // the check itself needs memory
  EXPECT_EQ(integrity(c), "ok");
  EXPECT_EQ(query_int(c, "SELECT count(*) FROM t"), rows - 1);
}

// SQLite's own fault simulation (sqlite3_test_control FAULT_INSTALL), where the build has it:
// every simulated fault is an error of the statement, never a corrupt database.
int g_fault_calls = 0;
int fail_every_third(int) { return ++g_fault_calls % 3 == 0 ? SQLITE_IOERR : SQLITE_OK; }

TEST_F(SqliteNomem, SqliteFaultSimulationWhereTheBuildHasIt) {
  GroupRef g = make("t");
  Connection c = open("t.db", *g);
  fill(c, 500);
  if (sqlite3_test_control(SQLITE_TESTCTRL_FAULT_INSTALL, fail_every_third) != SQLITE_OK)
    GTEST_SKIP() << "sqlite3_test_control(SQLITE_TESTCTRL_FAULT_INSTALL) is compiled out";
  for (int i = 0; i < 50; ++i)
    (void)c.exec("BEGIN; UPDATE t SET v = randomblob(200) WHERE k % 5 = 0; COMMIT;");
  (void)sqlite3_test_control(SQLITE_TESTCTRL_FAULT_INSTALL, nullptr);
  (void)c.exec("ROLLBACK");
  if (g_fault_calls == 0) GTEST_SKIP() << "no fault site reached in this build";
  EXPECT_EQ(integrity(c), "ok");
}

}  // namespace
}  // namespace memcg::sqlite::testing
