// Rstat: per-shard statistics with lazy hierarchical aggregation (the kernel's "rstat").
//
// Every group embeds an RstatNode holding, for each statistic item (see stat_registry.hpp), a
// hierarchical total (this group and all its descendants) and a local value (this group only).
// Hot paths never touch those: update() adds a delta to a raw counter of the calling thread's
// shard (one per CPU) and marks the node on that shard's "updated tree", the set of nodes with
// deltas not yet folded. flush(R) walks only the updated trees below R, folds each node's deltas
// into its totals and pushes them one level up; ancestors above R receive them as pending input
// and fold it at their own next flush. A clean shard is skipped without touching any of its cache
// lines (a bitmask of non-empty shards), and a node not on a shard's tree is skipped without
// taking that shard's lock. So the cost of an update is O(depth) with one locked add, and the
// cost of a flush is proportional to what changed, not to the size of the tree.
//
// Readers decide when to pay for a flush with the kernel's memcg thresholds: every update also
// records its magnitude; a group needs a flush once more than batch × nr_shards units of update
// magnitude were recorded against it (flush_if_needed), and periodic() flushes everything from
// the root once per period. A reader's view is thus stale by at most staleness_bound_units() of
// update magnitude per level, for at most periodic_ns. Totals can be transiently negative (a
// decrement folded before the matching increment on another shard); readers see them as 0.
//
// Thread safety: update(), update_on(), flush(), flush_if_needed(), periodic(), detach() and the
// readers may be called from any thread at any time. Flushes serialise on one flush mutex, taken
// and released once per shard (never held across all shards); an update takes its shard's tree
// lock only when it links a node that was not yet on that shard's tree. Creating a node is safe
// concurrently with everything except detaching or destroying its parent.
//
// Memory: per node, nr_shards blocks of round_up(24 + 8 × nr_items, 64) bytes (raw counters,
// tree links and tally of one shard share one cache line or two) plus 8 × nr_items bytes per
// shard of flusher-only snapshots, 24 × nr_items bytes of totals, locals and pending input, and
// the node object itself (three cache lines). With 12 items and 64 shards: 14.5 KiB per node.
#pragma once

#include "memcg/base/internal/cpu.hpp"
#include "memcg/base/internal/rseq.hpp"

#include <sched.h>

#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace memcg {

class Rstat;

// The statistics of one group. Non-copyable, non-movable: shard trees point at it.
class RstatNode {
 public:
  // Creates a node under `parent`; parent == nullptr makes it the root (one root per Rstat).
  // REQUIRES: `rs` outlives the node; `parent` is not detached.
  RstatNode(Rstat& rs, RstatNode* parent);
  // REQUIRES: detached, or the root with no attached children.
  ~RstatNode();
  RstatNode(const RstatNode&) = delete;
  RstatNode& operator=(const RstatNode&) = delete;

  RstatNode* parent() const noexcept { return parent_; }
  bool is_root() const noexcept { return parent_ == nullptr; }

  // Hierarchical value of `item` after the last flush that covered this node, clamped at >= 0
  // (0 for an item out of range).
  int64_t total(int item) const noexcept;
  // This node's own value of `item` after the last flush that covered it, clamped at >= 0.
  int64_t local(int item) const noexcept;

 private:
  friend class Rstat;

  // Read-mostly, read on every update: set at construction, never written afterwards.
  Rstat& rs_;
  RstatNode* const parent_;
  std::byte* shards_;  // nr_shards blocks of Rstat::stride_ bytes, see Rstat::ShardHeader
  // Own cache line: every update reads it for each ancestor, updaters add to it once per `batch`
  // units per shard, a flush clears it. Kept off the line above so those rare writes do not
  // invalidate the pointers every update reads.
  alignas(64) std::atomic<int64_t> updates_total_{0};
  // Written by flushes only (under the flush mutex), so kept off both lines above.
  alignas(64) std::unique_ptr<int64_t[]> prev_;     // [shard][item] raw counter at last fold
  std::unique_ptr<int64_t[]> pending_;              // [item] pushed up by children, not folded
  std::unique_ptr<std::atomic<int64_t>[]> totals_;  // [item] hierarchical, then [item] local
  RstatNode* flush_next_ = nullptr;                 // the flush list being processed
  std::atomic<int> nr_children_{0};                 // attached children, for REQUIRES checks
  bool detached_ = false;
};

class Rstat {
 public:
  struct Options {
    // Number of shards; 0 = the CPUs the system has configured.
    int nr_shards = 0;
    // Flush side: skip a shard whose tree does not hold the flushed node without taking the
    // shard's lock. The update side always checks. Off only for the ablation benchmark.
    bool speculative_check = true;
    // Flush side: skip shards whose tree is empty by reading one bitmask word per 64 shards,
    // without touching any per-shard cache line. Off only for the ablation benchmark.
    bool nonempty_mask = true;
    // The kernel's MEMCG_CHARGE_BATCH: a shard's update tally moves to the group's shared
    // total in steps of at least 64 units, so the shared atomic is written once per 64 units of
    // updates, and a group needs a flush after batch × nr_shards units.
    int64_t batch = 64;
    // The kernel's periodic flush period, 2 s.
    uint64_t periodic_ns = 2'000'000'000;
  };

  // Throws std::invalid_argument when nr_shards < 0, batch < 1 or batch × nr_shards overflows.
  Rstat(size_t nr_items, Options options);
  // REQUIRES: every node of this Rstat was destroyed.
  ~Rstat();
  Rstat(const Rstat&) = delete;
  Rstat& operator=(const Rstat&) = delete;

  // Adds `delta` to `item` of `n` on the calling thread's shard. `magnitude_units` is |delta| in
  // charge units, a non-zero sub-unit amount counting as 1 (values < 1 are taken as 1); it feeds
  // the flush threshold only. delta == 0 is ignored entirely, and so is an item outside
  // 0 .. nr_items - 1 (one unsigned compare: an out-of-range index would write into the next
  // shard's block or past the node's allocation).
  // REQUIRES: n not detached.
  void update(RstatNode& n, int item, int64_t delta, int64_t magnitude_units) noexcept {
    if (delta == 0 || static_cast<size_t>(static_cast<unsigned>(item)) >= nr_items_) [[unlikely]]
      return;
#if MEMCG_RSEQ_CS
    if (cs_mode_) {
      update_tail(n, add_on_current_cpu(n, item, delta), magnitude_units);
      return;
    }
#endif
    update_on(current_shard(), n, item, delta, magnitude_units);
  }
  // As update(), on an explicit shard (tests and simulations), with a locked add (an item out of
  // range is ignored likewise). REQUIRES:
  // 0 <= shard < nr_shards, and no concurrent update() on the CPU of that shard (update() writes
  // its CPU's shard with plain stores when shards are one per CPU).
  inline void update_on(int shard, RstatNode& n, int item, int64_t delta,
                        int64_t magnitude_units) noexcept;

  // Folds every shard's pending deltas of the subtree at `subtree_root` into its totals, and the
  // subtree's contribution into its parent's pending input. REQUIRES: not detached.
  void flush(RstatNode& subtree_root);
  // True when more than batch × nr_shards units of update magnitude were recorded against `n`
  // (on any shard, in its subtree) since its last flush.
  bool needs_flush(const RstatNode& n) const noexcept {
    return n.updates_total_.load(std::memory_order_relaxed) > flush_threshold_;
  }
  // The reader's flush (memory.stat): flush(n) if needs_flush(n).
  void flush_if_needed(RstatNode& n) {
    if (needs_flush(n)) flush(n);
  }
  // Flushes from the root, unconditionally, when periodic_ns have passed since the last periodic
  // flush (the first period starts at time 0 of the caller's clock). `now_ns` comes from the
  // caller's monotonic clock. True if this call flushed; concurrent callers flush once a period.
  bool periodic(uint64_t now_ns);
  // The first half of periodic(): true for the one caller that claims a due period, which must
  // then flush from the root itself (after folding what it caches elsewhere, for instance).
  bool claim_period(uint64_t now_ns) noexcept;
  // Retires a removed group: folds its deltas of every shard into its totals and its parent's
  // pending input (nothing is lost from the parent's totals), and unlinks it from every shard.
  // REQUIRES: n is not the root, has no attached children, and receives no more updates.
  void detach(RstatNode& n);

  // Hierarchical / own value of `item` of `n` after the last flush covering it, clamped >= 0.
  int64_t total(const RstatNode& n, int item) const noexcept { return n.total(item); }
  int64_t local(const RstatNode& n, int item) const noexcept { return n.local(item); }

  int nr_shards() const noexcept { return nr_shards_; }
  size_t nr_items() const noexcept { return nr_items_; }
  const Options& options() const noexcept { return options_; }

  // Units of update magnitude a reader's view may miss per level of the tree (and for at most
  // periodic_ns): the reader-flush threshold (batch × nr_shards, the shared count) plus what each
  // shard's tally holds below one batch before it moves into that count (batch − 1 per shard).
  static constexpr uint64_t staleness_bound_units(int64_t batch, int nr_shards) noexcept {
    return static_cast<uint64_t>(batch) * static_cast<uint64_t>(nr_shards) +
           static_cast<uint64_t>(batch - 1) * static_cast<uint64_t>(nr_shards);
  }
  int64_t flush_threshold() const noexcept { return flush_threshold_; }

  // Diagnostics. The raw counter of `item` of `n` on `shard` (the naive-aggregation baseline of
  // the benchmarks reads it), and the update magnitude recorded against `n` since its last flush
  // (shared total plus every shard's tally; approximate while updates run).
  int64_t raw(const RstatNode& n, int shard, int item) const noexcept;
  int64_t recorded_magnitude(const RstatNode& n) const noexcept;

  // Instrumentation of the flush side for tests and benchmarks.
  struct Counters {
    uint64_t shard_lock_acquisitions;              // shard tree locks taken by flushes/detaches
    uint64_t shards_skipped_by_mask;               // shards passed over by the non-empty mask
    uint64_t shards_skipped_by_speculative_check;  // shards passed over by the on-tree test
    uint64_t nodes_flushed;                        // (node, shard) folds
    uint64_t flushes;                              // flush() calls, including detach's and periodic
  };
  Counters counters() const noexcept;

 private:
  friend class RstatNode;

  // ---- hot path helpers; the integrator replaces the two marked ones ----

  // The calling thread's shard: its CPU (read from rseq's cpu_id where glibc registered it),
  // folded onto fewer shards when so configured.
  int current_shard() const noexcept {
    const int cpu = internal::current_cpu();
    return cpu < nr_shards_ ? cpu : cpu % nr_shards_;
  }
  // Adds to a counter of a shard with a locked add: the path when shards are not one per CPU (or
  // restartable sequences are unavailable), where threads sharing a shard may run concurrently.
  //
  // Ordering: seq_cst (the same `lock xadd` as relaxed on x86-64) so that the add precedes the
  // updater's on-tree test in the single total order, while a flush unlinks a node (seq_cst
  // store of null) before it reads the node's counters (seq_cst loads). Either the updater sees
  // the unlink and links the node again, or the flush sees the add: a delta is never left on a
  // node that is on no tree. An rseq add must keep that pairing (e.g. membarrier on the flush
  // side); the kernel accepts the window instead, leaving such a delta until the node's next
  // update on that shard.
  static void add_on_shard(std::atomic<int64_t>& counter, int64_t delta) noexcept {
    counter.fetch_add(delta, std::memory_order_seq_cst);
  }
#if MEMCG_RSEQ_CS
  // With one shard per CPU: the add is a plain store committed in a restartable sequence on the
  // calling thread's CPU (no lock prefix), retried on the new CPU if the thread was preempted or
  // migrated. Returns the shard it landed on. The pairing that add_on_shard gets from seq_cst is
  // restored on the flush side: after unlinking a shard's nodes, the flush fences that CPU
  // (membarrier) before it reads their counters, so a store that the updater's on-tree test
  // raced with is either seen by the fold or followed by a test that sees the unlink.
  int add_on_current_cpu(RstatNode& n, int item, int64_t delta) noexcept {
    static constexpr uint64_t kNeverDisabled = 0;
    static const void* const kOwner = &kNeverDisabled;
    for (;;) {
      const int cpu = internal::current_cpu();
      int64_t* counter = reinterpret_cast<int64_t*>(&counters_of(n, cpu)[item]);
      if (internal::cs_add_bounded(cpu, &kNeverDisabled, &kOwner, kOwner, counter, delta,
                                   INT64_MIN, INT64_MAX) == internal::CsResult::kOk)
        return cpu;
    }
  }
#endif
  // The rest of an update once the delta is in the shard's counter.
  inline void update_tail(RstatNode& n, int shard, int64_t magnitude_units) noexcept;

  struct ShardHeader;
  ShardHeader& header(const RstatNode& n, int shard) const noexcept;
  std::atomic<int64_t>* counters_of(const RstatNode& n, int shard) const noexcept;
  void account_update(RstatNode& n, int shard, int64_t magnitude) noexcept;

  // ---- slow path ----
  void link_updated(RstatNode& n, int shard) noexcept;   // puts n and its ancestors on the tree
  void flush_shard(RstatNode& r, int shard);             // one shard of flush(r)
  void flush_shard_checked(RstatNode& r, int shard);     // with the speculative on-tree test
  RstatNode* build_flush_list(RstatNode& r, int shard);  // under the shard lock
  void fold(RstatNode& n, int shard) noexcept;           // the per-node callback

  void set_nonempty(int shard) noexcept;
  void clear_nonempty(int shard) noexcept;

  // Read-only after construction.
  const size_t nr_items_;
  const int nr_shards_;
  // Per-CPU updates through restartable sequences (shards = CPUs, rseq registered).
  const bool cs_mode_;
  const Options options_;
  const size_t stride_;            // bytes per (node, shard) block, a multiple of 64
  const int64_t flush_threshold_;  // batch × nr_shards
  const size_t nr_mask_words_;

  // One tree lock per shard, each on its own cache line so linking on one shard does not
  // disturb another.
  struct alignas(64) ShardLock {
    std::mutex mu;
  };
  std::unique_ptr<ShardLock[]> shard_locks_;
  // Bit s set: shard s's tree is non-empty (the root is on it). Set by the update that links the
  // root, cleared by the root flush that unlinks it, both under the shard lock; read without it.
  std::unique_ptr<std::atomic<uint64_t>[]> nonempty_;
  std::atomic<RstatNode*> root_{nullptr};

  // Flush side.
  alignas(64) std::mutex flush_mutex_;
  std::vector<RstatNode*> flush_stack_;  // guarded by flush_mutex_: scratch of build_flush_list
  std::atomic<uint64_t> last_periodic_ns_{0};
  struct AtomicCounters {
    std::atomic<uint64_t> shard_lock_acquisitions{0};
    std::atomic<uint64_t> shards_skipped_by_mask{0};
    std::atomic<uint64_t> shards_skipped_by_speculative_check{0};
    std::atomic<uint64_t> nodes_flushed{0};
    std::atomic<uint64_t> flushes{0};
  };
  alignas(64) AtomicCounters counters_;
};

// ---------------------------------------------------------------------------------------------
// Implementation details below; not part of the interface.

// The start of each (node, shard) block; the block continues with nr_items raw counters. Links,
// tally and counters of one shard sit together because an update touches all three, and apart
// from the flusher-only snapshots (RstatNode::prev_) so a flush writes nothing the updater reads
// except when a node leaves the tree.
struct Rstat::ShardHeader {
  // Next sibling in the parent's children list (the last one points at the parent); the root on
  // the tree points at itself. nullptr: not on this shard's tree. Written under the shard lock,
  // read without it by the speculative tests of both sides.
  std::atomic<RstatNode*> next{nullptr};
  // First child with pending deltas on this shard; the node itself when none. Shard lock.
  RstatNode* children;
  // Update magnitude recorded on this shard since it last moved to updates_total_.
  std::atomic<int64_t> tally{0};
};
static_assert(sizeof(void*) == 8, "block layout assumes 64-bit pointers");

inline Rstat::ShardHeader& Rstat::header(const RstatNode& n, int shard) const noexcept {
  return *reinterpret_cast<ShardHeader*>(n.shards_ + static_cast<size_t>(shard) * stride_);
}

inline std::atomic<int64_t>* Rstat::counters_of(const RstatNode& n, int shard) const noexcept {
  return reinterpret_cast<std::atomic<int64_t>*>(n.shards_ + static_cast<size_t>(shard) * stride_ +
                                                 sizeof(ShardHeader));
}

inline void Rstat::update_on(int shard, RstatNode& n, int item, int64_t delta,
                             int64_t magnitude_units) noexcept {
  assert(shard >= 0 && shard < nr_shards_);
  assert(!n.detached_);
  if (delta == 0 || static_cast<size_t>(static_cast<unsigned>(item)) >= nr_items_) return;
  add_on_shard(counters_of(n, shard)[item], delta);
  update_tail(n, shard, magnitude_units);
}

inline void Rstat::update_tail(RstatNode& n, int shard, int64_t magnitude_units) noexcept {
  // Speculative on-tree test: a node already on the tree needs nothing more. See add_on_shard
  // for why a concurrent flush cannot strand the delta just added.
  if (header(n, shard).next.load(std::memory_order_seq_cst) == nullptr) [[unlikely]] {
    link_updated(n, shard);
  }
  account_update(n, shard, magnitude_units < 1 ? 1 : magnitude_units);
}

// The memcg update accounting: walk up while the group is not yet flushable, adding the
// magnitude to this shard's tally and moving the tally to the group's shared total whenever it
// reaches `batch`.
inline void Rstat::account_update(RstatNode& n, int shard, int64_t magnitude) noexcept {
  const int64_t batch = options_.batch;
  for (RstatNode* g = &n; g != nullptr; g = g->parent_) {
    // g is flushable already; as in the kernel, so are its ancestors (they recorded at least
    // as much unless flushed since), and the walk stops.
    if (g->updates_total_.load(std::memory_order_relaxed) > flush_threshold_) break;
    std::atomic<int64_t>& tally = header(*g, shard).tally;
    // Load and store rather than a locked add: the tally only decides when a reader flushes, so
    // an increment lost to another thread of the same shard (or to a flush clearing it) merely
    // delays or advances a flush by less than one batch.
    const int64_t t = tally.load(std::memory_order_relaxed) + magnitude;
    if (t < batch) {
      tally.store(t, std::memory_order_relaxed);
      continue;
    }
    tally.store(0, std::memory_order_relaxed);
    g->updates_total_.fetch_add(t, std::memory_order_relaxed);
  }
}

}  // namespace memcg
