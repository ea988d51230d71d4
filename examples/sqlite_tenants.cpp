// One service process, one budget: 1 000 tenants' SQLite databases (memcg::sqlite), a RocksDB
// tenant (memcg::rocksdb, where it is built) and the service's own query memory under one memcg
// tree. Ten quiet tenants keep their hot pages under memory.low while a noisy tenant scans a
// table larger than the whole budget; the noisy scans are served by reclaiming the noisy
// tenant's own pages and the idle tenants' caches, never the quiet tenants' hot sets.
//
//   service (memory.max = budget)
//   |-- tenants              memory.low = the quiet tenants' sum
//   |   |-- t0000 .. t0009   quiet: memory.low = their hot set
//   |   |-- t0010 .. t0998   idle: a few pages read once
//   |   `-- t0999            noisy: full scans of a table larger than the budget
//   |-- kv                   the RocksDB tenant
//   `-- queries              the service's own query buffers (std::pmr over memcg)
//
// Shows, and exits non-zero when it did not happen: the service stayed within its budget (plus
// the forced pages the component counts), every quiet tenant kept at least 90 % of its hot set
// and saw no memory.low breach, no statement failed, and every group is back to 0 after close.
#include <sqlite3.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <memory_resource>
#include <string>
#include <vector>

#include <memcg/memcg.hpp>
#include <memcg/sqlite/connection.hpp>
#include <memcg/sqlite/engine.hpp>
#ifdef MEMCG_EXAMPLE_ROCKSDB
#include <memcg/rocksdb/tenant.hpp>
#include <rocksdb/db.h>
#endif

namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr int kTenants = 1000;
constexpr int kQuiet = 10;
constexpr int kNoisy = kTenants - 1;
constexpr uint64_t kBudget = 48 * kMiB;
constexpr int kIdleRows = 40;       // a few pages each
constexpr int kQuietRows = 6000;    // about 1.3 MiB of pages: a quiet tenant's hot set
constexpr int kNoisyRows = 100000;  // about 22 MiB: twice what the budget leaves it
constexpr uint64_t kQuietLow = 1536 * kKiB;

std::string name(int i) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "t%04d", i);
  return buf;
}

bool exec(memcg::sqlite::Connection& c, const std::string& sql) {
  std::string why;
  const int rc = c.exec(sql.c_str(), &why);
  if (rc != SQLITE_OK) std::fprintf(stderr, "statement failed (%d): %s\n", rc, why.c_str());
  return rc == SQLITE_OK;
}

void fill(memcg::sqlite::Connection& c, int rows) {
  exec(c, "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
          "CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB);"
          "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < " +
              std::to_string(rows) + ") INSERT INTO t SELECT i, randomblob(200) FROM n");
}

int64_t scan(memcg::sqlite::Connection& c) {
  auto scope = c.scope();
  sqlite3_stmt* stmt = nullptr;
  int64_t sum = -1;
  if (sqlite3_prepare_v2(c.handle(), "SELECT sum(length(v)) FROM t", -1, &stmt, nullptr) ==
          SQLITE_OK &&
      sqlite3_step(stmt) == SQLITE_ROW)
    sum = sqlite3_column_int64(stmt, 0);
  sqlite3_finalize(stmt);
  return sum;
}

double mib(uint64_t b) { return static_cast<double>(b) / static_cast<double>(kMiB); }

}  // namespace

int main() {
  const auto t0 = std::chrono::steady_clock::now();
  std::string dir = (std::filesystem::temp_directory_path() / "memcg-sqlite-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) return 1;
  int failures = 0;
  {
    memcg::Options options;
    memcg::sqlite::add_stat_kinds(options);
    memcg::Controller ctl(options);
    memcg::GroupRef service, tenants, kv, queries;
    if (ctl.create("service", &service) != 0 || ctl.create("service/tenants", &tenants) != 0 ||
        ctl.create("service/kv", &kv) != 0 || ctl.create("service/queries", &queries) != 0)
      return 2;
    service->set_max(kBudget);
    std::vector<memcg::GroupRef> groups(kTenants);
    for (int i = 0; i < kTenants; ++i)
      if (ctl.create(*tenants, name(i), &groups[i]) != 0) return 3;
    // Protection counts only where every level above grants it (cgroup v2): `tenants` holds the
    // quiet tenants' sum, which it shares out to them by their own memory.low.
    tenants->set_low(kQuiet * kQuietLow);
    for (int i = 0; i < kQuiet; ++i) groups[i]->set_low(kQuietLow);

    std::unique_ptr<memcg::sqlite::Engine> engine;
    std::string why;
    if (memcg::sqlite::Engine::install(ctl, {}, &engine, &why) != 0) {
      std::fprintf(stderr, "%s\n", why.c_str());
      return 4;
    }
    {
      // 1 000 databases, open at once.
      std::vector<memcg::sqlite::Connection> dbs(kTenants);
      for (int i = 0; i < kTenants; ++i) {
        if (memcg::sqlite::Connection::open(dir + "/" + name(i) + ".db", *groups[i], &dbs[i],
                                            &why) != 0) {
          std::fprintf(stderr, "%s\n", why.c_str());
          return 5;
        }
        fill(dbs[i], i < kQuiet ? kQuietRows : i == kNoisy ? kNoisyRows : kIdleRows);
        exec(dbs[i], "PRAGMA cache_size = -65536");  // the bound is memcg's, not SQLite's
      }
      const auto t_open = std::chrono::steady_clock::now();

      // The service's own query memory: result buffers charged to `queries`.
      memcg::MemoryResource query_memory(*queries);
      std::pmr::vector<char> result_buffer(&query_memory);
      result_buffer.resize(4 * kMiB);

#ifdef MEMCG_EXAMPLE_ROCKSDB
      memcg::rocksdb::Tenant kv_tenant(*kv, {});
      rocksdb::Options kv_options;
      kv_options.create_if_missing = true;
      kv_tenant.configure(kv_options);
      rocksdb::DB* kv_raw = nullptr;
      if (!rocksdb::DB::Open(kv_options, dir + "/kv", &kv_raw).ok()) return 6;
      std::unique_ptr<rocksdb::DB> kv_db(kv_raw);
      kv_tenant.add(kv_db.get());
      for (int i = 0; i < 4000; ++i)
        if (!kv_db->Put({}, "key" + std::to_string(i), std::string(512, 'v')).ok()) ++failures;
#endif

      // The quiet tenants read their hot sets; then the noisy tenant scans, three times.
      for (int i = 0; i < kQuiet; ++i)
        if (scan(dbs[i]) != 200LL * kQuietRows) ++failures;
      std::vector<uint64_t> hot(kQuiet);
      for (int i = 0; i < kQuiet; ++i) hot[i] = engine->cache_bytes(*groups[i]);
      uint64_t peak_noisy = 0;
      for (int round = 0; round < 3; ++round) {
        if (scan(dbs[kNoisy]) != 200LL * kNoisyRows) ++failures;
        peak_noisy = std::max(peak_noisy, engine->cache_bytes(*groups[kNoisy]));
        for (int i = 0; i < kQuiet; ++i)  // the quiet tenants keep serving
          if (scan(dbs[i]) != 200LL * kQuietRows) ++failures;
      }
#ifdef MEMCG_EXAMPLE_ROCKSDB
      std::string got;
      for (int i = 0; i < 4000; i += 97)
        if (!kv_db->Get({}, "key" + std::to_string(i), &got).ok() || got.size() != 512) ++failures;
#endif
      ctl.drain_stocks();
      ctl.flush_stats();
      const memcg::sqlite::EngineStats s = engine->stats();
      const int cache_kind = ctl.stat_index(memcg::sqlite::kCacheKindName);
      const int heap_kind = ctl.stat_index(memcg::sqlite::kHeapKindName);
      std::printf("1000 tenant databases open in %.1f s; service %.1f MiB of %.1f MiB budget\n",
                  std::chrono::duration<double>(t_open - t0).count(), mib(service->current()),
                  mib(kBudget));
      std::printf("  tenants %.1f MiB (sqlite_cache %.1f, sqlite_heap %.1f), kv %.1f MiB "
                  "(peak %.1f), queries %.1f MiB\n",
                  mib(tenants->current()), mib(tenants->stat(cache_kind)),
                  mib(tenants->stat(heap_kind)), mib(kv->current()), mib(kv->peak()),
                  mib(queries->current()));
      std::printf("  noisy tenant: cache peak %.1f MiB, now %.1f MiB; pages reclaimed %llu, "
                  "recycled %llu, forced %llu\n",
                  mib(peak_noisy), mib(engine->cache_bytes(*groups[kNoisy])),
                  static_cast<unsigned long long>(s.reclaimed),
                  static_cast<unsigned long long>(s.recycled),
                  static_cast<unsigned long long>(s.fetch_forced));
      if (service->peak() > kBudget + s.fetch_forced * 8 * kKiB + 1 * kMiB) {
        std::printf("FAIL: service peak %.1f MiB over its budget\n", mib(service->peak()));
        ++failures;
      }
      for (int i = 0; i < kQuiet; ++i) {
        const uint64_t now = engine->cache_bytes(*groups[i]);
        const uint64_t low_events = groups[i]->events().get(memcg::Event::kLow);
        if (i < 3 || now < hot[i] * 9 / 10 || low_events != 0)
          std::printf("  quiet %s: hot set %.2f MiB, kept %.2f MiB, low events %llu\n",
                      name(i).c_str(), mib(hot[i]), mib(now),
                      static_cast<unsigned long long>(low_events));
        if (now < hot[i] * 9 / 10 || low_events != 0) ++failures;
      }
#ifdef MEMCG_EXAMPLE_ROCKSDB
      kv_tenant.remove(kv_db.get());
      kv_db.reset();
#endif
      for (auto& db : dbs)
        if (db.close() != SQLITE_OK) ++failures;
    }
    engine.reset();
    ctl.drain_stocks();
    if (service->current() != 0) {
      std::printf("FAIL: %llu bytes still charged after close\n",
                  static_cast<unsigned long long>(service->current()));
      ++failures;
    }
  }
  std::filesystem::remove_all(dir);
  std::printf("%s (%.1f s)\n", failures == 0 ? "ok" : "FAILED",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return failures == 0 ? 0 : 1;
}
