// Tenant: one group's RocksDB databases held to that group, in a few lines.
//
//   memcg::rocksdb::Tenant tenant(*group, {});
//   rocksdb::Options options;
//   options.create_if_missing = true;
//   tenant.configure(options);            // block cache + allocator, write buffer manager
//   rocksdb::DB* db;
//   rocksdb::DB::Open(options, path, &db);
//   tenant.add(db);
//   ...
//   tenant.remove(db);                    // shutdown order: 1. remove and close every database,
//   delete db;                            // 2. destroy the Tenant, 3. remove the group
//
// The tenant owns a BlockCache (blocks charged byte-exact, capacity set by the group), a
// WriteBufferGovernor (memtables sized from the group, mirrored into it, flushed when they must
// shrink) and a governor thread that runs both at every `tick` and at once when reclaim asks.
// The governor thread is not attached to the group: it allocates nothing for the tenant.
//
// In that order nothing stays charged: closing a database frees its memtables and releases its
// cache handles; the Tenant then stops its thread, uncharges the mirror and frees every cached
// block, so the group is back to what other code charged to it, and the process may exit
// normally (RocksDB's static thread pools hold no memory of the tenant's group; no _exit).
// Destroying the Tenant while a database is open leaves that database's blocks charged until
// they are released, and its memtables uncounted.
#ifndef MEMCG_ROCKSDB_TENANT_HPP_
#define MEMCG_ROCKSDB_TENANT_HPP_

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <rocksdb/table.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "memcg/rocksdb/block_cache.hpp"
#include "memcg/rocksdb/write_buffer.hpp"

namespace memcg::rocksdb {

struct TenantOptions {
  BlockCacheOptions cache;
  WriteBufferOptions write_buffer;
  // The governor thread's period; 0 runs no thread (call safe_point() yourself).
  std::chrono::milliseconds tick{20};
  // The databases' Env (DBOptions::env), kept alive by the tenant; null leaves options.env as
  // it is. Arena mode (arena.hpp) gives one whose background jobs run bound to the arena.
  std::shared_ptr<::rocksdb::Env> env;
  // Run by ~Tenant on the destroying thread last, once the governor thread has stopped and the
  // cache, the write-buffer governor and the env are gone: what the mode must release there. Arena mode
  // (arena_options) flushes the thread's jemalloc cache, which holds the arena's blocks this
  // thread freed when it closed the databases; without it they keep the arena's pages charged.
  std::function<void()> teardown;
};

class Tenant {
 public:
  // Throws std::invalid_argument for bad options (see BlockCache, WriteBufferGovernor).
  Tenant(Group& group, TenantOptions options = {});
  // Stops the governor thread, uncharges the memtable mirror, frees the cached blocks, then runs
  // TenantOptions::teardown. REQUIRES: every database configured by this tenant is closed; in
  // arena mode, on the thread that closed them (or that thread has called
  // memcg::jemalloc::flush_thread_cache(), or has exited).
  ~Tenant();
  Tenant(const Tenant&) = delete;
  Tenant& operator=(const Tenant&) = delete;

  // Sets `options`' table factory (a block-based table on the tenant's cache, index and filter
  // blocks cached there too so that they are charged and evictable), write buffer manager and,
  // if TenantOptions::env is set, env. The other table options are kept from `table`.
  // Refused with InvalidArgument, `options` unchanged and counted in refused_configures():
  //   - `table.block_cache` set: the user's cache would be replaced by the tenant's (a cache
  //     charged to nobody and sized by nobody otherwise); leave it null;
  //   - a fixed BlockCacheOptions::capacity_bytes below the group's max(memory.min,
  //     memory.low): the cache could never hold what the protection keeps for it.
  ::rocksdb::Status configure(::rocksdb::Options& options,
                              ::rocksdb::BlockBasedTableOptions table = {}) const;
  uint64_t refused_configures() const noexcept {
    return refused_configures_.load(std::memory_order_relaxed);
  }
  // A database opened with configure()d options, for the write buffer governor's flushes.
  void add(::rocksdb::DB* db, std::vector<::rocksdb::ColumnFamilyHandle*> families = {});
  void remove(::rocksdb::DB* db);

  // Writes `batch` to `db` (a database of this tenant) once the group has room for its memtable
  // cost, estimated as the batch's data size plus kEntryOverhead per entry: what
  // WriteBufferGovernor::admit() says (stall up to a deadline, or fail at once, per
  // WriteBufferOptions::admission; a batch larger than memory.max fails at once), then
  // DB::Write. A refusal is a Status (MemoryLimit or TimedOut) and writes nothing. Null
  // arguments: InvalidArgument.
  static constexpr uint64_t kEntryOverhead = 32;  // skiplist node and lengths, per entry
  ::rocksdb::Status write(::rocksdb::DB* db, const ::rocksdb::WriteOptions& options,
                          ::rocksdb::WriteBatch* batch);

  // Runs both governors now (what the thread does each tick): from a thread that holds no
  // RocksDB lock and is not inside a charge.
  void safe_point() noexcept;

  Group& group() const noexcept { return *group_; }
  BlockCache& cache() noexcept { return cache_; }
  WriteBufferGovernor& write_buffers() noexcept { return write_buffers_; }
  // TenantOptions::env (null if none was given).
  ::rocksdb::Env* env() const noexcept { return options_.env.get(); }
  uint64_t ticks() const noexcept { return ticks_.load(std::memory_order_relaxed); }

 private:
  void run();
  void wake() noexcept;

  // First: destroyed last, it runs TenantOptions::teardown after everything below is gone (the
  // cache's destruction frees RocksDB's handles on this thread, too).
  struct AtEnd {
    std::function<void()> run;
    ~AtEnd() {
      if (run) run();
    }
  } at_end_;
  GroupRef group_;
  const TenantOptions options_;
  // Before the governors: their reclaim may call wake() as soon as they are registered.
  std::mutex mu_;  // the thread's sleep
  std::condition_variable cv_;
  std::atomic<bool> woken_{false};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> ticks_{0};
  mutable std::atomic<uint64_t> refused_configures_{0};
  BlockCache cache_;
  WriteBufferGovernor write_buffers_;
  std::thread thread_;  // last: started once everything above is ready
};

}  // namespace memcg::rocksdb

#endif  // MEMCG_ROCKSDB_TENANT_HPP_
