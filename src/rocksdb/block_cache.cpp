#include "memcg/rocksdb/block_cache.hpp"

#include <algorithm>
#include <stdexcept>

#include "guarded_cache.hpp"

namespace memcg::rocksdb {

namespace {
// RocksDB's default shard count follows the configured capacity: the most shard bits (at most 6)
// that leave each shard at least 512 KiB (GetDefaultCacheShardBits). LRUCache holds each shard to
// its own 1/n of the capacity, so shards much smaller than that evict while the cache as a whole
// has room: 64 shards of a 16 MiB room hold 256 KiB each, an index block larger than that is
// dropped after every use, and a working set of a few thousand blocks spreads unevenly over them
// (the fullest shards evict with the total below the capacity). A governed cache runs at the
// group's room, often far below its configuration, and a protected group's cache under pressure
// at its protection. So the same rule is applied to the smallest of the configured capacity, the
// tightest memory.high/max above the group, and the group's protection (max of memory.min and
// memory.low) where it has one.
int default_shard_bits(const Group& group, uint64_t capacity) {
  for (const Group* g = &group; g != nullptr && !g->is_root(); g = g->parent())
    capacity = std::min({capacity, g->high(), g->max()});
  const uint64_t protection = std::max(group.min(), group.low());
  if (protection > 0) capacity = std::min(capacity, protection);
  int bits = 0;
  while (bits < 6 && (capacity >> (bits + 1)) >= (uint64_t{512} << 10)) ++bits;
  return bits;
}

uint64_t tightest_limit(const Group& group) noexcept {
  uint64_t limit = kUnlimited;
  for (const Group* g = &group; g != nullptr && !g->is_root(); g = g->parent())
    limit = std::min({limit, g->high(), g->max()});
  return limit;
}

// Set on a thread that may lower the capacity itself (update(), the constructor).
thread_local bool t_direct = false;

struct DirectScope {
  bool saved = t_direct;
  DirectScope() { t_direct = true; }
  ~DirectScope() { t_direct = saved; }
};
}  // namespace

BlockCache::BlockCache(Group& group, BlockCacheOptions options)
    : allocator_(options.allocator != nullptr ? options.allocator
                                              : std::make_shared<ByteAllocator>(group)),
      defer_reclaim_(options.defer_reclaim),
      wake_(std::move(options.wake)),
      group_(&group),
      fixed_(options.capacity_bytes) {
  if (&allocator_->group() != &group)
    throw std::invalid_argument("memcg::rocksdb::BlockCache: the allocator is on another group");
  if (fixed_ != 0) options.governor.max_bytes = fixed_;
  if (options.governor.min_bytes > options.governor.max_bytes)
    throw std::invalid_argument("memcg::rocksdb::BlockCache: governor.min_bytes above capacity");
  // Following the group: RocksDB starts at the group's tightest limit (the governor sets the
  // capacity right after), the shards follow the same.
  const uint64_t initial =
      fixed_ != 0 ? fixed_ : std::min(tightest_limit(group), kUnlimitedCapacity * 1024);
  ::rocksdb::LRUCacheOptions lru;
  lru.capacity = static_cast<std::size_t>(std::min<uint64_t>(initial, SIZE_MAX));
  lru.num_shard_bits = options.num_shard_bits >= 0 ? options.num_shard_bits
                                                   : default_shard_bits(group, initial);
  lru.strict_capacity_limit = false;  // an insert never fails: the capacity is a target
  lru.memory_allocator = allocator_;
  cache_ = std::make_shared<internal::GuardedCache>(::rocksdb::NewLRUCache(lru), allocator_,
                                                    this, &BlockCache::has_pending,
                                                    &BlockCache::after_call);
  DirectScope direct;
  governor_ = std::make_unique<CacheGovernor>(group, *this, options.governor);
}

BlockCache::~BlockCache() {
  governor_.reset();  // no reclaim calls into the cache from here on
  cache_->SetCapacity(0);
  cache_->EraseUnRefEntries();
}

bool BlockCache::has_pending(const BlockCache* self) noexcept {
  return !self->defer_reclaim_ && self->pending_.load(std::memory_order_relaxed) != kNone;
}

void BlockCache::after_call(BlockCache* self) noexcept {
  const uint64_t pending = self->pending_.exchange(kNone, std::memory_order_acq_rel);
  if (pending != kNone) self->apply_deferred(pending);
}

void BlockCache::apply_deferred(uint64_t bytes) noexcept {
  apply(bytes);
  // The governor records the cut now that it is in force (null while it is being built).
  if (CacheGovernor* g = governor_.get()) g->applied(applied_.load(std::memory_order_relaxed));
}

bool BlockCache::set_capacity_bytes(uint64_t bytes) noexcept {
  // Inside one of RocksDB's cache calls on this thread (a hooked operator new under a shard's
  // mutex): SetCapacity would take that mutex again. Deferred to the end of the call.
  if ((defer_reclaim_ && !t_direct) || internal::in_cache_call()) {
    // Perhaps inside a charge made under a shard's mutex: SetCapacity would take it again. Until
    // the governor thread applies it nothing is freed, so every safe point of the window asks
    // again for the same overage: the shrink is held at the room the group leaves the cache
    // now (the governor's target, from the blocks actually live), which those repeated asks do
    // not move, instead of going down by the overage at each of them.
    const CacheGovernor* g = governor_.get();  // null while the governor is being built
    if (g != nullptr) bytes = std::max(bytes, g->target());
    pending_.store(bytes, std::memory_order_release);
    deferred_.fetch_add(1, std::memory_order_relaxed);
    if (wake_) wake_();
    return false;
  }
  apply(bytes);
  return true;
}

void BlockCache::update() noexcept {
  DirectScope direct;
  const uint64_t before = applied_.load(std::memory_order_relaxed);
  const uint64_t pending = pending_.exchange(kNone, std::memory_order_acq_rel);
  if (pending != kNone) apply_deferred(pending);
  governor_->update();
  if (applied_.load(std::memory_order_relaxed) < before) allocator_->trim();
  const bool conflict = below_protection();
  // Counted once per transition into the conflict, whichever thread updates.
  if (in_conflict_.exchange(conflict, std::memory_order_relaxed) != conflict && conflict)
    conflicts_.fetch_add(1, std::memory_order_relaxed);
}

bool BlockCache::below_protection() const noexcept {
  return fixed_ != 0 && fixed_ < std::max(group_->min(), group_->low());
}

void BlockCache::apply(uint64_t bytes) noexcept {
  // Following a group with no limit anywhere: bounded all the same.
  if (fixed_ == 0 && tightest_limit(*group_) == kUnlimited)
    bytes = std::min(bytes, kUnlimitedCapacity);
  applied_.store(bytes, std::memory_order_relaxed);
  // RocksDB's charge per byte the group counts (> 1: handles and Block objects; < 1 never
  // seen). Measured only once there is enough in the cache to measure.
  const uint64_t live = allocator_->live_bytes();
  const uint64_t usage = cache_->GetUsage();
  double ratio = 1.0;
  if (live >= (1u << 20) && usage > 0) ratio = static_cast<double>(usage) / static_cast<double>(live);
  const double scaled = static_cast<double>(bytes) * ratio;
  const std::size_t cap = scaled >= static_cast<double>(SIZE_MAX) ? SIZE_MAX
                                                                  : static_cast<std::size_t>(scaled);
  cache_->SetCapacity(cap);
}

}  // namespace memcg::rocksdb
