// What the charge path (charge.cpp) and the safe point (safe_point.cpp) share: the ladder's
// constants and steps, and the per-thread records that allocator hooks leave
// (core/internal/alloc_hook.hpp). Private to src/core.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"
#include "memcg/core/charge/internal/alloc_hook.hpp"

#include "core/tree/controller_registry.hpp"

namespace memcg::internal {

// Reclaim attempts without progress before the OOM handler (the kernel's MAX_RECLAIM_RETRIES).
inline constexpr int kMaxReclaimRetries = 16;
// The smallest reclaim request (the kernel's SWAP_CLUSTER_MAX = 32 pages of 4 KiB).
inline constexpr int64_t kMinReclaimBytes = 32 * 4096;

inline int64_t at_least_one(int64_t v) noexcept {
  return v > 0 ? v : 1;
}

// Reclaim and the OOM handler as memory stalls of the charging thread (psi.hpp).
int64_t reclaim_stalled(Group& group, Group& over_limit, int64_t units);
bool oom_stalled(Group& group, Group& over_limit, int64_t units);
// Whether this thread has memory.high work deferred (handle_pending_high() runs it).
bool high_pending() noexcept;

// What charges made inside allocator hooks left for the next safe point (alloc_hook.hpp), one
// slot per group. Each slot holds a reference to its group, counted in the group's
// thread_record_refs() (the thread may exit, or never reach a safe point, after its controller
// is gone); a record whose controller is gone (its serial is dead) is dropped without touching
// the group. Uncharges in hooks leave no slot: a wake of waiting charges they skipped is marked
// on the waiters' queues instead (charge_wait_hooks.hpp), so nothing pins a group for a thread
// that never reaches a safe point (an allocator's background purge thread).
struct DeferredSlot {
  Group* group = nullptr;  // holds a reference while non-null
  uint64_t serial = 0;
  int64_t refused = 0;  // the largest refused request, in units
  int64_t forced = 0;   // units forced past the limit
  uint32_t flags = 0;   // of the refused request (kRetryMayFail, kNoRetry)
};
struct DeferredRecords {
  // Groups one thread touches between two safe points; a record past them still counts but runs
  // no ladder (the next charge of that group outside a hook runs its own).
  static constexpr int kSlots = 4;
  DeferredSlot slots[kSlots];

  // The slot of `group`, or a new one (takes a reference; atomic only: callable in a hook).
  DeferredSlot* slot_for(Group& group) noexcept {
    DeferredSlot* free_slot = nullptr;
    for (DeferredSlot& s : slots) {
      if (s.group == &group && s.serial == group.controller().serial()) return &s;
      if (s.group == nullptr && free_slot == nullptr) free_slot = &s;
    }
    if (free_slot == nullptr) return nullptr;
    group.get();
    group.thread_record_refs().fetch_add(1, std::memory_order_relaxed);
    free_slot->group = &group;
    free_slot->serial = group.controller().serial();
    tl_deferred_pending = 1;
    return free_slot;
  }
  // A wake of waiting charges that an uncharge in a hook skipped (no reference: the controller
  // is looked up by its serial first). One controller at a time; the waiters' poll serves any
  // other.
  Controller* wake_controller = nullptr;
  uint64_t wake_serial = 0;

  ~DeferredRecords() {  // thread exit
    for (DeferredSlot& s : slots)
      if (Group* g = std::exchange(s.group, nullptr)) put_if_live(s.serial, *g);
  }
};
extern thread_local DeferredRecords tl_deferred;

}  // namespace memcg::internal
