// Effective protection: how memory.min and memory.low are shared out down the tree during a
// reclaim walk, mirroring the kernel's effective_protection() and
// mem_cgroup_calculate_protection().
//
// A group's declared protection is only a claim. What it gets (emin/elow) is relative to the
// reclaim root: children of the root get their declared values; deeper groups get at most their
// parent's effective value, and when siblings together claim more than the parent has, each gets a
// share in proportion to the protection it actually uses. With `recursive` (the kernel's
// memory_recursiveprot), a parent's unclaimed protection is handed to children in proportion to
// their unprotected usage.
//
// Sizing memory.low (and memory.min): protection holds only while the limit above it leaves
// room for it. Under a parent whose budget is memory.max (or the reclaim root's target), the
// children's lows are kept only if
//     budget >= pinned + sum of the children's memory.low
// where `pinned` is everything under that parent that no reclaimer can give back (plain charges,
// members' memory, caches that refuse to shrink). With less, reclaim has nothing unprotected left
// to take and breaches low (a `low` event on each protected group it reclaims from; memory.min is
// never breached: the charge fails or OOM-kills instead). Sibling lows that together exceed the
// parent's own effective low are cut down in proportion (below), so the sum to plan with is at
// most the parent's low. examples/low.yaml shows a budget that is too small and its `low` events.
//
// Unlike the kernel, which stores emin/elow in the counters (so concurrent reclaimers with
// different roots overwrite each other), memcg keeps them in the walk's own context. Same results
// for one walk; no stale value from an earlier, wider walk can leak into a narrower one.
#pragma once

#include <algorithm>
#include <cstdint>

#include "memcg/base/internal/int128.hpp"

namespace memcg {

// One of the two protections (min or low) of a group during a walk. Units throughout.
//   usage               the group's usage
//   parent_usage        its parent's usage
//   setting             its memory.min (or .low)
//   parent_effective    the parent's emin (or elow) in this walk
//   siblings_protected  the parent's children_min_usage (or children_low_usage)
// Intermediate products use 128 bits: with a parent set to `max` (2^51 units) the recursive term
// would overflow 64 bits once usage passes a few thousand units.
inline int64_t effective_protection(int64_t usage, int64_t parent_usage, int64_t setting,
                                    int64_t parent_effective, int64_t siblings_protected,
                                    bool recursive) noexcept {
  using internal::i128;
  const int64_t protected_usage = std::min(usage, setting);
  // Overcommitted: siblings claim more than the parent has. Share in proportion to use.
  if (siblings_protected > parent_effective)
    return static_cast<int64_t>(i128{protected_usage} * parent_effective / siblings_protected);
  int64_t ep = protected_usage;
  // Recursive mode hands the parent's unclaimed protection to the children in proportion to
  // their unprotected usage. The guards keep the division sane under unsynchronised reads.
  if (recursive && parent_effective > siblings_protected && parent_usage > siblings_protected &&
      usage > protected_usage) {
    const i128 unclaimed = i128{parent_effective} - siblings_protected;
    ep += static_cast<int64_t>(unclaimed * (usage - protected_usage) /
                               (i128{parent_usage} - siblings_protected));
  }
  return ep;
}

// The effective values of one group in one walk.
struct EffectiveProtection {
  int64_t emin = 0;
  int64_t elow = 0;
};

// Inputs of one group for compute_protection(). Read from the counters by the walk.
struct ProtectionInput {
  int64_t usage = 0;
  int64_t min = 0;
  int64_t low = 0;
  int64_t children_min_usage = 0;  // of this group (its children's claims)
  int64_t children_low_usage = 0;
};

// The kernel's mem_cgroup_calculate_protection for a group whose parent is not the reclaim root:
// `self` and `parent` inputs, `parent_eff` the parent's values in this walk. For a child of the
// reclaim root the effective values are the raw settings; the root itself is unprotected.
inline EffectiveProtection compute_protection(const ProtectionInput& self,
                                              const ProtectionInput& parent,
                                              const EffectiveProtection& parent_eff,
                                              bool recursive) noexcept {
  return {effective_protection(self.usage, parent.usage, self.min, parent_eff.emin,
                               parent.children_min_usage, recursive),
          effective_protection(self.usage, parent.usage, self.low, parent_eff.elow,
                               parent.children_low_usage, recursive)};
}

}  // namespace memcg
