// memcg::sqlite against SQLite's own page cache (pcache1) and malloc, side by side in one run
// (docs/BENCHMARKS-sqlite.md):
//  1. overhead: point reads (a prepared SELECT by primary key) and a full scan of a warm cache,
//     1 and 2 threads (each thread its own tenant database), the two set-ups alternated in
//     rounds, medians and their ratio;
//  2. a quiet tenant's point-read latency (p50, p99) beside a noisy tenant scanning a table four
//     times the memory, at the same total memory: memcg (noisy max, quiet low), SQLite's global
//     soft heap limit, a fixed cache_size per connection; and the quiet tenant alone;
//  3. the process's RSS with 1 000 databases open under one budget, and the charges after close.
// SQLite's configuration is process-wide: each set-up installs (or not) the Engine, runs, and
// shuts SQLite down. Not a google-benchmark program: `sqlite_bench [--smoke]`.
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <malloc.h>
#include <time.h>
#include <unistd.h>
#include <vector>

#include <memcg/memcg.hpp>
#include <memcg/sqlite/connection.hpp>
#include <memcg/sqlite/engine.hpp>

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

bool g_smoke = false;
std::string g_dir;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "sqlite_bench: %s\n", what.c_str());
  std::exit(1);
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Creates `path` with `rows` rows of 200 bytes, with SQLite's defaults (no Engine installed).
void create_db(const std::string& path, int rows) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) die("create " + path);
  const std::string sql =
      "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
      "CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB);"
      "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < " +
      std::to_string(rows) + ") INSERT INTO t SELECT i, randomblob(200) FROM n";
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) die("fill " + path);
  sqlite3_close(db);
}

// One set-up's connections: plain SQLite, or through memcg::sqlite into `group`.
struct Db {
  sqlite3* handle = nullptr;
  std::optional<memcg::sqlite::Connection> conn;
  void open(const std::string& path, memcg::Group* group, const char* pragmas) {
    if (group != nullptr) {
      conn.emplace();
      std::string why;
      if (memcg::sqlite::Connection::open(path, *group, &*conn, &why) != 0) die(why);
      handle = conn->handle();
    } else if (sqlite3_open(path.c_str(), &handle) != SQLITE_OK) {
      die("open " + path);
    }
    if (sqlite3_exec(handle, pragmas, nullptr, nullptr, nullptr) != SQLITE_OK) die("pragmas");
  }
  void close() {
    if (conn) {
      if (conn->close() != SQLITE_OK) die("close");
      conn.reset();
    } else if (handle != nullptr) {
      sqlite3_close(handle);
    }
    handle = nullptr;
  }
};

int64_t scan(sqlite3* db) {
  sqlite3_stmt* stmt = nullptr;
  int64_t sum = -1;
  if (sqlite3_prepare_v2(db, "SELECT sum(length(v)) FROM t", -1, &stmt, nullptr) == SQLITE_OK &&
      sqlite3_step(stmt) == SQLITE_ROW)
    sum = sqlite3_column_int64(stmt, 0);
  sqlite3_finalize(stmt);
  return sum;
}

// `n` point reads of random keys; returns each read's nanoseconds when `lat` is given.
void point_reads(sqlite3* db, int rows, int n, uint32_t seed, std::vector<uint32_t>* lat) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT length(v) FROM t WHERE k = ?", -1, &stmt, nullptr) != SQLITE_OK)
    die("prepare");
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) {
    const auto t = lat != nullptr ? Clock::now() : Clock::time_point{};
    sqlite3_bind_int(stmt, 1, 1 + static_cast<int>(rng() % static_cast<uint32_t>(rows)));
    if (sqlite3_step(stmt) != SQLITE_ROW || sqlite3_column_int(stmt, 0) != 200) die("point read");
    sqlite3_reset(stmt);
    if (lat != nullptr)
      lat->push_back(static_cast<uint32_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count()));
  }
  sqlite3_finalize(stmt);
}

// The calling thread's CPU time: a thread that waits for a CPU on a loaded machine does not
// count the wait (what the overhead figures compare is the work).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// SQLite's configuration for one set-up: the Engine installed, or SQLite's own.
struct Setup {
  memcg::Controller* ctl;
  std::unique_ptr<memcg::sqlite::Engine> engine;
  Setup(memcg::Controller& c, bool with_memcg) : ctl(&c) {
    if (!with_memcg) return;
    std::string why;
    if (memcg::sqlite::Engine::install(c, {}, &engine, &why) != 0) die(why);
  }
  ~Setup() {
    if (engine) engine.reset();
    else sqlite3_shutdown();
  }
};

// ---- 1. overhead ------------------------------------------------------------------------------

constexpr int kBatch = 1000;

struct Overhead {
  double point_ns[2][2];  // [memcg][threads - 1]: ns per point read
  double scan_ms[2][2];   // ms per full scan
};

void run_overhead(int rows, int rounds, int reads, int scans, Overhead* out) {
  std::vector<double> point[2][2], scanv[2][2];
  for (int round = 0; round < rounds; ++round) {
    for (int m = 0; m < 2; ++m) {
      memcg::Options o;
      memcg::sqlite::add_stat_kinds(o);
      memcg::Controller ctl(o);
      std::vector<memcg::GroupRef> groups(2);
      for (int i = 0; i < 2; ++i)
        if (ctl.create("t" + std::to_string(i), &groups[i]) != 0) die("group");
      Setup setup(ctl, m == 1);
      for (int threads = 1; threads <= 2; ++threads) {
        std::vector<Db> dbs(threads);
        for (int i = 0; i < threads; ++i) {
          dbs[i].open(g_dir + "/point" + std::to_string(i) + ".db", m ? groups[i].get() : nullptr,
                      "PRAGMA cache_size = -65536");
          if (scan(dbs[i].handle) != 200LL * rows) die("warm scan");  // the cache is warm
        }
        // Batches of kBatch reads, and single scans, each timed in its thread's CPU time: the
        // median of them, so that neither waiting for a CPU nor an odd batch moves a figure.
        std::vector<std::vector<double>> batch_ns(threads), scan_ms(threads);
        std::vector<std::thread> ts;
        // memcg: each thread runs its tenant's statements in the tenant's scope, as a service
        // does, so that the heap of the statements is charged too.
        for (int i = 0; i < threads; ++i)
          ts.emplace_back([&, i] {
            std::optional<memcg::sqlite::ConnectionScope> scope;
            if (m == 1) scope.emplace(*groups[i]);
            for (int b = 0; b < reads / kBatch; ++b) {
              const double t = thread_cpu_seconds();
              point_reads(dbs[i].handle, rows, kBatch, 7 + i + 2 * b, nullptr);
              batch_ns[i].push_back((thread_cpu_seconds() - t) * 1e9 / kBatch);
            }
          });
        for (auto& th : ts) th.join();
        ts.clear();
        for (int i = 0; i < threads; ++i)
          ts.emplace_back([&, i] {
            std::optional<memcg::sqlite::ConnectionScope> scope;
            if (m == 1) scope.emplace(*groups[i]);
            for (int s = 0; s < scans; ++s) {
              const double t = thread_cpu_seconds();
              if (scan(dbs[i].handle) != 200LL * rows) die("scan");
              scan_ms[i].push_back((thread_cpu_seconds() - t) * 1e3);
            }
          });
        for (auto& th : ts) th.join();
        for (int i = 0; i < threads; ++i) {
          point[m][threads - 1].insert(point[m][threads - 1].end(), batch_ns[i].begin(),
                                       batch_ns[i].end());
          scanv[m][threads - 1].insert(scanv[m][threads - 1].end(), scan_ms[i].begin(),
                                       scan_ms[i].end());
        }
        for (auto& d : dbs) d.close();
      }
    }
  }
  for (int m = 0; m < 2; ++m)
    for (int t = 0; t < 2; ++t) {
      out->point_ns[m][t] = median(point[m][t]);
      out->scan_ms[m][t] = median(scanv[m][t]);
    }
}

// ---- 2. the quiet tenant beside a noisy one ---------------------------------------------------

struct Latency {
  double p50_us, p99_us, quiet_cache_mib;
};

enum class Mode { kAlone, kMemcg, kSoftHeapLimit, kFixedCacheSize };
const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kAlone: return "quiet tenant alone (memcg, no noisy tenant)";
    case Mode::kMemcg: return "memcg: quiet memory.low, noisy memory.max";
    case Mode::kSoftHeapLimit: return "SQLite soft heap limit (global)";
    case Mode::kFixedCacheSize: return "fixed cache_size per connection";
  }
  return "";
}

Latency run_noisy(Mode mode, uint64_t total, int quiet_rows, int reads) {
  memcg::Options o;
  memcg::sqlite::add_stat_kinds(o);
  memcg::Controller ctl(o);
  memcg::GroupRef svc, quiet, noisy;
  if (ctl.create("svc", &svc) != 0 || ctl.create("svc/quiet", &quiet) != 0 ||
      ctl.create("svc/noisy", &noisy) != 0)
    die("groups");
  const uint64_t quiet_share = total * 5 / 8;  // the quiet tenant's hot set fits in it
  const bool memcg_mode = mode == Mode::kMemcg || mode == Mode::kAlone;
  Setup setup(ctl, memcg_mode);
  std::string quiet_pragmas = "PRAGMA cache_size = -65536";
  std::string noisy_pragmas = "PRAGMA cache_size = -262144";
  if (mode == Mode::kMemcg || mode == Mode::kAlone) {
    svc->set_max(total);
    quiet->set_low(quiet_share);
  }
  if (mode == Mode::kMemcg) noisy->set_max(total - quiet_share);
  if (mode == Mode::kSoftHeapLimit) (void)sqlite3_soft_heap_limit64(static_cast<int64_t>(total));
  if (mode == Mode::kFixedCacheSize) {
    quiet_pragmas = "PRAGMA cache_size = -" + std::to_string(total / 2 / kKiB);
    noisy_pragmas = "PRAGMA cache_size = -" + std::to_string(total / 2 / kKiB);
  }
  Db q, n;
  q.open(g_dir + "/quiet.db", memcg_mode ? quiet.get() : nullptr, quiet_pragmas.c_str());
  std::atomic<bool> stop{false};
  std::thread noisy_thread;
  if (mode != Mode::kAlone) {
    n.open(g_dir + "/noisy.db", memcg_mode ? noisy.get() : nullptr, noisy_pragmas.c_str());
    if (scan(n.handle) <= 0) die("noisy scan");  // the noisy tenant holds its memory first
    noisy_thread = std::thread([&] {
      std::optional<memcg::sqlite::ConnectionScope> scope;
      if (memcg_mode) scope.emplace(*noisy);
      while (!stop.load(std::memory_order_relaxed))
        if (scan(n.handle) <= 0) die("noisy scan");
    });
  }
  std::optional<memcg::sqlite::ConnectionScope> quiet_scope;
  if (memcg_mode) quiet_scope.emplace(*quiet);
  if (scan(q.handle) != 200LL * quiet_rows) die("quiet warm");
  std::vector<uint32_t> lat;
  lat.reserve(static_cast<size_t>(reads));
  point_reads(q.handle, quiet_rows, reads, 11, &lat);
  stop = true;
  if (noisy_thread.joinable()) noisy_thread.join();
  Latency r{};
  std::sort(lat.begin(), lat.end());
  r.p50_us = lat[lat.size() / 2] / 1e3;
  r.p99_us = lat[lat.size() * 99 / 100] / 1e3;
  int cur = 0, hi = 0;
  (void)hi;
  if (setup.engine) {
    r.quiet_cache_mib = static_cast<double>(setup.engine->cache_bytes(*quiet)) / kMiB;
  } else {
    sqlite3_db_status(q.handle, SQLITE_DBSTATUS_CACHE_USED, &cur, &hi, 0);
    r.quiet_cache_mib = static_cast<double>(cur) / kMiB;
  }
  quiet_scope.reset();
  q.close();
  n.close();
  if (mode == Mode::kSoftHeapLimit) (void)sqlite3_soft_heap_limit64(0);
  return r;
}

// ---- 3. 1 000 databases under one budget --------------------------------------------------------

uint64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

struct Many {
  int dbs;
  uint64_t budget;
  int64_t rss_before, rss_open;  // the whole process's, before the Engine and with all open
  uint64_t current_open, current_closed;
};

Many run_many(int dbs, uint64_t budget) {
  memcg::Options o;
  memcg::sqlite::add_stat_kinds(o);
  memcg::Controller ctl(o);
  memcg::GroupRef svc;
  if (ctl.create("svc", &svc) != 0) die("group");
  svc->set_max(budget);
  std::vector<memcg::GroupRef> groups(static_cast<size_t>(dbs));
  for (int i = 0; i < dbs; ++i)
    if (ctl.create(*svc, "t" + std::to_string(i), &groups[static_cast<size_t>(i)]) != 0) die("g");
  Many m{dbs, budget, 0, 0, 0, 0};
  {
    Setup setup(ctl, true);
    m.rss_before = static_cast<int64_t>(rss_bytes());
    std::vector<Db> open(static_cast<size_t>(dbs));
    for (int i = 0; i < dbs; ++i) {
      open[static_cast<size_t>(i)].open(g_dir + "/many" + std::to_string(i) + ".db",
                                        groups[static_cast<size_t>(i)].get(),
                                        "PRAGMA cache_size = -65536");
      if (scan(open[static_cast<size_t>(i)].handle) <= 0) die("many scan");
    }
    ctl.drain_stocks();
    m.rss_open = static_cast<int64_t>(rss_bytes());
    m.current_open = svc->current();
    for (auto& d : open) d.close();
  }
  ctl.drain_stocks();
  m.current_closed = svc->current();
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--smoke") == 0) g_smoke = true;
    else die(std::string("unknown argument ") + argv[i] + " (usage: sqlite_bench [--smoke])");
  }
  g_dir = (std::filesystem::temp_directory_path() / "memcg-sqlite-bench-XXXXXX").string();
  if (mkdtemp(g_dir.data()) == nullptr) die("mkdtemp");
  const int point_rows = 20000;                        // about 4.4 MiB each
  const int quiet_rows = g_smoke ? 4000 : 20000;       // about 4.4 MiB: the quiet hot set
  const int noisy_rows = g_smoke ? 20000 : 150000;     // about 33 MiB: 4x the total memory
  const uint64_t total = g_smoke ? 2 * kMiB : 8 * kMiB;
  const int many = g_smoke ? 50 : 1000;
  const auto t0 = Clock::now();
  for (int i = 0; i < 2; ++i) create_db(g_dir + "/point" + std::to_string(i) + ".db", point_rows);
  create_db(g_dir + "/quiet.db", quiet_rows);
  create_db(g_dir + "/noisy.db", noisy_rows);
  for (int i = 0; i < many; ++i) create_db(g_dir + "/many" + std::to_string(i) + ".db", 40);
  sqlite3_shutdown();
  std::printf("sqlite_bench%s: data created in %.1f s (SQLite %s, %u CPUs)\n",
              g_smoke ? " --smoke" : "", seconds_since(t0), sqlite3_libversion(),
              std::thread::hardware_concurrency());

  // The 1 000 databases first, from a trimmed heap: what the process holds while they are open.
  malloc_trim(0);
  const uint64_t budget = g_smoke ? 8 * kMiB : 48 * kMiB;
  const Many m = run_many(many, budget);

  Overhead oh{};
  run_overhead(point_rows, g_smoke ? 1 : 5, g_smoke ? 2000 : 100000, g_smoke ? 2 : 20, &oh);
  std::printf("\n1. Overhead against SQLite's pcache1 and malloc (warm cache; %d rounds, the set-ups "
              "alternated; thread CPU time: medians of batches of %d reads and of single scans, per thread)\n",
              g_smoke ? 1 : 5, kBatch);
  std::printf("| workload | threads | SQLite | memcg::sqlite | ratio |\n|---|---|---|---|---|\n");
  for (int t = 0; t < 2; ++t) {
    std::printf("| point read (ns) | %d | %.0f | %.0f | %.3f |\n", t + 1, oh.point_ns[0][t],
                oh.point_ns[1][t], oh.point_ns[1][t] / oh.point_ns[0][t]);
    std::printf("| full scan, 20 000 rows (ms) | %d | %.2f | %.2f | %.3f |\n", t + 1,
                oh.scan_ms[0][t], oh.scan_ms[1][t], oh.scan_ms[1][t] / oh.scan_ms[0][t]);
  }

  std::printf("\n2. Quiet tenant's point reads beside a noisy scanning tenant, %.0f MiB in all\n",
              static_cast<double>(total) / kMiB);
  std::printf("| set-up | p50 (us) | p99 (us) | p99 / alone | quiet cache (MiB) |\n"
              "|---|---|---|---|---|\n");
  const int reads = g_smoke ? 2000 : 100000;
  Latency alone{};
  for (Mode m : {Mode::kAlone, Mode::kMemcg, Mode::kSoftHeapLimit, Mode::kFixedCacheSize}) {
    const Latency l = run_noisy(m, total, quiet_rows, reads);
    if (m == Mode::kAlone) alone = l;
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f |\n", mode_name(m), l.p50_us, l.p99_us,
                l.p99_us / alone.p99_us, l.quiet_cache_mib);
  }

  std::printf("\n3. %d databases open under one budget of %.0f MiB (run first, on a trimmed heap)\n",
              m.dbs, static_cast<double>(m.budget) / kMiB);
  std::printf("| charged while open | process RSS before | process RSS while open | growth | "
              "growth / budget | charged after close |\n|---|---|---|---|---|---|\n"
              "| %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.2f | %llu bytes |\n",
              static_cast<double>(m.current_open) / kMiB,
              static_cast<double>(m.rss_before) / kMiB, static_cast<double>(m.rss_open) / kMiB,
              static_cast<double>(m.rss_open - m.rss_before) / kMiB,
              static_cast<double>(m.rss_open - m.rss_before) / static_cast<double>(m.budget),
              static_cast<unsigned long long>(m.current_closed));
  std::filesystem::remove_all(g_dir);
  std::printf("\ntotal %.1f s\n", seconds_since(t0));
  if (m.current_closed != 0) die("charges left after every connection closed");
  return 0;
}
