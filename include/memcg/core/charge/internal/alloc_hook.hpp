// Charges made inside an allocator's hooks (jemalloc's extent hooks), and the safe point that
// finishes their work later.
//
// An allocator calls its hooks with its own locks held (jemalloc 5.3 holds an arena's growth
// mutex through the commit hook). Nothing that can block may run there: no reclaim, sleep, OOM
// kill, callback, notification, nor any library lock (another thread may hold that lock while it
// waits for the allocator's). The kernel has the same split: a charge made where the task cannot
// sleep only tries the counters, and what it could not do (the memory.high penalty,
// mem_cgroup_handle_over_high) runs on the return to user space.
//
// Inside an AllocHookScope the charge path therefore only tries the page counters. A charge that
// does not fit is refused, or forced past memory.max when the caller cannot take a failure
// (kNoFail, NoFailScope, kHighPrio); either way it leaves a record on the thread (the group, the
// units refused or forced) and raises nothing. An uncharge under the scope updates the counters
// at once but leaves the wake of waiting charges to the record (the waiters' own poll, 10 ms,
// bounds the delay where no safe point follows, e.g. on the allocator's own threads). The next
// safe point on the thread runs what the records ask for, outside the allocator: the `max`
// event, reclaim of the group, draining the stocks, the OOM decision, the memory.high throttle
// and the wake. Safe points: memcg::safe_point() (safe_point.hpp), and every charge slow path
// entered outside a scope.
//
// A thread between two safe points counts a refusal (ChargeCounters::failed) once, however often
// the allocator retries underneath (jemalloc asks for a fresh committed region after a refused
// commit), and runs one ladder for it.
//
// Internal header: users of memcg must not include it or rely on it.
#ifndef MEMCG_INTERNAL_ALLOC_HOOK_HPP_
#define MEMCG_INTERNAL_ALLOC_HOOK_HPP_

#include <atomic>
#include <cstdint>

namespace memcg::internal {

// Depth of allocator hooks running on this thread.
inline thread_local int tl_alloc_hook_depth = 0;
// Non-zero: some record waits for a safe point on this thread (one load on the fast paths).
// Initial-exec, as jemalloc's own thread state: a load at a fixed offset from the thread pointer,
// where the default model of position-independent code calls __tls_get_addr in a shared build
// and takes three instructions in a static one.
[[gnu::tls_model("initial-exec")]] inline thread_local int tl_deferred_pending = 0;
// Refusals recorded on this thread since its last safe point (the allocator layer counts its
// own failures once per interval by it).
inline thread_local uint64_t tl_deferred_refusals = 0;

struct AllocHookScope {
  AllocHookScope() noexcept { ++tl_alloc_hook_depth; }
  ~AllocHookScope() { --tl_alloc_hook_depth; }
  AllocHookScope(const AllocHookScope&) = delete;
  AllocHookScope& operator=(const AllocHookScope&) = delete;
};

// Set once by an allocator layer (memcg::jemalloc): called with true before a safe point runs
// a ladder on this thread and with false after it. The ladder runs reclaimers and kill
// callbacks, whose allocations must not land in (and outlive in) the tenant's allocator: the
// jemalloc layer moves the thread to jemalloc's arena 0 meanwhile.
using LadderScopeFn = void (*)(bool enter) noexcept;
extern std::atomic<LadderScopeFn> g_ladder_scope;

// Runs the records of this thread if the thread is at a safe point (no hook, no reclaim, no
// library lock, not already inside a safe point); a no-op otherwise. Returns true when it ran.
bool run_deferred() noexcept;

}  // namespace memcg::internal

#endif  // MEMCG_INTERNAL_ALLOC_HOOK_HPP_
