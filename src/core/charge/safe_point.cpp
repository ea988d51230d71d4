// The safe point: runs what charges made inside allocator hooks left on the thread
// (core/internal/alloc_hook.hpp, safe_point.hpp).
#include "memcg/core/charge/safe_point.hpp"

#include <algorithm>
#include <atomic>
#include <utility>

#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/charge/internal/alloc_hook.hpp"
#include "memcg/core/wait/internal/charge_wait_hooks.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/percpu/internal/stock.hpp"

#include "charge_ladder.hpp"
#include "core/tree/controller_registry.hpp"

namespace memcg {

thread_local internal::DeferredRecords internal::tl_deferred;

namespace {

using internal::at_least_one;
using internal::DeferredRecords;
using internal::DeferredSlot;
using internal::kMaxReclaimRetries;
using internal::kMinReclaimBytes;
using internal::oom_stalled;
using internal::reclaim_stalled;
using internal::tl_deferred;

// The deepest level below the root at which `need` more units do not fit (need 0: a level over
// its max), or null.
Group* level_short_of(Group& group, int64_t need) noexcept {
  Group* worst = nullptr;
  for (Group* g = &group; g && !g->is_root(); g = g->parent()) {
    const int64_t usage = g->memory().usage();
    const int64_t max = g->memory().max();
    if (usage > max || max - usage < need) {
      worst = g;
      break;
    }
  }
  return worst;
}

// The ladder an allocator hook could not run (alloc_hook.hpp), now outside the allocator: one
// bounded pass. For a refusal: reclaim until the refused amount fits, then the OOM decision as
// the charge would have made it (requests of at most the costly size, not with kRetryMayFail).
// After forced charges: reclaim while it makes progress and the group is over memory.max, then
// the OOM policy whatever the size (the memory is taken already; killing is the only way back);
// reclaim that freed nothing is not retried (the memory is held: retrying only spins). Returns
// true when the group is still over its limit at the end (the pass stalled).
bool run_ladder(Group& group, const DeferredSlot& rec) noexcept {
  Controller& ctl = group.controller();
  const int64_t costly = costly_charge_units(ctl);
  const int64_t min_reclaim = at_least_one(kMinReclaimBytes >> ctl.unit_shift());
  const bool forced = rec.forced > 0;
  const int64_t need = forced ? 0 : rec.refused;
  Group* over = level_short_of(group, need);
  if (over == nullptr) return false;
  over->raise(Event::kMax);
  int retries = rec.flags & kNoRetry ? 0 : kMaxReclaimRetries;
  bool drained = false;
  int kills = 0;
  for (;;) {
    const int64_t short_by =
        over->memory().usage() + need - static_cast<int64_t>(over->memory().max());
    const int64_t reclaimed =
        reclaim_stalled(group, *over, std::max(std::max<int64_t>(short_by, 1), min_reclaim));
    over = level_short_of(group, need);
    if (over == nullptr) return false;
    if (!drained) {
      drained = true;
      ctl.obj_stock().drain_all(over);
      ctl.stock().drain_all(over);
      ctl.charge_counters().drains.fetch_add(1, std::memory_order_relaxed);
      if ((over = level_short_of(group, need)) == nullptr) return false;
      continue;
    }
    if (reclaimed > 0 && retries > 0) {
      --retries;
      continue;
    }
    if (!forced && retries-- > 0) continue;
    const bool may_kill = forced || (need <= costly && !(rec.flags & kRetryMayFail));
    // A bounded number of kills per safe point: each waits for its victim (oom.hpp).
    if (!may_kill || kills++ >= 4) return true;
    over->raise(Event::kOom);
    if (!oom_stalled(group, *over, std::max<int64_t>(need, 1))) return true;
    const std::atomic<bool>* dying = internal::tl_charging_member_killed;
    if (dying && dying->load(std::memory_order_acquire)) return true;
    retries = kMaxReclaimRetries;
    if ((over = level_short_of(group, need)) == nullptr) return false;
  }
}

// Runs the ladder of a record, unless it only forced charges and a forced ladder for the group,
// on any thread, stalled less than kStalledLadderBackoffNs ago: the forced bytes are counted
// already (by the hook), and a new pass would find the same held memory. The pause is the
// group's, not the thread's: the ladder acts on the group (reclaim of its caches and arenas, its
// OOM decision), so N threads of a stalled tenant would otherwise run N passes and N OOM
// decisions for one overshoot. A refusal is never paused (its allocation failed: the thread
// needs the pass to find room for the next one).
void run_record(Group& group, const DeferredSlot& rec) noexcept {
  const bool forced_only = rec.refused == 0;
  const uint64_t now = group.controller().clock().now_ns();
  std::atomic<uint64_t>& paused_until = group.stalled_ladder_until();
  if (forced_only && now < paused_until.load(std::memory_order_relaxed)) return;
  const bool stalled = run_ladder(group, rec);
  if (!stalled || !forced_only) {
    // Relaxed: a pause lost to a racing pass only costs that pass.
    if (paused_until.load(std::memory_order_relaxed) != 0)
      paused_until.store(0, std::memory_order_relaxed);
    return;
  }
  const uint64_t until = now + kStalledLadderBackoffNs;
  paused_until.store(until < now ? UINT64_MAX : until, std::memory_order_relaxed);
}

thread_local bool tl_in_safe_point = false;

}  // namespace

std::atomic<internal::LadderScopeFn> internal::g_ladder_scope{nullptr};

bool internal::run_deferred() noexcept {
  if (internal::tl_deferred_pending == 0 && !internal::high_pending()) return false;
  if (internal::tl_alloc_hook_depth > 0 || internal::tl_reclaim_depth > 0 ||
      internal::tl_hook_bypass > 0 || tl_in_safe_point)
    return false;
  tl_in_safe_point = true;
  // Taken out first: the ladder allocates and charges, which may leave new records.
  DeferredSlot taken[DeferredRecords::kSlots];
  for (int i = 0; i < DeferredRecords::kSlots; ++i)
    taken[i] = std::exchange(tl_deferred.slots[i], DeferredSlot{});
  Controller* const wake_ctl = std::exchange(tl_deferred.wake_controller, nullptr);
  const uint64_t wake_serial = tl_deferred.wake_serial;
  internal::tl_deferred_pending = 0;
  internal::tl_deferred_refusals = 0;
  const internal::LadderScopeFn scope = internal::g_ladder_scope.load(std::memory_order_acquire);
  if (scope != nullptr) scope(true);
  for (DeferredSlot& rec : taken) {
    Group* g = std::exchange(rec.group, nullptr);
    if (g == nullptr) continue;
    if (!internal::controller_live(rec.serial)) continue;  // gone: nothing to touch
    if (rec.refused > 0 || rec.forced > 0) run_record(*g, rec);
    g->thread_record_refs().fetch_sub(1, std::memory_order_relaxed);
    g->put();
  }
  if (wake_ctl != nullptr)
    internal::run_if_live(
        wake_serial,
        [](void* ctl) { internal::run_deferred_wakes(*static_cast<Controller*>(ctl)); }, wake_ctl);
  if (internal::high_pending()) handle_pending_high();
  if (scope != nullptr) scope(false);
  tl_in_safe_point = false;
  return true;
}

bool safe_point() noexcept {
  if (internal::tl_deferred_pending == 0 && !internal::high_pending()) [[likely]]
    return false;
  return internal::run_deferred();
}
}  // namespace memcg
