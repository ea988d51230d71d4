#include "memcg/rocksdb/allocator.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/charge/obj_stock.hpp"

namespace memcg::rocksdb {

namespace {
struct alignas(16) Header {
  uint64_t bytes;  // the charged size: header included
  uint64_t magic;
};
static_assert(sizeof(Header) == ByteAllocator::kHeaderBytes);
constexpr uint64_t kMagic = 0x6d656d6367726462ull;        // "memcgrdb"
constexpr uint64_t kMagicForced = 0x6d656d6367726446ull;  // "memcgrdF": charged past max

[[noreturn]] void die(const char* what, std::size_t size) {
  std::fprintf(stderr, "memcg::rocksdb::ByteAllocator: %s (%zu bytes)\n", what, size);
  std::fflush(stderr);
  std::abort();
}
}  // namespace

void BlockAllocator::count_live(uint64_t bytes, bool forced) noexcept {
  live_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  live_blocks_.fetch_add(1, std::memory_order_relaxed);
  if (!forced) return;
  forced_.fetch_add(1, std::memory_order_relaxed);
  forced_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  const uint64_t live = forced_live_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  uint64_t peak = forced_live_peak_.load(std::memory_order_relaxed);
  while (live > peak &&
         !forced_live_peak_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

void BlockAllocator::count_freed(uint64_t bytes, bool forced) noexcept {
  live_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  live_blocks_.fetch_sub(1, std::memory_order_relaxed);
  if (forced) forced_live_.fetch_sub(bytes, std::memory_order_relaxed);
}

ByteAllocator::ByteAllocator(Group& group, int kind) : BlockAllocator(group), kind_(kind) {}

void* ByteAllocator::Allocate(std::size_t size) {
  if (size > ObjStock::kMaxBytes) die("block too large to count", size);
  const uint64_t bytes = size + kHeaderBytes;
  // The memory first: a charge that reclaims may make the cache free blocks, which is cheaper
  // than holding a charge while malloc fails.
  void* raw = std::malloc(bytes);
  for (int attempt = 0; raw == nullptr && attempt < 3; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    raw = std::malloc(bytes);
  }
  if (raw == nullptr) die("malloc failed", size);
  const ChargeStatus s =
      group().controller().obj_stock().charge(group(), bytes, kChargeFlags, kind_);
  const bool forced = s == ChargeStatus::kForced;
  // kNoMem cannot come with kNoFail below the range bound checked above, but if the counters
  // ever refused, the block is still served, recorded as uncharged.
  auto* h = static_cast<Header*>(raw);
  h->bytes = charged(s) ? bytes : 0;
  h->magic = forced ? kMagicForced : kMagic;
  if (charged(s)) count_live(bytes, forced);
  return h + 1;
}

void ByteAllocator::Deallocate(void* p) {
  if (p == nullptr) return;
  Header* h = static_cast<Header*>(p) - 1;
  if (h->magic != kMagic && h->magic != kMagicForced)
    die("Deallocate of a block this allocator did not hand out", 0);
  const bool forced = h->magic == kMagicForced;
  h->magic = 0;
  const uint64_t bytes = h->bytes;
  std::free(h);
  if (bytes != 0) {
    group().controller().obj_stock().uncharge(group(), bytes, kind_);
    // After the uncharge: the count never shows less than the counters may still hold.
    count_freed(bytes, forced);
  }
}

std::size_t ByteAllocator::UsableSize(void* /*p*/, std::size_t allocation_size) const {
  return allocation_size;  // exactly what was charged for the caller's part
}

}  // namespace memcg::rocksdb
