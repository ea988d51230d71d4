// Reclaim: asking the application's caches to give memory back, and the driver that decides
// whom to ask how much, mirroring the kernel's memcg reclaim (shrink_node_memcgs and friends).
//
// A Reclaimer is memory an application can free on request (a cache, a spillable buffer). It is
// registered on the group its memory is charged to. When a group hits memory.max or memory.high,
// or memory.reclaim is written, the driver walks the subtree of that group (the reclaim root),
// computes each group's effective protection (memory.min/low shared out down the tree, see
// protection.hpp), skips what is protected, and asks each remaining reclaimer to scan an amount
// proportional to its size and to its unprotected share, at a priority that rises (12 -> 0)
// until enough was freed. Best-effort protection (low) is breached only when a whole pass freed
// nothing; each breach raises a `low` event on the group.
//
// The reclaimer contract, in short (each point is detailed below):
//  1. Report in units, what the counters saw: `reclaimed` = the units reclaim() itself just
//     uncharged, `scanned` = the units it looked at (freed or kept). Over-reporting buys nothing:
//     only the reclaim root's usage drop counts as progress, so a claim above it is ignored, and
//     a reclaimer whose reports are not backed by uncharges makes charges give up and fail.
//  2. Uncharge inside reclaim() with uncharge_direct(): the charge waiting for room looks at the
//     counters, and a plain uncharge() would park the units in this CPU's stock, out of its
//     sight. Everywhere else (the owner's own erase or clear) uncharge() is right, and cheaper.
//  3. Never charge while holding a lock that reclaim() takes: the charge may call reclaim() of
//     this very reclaimer on the same thread. Charge first, then lock and insert.
//  4. The ReclaimerRegistration is the reclaimer's LAST data member (or outlives it from outside):
//     members are destroyed in reverse order, so the registration goes first and its destructor
//     waits for a call in flight, before the entries and the lock that reclaim() uses are gone.
//  5. Entries of variable size: keep the byte total and hold ceil(total / unit) units. An insert
//     charges ceil(size / unit) (always enough, whatever reclaim does to the total meanwhile),
//     then gives back the surplus of the rounded total; reclaim() reports the difference of the
//     rounded totals it caused. Rounding never drifts.
//     examples/variable_cache.cpp is a complete reclaimer built this way.
//
// Rules for reclaimers (the driver never holds a lock of the library while calling one):
//  - reclaim() frees memory and uncharges it itself (it charged it), with uncharge_direct() so
//    that the counters show it at once; it reports what it scanned and what it freed. It may
//    allocate and may charge (charges made from inside a reclaimer are forced: they never
//    recurse into reclaim). It may remove itself or other reclaimers (see
//    ReclaimerRegistration for when that waits).
//  - It is not called concurrently with itself for the same registration.
//  - A reclaimer that throws, reports a negative count or more freed than scanned is treated as
//    having freed nothing (what it really uncharged stays correct, since uncharging is its own
//    act); a report of more scanned than asked is cut to what was asked.
//  - Reports are not trusted for progress: what reclaim() returns, and what a charge, a
//    memory.high/max write or memory.reclaim counts as progress, is at most what the counters
//    show freed (the reclaim root's usage drop). A reclaimer that claims to free what it does
//    not makes those give up after their bounded retries instead of retrying for ever.
#pragma once

#include <cstdint>
#include <memory>

#include "memcg/core/tree/group.hpp"

namespace memcg {

// swappiness of a memory.reclaim request.
inline constexpr int kSwappinessNotGiven = -1;  // no `swappiness=` key: the group's own
inline constexpr int kSwappinessLimit = 200;    // largest numeric value accepted
inline constexpr int kSwappinessMax = 201;      // `swappiness=max`: anonymous memory only

struct ReclaimRequest {
  uint64_t bytes;  // requested amount; UINT64_MAX when the size overflowed 64 bits
  int swappiness;  // kSwappinessNotGiven, 0..kSwappinessLimit, or kSwappinessMax
};


struct ReclaimResult {
  int64_t scanned = 0;    // units looked at
  int64_t reclaimed = 0;  // units freed and uncharged
};

class Reclaimer {
 public:
  virtual ~Reclaimer() = default;
  // Units this reclaimer could free if asked for everything (the kernel's LRU size). Read
  // without locks by the driver to size its requests; an estimate is fine.
  virtual int64_t reclaimable() const noexcept = 0;
  // Scan up to `nr_to_scan` units and free what can be freed. `priority` is 12 (gentle) .. 0
  // (desperate), for reclaimers that want to behave differently under pressure.
  virtual ReclaimResult reclaim(int64_t nr_to_scan, int priority) = 0;
};

// A registration of a reclaimer on a group. Destroying (or reset()) unregisters and waits for an
// in-flight call to finish, so that once it returns the reclaimer is never called again and may
// be destroyed. Two exceptions, where waiting could never end; there it returns at once, the
// reclaimer is not called again, but the call in flight may still be running:
//  - called from inside that reclaimer's own reclaim() (or from a reclaim nested in it);
//  - called from inside a reclaim() (of any reclaimer) when the thread running the call to wait
//    for is itself waiting, directly or through other threads, for a call running on this
//    thread. Example: A's reclaim() unregisters B while B's reclaim() on another thread
//    unregisters A: the first to arrive waits, the second returns at once, and both calls end.
// A reclaimer unregistered in one of these ways must stay alive until its call returns: destroy
// it only from outside reclaim, once the reclaims that could be running it are over.
class ReclaimerRegistration {
 public:
  ReclaimerRegistration() = default;
  ReclaimerRegistration(Group& group, Reclaimer& reclaimer);
  ReclaimerRegistration(ReclaimerRegistration&&) noexcept;
  ReclaimerRegistration& operator=(ReclaimerRegistration&&) noexcept;
  ~ReclaimerRegistration() { reset(); }
  void reset() noexcept;
  explicit operator bool() const noexcept { return entry_ != nullptr; }

 private:
  struct Entry;
  friend struct ReclaimAccess;
  std::shared_ptr<Entry> entry_;
};

// Why reclaim runs: decides vmpressure/socket-pressure input and which stat items count it.
enum class ReclaimReason : uint8_t {
  kLimit,      // a charge hit memory.max (or a memory.max write)
  kHigh,       // memory.high enforcement
  kProactive,  // memory.reclaim
};

struct ReclaimStats {
  int64_t scanned = 0;
  int64_t reclaimed = 0;
  int passes = 0;             // priority levels run
  bool low_breached = false;  // the low-override pass ran
};

// Frees up to `nr_units` (at least 32 4-KiB pages' worth is asked of a group, as in the kernel)
// from the subtree of `root`. Returns units reclaimed as far as the counters confirm it: the
// reclaimers' reports, but no more than `root`'s usage dropped meanwhile (so a concurrent charge
// into the subtree can hide progress; callers count that as a fruitless attempt). `stats`
// receives the reclaimers' reports (clamped as above).
int64_t reclaim(Group& root, int64_t nr_units, ReclaimReason reason, ReclaimStats* stats = nullptr);

// ---------------------------------------------------------------------------------------------
// Implementation details below; not part of the interface.
namespace internal {
// What a reclaim that reported `reported` units freed may count on: no more than the usage of
// its root dropped from `usage_before` to `usage_after`, never negative.
inline int64_t confirmed_reclaim(int64_t reported, int64_t usage_before,
                                 int64_t usage_after) noexcept {
  // Counters clamp at 0; clamping here too keeps the difference from overflowing regardless.
  const int64_t before = usage_before > 0 ? usage_before : 0;
  const int64_t after = usage_after > 0 ? usage_after : 0;
  if (reported <= 0 || after >= before) return 0;
  return reported < before - after ? reported : before - after;
}

// What reclaim rooted at `root` could free at once (admission.hpp, reclaim for admission): over
// `root`'s subtree, each group's registered reclaimers' reclaimable(), capped by the group's
// usage above its effective protection in a walk rooted at `root` (the driver's computation,
// memory.low honoured: the low-override pass is a last resort, not room), summed and capped by
// `root`'s usage. An estimate, as the reclaimers' sizes are; a reclaimer in a call is skipped.
int64_t reclaimable_now(Group& root);
}  // namespace internal

}  // namespace memcg
