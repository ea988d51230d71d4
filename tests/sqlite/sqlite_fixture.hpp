// Shared pieces of the memcg::sqlite tests: a scratch directory, a controller with the
// component's stat kinds and an installed Engine, tenants' databases filled with rows.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "memcg/memcg.hpp"
#include "memcg/sqlite/connection.hpp"
#include "memcg/sqlite/engine.hpp"

namespace memcg::sqlite::testing {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * 1024;

class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "memcg-sqlite-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline Options sqlite_options() {
  Options o;
  add_stat_kinds(o);
  return o;
}

// A controller and an Engine on it; the Engine goes first (it needs the controller).
class SqliteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    ASSERT_EQ(Engine::install(ctl_, options_, &engine_, &why), 0) << why;
    cache_kind_ = ctl_.stat_index(kCacheKindName);
    heap_kind_ = ctl_.stat_index(kHeapKindName);
    ASSERT_GE(cache_kind_, 0);
    ASSERT_GE(heap_kind_, 0);
  }
  void TearDown() override { engine_.reset(); }

  GroupRef make(const std::string& path) {
    GroupRef g;
    EXPECT_EQ(ctl_.create(path, &g), 0) << path;
    return g;
  }
  Connection open(const std::string& name, Group& g) {
    Connection c;
    std::string why;
    EXPECT_EQ(Connection::open(dir_.sub(name), g, &c, &why), 0) << why;
    return c;
  }
  int64_t cache_stat(Group& g) {
    ctl_.flush_stats();
    return g.stat(cache_kind_);
  }
  int64_t heap_stat(Group& g) {
    ctl_.flush_stats();
    return g.stat(heap_kind_);
  }

  ScratchDir dir_;
  Controller ctl_{sqlite_options()};
  EngineOptions options_;
  std::unique_ptr<Engine> engine_;
  int cache_kind_ = -1;
  int heap_kind_ = -1;
};

// `rows` rows of about `row_bytes` each in table t(k INTEGER PRIMARY KEY, v BLOB), one
// transaction. About 4 KiB pages: rows / (4096 / row_bytes) leaf pages.
inline void fill(Connection& c, int rows, int row_bytes = 200) {
  ASSERT_EQ(c.exec("CREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY, v BLOB)"), SQLITE_OK);
  const std::string sql = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < " +
                          std::to_string(rows) + ") INSERT INTO t SELECT i, randomblob(" +
                          std::to_string(row_bytes) + ") FROM n";
  std::string why;
  ASSERT_EQ(c.exec(sql.c_str(), &why), SQLITE_OK) << why;
}

// One integer of a query's first row (or -1 on error), in the connection's scope.
inline int64_t query_int(Connection& c, const char* sql, int* rc_out = nullptr) {
  auto scope = c.scope();
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(c.handle(), sql, -1, &stmt, nullptr);
  int64_t v = -1;
  if (rc == SQLITE_OK) {
    rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
      v = sqlite3_column_int64(stmt, 0);
      rc = SQLITE_OK;
    }
  }
  sqlite3_finalize(stmt);
  if (rc_out != nullptr) *rc_out = rc;
  return v;
}

// PRAGMA integrity_check's first line ("ok" for a sound database).
inline std::string integrity(Connection& c) {
  auto scope = c.scope();
  sqlite3_stmt* stmt = nullptr;
  std::string out = "prepare failed";
  if (sqlite3_prepare_v2(c.handle(), "PRAGMA integrity_check", -1, &stmt, nullptr) == SQLITE_OK) {
    const int rc = sqlite3_step(stmt);
    out = rc == SQLITE_ROW ? reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0))
                           : std::string("step: ") + sqlite3_errstr(rc);
  }
  sqlite3_finalize(stmt);
  return out;
}

// A full scan: the sum of the blobs' lengths (touches every leaf page).
inline int64_t scan(Connection& c) { return query_int(c, "SELECT sum(length(v)) FROM t"); }

}  // namespace memcg::sqlite::testing
