// WriteBufferGovernor: RocksDB's memtables held to a group.
//
// Memtables allocate with plain new[] and have no allocator hook; RocksDB's WriteBufferManager
// (not meant to be subclassed) is the one place that knows their total. The governor owns the
// tenant's WriteBufferManager and, at each update():
//   - sizes it from the group: min(memory.high, memory.max) of the tightest level times
//     `limit_percent`, clamped to [min_bytes, max_bytes] (RocksDB then switches and flushes
//     memtables by its own rule once they pass 7/8 of it);
//   - mirrors its memory_usage() into the group (memcg::MirroredCharge), so memory.current,
//     memory.max and the cache governor see the memtables as the group's other memory;
//   - ends a write stall that no flush has ended within stall_timeout_ns;
//   - asks RocksDB to flush (DB::Flush, wait=false) the databases it was given when the
//     memtables are over the buffer size, or when reclaim asked for memory since the last update.
// Reclaim never flushes from inside a charge: it only records the request and wakes the
// component's governor thread (the `wake` function), which flushes at its next update. So
// between updates the group may hold memtable memory past memory.max: the mirror forces and
// counts it (mirror().forced_bytes()); the cache governor makes room for it by shrinking the
// cache at the same update.
//
// Flush and compaction threads are RocksDB's (Env thread pools shared by every database of the
// process); memtable memory is counted to the tenant by the mirror whichever thread allocates
// it, and every block a flush or compaction reads through the tenant's block cache's allocator
// is charged to the tenant (docs/rocksdb.md lists what is not counted).
#ifndef MEMCG_ROCKSDB_WRITE_BUFFER_HPP_
#define MEMCG_ROCKSDB_WRITE_BUFFER_HPP_

#include <rocksdb/db.h>
#include <rocksdb/write_buffer_manager.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "memcg/core/mirror.hpp"
#include "memcg/core/reclaim.hpp"

namespace memcg::rocksdb {

struct WriteBufferOptions {
  uint64_t max_bytes = 64 << 20;  // the write buffer size wanted for all the tenant's memtables
  uint64_t min_bytes = 1 << 20;   // never sized below this
  unsigned limit_percent = 25;    // at most this share of the group's tightest limit (1..100)
  // RocksDB stalls writes while the memtables hold the whole buffer, until flushes free it
  // (WriteBufferManager's allow_stall): what holds memtables to the buffer when flushes lag.
  bool allow_stall = true;
  // A stall that lasts this long (memtables that no flush frees: pinned by iterators, a stuck
  // flush) is ended by raising the buffer above the memtables: a write never waits for ever
  // because of the group. Counted in stall_escapes().
  uint64_t stall_timeout_ns = 500'000'000;
  // Mirror the memtables' size into the group. Off where the memtables' pages are charged
  // already (arena mode: the writing threads are bound to the group's arena); the buffer is
  // still sized from the group and flushed when it must shrink.
  bool mirror = true;
};

class WriteBufferGovernor final : public Reclaimer {
 public:
  // `wake` is called from reclaim (any thread, inside a charge: it must not block or charge)
  // to bring the next update() forward. Throws std::invalid_argument for min_bytes of 0,
  // min_bytes > max_bytes or limit_percent outside 1..100.
  WriteBufferGovernor(Group& group, WriteBufferOptions options = {},
                      std::function<void()> wake = {});
  // Unregisters and uncharges the mirror. REQUIRES: the databases using manager() are closed.
  ~WriteBufferGovernor() override;
  WriteBufferGovernor(const WriteBufferGovernor&) = delete;
  WriteBufferGovernor& operator=(const WriteBufferGovernor&) = delete;

  // For DBOptions::write_buffer_manager of every database of the tenant.
  const std::shared_ptr<::rocksdb::WriteBufferManager>& manager() const noexcept {
    return manager_;
  }
  // The databases update() may flush (their default column family, or `families`). add()
  // after DB::Open, remove() before closing: remove waits for an update in flight.
  void add(::rocksdb::DB* db, std::vector<::rocksdb::ColumnFamilyHandle*> families = {});
  void remove(::rocksdb::DB* db);

  // The safe point: size, mirror, flush. From the governor thread or the application's own
  // thread, never from inside a charge or a RocksDB callback.
  void update() noexcept;

  // The size the buffer would get from the group now.
  uint64_t target() const noexcept;
  uint64_t buffer_size() const noexcept { return manager_->buffer_size(); }
  const MirroredCharge& mirror() const noexcept { return mirror_; }
  uint64_t flushes() const noexcept { return flushes_.load(std::memory_order_relaxed); }
  uint64_t flush_requests() const noexcept {
    return flush_requests_.load(std::memory_order_relaxed);
  }
  uint64_t stall_escapes() const noexcept { return stall_escapes_.load(std::memory_order_relaxed); }

  // Reclaimer: memtable memory is freed by a flush, after the charge that asked.
  int64_t reclaimable() const noexcept override;
  ReclaimResult reclaim(int64_t nr_to_scan, int priority) override;

 private:
  struct Db {
    ::rocksdb::DB* db;
    std::vector<::rocksdb::ColumnFamilyHandle*> families;
  };
  GroupRef group_;
  const WriteBufferOptions options_;
  const std::function<void()> wake_;
  std::shared_ptr<::rocksdb::WriteBufferManager> manager_;
  MirroredCharge mirror_;
  std::mutex dbs_mu_;  // guards dbs_; held across update()'s flush requests
  std::vector<Db> dbs_;
  std::atomic<bool> flush_wanted_{false};
  std::atomic<uint64_t> flushes_{0};
  std::atomic<uint64_t> flush_requests_{0};
  std::atomic<uint64_t> stall_escapes_{0};
  uint64_t stall_since_ns_ = 0;  // guarded by update_mu_
  std::mutex update_mu_;          // serialises update()
  ReclaimerRegistration registration_;  // last: registered once everything above is ready
};

}  // namespace memcg::rocksdb

#endif  // MEMCG_ROCKSDB_WRITE_BUFFER_HPP_
