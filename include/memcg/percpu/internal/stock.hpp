// Stock: a per-CPU cache of pre-charged units.
//
// Charging a group walks its counters up to the root with atomic updates; the stock amortises
// that walk. A charge of n units first tries consume(): if this CPU's shard caches the group with
// at least n units, they are taken from there and the counters are not touched. Otherwise the
// caller charges a whole batch to the counters and puts the surplus back with refill(). Units in
// the stock are counted as used by their group (and its ancestors), so a group may look full
// while its free room sits in stocks; drain_all() gives such units back.
//
// Each shard holds kSlots slots (owner, units, a cached statistic count), at most batch() units
// each; the units a stock can hide are therefore bounded by slack_bound() =
// shards x kSlots x batch, however many threads there are.
//
// Statistics ride along (as the kernel's per-CPU object stock caches a vmstat delta next to its
// bytes): consume() and refill() take the kind of the memory (an owner-defined statistic
// index), and each slot caches the net units charged under one kind in the same word as its
// units, so a hit updates both with one store and the owner's statistics are not touched at all.
// The cached count stays within [-batch, batch]; beyond that, at eviction, drain and
// fold_stats() it is passed on through StockOwner::stock_stat(). A slot re-tags itself to a
// new kind when its count is zero; a hit of another kind passes its units on at once. So a
// reader of the owner's statistics misses at most batch units per slot (stat_slack_bound()),
// until fold_stats().
//
// Thread safety: every method may be called from any thread at any time; a thread may migrate
// between CPUs at any instant. Every unit given to refill() comes back exactly once, through a
// successful consume() or through StockOwner::stock_uncharge().
//
// Cost: consume() and refill() are a few inline instructions on a hit. With restartable
// sequences (internal::rseq_mode(), x86-64) a hit is a plain load-check-store that the kernel
// restarts if the thread is preempted or migrated, so it issues no atomic read-modify-write:
// about 2 ns a call (a consume + refill pair measured 3.7 ns, against 19 ns with the try-lock).
// Otherwise (other architectures, ThreadSanitizer builds, MEMCG_NO_RSEQ=1, fewer shards than CPUs,
// or Mode::kFallback) each shard is guarded by a try-lock: one atomic exchange per call, and a busy
// shard sends the caller to its slow path instead of waiting. Draining a shard that belongs to
// another CPU costs a system call in rseq mode.

#ifndef MEMCG_STOCK_HPP_
#define MEMCG_STOCK_HPP_

#include <atomic>
#include <cassert>
#include <cstdint>
#include <memory>

#include "memcg/base/internal/cpu.hpp"
#include "memcg/base/internal/rseq.hpp"

namespace memcg {

// What a stock slot refers to. Implemented by the group type; called only on slow paths, except
// stock_stat(), which a hit calls when its kind is not the one its slot caches.
// The stock calls stock_uncharge(), stock_stat(), stock_get() and stock_is_within() while it may
// hold a shard (so that a drain that returns has given back everything it took), and
// stock_put() only after releasing it; none of them may call back into the stock.
class StockOwner {
 public:
  // Gives `units` (> 0) back to the counters: they leave the stock for good.
  virtual void stock_uncharge(int64_t units) noexcept = 0;
  // Adds `units` (non-zero, either sign) to the owner's statistic `kind` (>= 0): charges made
  // (+) and undone (-) under that kind, passed on by the stock.
  virtual void stock_stat(int kind, int64_t units) noexcept = 0;
  // A slot now refers to this owner: take a reference that keeps it alive.
  virtual void stock_get() noexcept = 0;
  // A slot let go of this owner: drop the reference taken by stock_get().
  virtual void stock_put() noexcept = 0;
  // True iff this owner is `root` or a descendant of it.
  virtual bool stock_is_within(const StockOwner* root) const noexcept = 0;
  // False once units given back for this owner must go straight to the counters instead of
  // into a new slot (a removed group: the kernel uncharges a dead cgroup's pages directly).
  // Asked under the shard's word, so a drain of the owner that follows the change of answer
  // leaves no slot of it behind.
  virtual bool stock_cacheable() const noexcept { return true; }

 protected:
  ~StockOwner() = default;
};

class Stock {
 public:
  // Owners cached per shard: a CPU switching among up to this many groups keeps hitting.
  static constexpr int kSlots = 7;
  // Units per slot are kept small enough for a byte; larger requests bypass the stock anyway.
  static constexpr int64_t kMaxBatch = 127;
  // The kind of units that change no statistic (the surplus of a batch, for instance).
  static constexpr int kNoKind = -1;
  // Kinds a slot can cache (its tag is a byte, 0 meaning none); larger kinds are passed on to
  // the owner at every hit.
  static constexpr int kMaxCachedKind = 253;

  enum class Mode {
    kAuto,      // restartable sequences when internal::rseq_mode() allows, else the try-lock
    kFallback,  // always the try-lock (tests, comparisons)
  };

  // nr_shards: shards to create; 0 means internal::nr_cpu_ids(). The shard of a call is its CPU
  // modulo nr_shards. Rseq mode needs one shard per possible CPU and is not used with fewer.
  // batch: the most units a slot holds and the largest request the stock serves.
  // Kinds are the owners' business: a slot caches any kind a tag can name and passes it on
  // as it is, so an owner must accept (and may ignore) a kind it does not have (a Group does).
  // REQUIRES: nr_shards >= 0; 1 <= batch <= kMaxBatch.
  Stock(int nr_shards, int64_t batch, Mode mode = Mode::kAuto);
  // Drains every shard. REQUIRES: no concurrent call on this stock.
  ~Stock();

  Stock(const Stock&) = delete;
  Stock& operator=(const Stock&) = delete;

  // Takes n pre-charged units of `o` from this CPU's shard. False (a miss, nothing taken) when
  // n > batch(), the shard is busy, or o's slot holds fewer than n units.
  // On a hit, `kind` (unless kNoKind) is charged n units: cached in the slot or passed on.
  // n < 1 is a miss that is not counted (the shard is not looked at).
  // REQUIRES: o != nullptr and the caller holds a reference to o.
  bool consume(StockOwner* o, int64_t n, int kind = kNoKind) noexcept;

  // Puts n charged units of `o` into this CPU's shard. Whatever the shard cannot keep goes back
  // through o->stock_uncharge(): n > batch() or a busy shard (all n), or o's slot going above
  // batch() (the whole slot). Without a slot for o, the first empty slot is used, else a slot is
  // evicted (drained) in round-robin order: each shard's cursor names the next victim and moves
  // on by one after each eviction.
  // `kind` (unless kNoKind) is uncharged n units, wherever the units go.
  // REQUIRES: o != nullptr and the caller holds a reference to o; n >= 0.
  void refill(StockOwner* o, int64_t n, int kind = kNoKind) noexcept;
  // refill()'s hot path alone: true when this CPU's slot for o took the n units with one
  // restartable store, false (nothing done) otherwise. Never calls back into o unless `kind`'s
  // count must be passed on, and never with kNoKind: usable where callbacks are not allowed.
  bool refill_hit(StockOwner* o, int64_t n, int kind = kNoKind) noexcept;

  // Drains every slot of the calling CPU's shard.
  void drain_cpu_local() noexcept;
  // Drains, in every shard, the slots whose owner is `root` or a descendant (every slot when
  // root is nullptr). Synchronous: the units are back in the counters when it returns. Waits for
  // shards that are busy.
  void drain_all(const StockOwner* root) noexcept;
  // Drains every slot of `o` in every shard (group removal). No slot of o remains if no refill
  // for o runs concurrently, or if o->stock_cacheable() turned false (seq_cst) before the call.
  void drain_owner(const StockOwner* o) noexcept;

  // Passes every slot's cached statistic count to its owner, leaving the units in place. After
  // it returns, the owners' statistics include every consume() and refill() that happened
  // before the call. Costs a fence for each other CPU whose shard caches a non-zero count.
  void fold_stats() noexcept;

  // Units held for `o` over all shards; exact only when no other thread uses the stock.
  int64_t stocked(const StockOwner* o) const noexcept;

  int nr_shards() const noexcept { return nr_shards_; }
  int64_t batch() const noexcept { return batch_; }
  // The most units the stock can hide from the counters: nr_shards * kSlots * batch.
  int64_t slack_bound() const noexcept { return int64_t{nr_shards_} * kSlots * batch_; }
  // The most units of statistics the slots can hold back from their owners (over all owners:
  // at most nr_shards * batch for one owner, which has one slot per shard):
  // nr_shards * kSlots * batch.
  int64_t stat_slack_bound() const noexcept { return int64_t{nr_shards_} * kSlots * batch_; }
  // Whether hits run as restartable sequences (else the try-lock path).
  bool uses_rseq() const noexcept { return rseq_; }

  // Event counts summed over shards. Approximate while the stock is in use: counters are bumped
  // with a relaxed load and store (no atomic read-modify-write on the hot path), so a thread
  // preempted between the two can lose another's increment.
  struct Stats {
    uint64_t hits;             // consume() that took units
    uint64_t misses;           // consume() that took nothing
    uint64_t refills;          // refill() whose units stayed in the stock
    uint64_t evictions;        // slots drained to make room for another owner
    uint64_t overflow_drains;  // slots drained because a refill took them above batch()
    uint64_t remote_drains;    // shards drained by drain_all() / drain_owner()
    uint64_t stat_spills;      // cached counts passed on because they left [-batch, batch]
    uint64_t stat_direct;      // hits whose kind was not cached (passed on at once)
  };
  Stats stats() const noexcept;

  // -------------------------------------------------------------------------------------------
  // Implementation details.
 private:
  // A slot's word packs everything a hit changes, so that one commit store changes all of it:
  // bits 0-7 the units (at most kMaxBatch), bits 8-15 the cached kind + 1 (0: none), bits 16-63
  // the signed count of units charged (+) and uncharged (-) under that kind and not yet passed
  // to the owner, within [-batch, batch].
  struct Word {
    static int64_t units(uint64_t w) noexcept { return static_cast<int64_t>(w & 0xff); }
    static unsigned tag(uint64_t w) noexcept { return static_cast<unsigned>((w >> 8) & 0xff); }
    static int64_t count(uint64_t w) noexcept { return static_cast<int64_t>(w) >> 16; }
    static uint64_t make(int64_t units, unsigned tag, int64_t count) noexcept {
      return static_cast<uint64_t>(units) | (uint64_t{tag} << 8) |
             (static_cast<uint64_t>(count) << 16);
    }
  };
  // The tag that caches `kind`, or 0 when the kind is not cacheable (kNoKind and kinds past a
  // byte included). Against a constant, so that a hit with a constant kind folds it away: a kind
  // past the owner's statistics may be cached, and is ignored by the owner when passed on
  // (Rstat::update range-checks every item).
  static unsigned tag_of(int kind) noexcept {
    return static_cast<unsigned>(kind) <= static_cast<unsigned>(kMaxCachedKind)
               ? static_cast<unsigned>(kind) + 1
               : 0;
  }
  static int kind_of(unsigned tag) noexcept { return static_cast<int>(tag) - 1; }

  // What a hit adds to a slot's word read as `w`, for a change of `du` units (-n for consume,
  // +n for refill) of `kind`, and what the committed word must then show under `mask`: the tag
  // the plan was made for (and a zero count before re-tagging), else the hit must not commit.
  struct Plan {
    uint64_t add, mask, expect;
    bool direct;  // the kind is not cached: pass its units to the owner after the commit
  };
  static Plan plan(uint64_t w, int64_t du, int kind) noexcept {
    const uint64_t tag = Word::tag(w);
    const uint64_t ktag = tag_of(kind);
    const uint64_t stat = static_cast<uint64_t>(-du) << 16;  // charged under the kind: +
    const uint64_t units = static_cast<uint64_t>(du);
    if (ktag != 0 && tag == ktag) return {units + stat, 0xff00, tag << 8, false};
    if (ktag != 0 && Word::count(w) == 0)  // re-tag: the count must still be zero
      return {units + ((ktag - tag) << 8) + stat, ~uint64_t{0xff}, (ktag << 8) + stat, false};
    return {units, 0xff00, tag << 8, kind != kNoKind};
  }

  // Shard layout. Aligned to 64 bytes so that no two shards (written by different CPUs on every
  // hit) ever share a cache line. Line 0 holds what a hit reads and only slow paths write; line
  // 1 what a hit writes; line 2 the statistics; line 3 is padding: 256 bytes a shard, so that a
  // hit finds its shard with a shift, and no two shards share an aligned pair of lines (which
  // some CPUs prefetch together).
  struct alignas(64) Shard {
    // Non-zero while a thread holds the shard: the try-lock of the fallback mode and the
    // "disabled" word of the rseq protocol (internal/rseq.hpp). Owners change only under it.
    std::atomic<uint64_t> disabled;
    std::atomic<StockOwner*> owner[kSlots];
    alignas(64) std::atomic<uint64_t> word[kSlots];  // see Word
    uint8_t cursor;  // next eviction victim; changed only under `disabled`
    struct alignas(64) Counters {
      std::atomic<uint64_t> hits, misses, refills, evictions, overflow_drains, remote_drains,
          stat_spills, stat_direct;
    } stats;
    struct alignas(64) Padding {
      char bytes[64];
    } padding;

    // Slot caching `o`, or -1. Racy scan: the owner is checked again under the lock or inside
    // the critical section that uses the slot.
    int find(const StockOwner* o) const noexcept {
      // Unrolled: a compare and a branch per slot, and the slot index a constant at each exit.
#pragma GCC unroll 7
      for (int i = 0; i < kSlots; ++i) {
        if (owner[i].load(std::memory_order_relaxed) == o) return i;
      }
      return -1;
    }
  };
  static_assert(sizeof(Shard) == 256, "the hot path indexes shards with a shift");
  // Critical sections access the shard's words as the plain types they wrap.
  static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t) &&
                sizeof(std::atomic<StockOwner*>) == sizeof(StockOwner*));
  static_assert(kMaxBatch < 128, "a hit adds at most kMaxBatch to at most kMaxBatch units: a byte");

  // A slot taken out of a shard under its lock, given back after the lock is released.
  struct Taken {
    StockOwner* owner;
    int64_t units;
    int kind;       // the cached kind, kNoKind if none
    int64_t count;  // its cached count
  };

  // Cheap counter bump for statistics (see Stats).
  static void bump(std::atomic<uint64_t>& c) noexcept {
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  // How often a hot path retries after an abort before taking the slow path. Aborts come from
  // preemption, migration or signals, so one retry nearly always suffices; a thread interrupted
  // that often is better served by the lock, whose cost is bounded.
  static constexpr int kMaxAborts = 4;

  // The hot path of consume (du = -n) and refill (du = +n); false: take the slow path.
  bool hit(StockOwner* o, int64_t n, int64_t du, int kind) noexcept;
  // The general hit, out of line: re-reads the slot's word and plans the change (re-tagging a
  // slot, a kind passed on), retrying after aborts. For hits the inline attempt did not commit.
  bool hit_general(StockOwner* o, int64_t du, int kind) noexcept;
  bool consume_slow(StockOwner* o, int64_t n, int kind) noexcept;
  void refill_slow(StockOwner* o, int64_t n, int kind) noexcept;
  void apply(Shard& s, int i, StockOwner* o, int64_t du, int kind) noexcept;
  int local_shard() const noexcept;
  bool try_lock(int idx) noexcept;
  void lock_wait(int idx) noexcept;
  void make_exclusive(int idx) noexcept;
  void unlock(int idx) noexcept;
  static Taken take(Shard& s, int i) noexcept;
  static void uncharge_taken(Taken& t) noexcept;
  static void give_back(const Taken& t) noexcept;
  template <typename Match>
  void drain_matching(Match match, bool count_remote) noexcept;

  std::unique_ptr<Shard[]> shards_;
  int nr_shards_;
  int64_t batch_;
  bool rseq_;
  // nr_shards_ in rseq mode, else 0: the hot path's one check of both (any CPU id fails it
  // outside rseq mode, and an unregistered thread's negative id always does).
  uint32_t rseq_shards_;
  // 2 * batch_: the span of a cached count, [-batch, batch], read by the hot path's section.
  int64_t count_span_;
};

// Both hot paths, inline: read the CPU from the rseq area, find the owner's slot with a plain
// scan, and commit the change in one critical section that re-checks CPU, shard word and owner
// and checks the slot's new word: the units within [0, batch] and, for a kind a tag can name,
// the slot caching that kind with its count within [-batch, batch]. This covers the common hit
// without reading the word first. Whatever else can still be a hit (an abort, a slot to re-tag, a
// kind passed on to the owner) goes to hit_general(), out of line; a CPU outside the stock
// (fallback mode, or no rseq for the thread) or no slot for the owner is a miss at once.
inline __attribute__((always_inline)) bool Stock::hit(StockOwner* o, int64_t n, int64_t du,
                                                      int kind) noexcept {
#if MEMCG_RSEQ_CS
  // n in [1, batch] with one unsigned compare; folded away for a constant n of 1 (the
  // constructor keeps batch_ at 1 or more).
  if (batch_ < 1) __builtin_unreachable();
  if (static_cast<uint64_t>(n - 1) < static_cast<uint64_t>(batch_)) [[likely]] {
    struct rseq* const rs = internal::rseq_area();
    const auto cpu = static_cast<uint32_t>(__atomic_load_n(&rs->cpu_id, __ATOMIC_RELAXED));
    if (cpu >= rseq_shards_) [[unlikely]]
      return false;
    Shard& s = shards_[cpu];
    const int i = s.find(o);
    if (i < 0) [[unlikely]]
      return false;
    // Constants for a constant kind. kNoKind: the units alone change (the tag and count are
    // not looked at). A kind with a tag: its count moves with the units, under that tag.
    const unsigned ktag = tag_of(kind);
    if (ktag != 0 || kind == kNoKind) [[likely]] {
      const uint64_t add = ktag != 0 ? static_cast<uint64_t>(du) + (static_cast<uint64_t>(-du) << 16)
                                     : static_cast<uint64_t>(du);
      if (internal::cs_slot_add(rs, static_cast<int>(cpu),
                                *reinterpret_cast<const uint64_t*>(&s.disabled),
                                *reinterpret_cast<const void* const*>(&s.owner[i]), o,
                                *reinterpret_cast<uint64_t*>(&s.word[i]), add,
                                ktag != 0 ? 0xffffu : 0xffu, ktag << 8,
                                *reinterpret_cast<const uint64_t*>(&batch_),
                                *reinterpret_cast<const uint64_t*>(&count_span_)) ==
          internal::CsResult::kOk)
          [[likely]] {
        bump(du < 0 ? s.stats.hits : s.stats.refills);
        return true;
      }
    }
    return hit_general(o, du, kind);
  }
#else
  (void)o;
  (void)n;
  (void)du;
  (void)kind;
#endif
  return false;
}

inline __attribute__((always_inline)) bool Stock::consume(StockOwner* o, int64_t n,
                                                          int kind) noexcept {
  assert(o != nullptr);
  // n < 1 is no request: a miss without a look at the shard (try_charge() sends it on).
  return hit(o, n, -n, kind) || (n > 0 && consume_slow(o, n, kind));
}

inline __attribute__((always_inline)) bool Stock::refill_hit(StockOwner* o, int64_t n,
                                                             int kind) noexcept {
  assert(o != nullptr);
  return hit(o, n, n, kind);
}

inline __attribute__((always_inline)) void Stock::refill(StockOwner* o, int64_t n,
                                                         int kind) noexcept {
  assert(o != nullptr);
  if (!hit(o, n, n, kind)) refill_slow(o, n, kind);
}

}  // namespace memcg

#endif  // MEMCG_STOCK_HPP_
