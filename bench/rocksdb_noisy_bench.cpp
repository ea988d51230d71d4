// The noisy-neighbour benchmark of memcg::rocksdb (docs/BENCHMARKS-rocksdb.md, "Noisy neighbour").
//
// One service of three tenants under one budget (96 MiB by default):
//   quiet   point reads over its own data set (about 11 MiB of blocks), memory.min 16 MiB;
//           paced (a fixed rate, every Get timed) or hot (one thread, as fast as it can)
//   noisy   range scans (iterators of 256 keys from random keys) over a data set of about
//           135 MiB, much larger than the budget
//   writer  puts at 40 000/s (a batch of 40 every millisecond), limited to 48 MiB
// in four variants, each run in a child process of its own (a fresh heap and a clean RSS), and
// alternated: byte arena R1 R2, byte arena R1 R2, ...
//   byte    memcg::rocksdb::Tenant per tenant group, the groups under a parent at the budget
//   arena   the same in arena mode (memcg::rocksdb_arena: a jemalloc arena per tenant, every
//           thread that calls a tenant's RocksDB bound to it); where it is built
//   R1      RocksDB's own: one LRUCache of the budget with strict_capacity_limit, shared by the
//           three databases, and a WriteBufferManager per tenant charging it
//   R2      RocksDB's own: fixed strict LRU caches per tenant (quiet 16 MiB, writer 12 MiB and a
//           12 MiB WriteBufferManager, noisy the rest)
// Each child runs the cases in order: quiet alone (paced, hot); quiet beside the noisy scanner and
// the writer (paced, hot); the budget halved at run time (paced, the noise going on); the noisy
// tenant closed and a 64 MiB WriteBatch from the writer (both on the whole budget again);
// teardown. The parent prints the median over rounds of each figure per variant, and the
// per-round ratios of the hot reads. Latencies are each Get's own (a paced reader's wake-up is
// not in them). RSS is the child's growth from just before its databases open. jemalloc is the
// whole program's malloc where arena mode is built (linking memcg::jemalloc makes it so), for
// every variant alike.
//
//   rocksdb_noisy_bench [--rounds=3] [--phase=3] [--quiet-keys=50000] [--noisy-keys=600000]
//                       [--budget-mib=96] [--variants=byte,arena,r1,r2] [--smoke]
// A profile of one variant's hot reads (docs/BENCHMARKS-rocksdb.md): --build=DIR writes the data
// sets, then --child=byte|arena|r1|r2 --dir=DIR --hot-only runs that variant's hot reads alone.
// --smoke: small data, short phases, one round; exits non-zero unless every variant completed,
// the quiet tenant's reads all succeeded in byte and arena mode, their groups went back to 0,
// and the 64 MiB batch was refused by Tenant::write() and counted when written with DB::Write.
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/statistics.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <rocksdb/write_buffer_manager.h>
#include <stdlib.h>  // mkdtemp
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "memcg/memcg.hpp"
#include "memcg/rocksdb/tenant.hpp"
#ifdef MEMCG_NOISY_ARENA
#include "memcg/rocksdb/arena.hpp"
#endif

namespace {

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

std::string key(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "key%09d", i);
  return buf;
}

std::string value(int i) {
  std::string v(kValue, 'a');
  uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
  for (auto& c : v) x = x * 6364136223846793005ull + 1, c = static_cast<char>('a' + (x >> 59));
  return v;
}

double mib(double b) { return b / static_cast<double>(kMiB); }

uint64_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "rocksdb_noisy_bench: %s\n", what.c_str());
  std::exit(2);
}

void check(const ::rocksdb::Status& s, const std::string& what) {
  if (!s.ok()) die(what + ": " + s.ToString());
}

::rocksdb::BlockBasedTableOptions table_options() {
  ::rocksdb::BlockBasedTableOptions t;
  t.block_size = 4096;
  t.cache_index_and_filter_blocks = true;
  t.filter_policy.reset(::rocksdb::NewBloomFilterPolicy(10));
  return t;
}

::rocksdb::Options db_options() {
  ::rocksdb::Options o;
  o.create_if_missing = true;
  o.compression = ::rocksdb::kNoCompression;
  o.write_buffer_size = 4 * kMiB;
  return o;
}

void with_cache(::rocksdb::Options& o, std::shared_ptr<::rocksdb::Cache> cache) {
  ::rocksdb::BlockBasedTableOptions t = table_options();
  t.block_cache = std::move(cache);
  o.table_factory.reset(::rocksdb::NewBlockBasedTableFactory(t));
}

std::unique_ptr<::rocksdb::DB> open_db(const ::rocksdb::Options& o, const std::string& path) {
  ::rocksdb::DB* db = nullptr;
  check(::rocksdb::DB::Open(o, path, &db), "open " + path);
  return std::unique_ptr<::rocksdb::DB>(db);
}

std::shared_ptr<::rocksdb::Cache> strict_cache(uint64_t bytes) {
  ::rocksdb::LRUCacheOptions lru;
  lru.capacity = bytes;
  lru.strict_capacity_limit = true;
  return ::rocksdb::NewLRUCache(lru);
}

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

::rocksdb::WriteOptions no_wal() {
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

// byte and arena mode: a parent group at the budget, a group and a Tenant per tenant.
class MemcgService final : public Service {
 public:
  MemcgService(const Config& c, bool arena) : arena_mode_(arena) {
    const char* names[3] = {"svc/quiet", "svc/noisy", "svc/writer"};
    if (ctl_.create("svc", &svc_) != 0) die("create svc");
    for (int r = 0; r < 3; ++r)
      if (ctl_.create(names[r], &groups_[r]) != 0) die(std::string("create ") + names[r]);
    svc_->set_max(c.budget);
    groups_[kQuiet]->set_min(c.quiet_min);
    groups_[kWriter]->set_max(c.writer_max);
    for (int r = 0; r < 3; ++r) {
      memcg::rocksdb::TenantOptions to;
#ifdef MEMCG_NOISY_ARENA
      if (arena_mode_) {
        memcg::jemalloc::ArenaOptions ao = memcg::rocksdb::kArenaOptions;
        if (c.arena_decay_ms >= -1) ao.dirty_decay_ms = c.arena_decay_ms;
        if (memcg::jemalloc::Arena::create(*groups_[r], &arenas_[r], ao) != 0)
          die("Arena::create");
        to = memcg::rocksdb::arena_options(*arenas_[r], to);
      }
#endif
      tenants_[r] = std::make_unique<memcg::rocksdb::Tenant>(*groups_[r], to);
    }
  }
  ~MemcgService() override { teardown(); }

  void open(const Config& c) override {
    ::rocksdb::Options o[3];
    for (int r = 0; r < 3; ++r) {
      o[r] = db_options();
      check(tenants_[r]->configure(o[r], table_options()), "Tenant::configure");
    }
    open_all(c, o[kQuiet], o[kNoisy], o[kWriter]);
    for (int r = 0; r < 3; ++r) tenants_[r]->add(dbs_[r].get());
  }

  std::shared_ptr<void> bind(Role r) override {
#ifdef MEMCG_NOISY_ARENA
    if (arena_mode_) {
      auto b = std::make_shared<memcg::rocksdb::ScopedTenantThread>(*arenas_[r], *dbs_[r]);
      if (!b->ok()) die("ScopedTenantThread");
      return b;
    }
#endif
    static_cast<void>(r);
    return nullptr;
  }
  uint64_t counted() override { return svc_->current(); }
  void halve() override { svc_->set_max(svc_->max() / 2); }
  void restore() override { svc_->set_max(svc_->max() * 2); }
  // Each tenant's cache: capacity (RocksDB's terms), and the governor's moves of it.
  void counters(Results& out, const std::string& prefix) override {
    const char* names[3] = {"quiet", "noisy", "writer"};
    for (int r = 0; r < 3; ++r) {
      if (!tenants_[r]) continue;
      const std::string p = prefix + names[r] + "_";
      memcg::rocksdb::BlockCache& bc = tenants_[r]->cache();
      const memcg::CacheGovernor::Stats gs = bc.governor().stats();
      out[p + "capacity_mib"] = mib(static_cast<double>(bc.cache()->GetCapacity()));
      out[p + "reclaims"] = static_cast<double>(gs.reclaims);
      out[p + "lowered"] = static_cast<double>(gs.lowered);
      out[p + "raised"] = static_cast<double>(gs.raised);
      out[p + "deferred"] = static_cast<double>(bc.deferred());
      // The governor's own figures, in the group's bytes (the capacity above is RocksDB's).
      out[p + "gov_capacity_mib"] = mib(static_cast<double>(bc.governor().capacity()));
      out[p + "gov_target_mib"] = mib(static_cast<double>(bc.governor().target()));
      out[p + "group_mib"] = mib(static_cast<double>(groups_[r]->current()));
      out[p + "cache_usage_mib"] = mib(static_cast<double>(bc.cache()->GetUsage()));
      out[p + "blocks_mib"] = mib(static_cast<double>(bc.allocator().live_bytes()));
      out[p + "blocks"] = static_cast<double>(bc.allocator().live_blocks());
#ifdef MEMCG_NOISY_ARENA
      if (arena_mode_) {
        const memcg::jemalloc::ArenaStats as = arenas_[r]->stats();
        out[p + "arena_active_mib"] = mib(static_cast<double>(as.active));
        out[p + "arena_dirty_mib"] = mib(static_cast<double>(as.dirty));
        out[p + "arena_metadata_mib"] = mib(static_cast<double>(as.metadata));
      }
#endif
    }
  }
  ::rocksdb::Status write(::rocksdb::WriteBatch* b) override {
    return tenants_[kWriter]->write(dbs_[kWriter].get(), no_wal(), b);
  }
  void close_noisy() override { close(kNoisy); }
  double noisy_left() override { return mib(static_cast<double>(groups_[kNoisy]->current())); }

  BurstResult burst(::rocksdb::WriteBatch& batch) override {
    BurstResult r;
    memcg::Group& w = *groups_[kWriter];
    memcg::rocksdb::Tenant& t = *tenants_[kWriter];
    const ::rocksdb::Status a = t.write(dbs_[kWriter].get(), no_wal(), &batch);
    r.refused = a.IsMemoryLimit() ? 1 : a.ok() ? 0 : 2;
    r.admitted_status = a.ToString();
    r.peak_before_mib = mib(static_cast<double>(w.peak()));
    const uint64_t forced0 = forced();
    uint64_t seen = 0;
    write_sampled(batch, r, [&] { return w.current(); }, seen);
    r.peak_mib = mib(static_cast<double>(std::max(seen, w.peak())));
    r.forced_mib = mib(static_cast<double>(forced() - forced0));
    r.memtable_mib = mib(static_cast<double>(t.write_buffers().manager()->memory_usage()));
    return r;
  }

  int64_t teardown() override {
    if (torn_down_) return left_;
    for (Role r : {kQuiet, kNoisy, kWriter}) close(r);
    ctl_.drain_stocks();
    // Arena mode: a released arena whose pages other threads' caches still held is collected
    // within 100 ms; wait up to 2 s for it.
    for (int i = 0; i < 200 && svc_->current() != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ctl_.drain_stocks();
    }
    left_ = static_cast<int64_t>(svc_->current());
    remove_writer_dir();
    torn_down_ = true;
    return left_;
  }

 private:
  uint64_t forced() const {
#ifdef MEMCG_NOISY_ARENA
    if (arena_mode_) return arenas_[kWriter]->stats().forced;
#endif
    return tenants_[kWriter]->write_buffers().mirror().forced_bytes();
  }
  // The documented order: remove and close the database, destroy the Tenant (on this thread,
  // which closed the database), then the arena.
  void close(Role r) {
    if (tenants_[r] && dbs_[r]) tenants_[r]->remove(dbs_[r].get());
    dbs_[r].reset();
    tenants_[r].reset();
#ifdef MEMCG_NOISY_ARENA
    arenas_[r].reset();
#endif
    ctl_.drain_stocks();
  }

  const bool arena_mode_;
  memcg::Controller ctl_;
  memcg::GroupRef svc_, groups_[3];
#ifdef MEMCG_NOISY_ARENA
  std::unique_ptr<memcg::jemalloc::Arena> arenas_[3];
#endif
  std::unique_ptr<memcg::rocksdb::Tenant> tenants_[3];
  bool torn_down_ = false;
  int64_t left_ = 0;
};

// R1: one strict LRU cache of the budget, shared; a WriteBufferManager per tenant charging it.
class SharedCacheService final : public Service {
 public:
  explicit SharedCacheService(const Config& c) : cache_(strict_cache(c.budget)) {
    for (int r = 0; r < 3; ++r)
      wbm_[r] = std::make_shared<::rocksdb::WriteBufferManager>(
          r == kWriter ? c.writer_max / 4 : c.budget / 8, cache_, true);
  }
  ~SharedCacheService() override { teardown(); }
  void open(const Config& c) override {
    ::rocksdb::Options o[3];
    for (int r = 0; r < 3; ++r) {
      o[r] = db_options();
      with_cache(o[r], cache_);
      o[r].write_buffer_manager = wbm_[r];
    }
    open_all(c, o[kQuiet], o[kNoisy], o[kWriter]);
  }
  uint64_t counted() override { return cache_->GetUsage(); }
  void halve() override {
    cache_->SetCapacity(cache_->GetCapacity() / 2);
    wbm_[kWriter]->SetBufferSize(wbm_[kWriter]->buffer_size() / 2);
  }
  void restore() override {
    cache_->SetCapacity(cache_->GetCapacity() * 2);
    wbm_[kWriter]->SetBufferSize(wbm_[kWriter]->buffer_size() * 2);
  }
  void close_noisy() override {
    dbs_[kNoisy].reset();
    wbm_[kNoisy].reset();
  }
  double noisy_left() override { return -1; }
  BurstResult burst(::rocksdb::WriteBatch& batch) override {
    BurstResult r;
    r.peak_before_mib = mib(static_cast<double>(cache_->GetUsage()));
    uint64_t seen = 0;
    write_sampled(batch, r, [&] { return static_cast<uint64_t>(cache_->GetUsage()); }, seen);
    r.peak_mib = mib(static_cast<double>(seen));
    const double over = static_cast<double>(seen) - static_cast<double>(cache_->GetCapacity());
    r.forced_mib = over > 0 ? mib(over) : 0;
    r.memtable_mib = mib(static_cast<double>(wbm_[kWriter]->memory_usage()));
    return r;
  }
  int64_t teardown() override {
    for (auto& d : dbs_) d.reset();
    remove_writer_dir();
    return -1;
  }

 private:
  std::shared_ptr<::rocksdb::Cache> cache_;
  std::shared_ptr<::rocksdb::WriteBufferManager> wbm_[3];
};

// R2: fixed strict caches per tenant, the writer's memtables held by a WriteBufferManager.
class FixedCacheService final : public Service {
 public:
  explicit FixedCacheService(const Config& c) {
    const uint64_t writer_cache = c.writer_max / 4, writer_buffer = c.writer_max / 4;
    caches_[kQuiet] = strict_cache(c.quiet_min);
    caches_[kWriter] = strict_cache(writer_cache);
    caches_[kNoisy] = strict_cache(c.budget - c.quiet_min - writer_cache - writer_buffer);
    wbm_ = std::make_shared<::rocksdb::WriteBufferManager>(writer_buffer, nullptr, true);
  }
  ~FixedCacheService() override { teardown(); }
  void open(const Config& c) override {
    ::rocksdb::Options o[3];
    for (int r = 0; r < 3; ++r) {
      o[r] = db_options();
      with_cache(o[r], caches_[r]);
    }
    o[kWriter].write_buffer_manager = wbm_;
    open_all(c, o[kQuiet], o[kNoisy], o[kWriter]);
  }
  uint64_t counted() override {
    uint64_t n = wbm_->memory_usage();
    for (auto& c : caches_)
      if (c) n += c->GetUsage();
    return n;
  }
  void halve() override {
    for (auto& c : caches_)
      if (c) c->SetCapacity(c->GetCapacity() / 2);
    wbm_->SetBufferSize(wbm_->buffer_size() / 2);
  }
  void restore() override {
    for (auto& c : caches_)
      if (c) c->SetCapacity(c->GetCapacity() * 2);
    wbm_->SetBufferSize(wbm_->buffer_size() * 2);
  }
  void close_noisy() override {
    dbs_[kNoisy].reset();
    caches_[kNoisy].reset();
  }
  double noisy_left() override { return caches_[kNoisy] ? -1 : 0; }
  BurstResult burst(::rocksdb::WriteBatch& batch) override {
    BurstResult r;
    r.peak_before_mib = mib(static_cast<double>(wbm_->memory_usage()));
    uint64_t seen = 0;
    write_sampled(batch, r, [&] { return static_cast<uint64_t>(wbm_->memory_usage()); }, seen);
    r.peak_mib = mib(static_cast<double>(seen));
    r.memtable_mib = mib(static_cast<double>(wbm_->memory_usage()));
    return r;
  }
  int64_t teardown() override {
    for (auto& d : dbs_) d.reset();
    remove_writer_dir();
    return -1;
  }

 private:
  std::shared_ptr<::rocksdb::Cache> caches_[3];
  std::shared_ptr<::rocksdb::WriteBufferManager> wbm_;
};

// ---- the cases ---------------------------------------------------------------------------------

struct Reads {
  std::vector<uint32_t> ns;  // each Get's latency
  uint64_t failed = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // the reading thread's own CPU time (preemption left out)
};

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The quiet tenant's point reads for `seconds`, on a thread bound as quiet: paced at
// c.paced_rate (a missed slot is not made up), or hot. A failed read: an error, a missing key or
// a wrong value.
//
// The latencies' buffer is reserved before the thread is bound: in arena mode, memory allocated on
// a bound thread is the tenant's (a hot phase's 4 MiB of latencies, and the same again as freed
// pages after it, were charged to quiet and spent its memory.min). It holds a read per
// microsecond of the phase (a hot Get takes about 4); a phase that fills it ends there.
Reads quiet_reads(Service& s, const Config& c, bool paced, double seconds, uint64_t seed) {
  Reads out;
  const std::size_t capacity = paced ? static_cast<std::size_t>(seconds * c.paced_rate) + 16
                                     : static_cast<std::size_t>(seconds * 1e6) + 16;
  out.ns.reserve(capacity);
  std::shared_ptr<void> bound = s.bind(kQuiet);
  ::rocksdb::DB& db = s.db(kQuiet);
  std::mt19937_64 rng(seed);
  std::string v;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(seconds));
  const auto interval = std::chrono::nanoseconds(1'000'000'000 / c.paced_rate);
  auto next = start;
  const double cpu0 = thread_cpu_seconds();
  while (out.ns.size() < capacity) {
    if (paced) {
      next += interval;
      const auto now = Clock::now();
      if (next < now) next = now;
      std::this_thread::sleep_until(next);
    }
    const auto t0 = Clock::now();
    if (t0 >= end) break;
    const int k = static_cast<int>(rng() % static_cast<uint64_t>(c.quiet_keys));
    const ::rocksdb::Status st = db.Get(::rocksdb::ReadOptions(), key(k), &v);
    const auto t1 = Clock::now();
    if (!st.ok() || v != value(k)) ++out.failed;
    out.ns.push_back(static_cast<uint32_t>(
        std::min<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count(),
                          UINT32_MAX)));
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  out.cpu_seconds = thread_cpu_seconds() - cpu0;
  return out;
}

// The noisy scanner and the writer, from start() to stop().
struct Noise {
  std::atomic<bool> stop_flag{false};
  std::atomic<uint64_t> scanned{0}, scan_errors{0}, puts{0}, put_failed{0};
  std::thread scanner, writer;

  void start(Service& s, const Config& c) {
    scanner = std::thread([this, &s, &c] {
      std::shared_ptr<void> bound = s.bind(kNoisy);
      std::mt19937_64 rng(99);
      while (!stop_flag.load(std::memory_order_relaxed)) {
        std::unique_ptr<::rocksdb::Iterator> it(s.db(kNoisy).NewIterator(::rocksdb::ReadOptions()));
        it->Seek(key(static_cast<int>(rng() % static_cast<uint64_t>(c.noisy_keys))));
        int n = 0;
        for (; n < kScanLength && it->Valid(); ++n) it->Next();
        if (!it->status().ok()) scan_errors.fetch_add(1, std::memory_order_relaxed);
        scanned.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      }
    });
    writer = std::thread([this, &s, &c] {
      std::shared_ptr<void> bound = s.bind(kWriter);
      const int per_ms = std::max(1, c.writer_rate / 1000);
      auto next = Clock::now();
      int i = 0;
      while (!stop_flag.load(std::memory_order_relaxed)) {
        next += std::chrono::milliseconds(1);
        const auto now = Clock::now();
        if (next + std::chrono::milliseconds(100) < now) next = now;  // far behind: no catch-up
        std::this_thread::sleep_until(next);
        ::rocksdb::WriteBatch b;
        for (int j = 0; j < per_ms; ++j, ++i) b.Put(key(i), value(i));
        if (s.write(&b).ok())
          puts.fetch_add(static_cast<uint64_t>(per_ms), std::memory_order_relaxed);
        else
          put_failed.fetch_add(static_cast<uint64_t>(per_ms), std::memory_order_relaxed);
      }
    });
  }
  void stop() {
    stop_flag = true;
    if (scanner.joinable()) scanner.join();
    if (writer.joinable()) writer.join();
  }
  ~Noise() { stop(); }
};

double percentile(std::vector<uint32_t>& v, double q) {
  if (v.empty()) return 0;
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(q * v.size()));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

// One measured phase: quiet's reads on their thread, RSS and the variant's count sampled every
// 5 ms on this one. fit_under != 0: also the time until the count is at or under it.
void phase(Service& s, const Config& c, const std::string& name, bool paced, double seconds,
           uint64_t rss0, Results& out, uint64_t fit_under = 0) {
  const uint64_t hit0 = s.quiet_stats().getTickerCount(::rocksdb::BLOCK_CACHE_HIT);
  const uint64_t miss0 = s.quiet_stats().getTickerCount(::rocksdb::BLOCK_CACHE_MISS);
  std::atomic<bool> done{false};
  Reads reads;
  const auto start = Clock::now();
  std::thread t([&] {
    reads = quiet_reads(s, c, paced, seconds, std::hash<std::string>()(name) + c.round);
    done.store(true);
  });
  uint64_t rss_max = 0, counted_max = 0;
  double gap_sum = 0;
  int samples = 0;
  double fit_ms = -1;
  while (!done.load()) {
    const uint64_t now_rss = rss_bytes();
    const uint64_t rss = now_rss - std::min(now_rss, rss0);
    const uint64_t counted = s.counted();
    rss_max = std::max(rss_max, rss);
    counted_max = std::max(counted_max, counted);
    gap_sum += static_cast<double>(rss) - static_cast<double>(counted);
    ++samples;
    if (fit_under != 0 && fit_ms < 0 && counted <= fit_under)
      fit_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  t.join();
  const uint64_t hits = s.quiet_stats().getTickerCount(::rocksdb::BLOCK_CACHE_HIT) - hit0;
  const uint64_t misses = s.quiet_stats().getTickerCount(::rocksdb::BLOCK_CACHE_MISS) - miss0;
  const std::string p = name + "_";
  out[p + "reads"] = static_cast<double>(reads.ns.size());
  out[p + "reads_s"] = static_cast<double>(reads.ns.size()) / reads.seconds;
  out[p + "reads_cpu_s"] =
      reads.cpu_seconds > 0 ? static_cast<double>(reads.ns.size()) / reads.cpu_seconds : 0;
  out[p + "failed"] = static_cast<double>(reads.failed);
  out[p + "p50_us"] = percentile(reads.ns, 0.50) / 1000;
  out[p + "p99_us"] = percentile(reads.ns, 0.99) / 1000;
  out[p + "p999_us"] = percentile(reads.ns, 0.999) / 1000;
  out[p + "hit"] = hits + misses ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0;
  out[p + "rss_mib"] = mib(static_cast<double>(rss_max));
  out[p + "counted_mib"] = mib(static_cast<double>(counted_max));
  out[p + "gap_mib"] = samples ? mib(gap_sum / samples) : 0;
  const uint64_t end_rss = rss_bytes();
  out[p + "rss_end_mib"] = mib(static_cast<double>(end_rss - std::min(end_rss, rss0)));
  out[p + "counted_end_mib"] = mib(static_cast<double>(s.counted()));
  if (fit_under != 0) out[p + "fit_ms"] = fit_ms;
}

std::unique_ptr<Service> make_service(const Config& c) {
  if (c.child == "byte") return std::make_unique<MemcgService>(c, false);
#ifdef MEMCG_NOISY_ARENA
  if (c.child == "arena") return std::make_unique<MemcgService>(c, true);
#endif
  if (c.child == "r1") return std::make_unique<SharedCacheService>(c);
  if (c.child == "r2") return std::make_unique<FixedCacheService>(c);
  die("unknown variant " + c.child);
}

// A child: one variant, every case once; "R name value" and "S name text" lines on stdout.
int run_child(Config c) {
  Results out;
  std::map<std::string, std::string> text;
  std::unique_ptr<Service> s = make_service(c);
  const uint64_t rss0 = rss_bytes();
  s->open(c);
  {  // warm the quiet tenant's cache: every key once
    std::thread t([&] {
      std::shared_ptr<void> bound = s->bind(kQuiet);
      std::string v;
      for (int i = 0; i < c.quiet_keys; ++i) s->db(kQuiet).Get(::rocksdb::ReadOptions(), key(i), &v);
    });
    t.join();
  }
  if (!c.hot_only) phase(*s, c, "alone_paced", true, c.phase_s, rss0, out);
  phase(*s, c, "alone_hot", false, c.phase_s, rss0, out);
  if (c.hot_only) {
    out["teardown_left_bytes"] = static_cast<double>(s->teardown());
    for (const auto& [k, v] : out) std::printf("R %s %.6g\n", k.c_str(), v);
    return 0;
  }
  {
    Noise noise;
    noise.start(*s, c);
    std::this_thread::sleep_for(std::chrono::duration<double>(c.settle_s));
    const uint64_t scanned0 = noise.scanned, puts0 = noise.puts;
    const auto t0 = Clock::now();
    phase(*s, c, "noisy_paced", true, c.phase_s, rss0, out);
    phase(*s, c, "noisy_hot", false, c.phase_s, rss0, out);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    out["noise_scan_keys_s"] = static_cast<double>(noise.scanned - scanned0) / secs;
    out["noise_puts_s"] = static_cast<double>(noise.puts - puts0) / secs;
    const uint64_t errors0 = noise.scan_errors + noise.put_failed;
    s->counters(out, "noisy_end_");
    out["noise_errors"] = static_cast<double>(errors0);
    // Budget halved at run time, the noise going on.
    s->halve();
    phase(*s, c, "halved", true, c.phase_s, rss0, out, c.budget / 2);
    out["halved_noise_failed"] =
        static_cast<double>(noise.scan_errors + noise.put_failed - errors0);
    noise.stop();
    s->restore();  // the next cases on the whole budget
  }
  {  // the noisy tenant closed
    const uint64_t before = s->counted();
    const uint64_t rss_before = rss_bytes();
    const auto t0 = Clock::now();
    s->close_noisy();
    out["close_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    out["close_freed_mib"] = mib(static_cast<double>(before) - static_cast<double>(s->counted()));
    out["close_noisy_left_mib"] = s->noisy_left();
    out["close_rss_drop_mib"] = mib(static_cast<double>(rss_before) - static_cast<double>(rss_bytes()));
    std::this_thread::sleep_for(std::chrono::seconds(1));
    out["close_rss_drop_1s_mib"] =
        mib(static_cast<double>(rss_before) - static_cast<double>(rss_bytes()));
  }
  {  // the burst: one batch of c.burst bytes in 64 KiB values
    ::rocksdb::WriteBatch batch;
    const std::string v(64 << 10, 'b');
    for (uint64_t i = 0; i < c.burst / (64 << 10); ++i) batch.Put("burst" + key(static_cast<int>(i)), v);
    const BurstResult b = s->burst(batch);
    out["burst_refused"] = b.refused;
    out["burst_direct_ok"] = b.direct_status == "OK" ? 1 : 0;
    out["burst_peak_before_mib"] = b.peak_before_mib;
    out["burst_peak_mib"] = b.peak_mib;
    out["burst_forced_mib"] = b.forced_mib;
    out["burst_memtable_mib"] = b.memtable_mib;
    out["burst_rss_rise_mib"] = b.rss_rise_mib;
    text["burst_admitted"] = b.refused < 0 ? "(no admission)" : b.admitted_status;
    text["burst_direct"] = b.direct_status;
  }
  out["teardown_left_bytes"] = static_cast<double>(s->teardown());
  s.reset();
  for (const auto& [k, v] : out) std::printf("R %s %.6g\n", k.c_str(), v);
  for (const auto& [k, v] : text) std::printf("S %s %s\n", k.c_str(), v.c_str());
  std::fflush(stdout);
  return 0;
}

// ---- the parent --------------------------------------------------------------------------------

void build(const std::string& path, int keys) {
  ::rocksdb::Options o = db_options();
  with_cache(o, ::rocksdb::NewLRUCache(8 * kMiB));
  auto db = open_db(o, path);
  for (int i = 0; i < keys;) {
    ::rocksdb::WriteBatch b;
    for (int j = 0; j < 1000 && i < keys; ++j, ++i) b.Put(key(i), value(i));
    check(db->Write(no_wal(), &b), "build " + path);
  }
  check(db->Flush(::rocksdb::FlushOptions()), "flush");
  check(db->CompactRange(::rocksdb::CompactRangeOptions(), nullptr, nullptr), "compact");
}

struct Run {
  int status = -1;
  Results r;
  std::map<std::string, std::string> s;
};

Run spawn(const std::string& exe, const Config& c, const std::string& variant, int round) {
  std::vector<std::string> args = {exe,
                                   "--child=" + variant,
                                   "--dir=" + c.dir,
                                   "--round=" + std::to_string(round),
                                   "--phase=" + std::to_string(c.phase_s),
                                   "--settle=" + std::to_string(c.settle_s),
                                   "--quiet-keys=" + std::to_string(c.quiet_keys),
                                   "--noisy-keys=" + std::to_string(c.noisy_keys),
                                   "--budget-mib=" + std::to_string(c.budget / kMiB),
                                   "--arena-decay-ms=" + std::to_string(c.arena_decay_ms)};
  int fds[2];
  if (pipe(fds) != 0) die("pipe");
  const pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  Run run;
  FILE* f = fdopen(fds[0], "r");
  if (f == nullptr) die("fdopen");
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    char name[128];
    double v = 0;
    if (std::sscanf(line, "R %127s %lf", name, &v) == 2) {
      run.r[name] = v;
    } else if (std::sscanf(line, "S %127s", name) == 1) {
      const char* t = line + 2 + std::strlen(name) + 1;
      std::string text(t);
      while (!text.empty() && text.back() == '\n') text.pop_back();
      run.s[name] = text;
    }
  }
  std::fclose(f);
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) die("waitpid");
  run.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return run;
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

const char* label(const std::string& v) {
  return v == "byte" ? "byte" : v == "arena" ? "arena" : v == "r1" ? "R1 shared strict" : "R2 fixed";
}

int run_parent(Config c) {
  std::vector<std::string> variants;
  for (std::size_t p = 0; p <= c.variants.size();) {
    const std::size_t q = std::min(c.variants.find(',', p), c.variants.size());
    const std::string v = c.variants.substr(p, q - p);
#ifndef MEMCG_NOISY_ARENA
    if (v == "arena") {
      std::fprintf(stderr, "arena mode not built (memcg::rocksdb_arena): skipped\n");
      p = q + 1;
      continue;
    }
#endif
    if (!v.empty()) variants.push_back(v);
    p = q + 1;
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "memcg-noisy-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) die("mkdtemp");
  c.dir = tmpl;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) die("readlink /proc/self/exe");
  exe[n] = 0;
  const auto t0 = Clock::now();
  build(c.dir + "/quiet", c.quiet_keys);
  build(c.dir + "/noisy", c.noisy_keys);
  std::printf("data: quiet %d keys, noisy %d keys of %zu B, built in %.1f s; budget %llu MiB, "
              "quiet memory.min %llu MiB, writer %llu MiB at %d puts/s; %d round(s) of %.1f s "
              "phases\n",
              c.quiet_keys, c.noisy_keys, kValue,
              std::chrono::duration<double>(Clock::now() - t0).count(),
              static_cast<unsigned long long>(c.budget / kMiB),
              static_cast<unsigned long long>(c.quiet_min / kMiB),
              static_cast<unsigned long long>(c.writer_max / kMiB), c.writer_rate, c.rounds,
              c.phase_s);
  std::fflush(stdout);
  std::map<std::string, std::vector<Run>> runs;
  bool all_ran = true;
  for (int round = 0; round < c.rounds; ++round) {
    for (const auto& v : variants) {
      const auto s0 = Clock::now();
      Run r = spawn(exe, c, v, round);
      std::fprintf(stderr, "round %d %-6s exit %d, %.1f s\n", round, v.c_str(), r.status,
                   std::chrono::duration<double>(Clock::now() - s0).count());
      if (r.status != 0 || r.r.empty()) all_ran = false;
      runs[v].push_back(std::move(r));
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(c.dir, ec);

  auto med = [&](const std::string& v, const std::string& k) {
    std::vector<double> xs;
    for (const Run& r : runs[v])
      if (auto it = r.r.find(k); it != r.r.end()) xs.push_back(it->second);
    return median(xs);
  };
  auto row = [&](const char* title, auto cell) {
    std::printf("| %s |", title);
    for (const auto& v : variants) std::printf(" %s |", cell(v).c_str());
    std::printf("\n");
  };
  auto fmt = [](const char* f, auto... xs) {
    char b[128];
    std::snprintf(b, sizeof b, f, xs...);
    return std::string(b);
  };
  auto header = [&](const char* first) {
    std::printf("\n| %s |", first);
    for (const auto& v : variants) std::printf(" %s |", label(v));
    std::printf("\n|---|");
    for (std::size_t i = 0; i < variants.size(); ++i) std::printf("---|");
    std::printf("\n");
  };
  const double budget = mib(static_cast<double>(c.budget));
  auto lat = [&](const std::string& p) {
    return [&, p](const std::string& v) {
      return fmt("%.1f / %.1f / %.1f", med(v, p + "_p50_us"), med(v, p + "_p99_us"),
                 med(v, p + "_p999_us"));
    };
  };
  auto num = [&](const std::string& k, const char* f) {
    return [&, k, f](const std::string& v) { return fmt(f, med(v, k)); };
  };
  std::printf("\nMedians over %d round(s); latencies of the quiet tenant's Gets in us "
              "(p50 / p99 / p99.9).\n",
              c.rounds);
  header("quiet point reads");
  row("alone, paced: latency", lat("alone_paced"));
  row("alone, paced: hit ratio", num("alone_paced_hit", "%.3f"));
  row("alone, hot: reads/s", num("alone_hot_reads_s", "%.0f"));
  row("alone, hot: reads per CPU-second", num("alone_hot_reads_cpu_s", "%.0f"));
  row("alone, hot: latency", lat("alone_hot"));
  row("noisy, paced: latency", lat("noisy_paced"));
  row("noisy, paced: hit ratio", num("noisy_paced_hit", "%.3f"));
  row("noisy, hot: reads/s", num("noisy_hot_reads_s", "%.0f"));
  row("noisy, hot: reads per CPU-second", num("noisy_hot_reads_cpu_s", "%.0f"));
  row("noisy, hot: latency", lat("noisy_hot"));
  row("noisy, hot: hit ratio", num("noisy_hot_hit", "%.3f"));
  row("failed quiet reads (4 phases)", [&](const std::string& v) {
    return fmt("%.0f", med(v, "alone_paced_failed") + med(v, "alone_hot_failed") +
                           med(v, "noisy_paced_failed") + med(v, "noisy_hot_failed"));
  });
  row("noisy scanner: keys/s", num("noise_scan_keys_s", "%.0f"));
  row("writer: puts/s", num("noise_puts_s", "%.0f"));
  row("noise errors (scans, puts)", num("noise_errors", "%.0f"));
  row("RSS growth, peak (MiB, x budget)", [&](const std::string& v) {
    const double r = std::max(med(v, "noisy_paced_rss_mib"), med(v, "noisy_hot_rss_mib"));
    return fmt("%.1f (%.2fx)", r, r / budget);
  });
  row("counted, peak (MiB)", [&](const std::string& v) {
    return fmt("%.1f", std::max(med(v, "noisy_paced_counted_mib"), med(v, "noisy_hot_counted_mib")));
  });
  row("RSS growth - counted, mean (MiB)", [&](const std::string& v) {
    return fmt("%.1f", (med(v, "noisy_paced_gap_mib") + med(v, "noisy_hot_gap_mib")) / 2);
  });

  // The hot reads against RocksDB's own, per round (the variants ran next to each other).
  for (const char* base : {"r1", "r2"}) {
    if (!runs.count(base) || !runs.count("byte")) continue;
    for (const char* p : {"alone_hot_reads_s", "noisy_hot_reads_s", "alone_hot_reads_cpu_s",
                          "noisy_hot_reads_cpu_s"}) {
      std::vector<double> ratios;
      std::string list;
      for (std::size_t i = 0; i < runs["byte"].size() && i < runs[base].size(); ++i) {
        const auto a = runs["byte"][i].r.find(p), b = runs[base][i].r.find(p);
        if (a == runs["byte"][i].r.end() || b == runs[base][i].r.end() || b->second == 0) continue;
        ratios.push_back(a->second / b->second);
        list += fmt(" %.2f", a->second / b->second);
      }
      std::printf("\nbyte / %s, %s, per round:%s; median %.2fx\n", label(base), p, list.c_str(),
                  median(ratios));
    }
  }

  if (runs.count("byte") || runs.count("arena")) {
    header("caches after the noisy phases");
    for (const char* t : {"quiet", "noisy", "writer"}) {
      const std::string p = std::string("noisy_end_") + t + "_";
      row((std::string(t) + ": group MiB, capacity MiB").c_str(), [&](const std::string& v) {
        if (v != "byte" && v != "arena") return std::string("-");
        return fmt("%.1f, %.1f", med(v, p + "group_mib"), med(v, p + "capacity_mib"));
      });
      row((std::string(t) + ": reclaims / lowered / raised / deferred").c_str(),
          [&](const std::string& v) {
            if (v != "byte" && v != "arena") return std::string("-");
            return fmt("%.0f / %.0f / %.0f / %.0f", med(v, p + "reclaims"), med(v, p + "lowered"),
                       med(v, p + "raised"), med(v, p + "deferred"));
          });
    }
  }

  header("budget halved at run time");
  row("quiet latency (paced)", lat("halved"));
  row("quiet hit ratio", num("halved_hit", "%.3f"));
  row("failed quiet reads", num("halved_failed", "%.0f"));
  row("failed scans and puts", num("halved_noise_failed", "%.0f"));
  row("ms until counted <= budget/2", num("halved_fit_ms", "%.0f"));
  row("counted at the end (MiB)", num("halved_counted_end_mib", "%.1f"));
  row("RSS growth at the end (MiB, x budget/2)", [&](const std::string& v) {
    const double r = med(v, "halved_rss_end_mib");
    return fmt("%.1f (%.2fx)", r, r / (budget / 2));
  });

  header("noisy tenant closed");
  row("close took (ms)", num("close_ms", "%.1f"));
  row("counted freed (MiB)", num("close_freed_mib", "%.1f"));
  row("left to the noisy tenant (MiB)", [&](const std::string& v) {
    const double x = med(v, "close_noisy_left_mib");
    return x < 0 ? std::string("n/a") : fmt("%.2f", x);
  });
  row("RSS drop at once / after 1 s (MiB)", [&](const std::string& v) {
    return fmt("%.1f / %.1f", med(v, "close_rss_drop_mib"), med(v, "close_rss_drop_1s_mib"));
  });

  header("64 MiB batch, writer limited to 48 MiB");
  row("Tenant::write()", [&](const std::string& v) {
    return runs[v].empty() || !runs[v][0].s.count("burst_admitted") ? std::string("?")
                                                                   : runs[v][0].s["burst_admitted"];
  });
  row("DB::Write", [&](const std::string& v) {
    return runs[v].empty() || !runs[v][0].s.count("burst_direct") ? std::string("?")
                                                                 : runs[v][0].s["burst_direct"];
  });
  row("writer's count before / peak (MiB)", [&](const std::string& v) {
    return fmt("%.1f / %.1f", med(v, "burst_peak_before_mib"), med(v, "burst_peak_mib"));
  });
  row("forced past the limit, counted (MiB)", [&](const std::string& v) {
    const double x = med(v, "burst_forced_mib");
    return x < 0 ? std::string("n/a") : fmt("%.1f", x);
  });
  row("memtables after (MiB)", num("burst_memtable_mib", "%.1f"));
  row("RSS rise (MiB)", num("burst_rss_rise_mib", "%.1f"));
  header("teardown");
  row("bytes left charged", [&](const std::string& v) {
    const double x = med(v, "teardown_left_bytes");
    return x < 0 ? std::string("n/a") : fmt("%.0f", x);
  });

  if (!all_ran) {
    std::printf("\nFAILED: a variant did not complete\n");
    return 1;
  }
  if (!c.smoke) return 0;
  // The smoke's checks, on every run of byte and arena mode.
  bool ok = true;
  auto expect = [&](bool cond, const std::string& what) {
    if (!cond) std::printf("FAILED: %s\n", what.c_str());
    ok = ok && cond;
  };
  for (const auto& v : variants) {
    if (v != "byte" && v != "arena") continue;
    for (const Run& r : runs[v]) {
      auto get = [&](const char* k) {
        auto it = r.r.find(k);
        return it == r.r.end() ? NAN : it->second;
      };
      for (const char* p : {"alone_paced", "alone_hot", "noisy_paced", "noisy_hot"}) {
        expect(get((std::string(p) + "_failed").c_str()) == 0, v + ": no failed quiet read in " + p);
        expect(get((std::string(p) + "_reads").c_str()) > 0, v + ": quiet read in " + p);
      }
      expect(get("teardown_left_bytes") == 0, v + ": groups back to 0 after teardown");
      expect(get("burst_refused") == 1, v + ": the batch refused by Tenant::write()");
      expect(get("burst_direct_ok") == 1, v + ": the batch written by DB::Write");
      expect(get("burst_peak_mib") >= mib(static_cast<double>(c.burst)),
             v + ": the written batch counted (writer's peak >= its size)");
    }
  }
  std::printf("\nsmoke: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

bool parse(int argc, char** argv, Config& c) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::size_t eq = a.find('=');
    const std::string k = a.substr(0, eq), v = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (k == "--rounds") c.rounds = std::stoi(v);
    else if (k == "--phase") c.phase_s = std::stod(v);
    else if (k == "--settle") c.settle_s = std::stod(v);
    else if (k == "--quiet-keys") c.quiet_keys = std::stoi(v);
    else if (k == "--noisy-keys") c.noisy_keys = std::stoi(v);
    else if (k == "--budget-mib") c.budget = std::stoull(v) * kMiB;
    else if (k == "--variants") c.variants = v;
    else if (k == "--child") c.child = v;
    else if (k == "--dir") c.dir = v;
    else if (k == "--round") c.round = std::stoi(v);
    else if (k == "--build") c.build = v;
    else if (k == "--hot-only") c.hot_only = true;
    else if (k == "--arena-decay-ms") c.arena_decay_ms = std::stoll(v);
    else if (k == "--smoke") {
      c.smoke = true;
      c.rounds = 1;
      c.phase_s = 0.3;
      c.settle_s = 0.2;
      c.quiet_keys = 5'000;
      c.noisy_keys = 40'000;
    } else {
      std::fprintf(stderr,
                   "usage: rocksdb_noisy_bench [--rounds=N] [--phase=SECONDS] [--quiet-keys=N] "
                   "[--noisy-keys=N] [--budget-mib=N] [--variants=byte,arena,r1,r2] [--smoke]\n");
      return false;
    }
  }
  return c.rounds > 0 && c.phase_s > 0 && c.quiet_keys > 0 && c.noisy_keys > 0 && c.budget > 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  if (!parse(argc, argv, c)) return 2;
  if (!c.build.empty()) {  // the data sets alone, for a child run by hand (a profile)
    build(c.build + "/quiet", c.quiet_keys);
    build(c.build + "/noisy", c.noisy_keys);
    return 0;
  }
  return c.child.empty() ? run_parent(c) : run_child(c);
}
