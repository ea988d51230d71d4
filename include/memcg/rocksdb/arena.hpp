// Arena mode: a tenant's RocksDB counted in pages, background work included (CMake target
// memcg::rocksdb_arena, built when both RocksDB and memcg::jemalloc are; docs/rocksdb.md,
// "Arena mode").
//
//   std::unique_ptr<memcg::jemalloc::Arena> arena;
//   memcg::jemalloc::Arena::create(*group, &arena, memcg::rocksdb::kArenaOptions);
//   {
//     memcg::rocksdb::Tenant tenant(*group, memcg::rocksdb::arena_options(*arena));
//     ... tenant.configure(options), open, tenant.add(db) (from a thread of no arena) ...
//     memcg::rocksdb::ScopedTenantThread bound(*arena, *db);  // each thread that calls RocksDB
//     ... use; then, unbound: tenant.remove(db), close ...
//   }                                  // the Tenant: its Env's threads joined, cache freed,
//                                      // this thread's jemalloc cache flushed
//   arena.reset();                     // then the arena, then the group: back to 0
//
// What the group is charged for: the pages of the arena (jemalloc's committed memory, rounding
// and freed-but-not-returned pages included), which hold
//   - the block cache's blocks (ArenaAllocator: mallocx into the arena, whichever thread reads);
//   - everything RocksDB's flush, compaction and purge jobs allocate (ArenaEnv: they run on
//     thread pools of the tenant's own, each job bound to the arena for its duration): table
//     builders' buffers, compaction iterators, the table readers and filters they open;
//   - everything the application's threads bound with ScopedTenantThread allocate, which is where
//     memtables are allocated (by the writing thread) and where RocksDB's per-read heap goes.
// The write-buffer governor still sizes the WriteBufferManager from the group and flushes when
// memtables must shrink, but does not mirror them (their pages are charged already). Not in the
// group: what unbound threads allocate (RocksDB's process-wide timer thread for statistics dumps,
// the SstFileManager's deletion thread, the governor thread's flush requests).
//
// Reclaim never lowers the cache's capacity from inside a charge in this mode (BlockCache's
// defer_reclaim): a charge runs reclaim at its safe point, operator new and delete, which RocksDB
// calls with a cache shard's mutex held, and lowering the capacity takes that mutex. The
// governor thread applies it at once when woken, then purges the arena so that the evicted
// blocks' pages are uncharged (ArenaAllocator::trim). Until then the overshoot is forced and
// counted by the arena (ArenaStats::forced).
#ifndef MEMCG_ROCKSDB_ARENA_HPP_
#define MEMCG_ROCKSDB_ARENA_HPP_

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/threadpool.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "memcg/jemalloc/arena.hpp"
#include "memcg/rocksdb/tenant.hpp"

namespace memcg::rocksdb {

// The arena options this mode wants: never-fail (RocksDB survives no failed allocation) and no
// OOM kill from RocksDB's allocations (a storage engine's memory is freed by eviction and
// flushes, not by killing; the overshoot is counted instead).
inline const memcg::jemalloc::ArenaOptions kArenaOptions = [] {
  memcg::jemalloc::ArenaOptions o;
  o.failure = memcg::jemalloc::ArenaFailure::kNeverFail;
  o.charge_flags = kRetryMayFail;
  return o;
}();

// A block-cache allocator on a group's arena: each block is mallocx()ed into the arena without a
// thread cache and freed to it, so the block's pages are the group's whichever thread reads or
// evicts it. Never returns null (never-fail arena; a failure of jemalloc itself aborts). After
// each allocation it runs the thread's safe point (a forced commit's ladder). REQUIRES: the
// Arena outlives this allocator (its blocks may outlive both).
class ArenaAllocator final : public BlockAllocator {
 public:
  explicit ArenaAllocator(memcg::jemalloc::Arena& arena);
  const char* Name() const override { return "memcg::rocksdb::ArenaAllocator"; }
  void* Allocate(std::size_t size) override;
  void Deallocate(void* p) override;
  std::size_t UsableSize(void* p, std::size_t allocation_size) const override;
  // Purges the arena's freed pages (the evicted blocks'): uncharges them now.
  void trim() noexcept override;

 private:
  memcg::jemalloc::Arena& arena_;
  const int flags_;
};

// A rocksdb::Env whose background jobs (Schedule: flush, compaction, purge) and threads
// (StartThread) run on thread pools of its own, each job bound to the arena (ScopedArenaAttach)
// for its duration. Everything else (files, clock) is the base Env's. RocksDB's Env::Default()
// pools are shared by every database of the process, which is why a tenant needs its own.
// Queued jobs are not unscheduled (UnSchedule returns 0): RocksDB then waits at close for them
// to run, and they return at once because the database is shutting down. Destruction joins the
// pools' threads. REQUIRES: every database using it is closed first, and the Arena outlives it.
class ArenaEnv final : public ::rocksdb::EnvWrapper {
 public:
  explicit ArenaEnv(memcg::jemalloc::Arena& arena,
                    ::rocksdb::Env* base = ::rocksdb::Env::Default());
  ~ArenaEnv() override;
  ArenaEnv(const ArenaEnv&) = delete;
  ArenaEnv& operator=(const ArenaEnv&) = delete;

  static const char* kClassName() { return "memcg::rocksdb::ArenaEnv"; }
  const char* Name() const override { return kClassName(); }

  void Schedule(void (*function)(void* arg), void* arg, Priority pri = LOW, void* tag = nullptr,
                void (*unschedule)(void* arg) = nullptr) override;
  int UnSchedule(void* /*tag*/, Priority /*pri*/) override { return 0; }
  void StartThread(void (*function)(void* arg), void* arg) override;
  void WaitForJoin() override;
  unsigned int GetThreadPoolQueueLen(Priority pri = LOW) const override;
  int ReserveThreads(int threads, Priority pri) override;
  int ReleaseThreads(int threads, Priority pri) override;
  void SetBackgroundThreads(int number, Priority pri = LOW) override;
  int GetBackgroundThreads(Priority pri = LOW) override;
  void IncBackgroundThreadsIfNeeded(int number, Priority pri) override;
  void LowerThreadPoolIOPriority(Priority /*pool*/) override {}
  void LowerThreadPoolCPUPriority(Priority /*pool*/) override {}
  ::rocksdb::Status LowerThreadPoolCPUPriority(Priority /*pool*/,
                                               ::rocksdb::CpuPriority /*pri*/) override {
    return ::rocksdb::Status::OK();
  }

  // Jobs and threads that ran bound to the arena, and those that could not be bound (the group
  // was offline: they ran unbound).
  uint64_t jobs() const noexcept { return jobs_.load(std::memory_order_relaxed); }
  uint64_t unbound_jobs() const noexcept { return unbound_.load(std::memory_order_relaxed); }

 private:
  ::rocksdb::ThreadPool& pool(Priority pri) const noexcept;
  void run_bound(void (*function)(void*), void* arg) noexcept;

  memcg::jemalloc::Arena& arena_;
  std::array<std::unique_ptr<::rocksdb::ThreadPool>, TOTAL> pools_;
  std::mutex threads_mu_;
  std::vector<std::thread> threads_;  // StartThread's, joined by WaitForJoin and destruction
  std::atomic<uint64_t> jobs_{0};
  std::atomic<uint64_t> unbound_{0};
};

// Binds the calling thread to the arena for the scope (ScopedArenaAttach), after one read of `db`
// made unbound: a thread's first RocksDB read creates its per-thread tables (ThreadLocalPtr's,
// which cache each column family's SuperVersion), and they live as long as the thread. Created
// while bound they would keep the tenant's arena, and 2 MiB of its group's charge, alive after the
// tenant is gone, for as long as the thread runs. Threads that end with the tenant (its own
// workers) may use ScopedArenaAttach directly. From a thread not bound to another arena.
class ScopedTenantThread {
 public:
  ScopedTenantThread(memcg::jemalloc::Arena& arena, ::rocksdb::DB& db);
  ScopedTenantThread(const ScopedTenantThread&) = delete;
  ScopedTenantThread& operator=(const ScopedTenantThread&) = delete;
  bool ok() const noexcept { return bound_->ok(); }

 private:
  std::unique_ptr<memcg::jemalloc::ScopedArenaAttach> bound_;
};

// `options` in arena mode: the cache's blocks from an ArenaAllocator with deferred reclaim, an
// ArenaEnv for the databases (TenantOptions::env, set on the options by Tenant::configure), the
// memtable mirror off, and a teardown that flushes the destroying thread's jemalloc cache (close
// the databases on the thread that destroys the Tenant). Throws std::invalid_argument if
// `options` already has an allocator, an env or a teardown. The deferred reclaim is applied by the tenant's governor thread: with
// TenantOptions::tick at 0 (no thread), the application must call Tenant::safe_point() itself.
// The first call in the process runs a small scratch database (4 000 keys) on a thread of no
// arena, once: RocksDB's process-wide tables (docs/rocksdb.md, "Arena mode").
TenantOptions arena_options(memcg::jemalloc::Arena& arena, TenantOptions options = {});

}  // namespace memcg::rocksdb

#endif  // MEMCG_ROCKSDB_ARENA_HPP_
