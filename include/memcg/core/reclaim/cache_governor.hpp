// CacheGovernor: a cache whose capacity the group sets, so that the cache evicts by its own logic
// instead of entry by entry under a charge.
//
// A cache that is charged per entry and answers reclaim only by "free N units now" makes every
// insert at the limit pay for a reclaim call, and its eviction order is the reclaimer's, not the
// cache's. A governed cache instead has a capacity that follows the room the group leaves it:
//
//   room at a level   = min(memory.high, memory.max) - (usage - cache usage) - headroom
//   floor at a level  = the group's effective protection against that level's reclaim
//                       - the group's non-cache usage
//   target            = min(room of the group, over each limited ancestor:
//                           max(room of the ancestor, floor at the ancestor)),
//                       clamped to [min_bytes, max_bytes]
//
// The effective protection is the reclaim driver's (protection.hpp): the larger of emin and elow
// of the group in a walk rooted at that ancestor, a child of it getting its declared memory.min/
// low, a deeper group its share of what its parent gets (recursive protection included), and the
// group's usage taken as at least its own protection, so that a protected cache under pressure
// can fill up to it. The group's own limit is not held back by its protection (a reclaim root's
// protection does not count against itself). So, as the kernel's reclaim skips a group under its
// effective min, update() never shrinks a cache whose group is under its effective protection
// at the level that presses; and a memory.min its parent does not hand out keeps nothing.
//
// update() lowers the capacity to the target at once and raises it only when the target passed
// it by `hysteresis_bytes` and no reclaim lowered it in the last `grow_delay_ns`, so a cache that
// pressure shrank does not grow straight back into it; a capacity below the protected floor (the
// smallest floor of the limited ancestors: a reclaim bite may take it there, as the kernel's
// reclaim may take a protected group one batch below its protection) comes back to the floor at
// the next update, without either delay. As a Reclaimer on the group it answers reclaim
// (memory.max, memory.high, memory.reclaim, an ancestor's pressure, with the group's protection
// honoured by the driver) by lowering the capacity by what was asked; the cache evicts down to
// it. A cache that defers the cut (set_capacity_bytes returns false: it cannot take its own locks
// where reclaim runs) tells the governor when it applies it (applied()); the governor records the
// cut then, not when it asked, so capacity() is the capacity in force and repeated asks for
// memory not yet freed do not each lower it.
//
// The kernel has no counterpart: its shrinkers are asked to scan objects. This is the capacity
// a user-space cache already has (RocksDB's LRUCache::SetCapacity), driven by the group.
#ifndef MEMCG_CORE_CACHE_GOVERNOR_HPP_
#define MEMCG_CORE_CACHE_GOVERNOR_HPP_

#include <atomic>
#include <cstdint>
#include <mutex>

#include "memcg/core/tree/group.hpp"
#include "memcg/core/reclaim/reclaim.hpp"

namespace memcg {

// What a governed cache offers: its size as the group counts it, and a capacity to evict to.
class GovernedCache {
 public:
  virtual ~GovernedCache() = default;
  // Bytes of the group's usage that the cache holds now (what evicting everything would free).
  virtual uint64_t usage_bytes() const noexcept = 0;
  // Evicts down to `bytes` (before returning, or soon) and admits no more than that afterwards;
  // returns true. A cache that cannot apply it now (reclaim may run while one of its own locks
  // is held) may keep it to apply later and return false: it then calls
  // CacheGovernor::applied() with the capacity it applies, when it does. Called from update()
  // and from reclaim (with no library lock held, under the governor's call mutex): it must not
  // call back into this governor.
  virtual bool set_capacity_bytes(uint64_t bytes) noexcept = 0;
};

struct CacheGovernorOptions {
  uint64_t min_bytes = 0;             // the capacity never goes below this
  uint64_t max_bytes = UINT64_MAX;    // nor above this (the cache's own configured size)
  // Kept free below the limit for the group's other memory to grow into without reclaim.
  // 0: 1/32 of the limit.
  uint64_t headroom_bytes = 0;
  // The capacity grows only when the target passed it by this much. 0: 1/16 of the target.
  uint64_t hysteresis_bytes = 0;
  // After reclaim lowered the capacity, no growth for this long (controller clock).
  uint64_t grow_delay_ns = 1'000'000'000;
};

class CacheGovernor final : public Reclaimer {
 public:
  // Governs `cache`, charged to `group` (held by reference until destruction): sets the first
  // capacity and registers as a reclaimer. Throws std::invalid_argument when min_bytes >
  // max_bytes (nothing registered then).
  CacheGovernor(Group& group, GovernedCache& cache, CacheGovernorOptions options = {});
  // Unregisters (waiting for a reclaim in flight). The cache's capacity stays as it was.
  ~CacheGovernor() override;
  CacheGovernor(const CacheGovernor&) = delete;
  CacheGovernor& operator=(const CacheGovernor&) = delete;

  // Recomputes the target and applies it (with the hysteresis above). Returns the capacity.
  // Call periodically (a timer, the component's governor thread) and after big changes. Never
  // from inside the cache's set_capacity_bytes.
  uint64_t update() noexcept;
  // The target from the group's counters now, without applying it.
  uint64_t target() const noexcept;
  // The capacity in force: the last one the cache applied.
  uint64_t capacity() const noexcept { return capacity_.load(std::memory_order_relaxed); }
  // From a cache whose set_capacity_bytes returned false: it applied `bytes` now. A cut below the
  // capacity counts as a reclaim and starts the grow delay. Lock-free: may be called from inside
  // the cache's own calls, on any thread, also while update() runs (which then follows it).
  void applied(uint64_t bytes) noexcept;

  struct Stats {
    uint64_t lowered;         // capacity lowered by update()
    uint64_t raised;          // capacity raised by update()
    uint64_t reclaims;        // cuts by reclaim in force (at once, or when a deferred one applied)
    uint64_t reclaim_busy;    // reclaim() calls that found update() applying and did nothing
    uint64_t deferred;        // capacities the cache kept to apply later (reclaim or update)
  };
  Stats stats() const noexcept;

  // Reclaimer: the cache's usage above min_bytes, in units; reclaim lowers the capacity.
  int64_t reclaimable() const noexcept override;
  ReclaimResult reclaim(int64_t nr_to_scan, int priority) override;

 private:
  struct Target {
    uint64_t target;  // what update() moves towards
    uint64_t floor;   // its protected part: restored without hysteresis
  };
  Target compute() const noexcept;
  // The group's effective protection (bytes, the larger of emin and elow) against a reclaim
  // rooted at its ancestor `root`, with the group grown to its own protection.
  uint64_t protection_under(const Group& root) const noexcept;
  // Hands `bytes` to the cache; true (and capacity_ set) if it is in force now.
  bool apply(uint64_t bytes) noexcept;  // REQUIRES: apply_mu_ held
  void note_cut() noexcept;             // a reclaim's cut is in force: the grow delay starts

  GroupRef group_;
  GovernedCache& cache_;
  const CacheGovernorOptions options_;
  // Serialises capacity changes (held across set_capacity_bytes: the governor's call mutex, a
  // plain std::mutex; reclaim only try-locks it, so a reclaim nested in an update cannot wait).
  std::mutex apply_mu_;
  std::atomic<uint64_t> capacity_{0};
  std::atomic<uint64_t> last_reclaim_ns_{0};
  std::atomic<bool> reclaimed_once_{false};
  std::atomic<uint64_t> lowered_{0}, raised_{0}, reclaims_{0}, reclaim_busy_{0}, deferred_{0};
  ReclaimerRegistration registration_;  // last: registered once everything above is ready
};

}  // namespace memcg

#endif  // MEMCG_CORE_CACHE_GOVERNOR_HPP_
