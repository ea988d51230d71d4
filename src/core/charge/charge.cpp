// The charge path out of line. The hot path (a stock hit) is inline in charge.hpp; everything
// else starts at internal::try_charge_slow().
#include "memcg/core/charge/charge.hpp"

#include <algorithm>
#include <new>
#include <utility>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/charge/limits.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/base/nofail.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/signal/trouble.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/percpu/internal/stock.hpp"

#include "memcg/core/charge/internal/alloc_hook.hpp"
#include "memcg/core/wait/internal/charge_wait_hooks.hpp"

#include "charge_ladder.hpp"
#include "core/tree/controller_registry.hpp"

namespace memcg {
namespace {

using internal::at_least_one;
using internal::DeferredSlot;
using internal::kMaxReclaimRetries;
using internal::kMinReclaimBytes;
using internal::oom_stalled;
using internal::reclaim_stalled;
using internal::tl_deferred;

Group* group_of_counter(Group& start, const PageCounter* counter) noexcept {
  for (Group* g = &start; g; g = g->parent())
    if (&g->memory() == counter) return g;
  return nullptr;
}

// memory.high bookkeeping of the calling thread: units charged while some level was over high
// (the kernel's current->memcg_nr_pages_over_high), and the group they were charged to, held by
// a reference until the throttle runs. The record may outlive the thread's use of the library:
// at thread exit it lets go of its reference, and a record whose controller was destroyed since
// (its serial is dead) drops the group without touching it.
struct PendingHigh {
  int64_t pages = 0;
  Group* group = nullptr;  // holds a reference while non-null
  uint64_t serial = 0;     // of group's controller

  // Hands the reference over to the caller (null if there is none, or its controller is gone).
  Group* take() noexcept {
    Group* g = std::exchange(group, nullptr);
    pages = 0;
    if (g == nullptr || !internal::controller_live(serial)) return nullptr;
    g->thread_record_refs().fetch_sub(1, std::memory_order_relaxed);  // the caller's now
    return g;
  }
  void drop() noexcept {
    if (Group* g = std::exchange(group, nullptr)) internal::put_if_live(serial, *g);
    pages = 0;
  }
  ~PendingHigh() { drop(); }  // thread exit
};
thread_local PendingHigh tl_high;

void handle_over_high() noexcept;


// After the counters were charged: note whether some level is over memory.high, and if the
// caller may block, reclaim and throttle now (the kernel does it on return to user space, which
// for an in-process allocator is the end of the allocation call).
void check_high(Group& group, int64_t batch, uint32_t flags) noexcept {
  for (Group* g = &group; g && !g->is_root(); g = g->parent()) {
    if (g->memory().usage() > g->memory().high()) [[unlikely]] {
      const uint64_t serial = group.controller().serial();
      // In an allocator hook a record of another group stays (dropping it may free a group,
      // which takes library locks): the units count there until the safe point.
      if (internal::tl_alloc_hook_depth > 0 && tl_high.group != nullptr) {
        tl_high.pages += batch;
        break;
      }
      if (tl_high.group != &group || tl_high.serial != serial) {
        // Pages over high carry over between groups of one controller, as the kernel's per-task
        // count does; a record of another controller is dropped with its count.
        const int64_t pages = tl_high.serial == serial ? tl_high.pages : 0;
        tl_high.drop();  // its controller may be gone: the serial tells
        group.get();
        group.thread_record_refs().fetch_add(1, std::memory_order_relaxed);
        tl_high.group = &group;
        tl_high.serial = serial;
        tl_high.pages = pages;
      }
      tl_high.pages += batch;
      break;
    }
  }
  if (tl_high.pages > 0 && (flags & kMayBlock) && !(flags & kInReclaim) &&
      internal::tl_reclaim_depth == 0)
    handle_over_high();
}


// A charge inside an allocator hook (alloc_hook.hpp): the counters only. Refused or forced, it
// leaves a record for the next safe point and raises nothing.
ChargeStatus charge_in_hook(Group& group, int64_t n, uint32_t flags) noexcept {
  Controller& ctl = group.controller();
  ChargeCounters& stats = ctl.charge_counters();
  stats.slow_path.fetch_add(1, std::memory_order_relaxed);
  int64_t batch = std::max<int64_t>(ctl.options().batch, n);
  if ((flags & kNoSpin) || !group.is_online()) batch = n;
  for (;;) {
    if (group.memory().try_charge(batch) == nullptr) {
      if (batch > n) ctl.stock().refill(&group, batch - n);
      group.stat_add(StatRegistry::kPgfault, 1, 1);
      check_high(group, batch, flags & ~kMayBlock);
      if (tl_high.pages > 0) internal::tl_deferred_pending = 1;  // the throttle waits too
      return ChargeStatus::kOk;
    }
    if (batch == n) break;
    batch = n;
  }
  const bool force = (flags & (kNoFail | kHighPrio | kInReclaim)) ||
                     internal::tl_nofail_depth > 0 || internal::tl_reclaim_depth > 0;
  DeferredSlot* slot = tl_deferred.slot_for(group);
  if (!force) {
    // Counted once per safe-point interval, whatever the allocator retries.
    if (slot == nullptr || slot->refused == 0) {
      stats.failed.fetch_add(1, std::memory_order_relaxed);
      ++internal::tl_deferred_refusals;
    }
    if (slot != nullptr) {
      slot->refused = std::max(slot->refused, n);
      slot->flags = flags;
    }
    return ChargeStatus::kNoMem;
  }
  if (!group.memory().charge(n)) [[unlikely]] {
    stats.failed.fetch_add(1, std::memory_order_relaxed);
    return ChargeStatus::kNoMem;
  }
  stats.forced.fetch_add(1, std::memory_order_relaxed);
  stats.forced_units.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  if (slot != nullptr) slot->forced += n;
  check_high(group, n, flags & ~kMayBlock);
  if (tl_high.pages > 0) internal::tl_deferred_pending = 1;
  return ChargeStatus::kForced;
}

[[gnu::noinline]] ChargeStatus charge_slow(Group& group, int64_t n, uint32_t flags) noexcept {
  if (internal::tl_alloc_hook_depth > 0) [[unlikely]]
    return charge_in_hook(group, n, flags);
  // A safe point: finish what earlier charges in allocator hooks left (alloc_hook.hpp).
  if (internal::tl_deferred_pending != 0) [[unlikely]]
    internal::run_deferred();
  Controller& ctl = group.controller();
  // A charge made while this thread reclaims must not recurse into reclaim.
  if (internal::tl_reclaim_depth > 0) flags |= kInReclaim;
  if (internal::tl_nofail_depth > 0) flags |= kNoFail;  // NoFailScope (nofail.hpp)
  Stock& stock = ctl.stock();
  ChargeCounters& stats = ctl.charge_counters();
  stats.slow_path.fetch_add(1, std::memory_order_relaxed);

  const int64_t costly = costly_charge_units(ctl);
  const int64_t min_reclaim = at_least_one(kMinReclaimBytes >> ctl.unit_shift());
  int64_t batch = std::max<int64_t>(ctl.options().batch, n);
  // A removed group keeps nothing in the stocks (it would hide its units from the parent and
  // keep it alive): charge exactly n.
  if ((flags & kNoSpin) || !group.is_online()) batch = n;
  int retries = kMaxReclaimRetries;
  Group* drained = nullptr;  // the highest subtree whose stocks this call drained
  bool max_raised = false;
  Group* over_limit = nullptr;

  // The caller's stock lookup just missed; a retry looks again (a drain, or this CPU's other
  // threads, may have refilled the stock meanwhile).
  for (bool retry = false;; retry = true) {
    if (retry && stock.consume(&group, n)) return ChargeStatus::kOk;

    PageCounter* failed = group.memory().try_charge(batch);
    if (failed == nullptr) {
      if (batch > n) stock.refill(&group, batch - n);
      group.stat_add(StatRegistry::kPgfault, 1, 1);
      check_high(group, batch, flags);
      return ChargeStatus::kOk;
    }
    over_limit = group_of_counter(group, failed);

    // A batch that does not fit may still leave room for the exact amount.
    if (batch > n) {
      batch = n;
      continue;
    }
    if (flags & kInReclaim) break;         // force
    if (!(flags & kMayBlock)) goto nomem;  // atomic context: no reclaim, no sleep

    over_limit->raise(Event::kMax);
    max_raised = true;
    {
      const int64_t reclaimed = reclaim_stalled(group, *over_limit, std::max(n, min_reclaim));
      if (over_limit->memory().margin() >= n) continue;
      // Units pre-charged in other CPUs' stocks count against the limit: give them back
      // before calling the group full.
      if (drained == nullptr || !over_limit->is_descendant_of(*drained)) {
        ctl.obj_stock().drain_all(over_limit);  // object reserves first: they return units
        stock.drain_all(over_limit);
        stats.drains.fetch_add(1, std::memory_order_relaxed);
        drained = over_limit;
        continue;
      }
      if (flags & kNoRetry) goto nomem;
      // Partial progress on a small charge retries for free, as in the kernel.
      if (reclaimed > 0 && n <= costly) continue;
      if (retries-- > 0) continue;
      if (flags & kRetryMayFail) goto nomem;
      if (n <= costly) over_limit->raise(Event::kOom);
      if (n <= costly && oom_stalled(group, *over_limit, n)) {
        const std::atomic<bool>* dying = internal::tl_charging_member_killed;
        if (dying && dying->load(std::memory_order_acquire)) goto nomem;
        retries = kMaxReclaimRetries;
        continue;
      }
    }
  nomem:
    if (!(flags & (kNoFail | kHighPrio))) {
      stats.failed.fetch_add(1, std::memory_order_relaxed);
      return ChargeStatus::kNoMem;
    }
    break;  // force
  }

  // Forced: the caller cannot take a failure. Charge exactly n past the limit, unless that
  // would take a level past the sentinel (more than can be counted in bytes).
  if (!max_raised && over_limit) over_limit->raise(Event::kMax);
  if (!group.memory().charge(n)) [[unlikely]] {
    stats.failed.fetch_add(1, std::memory_order_relaxed);
    return ChargeStatus::kNoMem;
  }
  stats.forced.fetch_add(1, std::memory_order_relaxed);
  stats.forced_units.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  return ChargeStatus::kForced;
}

}  // namespace

// Reclaim and the OOM handler (with its wait for a victim) are memory stalls of the charging
// thread, accounted to the charged group (psi.hpp).
int64_t internal::reclaim_stalled(Group& group, Group& over_limit, int64_t units) {
  MemStall stall(group);
  return group.controller().reclaim_for_charge(over_limit, units);
}
bool internal::oom_stalled(Group& group, Group& over_limit, int64_t units) {
  MemStall stall(group);
  return group.controller().out_of_memory(over_limit, units);
}
bool internal::high_pending() noexcept {
  return tl_high.pages > 0;
}

// The per-kind byte total of memory.stat follows every charge and uncharge, so that the state
// items add up to memory.current minus what sits in the stocks. On the hot paths the stock slot
// caches it (Stock::consume/refill take the kind); the other paths add it here.
static_assert(kNoStatKind == Stock::kNoKind, "charge kinds are passed to the stock as they are");

inline void account_kind(Group& group, int kind, int64_t units) noexcept {
  if (kind == kNoStatKind) return;
  group.stat_add(kind, units << group.controller().unit_shift(), units < 0 ? -units : units);
}

// The hot path (charge.hpp) found no pre-charged units in this CPU's stock. As in the kernel,
// memory.high is looked at only when the counters are charged, never on a stock hit.
ChargeStatus internal::try_charge_slow(Group& group, int64_t units, uint32_t flags,
                                       int kind) noexcept {
  // Range (charge.hpp): a count no counter can hold fails whatever the flags say.
  if (static_cast<uint64_t>(units) > static_cast<uint64_t>(group.controller().max_units()))
      [[unlikely]] {
    group.controller().charge_counters().failed.fetch_add(1, std::memory_order_relaxed);
    return ChargeStatus::kNoMem;
  }
  if (group.is_root() || units == 0) [[unlikely]]
    return ChargeStatus::kOk;
  const ChargeStatus status = charge_slow(group, units, flags);
  if (status != ChargeStatus::kNoMem) account_kind(group, kind, units);
  return status;
}

namespace {
// An uncharge of a count no charge could have made (charge.hpp, "Range"): ignored, but left
// visible as an underflow of the group's counter, which refuses the count and counts it.
void refuse_uncharge(Group& group) noexcept {
  group.memory().uncharge(-1);
}
bool uncharge_in_range(const Group& group, int64_t units) noexcept {
  return static_cast<uint64_t>(units) <= static_cast<uint64_t>(group.controller().max_units());
}
}  // namespace

void internal::uncharge_slow(Group& group, int64_t units, int kind) noexcept {
  if (units == 0) return;
  if (!uncharge_in_range(group, units)) [[unlikely]] {
    refuse_uncharge(group);
    return;
  }
  // A charge waits on this group's path (charge_wait.hpp): the units go to the counters, where
  // the waiter can use them.
  if (internal::charge_waiters_on_path(group)) [[unlikely]] {
    uncharge_direct(group, units, kind);
    return;
  }
  group.charge_stock()->refill(&group, units, kind);
}

void uncharge_direct(Group& group, int64_t units, int kind) noexcept {
  if (group.is_root() || units == 0) [[unlikely]]
    return;
  if (!uncharge_in_range(group, units)) [[unlikely]] {
    refuse_uncharge(group);
    return;
  }
  account_kind(group, kind, -units);
  group.memory().uncharge(units);
  if (internal::charge_waiters_on_path(group)) [[unlikely]] {
    // In an allocator hook the wake (which takes the queues' mutexes) is marked on the queues
    // and runs at this thread's safe point; the waiters' poll bounds the delay where none comes.
    if (internal::tl_alloc_hook_depth > 0) {
      if (internal::defer_wake_in_hook(group)) {
        tl_deferred.wake_controller = &group.controller();
        tl_deferred.wake_serial = group.controller().serial();
        internal::tl_deferred_pending = 1;
      }
      return;
    }
    internal::wake_charge_waiters_slow(group);
  }
}

namespace {
// The most bytes one charge may ask for: the sentinel's worth (charge.hpp, "Range").
uint64_t max_charge_bytes(const Controller& ctl) noexcept {
  return static_cast<uint64_t>(ctl.max_units()) << ctl.unit_shift();
}
}  // namespace

ChargeStatus try_charge_bytes(Group& group, uint64_t bytes, uint32_t flags, int kind) noexcept {
  Controller& ctl = group.controller();
  if (bytes > max_charge_bytes(ctl)) [[unlikely]] {
    ctl.charge_counters().failed.fetch_add(1, std::memory_order_relaxed);
    return ChargeStatus::kNoMem;
  }
  return try_charge(group, ctl.to_units_ceil(bytes), flags, kind);
}

void uncharge_bytes(Group& group, uint64_t bytes, int kind) noexcept {
  const Controller& ctl = group.controller();
  if (bytes > max_charge_bytes(ctl)) [[unlikely]] {
    if (!group.is_root()) refuse_uncharge(group);
    return;
  }
  uncharge(group, ctl.to_units_ceil(bytes), kind);
}

void charge_or_throw(Group& group, uint64_t bytes, uint32_t flags, int kind) {
  if (!charged(try_charge_bytes(group, bytes, flags, kind))) throw std::bad_alloc();
}

ChargeHandle::ChargeHandle(Group& group, uint64_t bytes, uint32_t flags, int kind) noexcept {
  if (charged(try_charge_bytes(group, bytes, flags, kind))) {
    group.get();
    group_ = &group;
    bytes_ = bytes;
    kind_ = kind;
  }
}

ChargeHandle::ChargeHandle(ChargeHandle&& o) noexcept
    : group_(o.group_), bytes_(o.bytes_), kind_(o.kind_) {
  o.group_ = nullptr;
  o.bytes_ = 0;
}

ChargeHandle& ChargeHandle::operator=(ChargeHandle&& o) noexcept {
  if (this != &o) {
    release();
    std::swap(group_, o.group_);
    std::swap(bytes_, o.bytes_);
    std::swap(kind_, o.kind_);
  }
  return *this;
}

void ChargeHandle::release() noexcept {
  if (!group_) return;
  uncharge_bytes(*group_, bytes_, kind_);
  group_->put();
  group_ = nullptr;
  bytes_ = 0;
}

void internal::charged_after_wait(Group& group, int64_t units) noexcept {
  check_high(group, units, kMayBlock);
}

// Charges above this many units are "costly": no free retry after partial progress and no OOM
// kill (charge.hpp).
int64_t costly_charge_units(const Controller& controller) noexcept {
  const int64_t units = static_cast<int64_t>(kCostlyChargeBytes >> controller.unit_shift());
  return units > 0 ? units : 1;
}

void handle_pending_high() noexcept {
  if (tl_high.pages > 0 && internal::tl_reclaim_depth == 0) handle_over_high();
}

ChargeStats charge_stats(const Controller& controller) noexcept {
  const ChargeCounters& c = controller.charge_counters();
  return {c.slow_path.load(std::memory_order_relaxed), c.forced.load(std::memory_order_relaxed),
          c.failed.load(std::memory_order_relaxed), c.drains.load(std::memory_order_relaxed),
          c.forced_units.load(std::memory_order_relaxed) * controller.unit_size()};
}

}  // namespace memcg

// ---- memory.high: reclaim and throttle (slow path) ----------------------------------------------
namespace memcg {
namespace {

// Reclaims from every level of `group` below the root that is over its high, raising `high` on
// each; returns units reclaimed (the kernel's reclaim_high).
int64_t reclaim_high(Group& group, int64_t nr_units) noexcept {
  int64_t reclaimed = 0;
  for (Group* g = &group; g && !g->is_root(); g = g->parent()) {
    if (g->memory().usage() <= g->memory().high()) continue;
    g->raise(Event::kHigh);
    MemStall stall(group);
    reclaimed += reclaim(*g, nr_units, ReclaimReason::kHigh);
  }
  return reclaimed;
}

uint64_t max_overage(const Group& group) noexcept {
  uint64_t worst = 0;
  for (const Group* g = &group; g && !g->is_root(); g = g->parent())
    worst = std::max(worst, high_overage(g->memory().usage(), g->memory().high()));
  return worst;
}

// The highest level below the root that is over its memory.high, or null.
Group* highest_over_high(Group& group) noexcept {
  Group* top = nullptr;
  for (Group* g = &group; g && !g->is_root(); g = g->parent())
    if (g->memory().usage() > g->memory().high()) top = g;
  return top;
}

// The kernel's mem_cgroup_handle_over_high: reclaim the excess; if the group is still far over
// high, sleep a penalty that grows with the square of the overage.
void handle_over_high() noexcept {
  const int64_t nr = tl_high.pages;
  Group* group = tl_high.take();
  if (nr <= 0 || group == nullptr) {
    if (group) group->put();
    return;
  }
  Controller& ctl = group->controller();
  const unsigned shift = ctl.unit_shift();
  // The penalty formula counts 4 KiB pages; a batch of 64 of them is its unit.
  const uint64_t nr_pages = shift >= 12 ? static_cast<uint64_t>(nr) << (shift - 12)
                                        : static_cast<uint64_t>(nr) >> (12 - shift);
  const int64_t retry_units = std::max<int64_t>(1, kMinReclaimBytes >> shift);
  int retries = kMaxReclaimRetries;
  bool first = true;
  bool drained = false;
  for (;;) {
    const int64_t reclaimed = reclaim_high(*group, first ? nr : retry_units);
    const uint64_t penalty =
        std::min(high_penalty_ms(max_overage(*group), nr_pages), kMaxHighDelayMs);
    // Small penalties are forgiven: not worth a sleep.
    if (penalty <= kMinHighDelayMs) break;
    // Units pre-charged in per-CPU stocks count in usage: give back those of the highest level
    // over high once before judging that a sleep is due (as a charge does before failing).
    if (!drained) {
      drained = true;
      if (Group* top = highest_over_high(*group)) {
        ctl.obj_stock().drain_all(top);  // object reserves first: they return units
        ctl.stock().drain_all(top);
        ctl.charge_counters().drains.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
    }
    // Reclaim still makes progress (or may yet): try again before sleeping.
    if (reclaimed > 0 || retries-- > 0) {
      first = false;
      continue;
    }
    ctl.charge_counters().throttled_ms.fetch_add(penalty, std::memory_order_relaxed);
    internal::count_throttle(*group, penalty * 1'000'000);  // per group (trouble.hpp)
    MemStall stall(*group);
    ctl.clock().sleep_ns(penalty * 1'000'000);
    break;
  }
  group->put();
}

}  // namespace
}  // namespace memcg
