// BlockCache: a RocksDB LRU block cache whose blocks a group pays for and whose capacity the
// group sets (memcg::CacheGovernor), so that RocksDB evicts by its own LRU logic.
//
// The blocks come from a ByteAllocator on the group. The capacity given to RocksDB is the
// governor's target converted into RocksDB's terms: RocksDB counts a block's charge with its
// metadata, the group counts the block's bytes with their header, and the ratio of the two
// (measured from the cache's usage and the allocator's live bytes) scales the capacity.
// Reclaim of the group lowers the capacity; RocksDB evicts unpinned blocks down to it before
// SetCapacity returns (LRUCacheShard::SetCapacity), and their Deallocate uncharges them.
//
// With the global operator-new hook (memcg::hook), a reclaim can start on a thread that holds
// one of the cache's shard mutexes: RocksDB's LRUHandleTable::Resize allocates the grown handle
// table with operator new under it, and the hook charges that allocation. SetCapacity takes
// every shard's mutex, that one included: a self-deadlock (reproduced by
// tests/rocksdb/rocksdb_hook_cache_test.cpp before this was handled). So cache() is a wrapper
// (internal::GuardedCache) that marks the thread as inside a cache call. A shrink asked there is
// deferred, like defer_reclaim's, and applied at the end of the outermost call, with no RocksDB
// lock held. What RocksDB allocates inside the call is forced (NoFailScope), never thrown, and
// counted as the group's forced charge.
#ifndef MEMCG_ROCKSDB_BLOCK_CACHE_HPP_
#define MEMCG_ROCKSDB_BLOCK_CACHE_HPP_

#include <rocksdb/cache.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "memcg/core/reclaim/cache_governor.hpp"
#include "memcg/rocksdb/allocator.hpp"

namespace memcg::rocksdb {

struct BlockCacheOptions {
  // 0 (the default): the cache follows its group, up to the room the tightest memory.high/max
  // above it leaves (the governor's target), and to kUnlimitedCapacity while no level has a
  // limit. Otherwise a size the user fixes: the capacity never goes above it
  // (CacheGovernorOptions' max_bytes, which is overridden with it). A fixed size below the
  // group's protection (max of memory.min and memory.low) defeats it: Tenant::configure()
  // refuses it, and update() counts it when the protection is raised later
  // (capacity_conflicts()).
  uint64_t capacity_bytes = 0;
  // -1: RocksDB's own rule (the most shard bits, at most 6, that leave each shard at least
  // 512 KiB: LRUCache holds each shard to its 1/n of the capacity) applied to the capacity the
  // cache is expected to run at, read at construction: the smallest of capacity_bytes, the
  // tightest memory.high/max above the group, and the group's protection (max of memory.min and
  // memory.low) if it has one. A group of memory.min 16 MiB under a 96 MiB parent: 32 shards, not
  // 64 (a protection set after construction does not change the count; set it first, or pass
  // num_shard_bits).
  int num_shard_bits = -1;
  CacheGovernorOptions governor;
  // The blocks' allocator; null: a ByteAllocator on the group. An allocator on another group
  // is refused.
  std::shared_ptr<BlockAllocator> allocator;
  // Reclaim lowers the capacity only through update() (the tenant's governor thread), which
  // `wake` (called from inside the charge: it must not block or charge) brings forward; reclaim
  // itself frees nothing at once, and asks no lower than the governor's room-based target (so
  // memory.reclaim's proactive asks do not shrink such a cache; limits and pressure do). For
  // allocators whose charges may run reclaim on a thread that holds one of RocksDB's cache locks
  // (an arena's safe points in operator new and delete, which RocksDB calls with a shard's mutex
  // held): lowering the capacity takes those locks.
  bool defer_reclaim = false;
  std::function<void()> wake;
};

class BlockCache final : public GovernedCache {
 public:
  // The capacity of a cache that follows a group with no limit at any level.
  static constexpr uint64_t kUnlimitedCapacity = uint64_t{64} << 20;

  // Builds the cache on `group` and starts governing it. Throws std::invalid_argument for a
  // capacity of 0, governor bounds that contradict it, or an allocator on another group.
  BlockCache(Group& group, BlockCacheOptions options = {});
  // Stops governing, then frees every block nobody holds. Blocks still referenced (a database
  // still open on the cache) stay charged until released: close the databases first.
  ~BlockCache() override;
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // For BlockBasedTableOptions::block_cache.
  const std::shared_ptr<::rocksdb::Cache>& cache() const noexcept { return cache_; }
  BlockAllocator& allocator() const noexcept { return *allocator_; }
  CacheGovernor& governor() noexcept { return *governor_; }
  // The governor's update, a capacity that a deferred reclaim left, and the allocator's trim
  // when the capacity went down. From a thread that holds no RocksDB lock, not in a charge.
  void update() noexcept;
  // Reclaims deferred (defer_reclaim) and applied by update().
  uint64_t deferred() const noexcept { return deferred_.load(std::memory_order_relaxed); }
  // The fixed capacity_bytes (0: following the group).
  uint64_t fixed_capacity() const noexcept { return fixed_; }
  // A fixed capacity below the group's protection: whether it is now, and the updates that found
  // it so after one that did not (or the first).
  bool below_protection() const noexcept;
  uint64_t capacity_conflicts() const noexcept {
    return conflicts_.load(std::memory_order_relaxed);
  }

  // GovernedCache
  uint64_t usage_bytes() const noexcept override { return allocator_->live_bytes(); }
  bool set_capacity_bytes(uint64_t bytes) noexcept override;

 private:
  void apply(uint64_t bytes) noexcept;
  void apply_deferred(uint64_t bytes) noexcept;  // apply(), then tell the governor
  // GuardedCache's end of the outermost call: a shrink deferred there is applied now (only
  // without defer_reclaim, whose shrinks the governor thread applies).
  static bool has_pending(const BlockCache* self) noexcept;
  static void after_call(BlockCache* self) noexcept;

  static constexpr uint64_t kNone = UINT64_MAX;
  std::shared_ptr<BlockAllocator> allocator_;
  std::shared_ptr<::rocksdb::Cache> cache_;
  const bool defer_reclaim_;
  const std::function<void()> wake_;
  std::atomic<uint64_t> pending_{kNone};  // a deferred reclaim's capacity
  std::atomic<uint64_t> applied_{kNone};  // the last capacity applied, in the group's bytes
  std::atomic<uint64_t> deferred_{0};
  GroupRef group_;
  const uint64_t fixed_;  // capacity_bytes
  std::atomic<bool> in_conflict_{false};
  std::atomic<uint64_t> conflicts_{0};
  std::unique_ptr<CacheGovernor> governor_;
};

}  // namespace memcg::rocksdb

#endif  // MEMCG_ROCKSDB_BLOCK_CACHE_HPP_
