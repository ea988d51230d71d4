// Charging: the path every allocation of a memory-controlled component takes, mirroring the
// kernel's try_charge_memcg.
//
//   try_charge(group, units)          hot path: this CPU's stock covers it, no shared write
//     -> charge_slow()                 a batch is charged up the tree, the rest kept in stock
//        -> the failure ladder         exact retry, `max` event, reclaim, drain all stocks,
//                                      bounded retries, then the OOM handler, then failure
//   uncharge(group, units)            back into this CPU's stock; overflow past the batch goes
//                                      back to the counters
//
// Slack: memory.current includes units pre-charged in per-CPU stocks, at most
// nr_shards x Stock::kSlots x batch units in the whole controller, however many threads run.
// When a charge would fail at a limit, every stock of that subtree is drained first, so the
// stock never causes a false failure.
//
// Contract: units are uncharged from the group they were charged to (keep the Group& or use a
// ChargeHandle). The caller holds a reference to the group (GroupRef, an attachment) for as long
// as the charge exists; a group whose last reference goes leaves its remaining charge counted
// in its ancestors.
//
// Failure is a result, not an exception: the hot path never throws. charge_or_throw() is the
// std::bad_alloc convenience.
//
// Large charges never OOM-kill (the kernel's costly order, PAGE_ALLOC_COSTLY_ORDER = 3): a charge
// of more than kCostlyChargeBytes (costly_charge_units() units) that reclaim cannot make room for
// fails with kNoMem without running the OOM killer, and gets no free retry after partial
// progress. Only charges of at most that size go on to the OOM handler. So a query that grows by
// megabytes per call fails its own growth while nobody is killed; to make growth OOM-eligible,
// charge it in pieces of at most costly_charge_units() (Reservation with OomPolicy::kPieces does,
// reservation.hpp). kRetryMayFail keeps even small charges away from the OOM killer.
//
// Range: a single charge is at most Controller::max_units() units (the `max` sentinel, INT64_MAX
// >> unit_shift: the most whose byte value fits a signed 64-bit integer), or as many bytes. A
// larger or negative count is refused with kNoMem, even with kNoFail, and so is a forced charge
// that would take some level's usage above the sentinel; nothing is charged then. A count of 0
// charges nothing and succeeds. An uncharge of a count that no charge could have made (negative,
// or above the sentinel) is ignored: nothing changes but the group counter's underflow count
// (PageCounter::underflows()). The checks sit on the slow paths: a stock hit only ever serves
// 1..batch units.
#pragma once

#include <atomic>
#include <cstdint>

#include "memcg/core/tree/group.hpp"
#include "memcg/percpu/stat_registry.hpp"
#include "memcg/percpu/internal/stock.hpp"

namespace memcg {

// Caller flags, the library's equivalent of the kernel's gfp bits that matter to memcg.
enum ChargeFlags : uint32_t {
  // Reclaim and sleep are allowed (a normal allocation). Without it the charge fails at once
  // when the counters are full, unless kNoFail/kHighPrio force it.
  kMayBlock = 1u << 0,
  // Fail after the first reclaim pass instead of retrying (large, optional allocations).
  kNoRetry = 1u << 1,
  // Retry, but never invoke the OOM handler.
  kRetryMayFail = 1u << 2,
  // Must not fail: when the ladder gives up, charge past max anyway (the kernel's __GFP_NOFAIL).
  kNoFail = 1u << 3,
  // High-priority context: like kNoFail on failure (the kernel's __GFP_HIGH).
  kHighPrio = 1u << 4,
  // The caller is itself reclaiming: never recurse into reclaim, force the charge.
  kInReclaim = 1u << 5,
  // Charge exactly what is asked; do not pre-charge a batch into the stock.
  kNoSpin = 1u << 6,
  kDefaultCharge = kMayBlock,
};

enum class [[nodiscard]] ChargeStatus : uint8_t {
  kOk,      // charged within the limits
  kForced,  // charged past max because the caller could not take a failure
  kNoMem,   // not charged: the limit held and nothing could be freed
};

// "ok", "forced", "nomem" ("unknown" for a value that is none of them), spelled as the same
// statuses of WaitStatus and ReserveStatus are: for logs.
constexpr const char* charge_status_name(ChargeStatus s) noexcept {
  switch (s) {
    case ChargeStatus::kOk: return "ok";
    case ChargeStatus::kForced: return "forced";
    case ChargeStatus::kNoMem: return "nomem";
  }
  return "unknown";
}

inline bool charged(ChargeStatus s) noexcept {
  return s != ChargeStatus::kNoMem;
}

// The costly size (see above): 8 pages of 4 KiB, whatever the controller's unit.
inline constexpr uint64_t kCostlyChargeBytes = 8 * 4096;
// kCostlyChargeBytes in the controller's units, at least 1: the largest charge that may run the
// OOM killer.
int64_t costly_charge_units(const Controller& controller) noexcept;

// The kind of memory a charge is, for memory.stat: a StatRegistry index (built-in such as
// StatRegistry::kAnon / kFile / kKernel / kSock, or an application kind from
// Controller::stat_index()). The same kind must be given to the uncharge.
// A kind that is neither kNoStatKind nor one of the controller's (0 <= kind <
// Controller::stats().size()) counts as kNoStatKind: the units are charged and uncharged as
// asked, and no memory.stat item changes. A stock slot may cache it like any kind (stock.hpp);
// the statistics engine ignores it wherever it arrives (rstat.hpp), so the hot path pays no
// extra check.
inline constexpr int kDefaultKind = StatRegistry::kAnon;
// A kind that counts in memory.current but in no memory.stat item: for units whose bytes are
// accounted elsewhere (the object layer counts its kinds in exact bytes, obj_stock.hpp).
inline constexpr int kNoStatKind = -1;

// Charges `units` to `group` (nothing is recorded for the root group).
inline ChargeStatus try_charge(Group& group, int64_t units, uint32_t flags = kDefaultCharge,
                               int kind = kDefaultKind) noexcept;
// Uncharges `units` that were charged to `group`. They go back into this CPU's stock (so a
// charge/uncharge pair usually touches no shared line); what overflows the batch goes back to the
// counters.
inline void uncharge(Group& group, int64_t units, int kind = kDefaultKind) noexcept;
// Uncharges straight from the counters, so that usage drops at once. For memory freed by reclaim
// or by an OOM kill, which a waiting charge must see (the kernel uncharges pages this way).
void uncharge_direct(Group& group, int64_t units, int kind = kDefaultKind) noexcept;

// Byte-denominated forms: rounded up to whole units (the same rounding both ways).
ChargeStatus try_charge_bytes(Group& group, uint64_t bytes, uint32_t flags = kDefaultCharge,
                              int kind = kDefaultKind) noexcept;
void uncharge_bytes(Group& group, uint64_t bytes, int kind = kDefaultKind) noexcept;

// Throws std::bad_alloc when the charge fails.
void charge_or_throw(Group& group, uint64_t bytes, uint32_t flags = kDefaultCharge,
                     int kind = kDefaultKind);

namespace internal {
struct ChargeHandleAccess;  // charge_wait.cpp: fills a handle granted after waiting
}

// A charge that remembers its group and holds a reference to it, so that it is uncharged from
// the right group after the thread moved and even after the group was removed. Costs two atomic
// reference-count updates over a bare try_charge/uncharge pair.
class ChargeHandle {
 public:
  ChargeHandle() = default;
  // Charges `bytes` to `group`; check ok() for the result.
  ChargeHandle(Group& group, uint64_t bytes, uint32_t flags = kDefaultCharge,
               int kind = kDefaultKind) noexcept;
  ChargeHandle(ChargeHandle&& o) noexcept;
  ChargeHandle& operator=(ChargeHandle&& o) noexcept;
  ~ChargeHandle() { release(); }
  bool ok() const noexcept { return group_ != nullptr; }
  Group* group() const noexcept { return group_; }
  uint64_t bytes() const noexcept { return bytes_; }
  // Uncharges now (idempotent).
  void release() noexcept;

 private:
  friend struct internal::ChargeHandleAccess;
  Group* group_ = nullptr;  // holds a reference while non-null
  uint64_t bytes_ = 0;
  int kind_ = kDefaultKind;
};

// Runs the memory.high handling that a charge deferred on this thread (charges that could not
// block). Call from a point where the thread may reclaim and sleep. No-op when nothing is pending.
void handle_pending_high() noexcept;

// Counters of the charge path, for tests and diagnostics (relaxed, per controller).
struct ChargeStats {
  uint64_t slow_path;  // charges that missed the stock
  uint64_t forced;     // charges forced past max
  uint64_t failed;     // charges that returned kNoMem
  uint64_t drains;     // drain_all calls made by failing charges
  uint64_t forced_bytes;  // the size of those forced charges, in bytes (whole units)
};
ChargeStats charge_stats(const Controller& controller) noexcept;

namespace internal {
// Reclaim depth of the calling thread. While it is non-zero (the thread is reclaiming), charges
// are forced instead of recursing into reclaim, as the kernel's PF_MEMALLOC does.
inline thread_local int tl_reclaim_depth = 0;
// Set while a Member charges on this thread: once an OOM kill made that member a victim, its
// charge fails instead of retrying (the kernel's "the caller is dying" exit from the ladder).
inline thread_local const std::atomic<bool>* tl_charging_member_killed = nullptr;
struct ReclaimScope {
  ReclaimScope() noexcept { ++tl_reclaim_depth; }
  ~ReclaimScope() { --tl_reclaim_depth; }
  ReclaimScope(const ReclaimScope&) = delete;
  ReclaimScope& operator=(const ReclaimScope&) = delete;
};

// Everything of try_charge() but a stock hit: the range check, the root, the failure ladder,
// high handling.
ChargeStatus try_charge_slow(Group& group, int64_t units, uint32_t flags, int kind) noexcept;
// Everything of uncharge() but a stock hit: the range check, then the stock's own slow path.
void uncharge_slow(Group& group, int64_t units, int kind) noexcept;
}  // namespace internal

// ---- hot paths, inline ------------------------------------------------------------------------
// A stock hit takes the units and the kind's statistic with one restartable store (stock.hpp);
// the root has no stock and, like every miss, goes out of line. Always inlined, like the stock's
// hot paths they contain: an out-of-line COMDAT copy could be discarded at link time and leave
// its restartable-sequence descriptor dangling.

inline __attribute__((always_inline)) ChargeStatus try_charge(Group& group, int64_t units, uint32_t flags, int kind) noexcept {
  Stock* const stock = group.charge_stock();
  // The stock's range check (1..batch units) also turns away a count below 1, uncounted.
  if (stock != nullptr && stock->consume(&group, units, kind)) [[likely]]
    return ChargeStatus::kOk;
  return internal::try_charge_slow(group, units, flags, kind);
}

inline __attribute__((always_inline)) void uncharge(Group& group, int64_t units,
                                                    int kind) noexcept {
  Stock* const stock = group.charge_stock();
  // Back into this CPU's stock with the kind's statistic. A hit takes 1..batch units only (one
  // unsigned compare in the stock, which turns away counts below 1 too); anything else, what
  // does not fit and counts out of range included, goes out of line.
  if (stock != nullptr) [[likely]] {
    if (!stock->refill_hit(&group, units, kind)) internal::uncharge_slow(group, units, kind);
  }
}

}  // namespace memcg
