// MirroredCharge: a group's charge that follows a size another library keeps track of.
//
// Some memory cannot be charged where it is allocated: RocksDB's memtables allocate with plain
// new[] and tell nobody but their own write buffer manager. What such a library can tell is its
// current total. A MirroredCharge takes that total ("set, not add": the library reports how much
// it holds now, not what changed) and charges or uncharges the difference to the group, so that
// memory.current, memory.max and reclaim see the memory. There is no kernel counterpart: the
// kernel charges every page where it is allocated.
//
// The memory exists when it is reported, so by default a growth that the group has no room for
// is forced (kNoFail), after one round of reclaim (kMayBlock) that lets the group's caches give
// room first; forced growths are counted. The charge is in whole units, rounded up.
//
// Never call set() from inside a charge's callbacks (a reclaimer, an OOM kill callback, a
// pressure listener): a mirror is refreshed from the caller's own thread or a safe point. Such a
// call is refused with EBUSY and changes nothing.
//
// Thread safety: set() may be called from any thread, concurrently. Concurrent calls do not wait
// for each other: the one that is charging applies the latest report before it returns, so once
// every set() has returned the charge matches the last report. No lock is held while charging.
#ifndef MEMCG_CORE_MIRROR_HPP_
#define MEMCG_CORE_MIRROR_HPP_

#include <atomic>
#include <cstdint>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/group.hpp"

namespace memcg {

class MirroredCharge {
 public:
  // Charges go to `group` (held by reference until destruction) as `kind`, with `flags`.
  explicit MirroredCharge(Group& group, int kind = kDefaultKind,
                          uint32_t flags = kMayBlock | kRetryMayFail | kNoFail);
  // Uncharges what is still charged. REQUIRES: no concurrent set().
  ~MirroredCharge();
  MirroredCharge(const MirroredCharge&) = delete;
  MirroredCharge& operator=(const MirroredCharge&) = delete;

  // Reports the other library's current total in bytes and charges or uncharges the
  // difference. Returns 0; ENOMEM when a growth was refused (only without kNoFail: the charge
  // stays at the previous report); EINVAL when `bytes` exceeds ObjStock::kMaxBytes; EBUSY when
  // called from inside reclaim. The last two change nothing.
  [[nodiscard]] int set(uint64_t bytes) noexcept;

  // The last accepted report, and what is charged for it (whole units, in bytes).
  uint64_t reported() const noexcept { return target_.load(std::memory_order_relaxed); }
  uint64_t charged_bytes() const noexcept;
  // Growths charged past memory.max because the group had no room, and their bytes.
  uint64_t forced() const noexcept { return forced_.load(std::memory_order_relaxed); }
  uint64_t forced_bytes() const noexcept { return forced_bytes_.load(std::memory_order_relaxed); }
  Group& group() const noexcept { return *group_; }

 private:
  // Charges or uncharges towards `target` bytes; returns 0 or ENOMEM.
  [[nodiscard]] int apply(uint64_t target) noexcept;

  GroupRef group_;
  const int kind_;
  const uint32_t flags_;
  std::atomic<uint64_t> target_{0};
  std::atomic<int64_t> charged_units_{0};  // written only by the setter holding busy_
  std::atomic<bool> busy_{false};
  std::atomic<uint64_t> forced_{0};
  std::atomic<uint64_t> forced_bytes_{0};
};

}  // namespace memcg

#endif  // MEMCG_CORE_MIRROR_HPP_
