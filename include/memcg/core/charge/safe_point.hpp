// safe_point(): where a thread finishes what charges made inside allocator hooks left undone.
//
// Charges made while an allocator holds its own locks (the extent hooks of memcg::jemalloc)
// neither reclaim nor sleep nor run the OOM killer: they take the counters or are refused (or
// forced, for code that cannot take a failure) and leave the rest on the thread. A safe point
// runs it: the `max` event, reclaim of the group until the refused amount fits (or, after forced
// charges, until the group is back under memory.max), the OOM policy when reclaim cannot get
// there, the memory.high throttle, and the wake of waiting charges. The kernel runs the
// equivalent on the return to user space (mem_cgroup_handle_over_high).
//
// The library calls it on its own at the boundaries it controls (every charge slow path outside
// a hook; memcg::jemalloc's operator new/delete and ScopedArenaAttach). A long-running loop
// that allocates with plain malloc calls it between items so that the overshoot of a limit stays
// within what one item allocates.
//
// Cost: one thread-local load when nothing is pending. Call with no library lock held and not
// from a reclaimer (a no-op there: the ladder would recurse).
#pragma once

#include <cstdint>

namespace memcg {

// One safe point runs one bounded ladder pass per group. After forced charges the pass reclaims
// while reclaim makes progress, then applies the OOM policy; when the group is still over
// memory.max at its end (the memory is held by live blocks and no victim freed enough), no thread
// runs a further ladder for forced charges of that group for this long (the controller's clock):
// forced charges meanwhile are still counted, and safe points cost a clock read. The pause is
// the group's because the ladder acts on the group (its reclaim, its OOM decision): every thread
// of a stalled tenant would find the same held memory, and N threads would run N passes and N
// OOM decisions for one overshoot. Refusals are never paused. The next safe point after the
// pause runs a full pass again (the OOM policy included). Without the pause, a thread that
// cannot take a failure and keeps allocating past the limit would run reclaim and the OOM
// decision at each page range it commits (thousands of times per second for nothing).
inline constexpr uint64_t kStalledLadderBackoffNs = 10'000'000;  // 10 ms

// Runs the deferred ladder of the calling thread; returns true if anything was pending.
bool safe_point() noexcept;

}  // namespace memcg
