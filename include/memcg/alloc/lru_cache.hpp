// LruCache: the built-in reclaimer, a cache of whole units charged to one group that gives the
// oldest units back first when reclaim asks (like the page cache of a file on the kernel's
// inactive LRU list).
//
// It models the memory, not the data: an application wraps its own cache around it (one unit per
// cached block) or uses it directly, as the scenario runner does for its `cache` objects.
// `referenced_percent` makes that share of scanned units rotate to the young end instead of being
// freed (they were used since the last scan), so reclaim gets less efficient and pressure rises.
//
// Thread safety: every call may be made from any thread; a mutex guards the list (never held
// while charging, so a charge that reclaims from this very cache cannot deadlock).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/reclaim/reclaim.hpp"

namespace memcg {

class LruCache final : public Reclaimer {
 public:
  // Registers on `group` (held by reference until destruction, so the cache outlives a removal of
  // its group and stays reclaimable through the parent).
  LruCache(Group& group, std::string name, int referenced_percent = 0);
  // Uncharges everything it holds and unregisters.
  ~LruCache() override;
  LruCache(const LruCache&) = delete;
  LruCache& operator=(const LruCache&) = delete;

  // Adds up to `units`, one charge per unit (each may reclaim, including from this cache).
  // Stops at the first charge that fails. Returns the units added.
  int64_t grow(int64_t units, uint32_t flags = kDefaultCharge);
  // Frees up to `units` of the oldest. Returns the units freed.
  int64_t shrink(int64_t units);
  // Frees everything.
  void drop() { shrink(size()); }

  int64_t size() const noexcept { return size_.load(std::memory_order_relaxed); }
  // Units freed by reclaim (not by shrink/drop).
  uint64_t evicted() const noexcept { return evicted_.load(std::memory_order_relaxed); }
  // Units reclaim rotated to the young end instead of freeing them (referenced), over the
  // cache's life: the work of its scans that freed nothing. One reclaim call rotates at most
  // what it was asked to scan.
  uint64_t rotated() const noexcept { return rotated_.load(std::memory_order_relaxed); }
  const std::string& name() const noexcept { return name_; }
  Group& group() const noexcept { return *group_; }

  // Units are numbered in the order they were added (0, 1, 2, ...). The callback learns which
  // units reclaim or shrink freed (`count` consecutive numbers from `first`), so that an
  // application can drop the data it kept in them. Called without the cache's lock held.
  using EvictFn = std::function<void(uint64_t first, int64_t count)>;
  void set_evict_callback(EvictFn fn);
  // For a caller that bounds the rotation work of many caches together (memcgctl's work
  // budget): told after each reclaim call that rotated units, with how many (already in
  // rotated()), without the cache's lock held. Returning false stops rotation: from then on
  // reclaim frees referenced units like the others, until a callback is set again (an empty one
  // included). A reclaim call rotates at most what it was asked to scan (a cluster, 128 KiB of
  // units, when the library's reclaim driver calls it), so a caller that returns false once its
  // budget is spent overshoots it by at most that.
  using RotateFn = std::function<bool(int64_t count)>;
  void set_rotate_callback(RotateFn fn);

  // Runs of consecutive unit numbers in the list: its memory is one small entry per run.
  // Adjacent runs are merged, so a run count above 1 means as many gaps between live units
  // (made by evictions between rotated units), never units rotated one by one: at most
  // size(), and 1 for a cache that reclaim rotates whole (referenced 100 %) or not at all.
  size_t nr_runs() const;

  // Reclaimer
  int64_t reclaimable() const noexcept override { return size(); }
  ReclaimResult reclaim(int64_t nr_to_scan, int priority) override;

 private:
  GroupRef group_;
  const std::string name_;
  const int referenced_percent_;
  // Consecutive unit numbers, oldest run at the front.
  struct Run {
    uint64_t first;
    int64_t count;
  };
  // Appends `unit` at the young end, merged into the last run when it follows it.
  // REQUIRES: mu_ held.
  void append_young(uint64_t unit);
  // Takes up to `n` units off the front, calling the evict callback; returns what it took.
  int64_t pop_oldest(int64_t n, std::vector<Run>* freed);
  void notify(const std::vector<Run>& freed);

  mutable std::mutex mu_;
  std::deque<Run> runs_;    // guarded by mu_
  uint64_t next_unit_ = 0;  // guarded by mu_
  // Accumulates referenced_percent_ per scanned unit; every 100 marks one unit as referenced, so
  // exactly that share of scanned units rotates, deterministically. Guarded by mu_.
  int ref_accumulator_ = 0;
  bool rotation_stopped_ = false;  // guarded by mu_: the rotate callback returned false
  EvictFn on_evict_;    // guarded by mu_ (copied out before calling)
  RotateFn on_rotate_;  // guarded by mu_ (copied out before calling)
  std::atomic<int64_t> size_{0};
  std::atomic<uint64_t> evicted_{0};
  std::atomic<uint64_t> rotated_{0};
  ReclaimerRegistration registration_;
};

}  // namespace memcg
