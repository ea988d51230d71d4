#include "memcg/rocksdb/arena.hpp"

#include <jemalloc/jemalloc.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>

#include "memcg/core/charge/safe_point.hpp"

namespace memcg::rocksdb {

namespace {
[[noreturn]] void die(std::size_t size) {
  std::fprintf(stderr, "memcg::rocksdb::ArenaAllocator: mallocx failed (%zu bytes)\n", size);
  std::fflush(stderr);
  std::abort();
}

// RocksDB creates some process-wide tables on their first use, from whichever thread uses them
// first: the cache-entry role registry (RegisterCacheDeleterRole, a hash map that a flush's first
// table open inserts into), and the like. Created by a job bound to a tenant's arena, they would
// hold that arena (and 2 MiB of its group's charge) for the life of the process. So before the
// first tenant, a scratch database goes once through what a tenant's databases do (writes,
// flushes, a compaction, cached index, filter and data blocks, reads) on a thread of no arena.
void warm_up_process_tables() {
  std::thread([] {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "memcg-rocksdb-warm-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) return;
    {
      ::rocksdb::Options o;
      o.create_if_missing = true;
      o.write_buffer_size = 64 << 10;
      ::rocksdb::BlockBasedTableOptions t;
      t.block_cache = ::rocksdb::NewLRUCache(1 << 20);
      t.cache_index_and_filter_blocks = true;
      t.filter_policy.reset(::rocksdb::NewBloomFilterPolicy(10));
      o.table_factory.reset(::rocksdb::NewBlockBasedTableFactory(t));
      ::rocksdb::DB* raw = nullptr;
      if (::rocksdb::DB::Open(o, tmpl, &raw).ok()) {
        std::unique_ptr<::rocksdb::DB> db(raw);
        std::string v;
        for (int round = 0; round < 2; ++round) {
          for (int i = 0; i < 2000; ++i)
            db->Put(::rocksdb::WriteOptions(), std::to_string(i), std::string(100, 'v'));
          db->Flush(::rocksdb::FlushOptions());
        }
        db->CompactRange(::rocksdb::CompactRangeOptions(), nullptr, nullptr);
        for (int i = 0; i < 2000; i += 7) db->Get(::rocksdb::ReadOptions(), std::to_string(i), &v);
        std::unique_ptr<::rocksdb::Iterator> it(db->NewIterator(::rocksdb::ReadOptions()));
        for (it->SeekToFirst(); it->Valid(); it->Next()) {
        }
        it.reset();
        db->Close();
      }
    }
    std::error_code ec;
    std::filesystem::remove_all(tmpl, ec);
  }).join();
}
}  // namespace

// ---- ArenaAllocator ---------------------------------------------------------------------------

ArenaAllocator::ArenaAllocator(memcg::jemalloc::Arena& arena)
    : BlockAllocator(arena.group()), arena_(arena), flags_(arena.mallocx_flags()) {}

void* ArenaAllocator::Allocate(std::size_t size) {
  const std::size_t n = size == 0 ? 1 : size;
  void* p = ::mallocx(n, flags_);
  // Never-fail arenas force the charge: null means jemalloc itself had no memory (or a kRefuse
  // arena refused), which RocksDB cannot take.
  for (int attempt = 0; p == nullptr && attempt < 3; ++attempt) {
    memcg::safe_point();  // a refused charge's ladder may free room
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    p = ::mallocx(n, flags_);
  }
  if (p == nullptr) die(size);
  count_live(::sallocx(p, 0), false);
  // jemalloc returned: the ladder of a forced commit runs here, with no cache lock held (the
  // block cache's own reclaim is deferred to the governor thread anyway).
  memcg::safe_point();
  return p;
}

void ArenaAllocator::Deallocate(void* p) {
  if (p == nullptr) return;
  const std::size_t bytes = ::sallocx(p, 0);
  ::dallocx(p, MALLOCX_TCACHE_NONE);
  count_freed(bytes, false);
}

std::size_t ArenaAllocator::UsableSize(void* /*p*/, std::size_t allocation_size) const {
  // The caller's part: RocksDB charges the cache with it; the group is charged the pages.
  return allocation_size;
}

void ArenaAllocator::trim() noexcept {
  arena_.purge();
}

// ---- ArenaEnv ---------------------------------------------------------------------------------

ArenaEnv::ArenaEnv(memcg::jemalloc::Arena& arena, ::rocksdb::Env* base)
    : ::rocksdb::EnvWrapper(base), arena_(arena) {
  // As Env::Default(): one thread for flushes (HIGH) and compactions (LOW), none for the bottom
  // and user pools; DB::Open raises them to its max_background_jobs.
  for (int p = 0; p < TOTAL; ++p)
    pools_[p].reset(::rocksdb::NewThreadPool(p == LOW || p == HIGH ? 1 : 0));
}

ArenaEnv::~ArenaEnv() {
  WaitForJoin();
  for (auto& p : pools_) p->JoinAllThreads();
}

::rocksdb::ThreadPool& ArenaEnv::pool(Priority pri) const noexcept {
  const int i = pri >= 0 && pri < TOTAL ? pri : LOW;
  return *pools_[i];
}

void ArenaEnv::run_bound(void (*function)(void*), void* arg) noexcept {
  memcg::jemalloc::ScopedArenaAttach bound(arena_);
  (bound.ok() ? jobs_ : unbound_).fetch_add(1, std::memory_order_relaxed);
  function(arg);
}

void ArenaEnv::Schedule(void (*function)(void*), void* arg, Priority pri, void* /*tag*/,
                        void (* /*unschedule*/)(void*)) {
  pool(pri).SubmitJob([this, function, arg] { run_bound(function, arg); });
}

void ArenaEnv::StartThread(void (*function)(void*), void* arg) {
  std::lock_guard<std::mutex> lock(threads_mu_);
  threads_.emplace_back([this, function, arg] { run_bound(function, arg); });
}

void ArenaEnv::WaitForJoin() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(threads_mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

unsigned int ArenaEnv::GetThreadPoolQueueLen(Priority pri) const {
  return pool(pri).GetQueueLen();
}

int ArenaEnv::ReserveThreads(int threads, Priority pri) {
  return pool(pri).ReserveThreads(threads);
}

int ArenaEnv::ReleaseThreads(int threads, Priority pri) {
  return pool(pri).ReleaseThreads(threads);
}

void ArenaEnv::SetBackgroundThreads(int number, Priority pri) {
  pool(pri).SetBackgroundThreads(number);
}

int ArenaEnv::GetBackgroundThreads(Priority pri) {
  return pool(pri).GetBackgroundThreads();
}

void ArenaEnv::IncBackgroundThreadsIfNeeded(int number, Priority pri) {
  ::rocksdb::ThreadPool& p = pool(pri);
  if (p.GetBackgroundThreads() < number) p.SetBackgroundThreads(number);
}

// ---- ScopedTenantThread -----------------------------------------------------------------------

ScopedTenantThread::ScopedTenantThread(memcg::jemalloc::Arena& arena, ::rocksdb::DB& db) {
  std::string value;
  db.Get(::rocksdb::ReadOptions(), ::rocksdb::Slice(), &value);  // the outcome does not matter
  bound_ = std::make_unique<memcg::jemalloc::ScopedArenaAttach>(arena);
}

// ---- arena_options ----------------------------------------------------------------------------

TenantOptions arena_options(memcg::jemalloc::Arena& arena, TenantOptions options) {
  if (options.cache.allocator != nullptr || options.env != nullptr || options.teardown)
    throw std::invalid_argument(
        "memcg::rocksdb::arena_options: allocator, env or teardown already set");
  static std::once_flag warm;
  std::call_once(warm, warm_up_process_tables);
  options.cache.allocator = std::make_shared<ArenaAllocator>(arena);
  options.cache.defer_reclaim = true;
  options.write_buffer.mirror = false;
  options.env = std::make_shared<ArenaEnv>(arena);
  // The blocks the closing thread freed (memtables, table readers) sit in its thread cache,
  // which keeps their pages in the arena; the Tenant's destruction returns them.
  options.teardown = [] { memcg::jemalloc::flush_thread_cache(); };
  return options;
}

}  // namespace memcg::rocksdb
