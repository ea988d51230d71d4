// Arena mode (memcg/rocksdb/arena.hpp): the tenant's RocksDB in its group's jemalloc arena.
// Accounting against the process's own growth, background jobs running in the tenant's arena,
// the limit held with no failed read, and teardown to 0 with no arena left.
#include <rocksdb/listener.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "memcg/rocksdb/arena.hpp"
#include "rocksdb/rocksdb_fixture.hpp"
#include "watchdog.hpp"

namespace memcg::rocksdb::testing {
namespace {

using memcg::jemalloc::Arena;
using memcg::jemalloc::ScopedArenaAttach;

// The process's anonymous resident memory (its heap, stacks and anonymous mappings; not the
// pages of librocksdb's code that running it brings in).
uint64_t rss_anon_bytes() {
  std::ifstream f("/proc/self/status");
  std::string word;
  while (f >> word) {
    if (word == "RssAnon:") {
      uint64_t kib = 0;
      f >> kib;
      return kib << 10;
    }
  }
  return 0;
}

std::unique_ptr<Arena> make_arena(Group& g) {
  std::unique_ptr<Arena> a;
  EXPECT_EQ(Arena::create(g, &a, kArenaOptions), 0);
  return a;
}

// Where RocksDB's flush and compaction jobs run: the arena of the job's thread, and of a block
// the job allocates (EventListener callbacks run on the job's thread).
class JobArenas : public ::rocksdb::EventListener {
 public:
  explicit JobArenas(const Arena* arena) : arena_(arena) {}
  void OnFlushCompleted(::rocksdb::DB*, const ::rocksdb::FlushJobInfo&) override { record(); }
  void OnCompactionCompleted(::rocksdb::DB*, const ::rocksdb::CompactionJobInfo&) override {
    record();
  }
  std::atomic<int> jobs{0}, in_arena{0};

 private:
  void record() {
    auto block = std::make_unique<char[]>(4096);
    const unsigned thread_arena = memcg::jemalloc::current_thread_arena();
    const unsigned block_arena = memcg::jemalloc::arena_of(block.get());
    jobs.fetch_add(1);
    if (arena_ != nullptr && arena_->owns(thread_arena) && arena_->owns(block_arena))
      in_arena.fetch_add(1);
  }
  const Arena* arena_;
};

// `threads` readers bound to the arena, each `per_thread` random Gets over keys [0, n).
ReadResult bound_reads(::rocksdb::DB& db, Arena& arena, int n, int threads, int per_thread,
                       uint64_t seed) {
  std::atomic<uint64_t> reads{0}, failed{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      ScopedArenaAttach bound(arena);
      std::mt19937_64 rng(seed * 1000 + static_cast<uint64_t>(t));
      std::string v;
      for (int i = 0; i < per_thread; ++i) {
        const int k = static_cast<int>(rng() % static_cast<uint64_t>(n));
        ::rocksdb::Status s = db.Get(::rocksdb::ReadOptions(), key(k), &v);
        if (!s.ok() || v != value(k, 200)) failed.fetch_add(1);
        reads.fetch_add(1);
      }
    });
  for (auto& th : ts) th.join();
  return {reads.load(), failed.load()};
}

// The arenas of destroyed Arena handles still held by live blocks, after up to `wait_ms` (a block
// freed into a thread's cache that is being flushed).
// Flushes the jemalloc thread caches of every thread of Env::Default()'s pools: one job per
// thread, each held until all have run so that no thread takes two.
void flush_default_pool_caches() {
  using ::rocksdb::Env;
  struct Barrier {
    std::atomic<int> arrived{0};
    int n = 0;
  };
  for (Env::Priority pri : {Env::BOTTOM, Env::LOW, Env::HIGH}) {
    const int n = Env::Default()->GetBackgroundThreads(pri);
    if (n <= 0) continue;
    auto b = std::make_shared<Barrier>();
    b->n = n;
    for (int i = 0; i < n; ++i)
      Env::Default()->Schedule(
          [](void* arg) {
            std::unique_ptr<std::shared_ptr<Barrier>> own(
                static_cast<std::shared_ptr<Barrier>*>(arg));
            Barrier& b = **own;
            memcg::jemalloc::flush_thread_cache();
            b.arrived.fetch_add(1);
            for (int spin = 0; b.arrived.load() < b.n && spin < 2000; ++spin)
              std::this_thread::sleep_for(std::chrono::milliseconds(1));
          },
          new std::shared_ptr<Barrier>(b), pri);
    for (int spin = 0; b->arrived.load() < n && spin < 5000; ++spin)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

size_t held_arenas(int wait_ms = 0) {
  size_t n = memcg::jemalloc::collect_released();
  for (int i = 0; n != 0 && i < wait_ms / 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    n = memcg::jemalloc::collect_released();
  }
  return n;
}

::rocksdb::Options with_listener(::rocksdb::Options o, std::shared_ptr<JobArenas> l) {
  o.listeners.push_back(std::move(l));
  return o;
}

TEST(RocksdbArena, CurrentWithinFivePercentOfTheProcessGrowth) {
  memcg::testing::Watchdog dog("arena accounting", std::chrono::seconds(90));
  ScratchDir dir;
  Controller ctl;
  GroupRef g = make_group(ctl, "/t");
  std::unique_ptr<Arena> arena = make_arena(*g);
  ASSERT_TRUE(arena);
  {
    TenantOptions to;
    to.cache.capacity_bytes = 64 * kMiB;
    Tenant tenant(*g, arena_options(*arena, to));
    // Opened and closed from an unbound thread (docs/rocksdb.md, "Arena mode"): DB::Open
    // registers process-wide timer tasks that outlive the database.
    auto db = open(small_options(tenant, 1 << 20), dir.sub("db"));
    tenant.add(db.get());
    ScopedTenantThread bound(*arena, *db);  // this thread writes and reads
    // From here, everything the tenant does is in the arena: the process grows by what the
    // group is charged.
    const uint64_t rss0 = rss_anon_bytes();
    const uint64_t charged0 = g->current();
    load(*db, 100'000, 200, true, true);  // memtables, flushes, a compaction: ~22 MiB of tables
    load(*db, 5'000, 200, false);         // and memtables left
    EXPECT_EQ(bound_reads(*db, *arena, 100'000, 2, 30'000, 5).failed, 0u);
    tenant.safe_point();
    drain(ctl);
    const uint64_t grown = rss_anon_bytes() - rss0;
    const uint64_t charged = g->current() - charged0;
    std::printf("process grew %llu KiB, group charged %llu KiB (%.1f %%), cache %llu KiB\n",
                (unsigned long long)grown >> 10, (unsigned long long)charged >> 10,
                100.0 * static_cast<double>(charged) / static_cast<double>(grown),
                (unsigned long long)tenant.cache().allocator().live_bytes() >> 10);
    ASSERT_GT(tenant.cache().allocator().live_bytes(), 8 * kMiB);
    EXPECT_GT(grown, 16 * kMiB);
    EXPECT_LE(charged, grown + grown / 20);
    EXPECT_GE(charged + grown / 20, grown);
    tenant.remove(db.get());
    memcg::jemalloc::flush_thread_cache();
  }
  memcg::jemalloc::flush_thread_cache();
  arena.reset();
  EXPECT_EQ(held_arenas(500), 0u);
}

TEST(RocksdbArena, FlushAndCompactionJobsRunInTheTenantsArena) {
  memcg::testing::Watchdog dog("arena jobs", std::chrono::seconds(90));
  ScratchDir dir;
  Controller ctl;
  GroupRef g = make_group(ctl, "/t");
  GroupRef plain = make_group(ctl, "/plain");
  std::unique_ptr<Arena> arena = make_arena(*g);
  ASSERT_TRUE(arena);
  auto in_tenant = std::make_shared<JobArenas>(arena.get());
  auto in_plain = std::make_shared<JobArenas>(arena.get());
  uint64_t env_jobs = 0;
  {
    Tenant tenant(*g, arena_options(*arena));
    Tenant control(*plain);  // byte mode: RocksDB's shared Env::Default() pools
    auto db = open(with_listener(small_options(tenant), in_tenant), dir.sub("db"));
    auto dc = open(with_listener(small_options(control), in_plain), dir.sub("control"));
    load(*db, 20'000, 200, true, true);
    load(*dc, 20'000, 200, true, true);
    env_jobs = static_cast<const ArenaEnv*>(tenant.env())->jobs();
  }
  memcg::jemalloc::flush_thread_cache();  // the blocks of the tenant's tables this thread freed
  // The control database's jobs ran on Env::Default()'s pools, shared by the process: their
  // threads may hold blocks of the tenant's arena in their jemalloc caches (docs/rocksdb.md,
  // "Arena mode"), which keeps the arena until those caches are flushed.
  flush_default_pool_caches();
  std::printf("tenant: %d of %d jobs in its arena (%llu jobs bound); control: %d of %d\n",
              in_tenant->in_arena.load(), in_tenant->jobs.load(), (unsigned long long)env_jobs,
              in_plain->in_arena.load(), in_plain->jobs.load());
  EXPECT_GE(in_tenant->jobs.load(), 2);  // a flush and a compaction at least
  EXPECT_EQ(in_tenant->in_arena.load(), in_tenant->jobs.load());
  EXPECT_GE(env_jobs, static_cast<uint64_t>(in_tenant->jobs.load()));
  EXPECT_GE(in_plain->jobs.load(), 2);
  EXPECT_EQ(in_plain->in_arena.load(), 0);
  arena.reset();
  EXPECT_EQ(held_arenas(500), 0u);
}

TEST(RocksdbArena, LimitHeldWithNoFailedReadAndNoOomKill) {
  memcg::testing::Watchdog dog("arena limit", std::chrono::seconds(90));
  ScratchDir dir;
  Controller ctl;
  GroupRef g = make_group(ctl, "/t");
  std::unique_ptr<Arena> arena = make_arena(*g);
  ASSERT_TRUE(arena);
  constexpr uint64_t kMax = 24 * kMiB;
  g->set_max(kMax);  // the load too: memtables, flushes and a compaction under the limit
  {
    TenantOptions to;
    to.cache.capacity_bytes = 8 * kMax;
    Tenant tenant(*g, arena_options(*arena, to));
    auto db = open(small_options(tenant), dir.sub("db"));
    tenant.add(db.get());
    {
      ScopedTenantThread bound(*arena, *db);
      load(*db, 150'000, 200, true, true);  // ~33 MiB of tables: more than the limit
    }
    const uint64_t before = g->peak();
    const ReadResult r = bound_reads(*db, *arena, 150'000, 3, 20'000, 11);
    const memcg::jemalloc::ArenaStats st = arena->stats();
    std::printf(
        "load peak %llu KiB; reads: peak %llu KiB (max %llu KiB), cache %llu KiB, "
        "capacity %llu KiB, deferred reclaims %llu, forced %llu KiB\n",
        (unsigned long long)before >> 10, (unsigned long long)g->peak() >> 10,
        (unsigned long long)kMax >> 10,
        (unsigned long long)tenant.cache().allocator().live_bytes() >> 10,
        (unsigned long long)tenant.cache().governor().capacity() >> 10,
        (unsigned long long)tenant.cache().deferred(), (unsigned long long)st.forced >> 10);
    EXPECT_EQ(r.failed, 0u);
    EXPECT_EQ(r.reads, 3u * 20'000);
    EXPECT_EQ(g->events().get(Event::kOomKill), 0u);
    // The overshoot arena mode states (docs/rocksdb.md): an eighth of max, the latency of the
    // governor thread's deferred capacity and purge, plus a jemalloc metadata block.
    EXPECT_LE(g->peak(), kMax + kMax / 8 + memcg::jemalloc::kNeverFailSlackBytes);

    // The tenant's other work takes plain heap in the arena while the cache is full: the pages
    // are forced past max, the safe point's reclaim defers the cache's shrink to the governor
    // thread, which lowers the capacity and purges the evicted blocks' pages. 8 MiB, or more
    // when the reads left room, so that the heap always passes max by at least 4 MiB.
    const uint64_t deferred0 = tenant.cache().deferred();
    const uint64_t room = kMax > g->current() ? kMax - g->current() : 0;
    const uint64_t heap_bytes = std::max<uint64_t>(8 * kMiB, room + 4 * kMiB);
    std::vector<std::unique_ptr<char[]>> heap;
    {
      ScopedTenantThread bound(*arena, *db);
      for (uint64_t taken = 0; taken < heap_bytes; taken += 256 << 10) {
        heap.push_back(std::make_unique<char[]>(256 << 10));
        std::memset(heap.back().get(), 1, 256 << 10);
      }
    }
    // The governor thread's latency bounds this wait; a loaded machine (CI) may need seconds.
    uint64_t settled = g->current();
    for (int i = 0; i < 1000 && settled > kMax; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      settled = g->current();
    }
    std::printf(
        "%llu KiB of heap at the limit: usage %llu KiB after the governor thread, cache %llu "
        "KiB, deferred reclaims %llu, forced %llu KiB\n",
        (unsigned long long)heap_bytes >> 10, (unsigned long long)settled >> 10,
        (unsigned long long)tenant.cache().allocator().live_bytes() >> 10,
        (unsigned long long)(tenant.cache().deferred() - deferred0),
        (unsigned long long)arena->stats().forced >> 10);
    EXPECT_GT(tenant.cache().deferred(), deferred0);
    EXPECT_LE(settled, kMax);
    // Shrunk by about the heap, not emptied: each retry of the ladder must not lower the
    // capacity again while the first shrink waits for the governor thread.
    EXPECT_GE(tenant.cache().allocator().live_bytes(), 4 * kMiB);
    EXPECT_EQ(bound_reads(*db, *arena, 150'000, 2, 2'000, 21).failed, 0u);
    EXPECT_EQ(g->events().get(Event::kOomKill), 0u);
    heap.clear();
    tenant.remove(db.get());
    db.reset();
  }
  memcg::jemalloc::flush_thread_cache();
  arena.reset();
  EXPECT_EQ(held_arenas(500), 0u);
}

TEST(RocksdbArena, TeardownLeavesTheGroupAtZeroAndNoArena) {
  memcg::testing::Watchdog dog("arena teardown", std::chrono::seconds(90));
  ScratchDir dir;
  Controller ctl;
  GroupRef g = make_group(ctl, "/t");
  std::unique_ptr<Arena> arena = make_arena(*g);
  ASSERT_TRUE(arena);
  {
    Tenant tenant(*g, arena_options(*arena));
    auto db = open(small_options(tenant), dir.sub("db"));  // from an unbound thread
    tenant.add(db.get());
    {
      ScopedTenantThread bound(*arena, *db);  // this thread outlives the tenant
      load(*db, 30'000, 200, true, true);
      load(*db, 3'000, 200, false);  // closes with memtables
      EXPECT_EQ(bound_reads(*db, *arena, 30'000, 2, 5'000, 3).failed, 0u);
    }
    ASSERT_GT(g->current(), 4 * kMiB);
    // 1. every database removed and closed (from an unbound thread)
    tenant.remove(db.get());
    ASSERT_TRUE(db->Close().ok());
    db.reset();
  }  // 2. the tenant: its Env's threads joined, its cache's blocks freed, this thread's cache
     //    flushed (the memtable blocks it freed at close)
  // 3. the arena, 4. the group: nothing else to call
  arena.reset();
  EXPECT_EQ(held_arenas(500), 0u);
  drain(ctl);
  EXPECT_EQ(g->current(), 0u);
  EXPECT_EQ(g->memory().underflows(), 0u);
  g.reset();
  EXPECT_EQ(ctl.remove("/t"), 0);
}

}  // namespace
}  // namespace memcg::rocksdb::testing
