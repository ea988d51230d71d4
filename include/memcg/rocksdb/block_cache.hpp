// BlockCache: a RocksDB LRU block cache whose blocks a group pays for and whose capacity the
// group sets (memcg::CacheGovernor), so that RocksDB evicts by its own LRU logic.
//
// The blocks come from a ByteAllocator on the group. The capacity given to RocksDB is the
// governor's target converted into RocksDB's terms: RocksDB counts a block's charge with its
// metadata, the group counts the block's bytes with their header, and the ratio of the two
// (measured from the cache's usage and the allocator's live bytes) scales the capacity.
// Reclaim of the group lowers the capacity; RocksDB evicts unpinned blocks down to it before
// SetCapacity returns (LRUCacheShard::SetCapacity), and their Deallocate uncharges them.
#ifndef MEMCG_ROCKSDB_BLOCK_CACHE_HPP_
#define MEMCG_ROCKSDB_BLOCK_CACHE_HPP_

#include <rocksdb/cache.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "memcg/core/cache_governor.hpp"
#include "memcg/rocksdb/allocator.hpp"

namespace memcg::rocksdb {

struct BlockCacheOptions {
  // The cache's configured size: the capacity never goes above it (CacheGovernorOptions'
  // max_bytes, which is overridden with it).
  uint64_t capacity_bytes = 64 << 20;
  // -1: one shard per 512 KiB (at most 64, RocksDB's rule) of the smaller of capacity_bytes and
  // the tightest memory.high/max above the group at construction, not of capacity_bytes alone.
  int num_shard_bits = -1;
  CacheGovernorOptions governor;
};

class BlockCache final : public GovernedCache {
 public:
  // Builds the cache on `group` and starts governing it. Throws std::invalid_argument for a
  // capacity of 0 or governor bounds that contradict it.
  BlockCache(Group& group, BlockCacheOptions options = {});
  // Stops governing, then frees every block nobody holds. Blocks still referenced (a database
  // still open on the cache) stay charged until released: close the databases first.
  ~BlockCache() override;
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // For BlockBasedTableOptions::block_cache.
  const std::shared_ptr<::rocksdb::Cache>& cache() const noexcept { return cache_; }
  ByteAllocator& allocator() const noexcept { return *allocator_; }
  CacheGovernor& governor() noexcept { return *governor_; }

  // GovernedCache
  uint64_t usage_bytes() const noexcept override { return allocator_->live_bytes(); }
  void set_capacity_bytes(uint64_t bytes) noexcept override;

 private:
  std::shared_ptr<ByteAllocator> allocator_;
  std::shared_ptr<::rocksdb::Cache> cache_;
  std::unique_ptr<CacheGovernor> governor_;
};

}  // namespace memcg::rocksdb

#endif  // MEMCG_ROCKSDB_BLOCK_CACHE_HPP_
