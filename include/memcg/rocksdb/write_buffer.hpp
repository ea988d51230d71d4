// WriteBufferGovernor: RocksDB's memtables held to a group.
//
// Memtables allocate with plain new[] and have no allocator hook; RocksDB's WriteBufferManager
// (not meant to be subclassed) is the one place that knows their total. The governor owns the
// tenant's WriteBufferManager and:
//   - charges the memtables as they grow, on the writing thread: the manager reserves its memory
//     in a cache of the governor's (internal::ReservationCache) each time a memtable takes an
//     arena block, and each reservation step sets the group's mirror (memcg::MirroredCharge) to
//     memory_usage(). So memory.current, memory.max and the cache governor see a write's
//     memtable memory while it is written, within one step (256 KiB, RocksDB's reservation
//     unit), whichever its size; a growth with no room left is forced and counted
//     (mirror().forced_bytes());
//   - at each update(): sizes the manager from the group (min(memory.high, memory.max) of the
//     tightest level times `limit_percent`, clamped to [min_bytes, max_bytes]; RocksDB then
//     switches and flushes memtables by its own rule once they pass 7/8 of it), refreshes the
//     mirror (frees are reported there), ends a write stall that no flush has ended within
//     stall_timeout_ns, and asks for a flush when the memtables are over the buffer size or
//     reclaim asked for memory since the last update;
//   - runs the flushes (DB::Flush, wait=false) on a thread of its own: DB::Flush waits for the
//     write in progress to leave RocksDB's write queue (seconds for a large batch), and neither
//     update() nor the cache governor that runs beside it may wait with it;
//   - admits writes (admit(), Tenant::write()): a write that would pass memory.max stalls until
//     reclaim and flushes make room, up to a deadline, or fails at once, as the options say; a
//     write larger than memory.max fails at once. Writes made with DB::Write directly are still
//     charged as they happen (and held by RocksDB's own stall), but not admitted first.
// Reclaim never flushes from inside a charge: it only records the request and wakes the
// component's governor thread (the `wake` function), which asks for the flush at its next update.
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
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "memcg/core/charge/mirror.hpp"
#include "memcg/core/reclaim/reclaim.hpp"

namespace memcg::rocksdb {

namespace internal {
class ReservationCache;
}

// What admit() does with a write the group has no room for, once reclaim has run.
enum class WriteAdmission {
  kStall,  // wait for flushes and reclaim to make room, up to admit_timeout_ns; then TimedOut
  kFail,   // fail at once with Status::MemoryLimit, nothing written
};

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
  // Mirror the memtables' size into the group, on the writing thread as they grow. Off where
  // the memtables' pages are charged already (arena mode: the writing threads are bound to the
  // group's arena); the buffer is still sized from the group and flushed when it must shrink.
  bool mirror = true;
  // admit(): a write the group has no room for stalls (up to admit_timeout_ns) or fails.
  WriteAdmission admission = WriteAdmission::kStall;
  uint64_t admit_timeout_ns = 1'000'000'000;
};

class WriteBufferGovernor final : public Reclaimer {
 public:
  // `wake` is called from reclaim (any thread, inside a charge: it must not block or charge)
  // to bring the next update() forward. Throws std::invalid_argument for min_bytes of 0,
  // min_bytes > max_bytes or limit_percent outside 1..100.
  WriteBufferGovernor(Group& group, WriteBufferOptions options = {},
                      std::function<void()> wake = {});
  // Stops the flush thread, unregisters and uncharges the mirror. REQUIRES: the databases using
  // manager() are closed (manager() itself may live on: its last releases reach nobody).
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

  // Admission of a write whose memtable cost is about `bytes` (Tenant::write() estimates it
  // from the batch), from the writing thread before it writes. OK when the group has room for
  // it now (reclaim included: the charge that proves it is given back at once, the write
  // charges itself as it goes). Status::MemoryLimit at once, nothing changed, when `bytes` is
  // larger than the tightest memory.max above the group (no flush could make room: counted in
  // oversized_writes()); otherwise, with no room, a flush is asked and the options' admission
  // applies: kFail returns MemoryLimit at once, kStall retries until admit_timeout_ns and then
  // returns TimedOut (both counted in refused_writes()). Never from inside a charge.
  ::rocksdb::Status admit(uint64_t bytes) noexcept;

  // The size the buffer would get from the group now.
  uint64_t target() const noexcept;
  uint64_t buffer_size() const noexcept { return manager_->buffer_size(); }
  const MirroredCharge& mirror() const noexcept { return mirror_; }
  uint64_t flushes() const noexcept { return flushes_.load(std::memory_order_relaxed); }
  uint64_t flush_requests() const noexcept {
    return flush_requests_.load(std::memory_order_relaxed);
  }
  uint64_t stall_escapes() const noexcept { return stall_escapes_.load(std::memory_order_relaxed); }
  uint64_t oversized_writes() const noexcept {
    return oversized_writes_.load(std::memory_order_relaxed);
  }
  uint64_t refused_writes() const noexcept { return refused_writes_.load(std::memory_order_relaxed); }
  // Mirror updates made as the manager's reservation changed: by writing threads as memtables
  // grew, and by whoever freed them (not by update()).
  uint64_t write_charges() const noexcept { return write_charges_.load(std::memory_order_relaxed); }

  // Reclaimer: memtable memory is freed by a flush, after the charge that asked.
  int64_t reclaimable() const noexcept override;
  ReclaimResult reclaim(int64_t nr_to_scan, int priority) override;

 private:
  struct Db {
    ::rocksdb::DB* db;
    std::vector<::rocksdb::ColumnFamilyHandle*> families;
  };
  void flush_all() noexcept;  // DB::Flush on every database, under dbs_mu_
  void run_flusher();

  GroupRef group_;
  const WriteBufferOptions options_;
  const std::function<void()> wake_;
  MirroredCharge mirror_;
  std::shared_ptr<internal::ReservationCache> reservations_;  // null without the mirror
  std::shared_ptr<::rocksdb::WriteBufferManager> manager_;
  std::mutex dbs_mu_;  // guards dbs_; held across the flush requests
  std::vector<Db> dbs_;
  std::mutex flush_mu_;  // the flush thread's sleep
  std::condition_variable flush_cv_;
  bool flush_pending_ = false;  // guarded by flush_mu_
  bool flush_stop_ = false;     // guarded by flush_mu_
  std::atomic<uint64_t> oversized_writes_{0};
  std::atomic<uint64_t> refused_writes_{0};
  std::atomic<uint64_t> write_charges_{0};
  std::atomic<bool> flush_wanted_{false};
  std::atomic<uint64_t> flushes_{0};
  std::atomic<uint64_t> flush_requests_{0};
  std::atomic<uint64_t> stall_escapes_{0};
  uint64_t stall_since_ns_ = 0;  // guarded by update_mu_
  std::mutex update_mu_;          // serialises update()
  std::thread flusher_;
  ReclaimerRegistration registration_;  // last: registered once everything above is ready
};

}  // namespace memcg::rocksdb

#endif  // MEMCG_ROCKSDB_WRITE_BUFFER_HPP_
