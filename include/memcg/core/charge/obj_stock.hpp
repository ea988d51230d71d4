// ObjStock: byte-granular charging over unit charges, the kernel's per-CPU object stock.
//
// Containers and allocators charge sizes such as 24 or 200 bytes; the counters count whole units
// (4 KiB by default). Charging ceil(s / unit) units for every object would overcharge by up to a
// unit per object. Instead each CPU's shard keeps a reserve of bytes that are charged to one
// (group, kind) but not in use. Charging s bytes takes them from the reserve when it is for that
// group and kind and holds at least s; otherwise the shard charges ceil((s - reserve) / unit)
// units through the unit charge path (try_charge, with its stock, limits and failure ladder) and
// keeps the tail. Uncharging adds the bytes to the reserve; once the reserve passes one unit,
// its whole units go back (memcg::uncharge). When a shard switches to another group, the old
// group's whole units go back and its sub-unit leftover is parked in that group's byte pool,
// which the next shard caching the group picks up. So at rest a group is charged exactly
// ceil(live bytes / unit) units, plus what sits in reserves.
//
// memory.stat: the object layer charges its units with kNoStatKind and counts the kind's item in
// exact bytes of live objects, so nothing is counted twice. A shard defers those byte deltas
// while its reserve is hit (the kernel caches them the same way) and folds them into the group's
// statistics whenever its slow path runs, when the pending delta passes one unit, and when it is
// drained. memory.current therefore exceeds the sum of the kinds by what sits in the unit stock,
// in the object reserves and pools, and the rounding of live bytes up to whole units.
//
// Removed groups: a reserve never holds a removed group. Controller::remove drains the group's
// reserves, and a free (or charge) after that finds the group offline and does not install it
// again (as the unit stock does): its bytes go to the group's pool, which returns each unit as it
// completes. So once its last bytes are freed a removed group is released, with no drain.
//
// Bounds: a shard's reserve holds at most one unit; a group's pool less than one unit at rest
// (briefly up to a unit more per concurrent drain). Byte statistics lag by at most two units per
// shard. Drained like the unit stock: by a charge that fails at a limit (the subtree's reserves,
// before the unit stock), by Controller::remove (the group's), and explicitly. A thread's exit
// needs no drain: reserves belong to CPUs, and the next thread on the CPU uses or evicts them
// (what they hide stays within the per-CPU bound above however many threads come and go).
//
// Lifetime: while a group has units charged through the object layer, the layer holds one
// reference on it, so a block may be freed after its allocating thread moved or exited and after
// the group was removed, without any reference held by the block itself. Those units are counted
// per group; each shard holds a few units of that count as credit for its owner, so that
// refills and returns on one CPU do not bounce the group's count between CPUs.
//
// Thread safety: every method may be called from any thread; threads may migrate at any instant.
// Cost: a hit is the unit stock's restartable sequence on one word (about 2 ns, no atomic
// read-modify-write); without rseq (ThreadSanitizer, MEMCG_NO_RSEQ=1, Mode::kFallback) a hit
// takes the shard's try-lock (one atomic exchange).
//
// REQUIRES for every charge and uncharge: bytes are uncharged from the group and kind they were
// charged to; 0 <= kind < kMaxKinds is served by the reserves (other kinds bypass them). A kind
// that is neither kNoStatKind nor one of the controller's counts as kNoStatKind, both ways.
#ifndef MEMCG_OBJ_STOCK_HPP_
#define MEMCG_OBJ_STOCK_HPP_

#include <atomic>
#include <cstdint>
#include <memory>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/base/internal/cpu.hpp"
#include "memcg/base/internal/rseq.hpp"

namespace memcg {

class ObjStock {
 public:
  // Kinds are packed into the low bits of the 128-byte-aligned group address, so that one word
  // names the reserve's owner and a hit compares one word.
  static constexpr int kMaxKinds = 128;
  // The largest size one charge may ask for (1 EiB): no allocator serves more, and it keeps every
  // byte sum of the layer far from overflow. A larger charge fails with kNoMem (whatever the
  // flags); a larger uncharge was never charged and is ignored.
  static constexpr uint64_t kMaxBytes = uint64_t{1} << 60;

  enum class Mode {
    kAuto,      // restartable sequences when internal::rseq_mode() allows, else the try-lock
    kFallback,  // always the try-lock (tests, comparisons)
  };

  // nr_shards: 0 = internal::nr_cpu_ids(); unit_shift: the controller's charge unit.
  // nr_kinds: the controller's statistic items (Controller::stats().size()); a kind outside
  // 0 .. nr_kinds - 1 is taken as kNoStatKind (charged, counted in no item), so no reserve is
  // ever tagged with it.
  ObjStock(int nr_shards, unsigned unit_shift, Mode mode = Mode::kAuto, int nr_kinds = kMaxKinds);
  // Drains every shard. REQUIRES: no concurrent call.
  ~ObjStock();
  ObjStock(const ObjStock&) = delete;
  ObjStock& operator=(const ObjStock&) = delete;

  // Charges `bytes` to `group` as `kind`. kNoMem when the unit charge failed (nothing charged).
  // Nothing is recorded for the root group. REQUIRES: the caller holds a reference to `group`.
  ChargeStatus charge(Group& group, uint64_t bytes, uint32_t flags, int kind) noexcept;
  // Uncharges `bytes` charged by charge(). The caller need not hold a reference (the layer's own
  // keeps the group alive while the bytes are charged).
  void uncharge(Group& group, uint64_t bytes, int kind) noexcept;

  // Drains the calling CPU's shard.
  void drain_cpu_local() noexcept;
  // Drains every shard whose reserve belongs to `root` or a descendant (every shard when null).
  // Synchronous: the units are back in the counters (not the unit stock) when it returns.
  void drain_all(const Group* root) noexcept;
  // Drains every shard whose reserve belongs to `group` (group removal).
  void drain_owner(const Group* group) noexcept;
  // Folds every shard's deferred byte statistics into its owner's, leaving the reserves in
  // place. After it returns, the groups' statistics include every charge and uncharge that
  // happened before the call. Takes each non-empty shard's word (and, in rseq mode, fences its
  // CPU).
  void fold_stats() noexcept;

  // Bytes held in reserves for `group` (any kind); exact only when nothing runs concurrently.
  int64_t stocked(const Group* group) const noexcept;
  // Bytes parked in the group's pool.
  static int64_t pooled(const Group& group) noexcept;

  int nr_shards() const noexcept { return nr_shards_; }
  bool uses_rseq() const noexcept { return rseq_; }
  // The statistic kinds of the controller: a valid kind k has 0 <= k < nr_kinds().
  int nr_kinds() const noexcept { return nr_kinds_; }
  // `kind` if it is one of the controller's kinds, else `otherwise` (kNoStatKind by default).
  int checked_kind(int kind, int otherwise = kNoStatKind) const noexcept {
    return static_cast<unsigned>(kind) < static_cast<unsigned>(nr_kinds_) ? kind : otherwise;
  }

  // Slow-path event counts summed over shards (approximate while in use).
  struct Stats {
    uint64_t refills;       // unit charges made for the reserves
    uint64_t switches;      // reserves that changed owner
    uint64_t returns;       // reserves that went past one unit and returned whole units
    uint64_t bypasses;      // calls that found the shard busy (or a kind >= kMaxKinds)
    uint64_t drains;        // reserves emptied by drain_*()
    uint64_t stat_flushes;  // deferred byte statistics folded into a group
  };
  Stats stats() const noexcept;

  // -------------------------------------------------------------------------------------------
  // Implementation details.
 private:
  // One cache line per shard: a hit reads `disabled` and `owner` and writes `bytes`.
  struct alignas(64) Shard {
    // The try-lock and rseq "disabled" word (internal/rseq.hpp); owner and reported change only
    // under it.
    std::atomic<uint64_t> disabled{0};
    // Tagged (group | kind) owner of the reserve, or null. The slot holds a reference on the group.
    std::atomic<const void*> owner{nullptr};
    std::atomic<int64_t> bytes{0};  // the reserve, 0 .. one unit
    // `bytes` as the group's statistics know it: reported - bytes is the deferred byte delta of
    // the owner's kind (hits move `bytes` only).
    int64_t reported = 0;
    // Units counted in the owner's obj_units_ beyond those backing its objects: a refill or
    // return on this shard moves units between this credit and its objects without touching the
    // group's shared count (0 .. 2 * kCredit). Given back with the owner.
    int64_t credit = 0;
    struct Counters {
      std::atomic<uint64_t> refills{0}, switches{0}, returns{0}, bypasses{0}, drains{0},
          stat_flushes{0};
    } stats;
  };
  static_assert(sizeof(std::atomic<int64_t>) == sizeof(int64_t) &&
                sizeof(std::atomic<const void*>) == sizeof(const void*) &&
                sizeof(std::atomic<uint64_t>) == sizeof(uint64_t));

  struct Taken {
    const void* owner = nullptr;
    int64_t bytes = 0;
    int64_t pending = 0;  // deferred byte statistics
    int64_t credit = 0;
  };

  static const void* tag(const Group& g, int kind) noexcept {
    return reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(&g) |
                                         static_cast<uintptr_t>(kind));
  }
  static void bump(std::atomic<uint64_t>& c) noexcept {
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  static constexpr int kMaxAborts = 4;
  // Units of obj_units_ credit a shard keeps for its owner (see Shard::credit); a shard touches
  // the group's shared count once per kCredit units of net refills or returns.
  static constexpr int64_t kCredit = 8;

  // The hot path of charge (kCharge: the reserve of (g, kind) on this CPU gives `bytes`, staying
  // at 0 or more) and uncharge (it takes them, staying at one unit or less). False: take the
  // slow path.
  template <bool kCharge>
  bool hit(Group& g, uint64_t bytes, int kind) noexcept;
  // hit() after its section aborted (preemption, migration, signal): a few more tries, out of
  // line.
  bool hit_retry(Group& g, uint64_t bytes, int kind, bool charge) noexcept;
  ChargeStatus charge_slow(Group& g, uint64_t bytes, uint32_t flags, int kind) noexcept;
  void uncharge_slow(Group& g, uint64_t bytes, int kind) noexcept;
  void put_bytes(Group& g, int kind, int64_t add, int64_t live, int64_t units_in,
                 bool referenced) noexcept;
  void release_held(Group& g, int kind, int64_t held) noexcept;
  static void count_units(Group& g, int64_t units) noexcept;
  void return_units(Group& g, int64_t units, int64_t uncounted, bool direct) noexcept;
  void pool_add(Group& g, int64_t bytes, bool direct) noexcept;
  void flush_stat(Group& g, int kind, int64_t delta) noexcept;
  void give_back(const Taken& t, bool direct) noexcept;
  static Taken take(Shard& s) noexcept;
  int local_shard() const noexcept;
  bool try_lock(int idx) noexcept;
  void lock_wait(int idx) noexcept;
  void make_exclusive(int idx) noexcept;
  void unlock(int idx) noexcept;
  template <typename Match>
  void drain_matching(Match match) noexcept;

  std::unique_ptr<Shard[]> shards_;
  int nr_shards_;
  int nr_kinds_;
  unsigned shift_;
  int64_t unit_;
  bool rseq_;
  // nr_shards_ when hits run as restartable sequences, else 0: the hot path's one check of
  // both (see Stock).
  uint32_t rseq_shards_;
};

// Byte-granular charge of the calling code's objects: the controller's object stock.
// Nothing is recorded for the root.
inline ChargeStatus try_charge_object(Group& group, uint64_t bytes, uint32_t flags = kDefaultCharge,
                                      int kind = kDefaultKind) noexcept {
  ObjStock* const os = group.object_stock();
  return os != nullptr ? os->charge(group, bytes, flags, kind) : ChargeStatus::kOk;
}
inline void uncharge_object(Group& group, uint64_t bytes, int kind = kDefaultKind) noexcept {
  if (ObjStock* const os = group.object_stock()) os->uncharge(group, bytes, kind);
}

// Hot paths: as in Stock, a restartable sequence that checks CPU, shard word and owner and then
// moves the reserve by `delta` bytes within [lo, hi]; anything else (a miss, an abort too many, a
// busy shard, a size beyond one unit) takes the slow path.
// The section adds -bytes (charge) or +bytes (uncharge) to the reserve and checks the one bound
// that can be crossed: the reserve and `bytes` are both within one unit (at most 2^61), so the
// sum cannot overflow.
template <bool kCharge>
inline __attribute__((always_inline)) bool ObjStock::hit(Group& g, uint64_t bytes,
                                                         int kind) noexcept {
#if MEMCG_RSEQ_CS
  if (bytes - 1 < static_cast<uint64_t>(unit_) &&
      static_cast<unsigned>(kind) < static_cast<unsigned>(kMaxKinds)) [[likely]] {
    struct rseq* const rs = internal::rseq_area();
    const auto cpu = static_cast<uint32_t>(__atomic_load_n(&rs->cpu_id, __ATOMIC_RELAXED));
    if (cpu >= rseq_shards_) [[unlikely]]
      return false;
    Shard& s = shards_[cpu];
    const auto& disabled = *reinterpret_cast<const uint64_t*>(&s.disabled);
    const auto& owner = *reinterpret_cast<const void* const*>(&s.owner);
    auto& reserve = *reinterpret_cast<int64_t*>(&s.bytes);
    const internal::CsResult r =
        kCharge ? internal::cs_add_floor(rs, static_cast<int>(cpu), disabled, owner, tag(g, kind),
                                         reserve, -static_cast<int64_t>(bytes), 0)
                : internal::cs_add_ceil(rs, static_cast<int>(cpu), disabled, owner, tag(g, kind),
                                        reserve, static_cast<int64_t>(bytes), unit_);
    if (r == internal::CsResult::kOk) [[likely]]
      return true;
    if (r == internal::CsResult::kAborted) return hit_retry(g, bytes, kind, kCharge);
  }
#else
  (void)g;
  (void)bytes;
  (void)kind;
#endif
  return false;
}

inline __attribute__((always_inline)) ChargeStatus ObjStock::charge(Group& g, uint64_t bytes,
                                                                    uint32_t flags,
                                                                    int kind) noexcept {
  if (hit<true>(g, bytes, kind)) [[likely]]
    return ChargeStatus::kOk;
  return charge_slow(g, bytes, flags, kind);
}

inline __attribute__((always_inline)) void ObjStock::uncharge(Group& g, uint64_t bytes,
                                                              int kind) noexcept {
  if (!hit<false>(g, bytes, kind)) [[unlikely]]
    uncharge_slow(g, bytes, kind);
}

}  // namespace memcg

#endif  // MEMCG_OBJ_STOCK_HPP_
