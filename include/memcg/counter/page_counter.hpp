// PageCounter: the hierarchical usage counter of one group, mirroring the kernel's page_counter.
//
// A charge adds to the counter of its group and of every ancestor up to the root; a try-charge
// does the same but backs out if any level would pass its `max`. Counts are in charge units (a
// power of two of bytes, 4 KiB by default); the group layer converts to bytes.
//
// Range: every count is in [0, sentinel()], the `max` sentinel of the unit (INT64_MAX >>
// unit_shift, so that its byte value fits a signed 64-bit integer). A call given a count outside
// it changes nothing (try_charge and charge fail, uncharge is ignored and counted as an
// underflow), and no charge takes usage above the sentinel at any level. With usage at most the
// sentinel at rest and each add at most the sentinel, no sum here can overflow: that would take
// 2^unit_shift (64 or more) charges of near-sentinel size in flight on one counter at once.
//
// Thread safety: charge, try_charge, uncharge and every read may run concurrently from any
// thread without locks. Setters of one counter must be serialised by the caller (the group layer
// holds a per-group mutex); setters may run concurrently with charges.
//
// Cost: one atomic add per level per charge. Two lessons of the kernel are built in:
//  - `usage` sits alone on its own 128-byte block, away from the limits and the parent pointer
//    that every charge reads, so that charging CPUs do not invalidate the line others poll
//    (the kernel's netperf regression of -69 % came from that false sharing);
//  - protected usage (for memory.min/low) is pushed to the parent only when it changed, so a
//    group that runs above its protection pays no extra atomic write per charge.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace memcg {

// Layout and propagation policy of a counter. The defaults are what the library uses; the other
// policies exist so that benchmarks can measure what each lesson is worth on the real code.
struct DefaultCounterPolicy {
  // 128 bytes: one cache line plus the adjacent line that the L2 prefetcher pulls in pairs.
  static constexpr std::size_t kAlign = 128;
  // Skip the exchange of min_usage/low_usage when the value would not change.
  static constexpr bool kSkipUnchangedProtection = true;
  // Count protection exchanges (tests only: it adds a write on the protection line).
  static constexpr bool kCountExchanges = false;
};

// Every field packed next to each other, as before the kernel split them.
struct PackedCounterPolicy : DefaultCounterPolicy {
  static constexpr std::size_t kAlign = alignof(std::atomic<int64_t>);
};

// Exchange protected usage whenever protection is configured (the kernel before 6.1).
struct AlwaysPropagatePolicy : DefaultCounterPolicy {
  static constexpr bool kSkipUnchangedProtection = false;
};

struct CountingCounterPolicy : DefaultCounterPolicy {
  static constexpr bool kCountExchanges = true;
};

namespace internal {
struct PageCounterLayout;
}

template <class Policy>
class BasicPageCounter {
 public:
  // The `max` sentinel for a unit of 2^unit_shift bytes: the largest count whose byte value
  // still fits a signed 64-bit integer (the kernel's PAGE_COUNTER_MAX).
  static constexpr int64_t sentinel(unsigned unit_shift) { return INT64_MAX >> unit_shift; }

  // `parent` is null for the root. Only the memory counter of a group tracks protection.
  BasicPageCounter(BasicPageCounter* parent, int64_t max_sentinel, bool protection_support = true)
      : max_(max_sentinel),
        high_(max_sentinel),
        parent_(parent),
        sentinel_(max_sentinel),
        protection_support_(protection_support) {}

  BasicPageCounter(const BasicPageCounter&) = delete;
  BasicPageCounter& operator=(const BasicPageCounter&) = delete;

  // ---- hot path ----------------------------------------------------------------------------

  // Adds `n` units at every level, ignoring limits (forced charges, the root's children
  // re-charging, tests). Fails (false, nothing charged) only when `n` is outside [0, sentinel()]
  // or some level would pass the sentinel: that much memory cannot be counted in bytes.
  bool charge(int64_t n) noexcept {
    if (!in_range(n)) [[unlikely]]
      return false;
    for (BasicPageCounter* c = this; c != nullptr; c = c->parent_) {
      // Relaxed: nothing is published through usage; set_max's race with try_charge does not
      // involve unconditional charges (they may pass max by definition).
      const int64_t old = c->usage_.fetch_add(n, std::memory_order_relaxed);
      // old > sentinel - n, rather than old + n > sentinel: no signed overflow whatever old is.
      if (old > c->sentinel_ - n) [[unlikely]] {
        c->usage_.fetch_sub(n, std::memory_order_relaxed);
        for (BasicPageCounter* d = this; d != c; d = d->parent_) d->cancel(n);
        return false;
      }
      const int64_t usage = old + n;
      c->propagate_protected_usage(usage);
      c->update_watermarks(usage);
    }
    return true;
  }

  // Adds `n` units at every level unless a level would exceed its max. Returns null on success,
  // else the lowest level that hit its limit (the counter to reclaim from and to raise the `max`
  // event on); then nothing is charged anywhere. No compare-and-swap loop: the add is
  // speculative and undone on failure, so a large failing charge can briefly make a concurrent
  // small one fail too (bounded by the size of the large one), as in the kernel.
  // A count outside [0, sentinel()] fails at this level, which is left unchanged (no failcnt).
  BasicPageCounter* try_charge(int64_t n) noexcept {
    if (!in_range(n)) [[unlikely]]
      return this;
    for (BasicPageCounter* c = this; c != nullptr; c = c->parent_) {
      // seq_cst on the add and on the load of max pairs with set_max_checked(): either this
      // charge sees the new limit or the setter sees this usage and retries (Dekker-style;
      // on x86 the add is a locked instruction and the load a plain move, so it costs nothing).
      const int64_t old = c->usage_.fetch_add(n, std::memory_order_seq_cst);
      // old + n > max, compared as old > max - n: max and n are both in [0, sentinel], so
      // nothing can overflow, and a success leaves usage <= max <= sentinel.
      if (old > c->max_.load(std::memory_order_seq_cst) - n) [[unlikely]] {
        c->usage_.fetch_sub(n, std::memory_order_relaxed);
        c->failcnt_.fetch_add(1, std::memory_order_relaxed);
        for (BasicPageCounter* d = this; d != c; d = d->parent_) d->cancel(n);
        return c;
      }
      const int64_t usage = old + n;
      c->propagate_protected_usage(usage);
      c->update_watermarks(usage);
    }
    return nullptr;
  }

  // Removes `n` units at every level. Returns false if some level would have gone below zero:
  // that level is clamped at zero instead of wrapping, and its underflow count is raised (a
  // caller bug: more was uncharged than charged). A count outside [0, sentinel()] was never
  // charged: it is ignored, counted as one underflow of this level, and false is returned.
  bool uncharge(int64_t n) noexcept {
    if (!in_range(n)) [[unlikely]] {
      underflows_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    bool ok = true;
    for (BasicPageCounter* c = this; c != nullptr; c = c->parent_) ok &= c->cancel(n);
    return ok;
  }

  // ---- limits (slow path) -------------------------------------------------------------------
  // Every setter saturates: a negative value is 0, anything above the sentinel the sentinel.

  // The kernel's page_counter_set_max: refuses (EBUSY) a limit below the current usage. Races
  // with try_charge are resolved by re-reading usage after publishing the limit.
  [[nodiscard]] int set_max_checked(int64_t units) noexcept {
    units = clamp_limit(units);
    for (;;) {
      const int64_t seen = usage_.load(std::memory_order_seq_cst);
      if (seen > units) return EBUSY;
      const int64_t old = max_.exchange(units, std::memory_order_seq_cst);
      if (usage_.load(std::memory_order_seq_cst) <= seen || units >= old) return 0;
      max_.store(old, std::memory_order_seq_cst);
    }
  }

  // cgroup v2's memory.max write: the new limit takes effect at once, even below usage; the
  // caller then reclaims or OOM-kills down to it. Returns the previous limit.
  int64_t exchange_max(int64_t units) noexcept {
    return max_.exchange(clamp_limit(units), std::memory_order_seq_cst);
  }

  void set_high(int64_t units) noexcept {
    high_.store(clamp_limit(units), std::memory_order_relaxed);
  }

  // Stores the setting and re-propagates protected usage at this level and every ancestor
  // (their own cached value may depend on this one only through children_*_usage, but the walk
  // keeps the invariant simple and matches the kernel).
  void set_min(int64_t units) noexcept {
    min_.store(clamp_limit(units), std::memory_order_relaxed);
    for (BasicPageCounter* c = this; c != nullptr; c = c->parent_)
      c->propagate_protected_usage(c->usage());
  }
  void set_low(int64_t units) noexcept {
    low_.store(clamp_limit(units), std::memory_order_relaxed);
    for (BasicPageCounter* c = this; c != nullptr; c = c->parent_)
      c->propagate_protected_usage(c->usage());
  }

  // Resets both watermarks to the current usage (memory.peak's reset starts from here).
  void reset_watermark() noexcept {
    const int64_t usage = this->usage();
    local_watermark_.store(usage, std::memory_order_relaxed);
    watermark_.store(usage, std::memory_order_relaxed);
  }
  // Resets only the local watermark and returns its previous value (memory.peak handles).
  int64_t reset_local_watermark() noexcept {
    return local_watermark_.exchange(usage(), std::memory_order_relaxed);
  }

  // ---- reads --------------------------------------------------------------------------------

  int64_t usage() const noexcept { return usage_.load(std::memory_order_relaxed); }
  int64_t max() const noexcept { return max_.load(std::memory_order_relaxed); }
  int64_t high() const noexcept { return high_.load(std::memory_order_relaxed); }
  int64_t min() const noexcept { return min_.load(std::memory_order_relaxed); }
  int64_t low() const noexcept { return low_.load(std::memory_order_relaxed); }
  // The highest usage a charge saw (memory.peak). A try_charge that succeeds never passes max,
  // but a forced charge() records the usage it saw, which may hold the speculative add of a
  // concurrent failing try_charge not yet backed out: a peak above max can exceed the forced
  // bytes by up to one failing try (batch or request) per concurrently charging thread.
  int64_t watermark() const noexcept { return watermark_.load(std::memory_order_relaxed); }
  int64_t local_watermark() const noexcept {
    return local_watermark_.load(std::memory_order_relaxed);
  }
  uint64_t failcnt() const noexcept { return failcnt_.load(std::memory_order_relaxed); }
  uint64_t underflows() const noexcept { return underflows_.load(std::memory_order_relaxed); }
  int64_t min_usage() const noexcept { return min_usage_.load(std::memory_order_relaxed); }
  int64_t low_usage() const noexcept { return low_usage_.load(std::memory_order_relaxed); }
  int64_t children_min_usage() const noexcept {
    return children_min_usage_.load(std::memory_order_relaxed);
  }
  int64_t children_low_usage() const noexcept {
    return children_low_usage_.load(std::memory_order_relaxed);
  }
  uint64_t protection_exchanges() const noexcept {
    return exchanges_.load(std::memory_order_relaxed);
  }
  int64_t sentinel() const noexcept { return sentinel_; }
  BasicPageCounter* parent() const noexcept { return parent_; }

  // Room left below max (0 when at or over it).
  int64_t margin() const noexcept {
    const int64_t room = max() - usage();
    return room > 0 ? room : 0;
  }

 private:
  bool in_range(int64_t n) const noexcept {
    return static_cast<uint64_t>(n) <= static_cast<uint64_t>(sentinel_);
  }
  int64_t clamp_limit(int64_t units) const noexcept {
    return std::clamp<int64_t>(units, 0, sentinel_);
  }

  // One level of uncharge; false (and clamped at 0) on underflow. REQUIRES: 0 <= n <= sentinel.
  bool cancel(int64_t n) noexcept {
    const int64_t old = usage_.fetch_sub(n, std::memory_order_relaxed);
    int64_t usage;
    bool ok = true;
    if (old < n) [[unlikely]] {
      // Give back only what this call took below zero, so that a concurrent charge that raced
      // in between keeps its units; then the counter reads 0 rather than a huge number. (old is
      // at least minus what racing uncharges took, so n - old cannot overflow.)
      usage_.fetch_add(n - old, std::memory_order_relaxed);
      underflows_.fetch_add(1, std::memory_order_relaxed);
      usage = 0;
      ok = false;
    } else {
      usage = old - n;
    }
    propagate_protected_usage(usage);
    return ok;
  }

  void update_watermarks(int64_t usage) noexcept {
    // Racy read-compare-store, as in the kernel: a lost update is overwritten by the next
    // charge that climbs higher, and resets set both marks, so watermark >= local_watermark.
    if (usage > local_watermark_.load(std::memory_order_relaxed)) [[unlikely]] {
      local_watermark_.store(usage, std::memory_order_relaxed);
      if (usage > watermark_.load(std::memory_order_relaxed))
        watermark_.store(usage, std::memory_order_relaxed);
    }
  }

  void propagate_protected_usage(int64_t usage) noexcept {
    if (!protection_support_ || parent_ == nullptr) return;
    propagate_one(usage, min_, min_usage_, parent_->children_min_usage_);
    propagate_one(usage, low_, low_usage_, parent_->children_low_usage_);
  }

  void propagate_one(int64_t usage, const std::atomic<int64_t>& setting,
                     std::atomic<int64_t>& cached, std::atomic<int64_t>& parent_sum) noexcept {
    const int64_t limit = setting.load(std::memory_order_relaxed);
    const int64_t protected_usage = std::min(usage, limit);
    int64_t old = cached.load(std::memory_order_relaxed);
    const bool exchange =
        Policy::kSkipUnchangedProtection ? protected_usage != old : (limit != 0 || old != 0);
    if (!exchange) return;
    // The delta comes from the exchanged value, so two racing updaters never count the same
    // change twice; a stale cached value is repaired by the next charge or uncharge here.
    old = cached.exchange(protected_usage, std::memory_order_relaxed);
    if constexpr (Policy::kCountExchanges) exchanges_.fetch_add(1, std::memory_order_relaxed);
    const int64_t delta = protected_usage - old;
    if (delta != 0) parent_sum.fetch_add(delta, std::memory_order_relaxed);
  }

  friend struct internal::PageCounterLayout;

  // Hot block: written by every charge and uncharge of this group or a descendant.
  alignas(Policy::kAlign) std::atomic<int64_t> usage_{0};
  std::atomic<uint64_t> failcnt_{0};  // written only when a try-charge fails here

  // Written sometimes on the charge path: protection bookkeeping and watermarks.
  alignas(Policy::kAlign) std::atomic<int64_t> min_usage_{0};
  std::atomic<int64_t> children_min_usage_{0};
  std::atomic<int64_t> low_usage_{0};
  std::atomic<int64_t> children_low_usage_{0};
  std::atomic<int64_t> watermark_{0};
  std::atomic<int64_t> local_watermark_{0};
  std::atomic<uint64_t> underflows_{0};
  std::atomic<uint64_t> exchanges_{0};

  // Read-mostly: read by every charge, written only by setters.
  alignas(Policy::kAlign) std::atomic<int64_t> max_;
  std::atomic<int64_t> high_;
  std::atomic<int64_t> min_{0};
  std::atomic<int64_t> low_{0};
  BasicPageCounter* const parent_;
  const int64_t sentinel_;
  const bool protection_support_;
};

using PageCounter = BasicPageCounter<DefaultCounterPolicy>;

// The layout promise, checked: usage owns its 128-byte block; the limits and the parent pointer
// that every charge reads, and the protection fields that some charges write, live elsewhere.
namespace internal {
struct PageCounterLayout {
  static constexpr std::size_t kBlock = 128;
  static constexpr std::size_t kUsage = offsetof(PageCounter, usage_);
#define MEMCG_BLOCK_OF(field) (offsetof(PageCounter, field) / kBlock)
  static_assert(alignof(PageCounter) == kBlock && kUsage % kBlock == 0);
  static_assert(MEMCG_BLOCK_OF(max_) != MEMCG_BLOCK_OF(usage_));
  static_assert(MEMCG_BLOCK_OF(parent_) != MEMCG_BLOCK_OF(usage_));
  static_assert(MEMCG_BLOCK_OF(min_usage_) != MEMCG_BLOCK_OF(usage_));
  static_assert(MEMCG_BLOCK_OF(min_usage_) != MEMCG_BLOCK_OF(max_));
  static_assert(sizeof(PageCounter) == 3 * kBlock);
#undef MEMCG_BLOCK_OF
};
}  // namespace internal

}  // namespace memcg
