// ByteAllocator: a rocksdb::MemoryAllocator for the block cache that charges a group the exact
// bytes of every block it hands out.
//
// RocksDB gives its MemoryAllocator the size at Allocate() only, so each block carries a 16-byte
// header with its size (which keeps malloc's 16-byte alignment); the header is charged too.
// Charges go through the object layer (obj_stock.hpp): byte-exact, a unit charge only when a
// CPU's reserve runs out.
//
// RocksDB survives neither a null (a read fails with "IO error: Bad address") nor an exception
// from its allocator, so a block is never refused: the charge may reclaim once (the group's
// cache governor then lowers the cache's capacity), and if the group still has no room it is
// forced past memory.max and counted (forced(), forced_bytes()). The overshoot that forcing can
// cause is bounded by the blocks being read at that instant (one per reading thread) plus what
// the cache cannot evict because readers pin it (rocksdb::Cache::GetPinnedUsage): the governor
// keeps the capacity below the room, so RocksDB evicts before it allocates the next block.
// Only a failure of malloc itself ends the process (std::abort, with a message), as an
// operator new failing inside RocksDB would.
//
// Every block is uncharged from the group it was charged to, from any thread, also after the
// group was removed (the object layer holds the group while bytes are charged).
#ifndef MEMCG_ROCKSDB_ALLOCATOR_HPP_
#define MEMCG_ROCKSDB_ALLOCATOR_HPP_

#include <rocksdb/memory_allocator.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/group.hpp"

namespace memcg::rocksdb {

// What a governed block cache needs of its allocator besides rocksdb::MemoryAllocator: the bytes
// of the live blocks as the group counts them (the cache governor's usage), and the overshoot
// counters. Two implementations: ByteAllocator (below) and, where memcg::jemalloc is built,
// ArenaAllocator (arena.hpp).
class BlockAllocator : public ::rocksdb::MemoryAllocator {
 public:
  // Bytes of live blocks as the allocator counts them (ByteAllocator: charged bytes, headers
  // included; ArenaAllocator: jemalloc's size classes): what freeing every block gives back.
  uint64_t live_bytes() const noexcept { return live_bytes_.load(std::memory_order_relaxed); }
  uint64_t live_blocks() const noexcept { return live_blocks_.load(std::memory_order_relaxed); }
  // Blocks charged past memory.max because the group had no room, and their bytes (0 where the
  // pages' owner counts them: ArenaStats::forced).
  uint64_t forced() const noexcept { return forced_.load(std::memory_order_relaxed); }
  uint64_t forced_bytes() const noexcept { return forced_bytes_.load(std::memory_order_relaxed); }
  // The overshoot, counted: bytes of forced blocks still live, and the most there ever were.
  // The group's usage passes memory.max by no more than these (and the other forced charges of
  // the group, such as the memtable mirror's).
  uint64_t forced_live_bytes() const noexcept {
    return forced_live_.load(std::memory_order_relaxed);
  }
  uint64_t forced_live_peak() const noexcept {
    return forced_live_peak_.load(std::memory_order_relaxed);
  }
  Group& group() const noexcept { return *group_; }
  // Called by the tenant's governor thread after the cache's capacity was lowered and RocksDB
  // freed blocks: gives their memory back to the group where freeing alone does not (an arena's
  // freed pages stay charged until purged). Never from inside a charge.
  virtual void trim() noexcept {}

 protected:
  explicit BlockAllocator(Group& group) : group_(&group) {}
  void count_live(uint64_t bytes, bool forced) noexcept;
  void count_freed(uint64_t bytes, bool forced) noexcept;

 private:
  GroupRef group_;
  std::atomic<uint64_t> live_bytes_{0};
  std::atomic<uint64_t> live_blocks_{0};
  std::atomic<uint64_t> forced_{0};
  std::atomic<uint64_t> forced_bytes_{0};
  std::atomic<uint64_t> forced_live_{0};
  std::atomic<uint64_t> forced_live_peak_{0};
};

class ByteAllocator final : public BlockAllocator {
 public:
  static constexpr std::size_t kHeaderBytes = 16;
  // Flags of each block's charge: one reclaim round, then forced; never an OOM kill.
  static constexpr uint32_t kChargeFlags = kMayBlock | kNoRetry | kNoFail;

  // Charges `group` (held by reference until destruction) as `kind` (memory.stat: file by
  // default, as the kernel counts a page cache).
  explicit ByteAllocator(Group& group, int kind = StatRegistry::kFile);
  ~ByteAllocator() override = default;

  const char* Name() const override { return "memcg::rocksdb::ByteAllocator"; }
  void* Allocate(std::size_t size) override;
  void Deallocate(void* p) override;
  std::size_t UsableSize(void* p, std::size_t allocation_size) const override;

 private:
  const int kind_;
};

}  // namespace memcg::rocksdb

#endif  // MEMCG_ROCKSDB_ALLOCATOR_HPP_
