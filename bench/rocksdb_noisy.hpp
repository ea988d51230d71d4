// The noisy-neighbour benchmark's pieces shared between its source files (rocksdb_noisy_bench.cpp
// says what it measures): the configuration, the data and RocksDB's options
// (rocksdb_noisy_db.cpp), the service in four variants (rocksdb_noisy_services.cpp), and a
// child's run of the cases (rocksdb_noisy_child.cpp).
#pragma once

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/statistics.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <thread>

namespace noisy {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = 1 << 20;
constexpr std::size_t kValue = 200;
constexpr int kScanLength = 256;

struct Config {
  int rounds = 3;
  double phase_s = 3.0;
  double settle_s = 1.0;  // noise running before the first measured phase beside it
  int quiet_keys = 50'000;
  int noisy_keys = 600'000;
  uint64_t budget = 96 * kMiB;
  uint64_t quiet_min = 16 * kMiB;
  uint64_t writer_max = 48 * kMiB;
  uint64_t burst = 64 * kMiB;
  int paced_rate = 2'000;   // quiet's reads per second when paced
  int writer_rate = 40'000; // the writer's puts per second
  std::string variants = "byte,arena,r1,r2";
  bool smoke = false;
  std::string dir;    // the data sets (children)
  std::string child;  // the variant a child runs
  std::string build;  // --build=DIR: write the data sets there and exit
  bool hot_only = false;
  int64_t arena_decay_ms = -2;  // arena mode: the arenas' dirty_decay_ms (-2: kArenaOptions')  // a child: open, warm, the hot reads alone, teardown (for profiles)
  int round = 0;
};

inline std::string key(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "key%09d", i);
  return buf;
}

inline std::string value(int i) {
  std::string v(kValue, 'a');
  uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
  for (auto& c : v) x = x * 6364136223846793005ull + 1, c = static_cast<char>('a' + (x >> 59));
  return v;
}

inline double mib(double b) { return b / static_cast<double>(kMiB); }

uint64_t rss_bytes();
[[noreturn]] void die(const std::string& what);
void check(const ::rocksdb::Status& s, const std::string& what);
::rocksdb::BlockBasedTableOptions table_options();
::rocksdb::Options db_options();
void with_cache(::rocksdb::Options& o, std::shared_ptr<::rocksdb::Cache> cache);
std::unique_ptr<::rocksdb::DB> open_db(const ::rocksdb::Options& o, const std::string& path);
std::shared_ptr<::rocksdb::Cache> strict_cache(uint64_t bytes);
// Writes a data set of `keys` keys at `path` (flushed and compacted).
void build(const std::string& path, int keys);

// ---- the service, four ways -------------------------------------------------------------------

enum Role { kQuiet = 0, kNoisy = 1, kWriter = 2 };

using Results = std::map<std::string, double>;

struct BurstResult {
  int refused = -1;            // Tenant::write(): 1 refused (MemoryLimit), 0 written; -1 none
  std::string admitted_status;
  std::string direct_status;   // DB::Write
  double peak_before_mib = 0;  // what the writer's limit had seen before the batch
  double peak_mib = 0;         // ... and at its peak with the batch
  double forced_mib = -1;      // charged past the limit and counted (-1: nothing counts it)
  double memtable_mib = 0;     // the writer's memtables after the write (WriteBufferManager)
  double rss_rise_mib = 0;
};

inline ::rocksdb::WriteOptions no_wal() {
  ::rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  return wo;
}

class Service {
 public:
  virtual ~Service() = default;
  // Opens the three databases (set-up done by the constructor).
  virtual void open(const Config& c) = 0;
  ::rocksdb::DB& db(Role r) { return *dbs_[r]; }
  ::rocksdb::Statistics& quiet_stats() { return *stats_; }
  // A thread's binding to a tenant for the scope (arena mode), null elsewhere.
  virtual std::shared_ptr<void> bind(Role) { return nullptr; }
  // The bytes the variant's limits count now.
  virtual uint64_t counted() = 0;
  // The budget halved at run time, and back to the whole of it.
  virtual void halve() = 0;
  virtual void restore() = 0;
  // The writer's batch: through the tenant's admission where there is one.
  virtual ::rocksdb::Status write(::rocksdb::WriteBatch* b) {
    return dbs_[kWriter]->Write(no_wal(), b);
  }
  // Closes the noisy tenant (its database and whatever the variant keeps for it); what it still
  // holds afterwards as the variant counts it (-1: nothing counts it per tenant).
  virtual void close_noisy() = 0;
  virtual double noisy_left() = 0;
  // The burst: Tenant::write() where there is one, then DB::Write on a writer thread.
  virtual BurstResult burst(::rocksdb::WriteBatch& batch) = 0;
  // Closes everything; bytes still charged to the groups (-1: no groups).
  virtual int64_t teardown() = 0;
  // The variant's own counters so far, named `prefix`...
  virtual void counters(Results&, const std::string&) {}

 protected:
  void open_all(const Config& c, ::rocksdb::Options q, const ::rocksdb::Options& n,
                const ::rocksdb::Options& w) {
    stats_ = ::rocksdb::CreateDBStatistics();
    q.statistics = stats_;
    dbs_[kQuiet] = open_db(q, c.dir + "/quiet");
    dbs_[kNoisy] = open_db(n, c.dir + "/noisy");
    writer_path_ = c.dir + "/writer-" + c.child + "-" + std::to_string(c.round);
    std::error_code ec;
    std::filesystem::remove_all(writer_path_, ec);
    dbs_[kWriter] = open_db(w, writer_path_);
  }
  void remove_writer_dir() {
    std::error_code ec;
    std::filesystem::remove_all(writer_path_, ec);
  }
  // DB::Write of `batch` on a thread of its own (bound as the writer), RSS and `sample` (the
  // variant's count of the writer) sampled every 2 ms meanwhile.
  template <class Sample>
  ::rocksdb::Status write_sampled(::rocksdb::WriteBatch& batch, BurstResult& r, Sample sample,
                                  uint64_t& sample_max) {
    const uint64_t rss0 = rss_bytes();
    uint64_t rss_max = rss0;
    sample_max = sample();
    std::atomic<bool> done{false};
    ::rocksdb::Status s;
    std::thread t([&] {
      std::shared_ptr<void> bound = bind(kWriter);
      s = dbs_[kWriter]->Write(no_wal(), &batch);
      done.store(true);
    });
    while (!done.load()) {
      rss_max = std::max(rss_max, rss_bytes());
      sample_max = std::max(sample_max, sample());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    t.join();
    rss_max = std::max(rss_max, rss_bytes());
    sample_max = std::max(sample_max, sample());
    r.rss_rise_mib = mib(static_cast<double>(rss_max - rss0));
    r.direct_status = s.ToString();
    return s;
  }

  std::unique_ptr<::rocksdb::DB> dbs_[3];
  std::shared_ptr<::rocksdb::Statistics> stats_;
  std::string writer_path_;
};

// The variant c.child names (byte, arena, r1, r2).
std::unique_ptr<Service> make_service(const Config& c);
// A child: one variant, every case once; "R name value" and "S name text" lines on stdout.
int run_child(Config c);

}  // namespace noisy
