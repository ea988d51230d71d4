// The admission queue's shared state (admission_queue.hpp): the per-group statistics, the
// queued items, the groups' entries and the queue's core, for admission_queue.cpp (submission,
// the public calls), admission_queue_worker.cpp (the workers, the timer, stop requests) and
// admission_queue_fairness.cpp (weighted fair queueing of the memory admitted, the hold-back
// for starved heads). Private to src/core/admission.
//
// Locking: one mutex per queue (AdmissionQueueCore::mu), a leaf for the library: it is never
// held across a try (which may reclaim, calling reclaimers), a run, a done, or the destruction of
// an item (whose stop callback may be running on another thread, waiting for mu). An item being
// tried is out of its group's map, owned by the trying worker; its group is marked busy so that
// no other worker tries the same group at the same time.
//
// Cost (queues of 10 000 tenants): the groups with queued items are kept in an ordered
// index by virtual time (`backlog`), the starved ones in their own list, the groups a starved
// group holds back out of the index until it lets them go; an admission costs O(log G). A group
// with nothing queued holds no GroupRef: its entry goes, unless its virtual time is ahead of
// where it would re-enter (a lead, kept by group id without the group until the others pass it).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memcg/base/clock.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/admission/admission_queue.hpp"
#include "memcg/core/admission/internal/admission_queue_state.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"

namespace memcg {
namespace internal {

struct QueueGroupState {
  std::atomic<uint32_t> weight{kAdmitWeightDefault};
  std::atomic<uint64_t> queued{0}, running{0}, submitted{0}, admitted{0}, timed_out{0},
      cancelled{0}, never_fits{0}, refused{0}, tries{0}, errors{0}, wait_ns_sum{0}, max_wait_ns{0};
};

struct QueueAccess {
  static std::atomic<QueueGroupState*>& slot(Group& g) noexcept { return g.admit_queue_; }
  static QueueGroupState* peek(const Group& g) noexcept {
    return g.admit_queue_.load(std::memory_order_acquire);  // pairs with the creator's release
  }
};

// The state of `g`, created on first use (null when out of memory).
QueueGroupState* queue_state(Group& g) noexcept;

inline void add(std::atomic<uint64_t>& c, int64_t d) noexcept {
  c.fetch_add(static_cast<uint64_t>(d), std::memory_order_relaxed);
}

// Virtual time advances per admission by the item's size in units (at least 1, at most
// kMaxCostUnits) times kVirtualPerUnit / weight: at least 100 per unit (weight 10000), so the
// integer division loses under 1 %. A step is below 2^53; the virtual times are moved down
// together (rebase) before they pass kRebaseAt, and additions saturate.
inline constexpr uint64_t kVirtualPerUnit = 1'000'000;
inline constexpr uint64_t kMaxCostUnits = uint64_t{1} << 32;
inline constexpr uint64_t kRebaseAt = uint64_t{1} << 62;

// The hold-back (admission_queue.hpp): another group is held back for a starved one once it is
// this many of its own head items ahead of it in virtual time.
inline constexpr uint64_t kHoldLagItems = 4;

// What admitting `units` costs a group of weight `w` in virtual time.
inline uint64_t virtual_cost(uint64_t units, uint32_t w) noexcept {
  return std::clamp<uint64_t>(units, 1, kMaxCostUnits) * (kVirtualPerUnit / std::max(w, 1u));
}

// The lowest level of `g`'s path (root excluded) with a memory.max where `need` more units do
// not fit beside its usage and the running admissions' promises; null when every level has room.
const Group* blocking_level(const Group& g, int64_t need) noexcept;
// Whether `level` is `g` or one of its ancestors.
bool under(const Group& g, const Group* level) noexcept;

struct AdmissionQueueCore;

// An item's stop callback (std::stop_callback): takes the item out of the queue at once and has
// the queue's timer complete it, with no user code run on the requesting thread.
struct StopHook {
  AdmissionQueueCore* core;
  uint64_t id;
  void operator()() const noexcept;
};

struct QueueItem {
  uint64_t id = 0;
  int priority = 0;
  uint64_t bytes = 0, deadline_ns = 0, submit_ns = 0;
  uint64_t units = 0;  // bytes in units, rounded up: its cost in virtual time
  std::stop_token stop;
  std::function<void(Reservation&)> run;
  std::function<void(ReserveStatus)> done;
  // Last: destroyed first, so that a Member kept alive by the callables outlives it.
  Reservation res;
  // Registered while the item is queued (from submit until it leaves the queue). Destroying it
  // waits for a callback running on another thread: never done under mu.
  std::optional<std::stop_callback<StopHook>> on_stop;
  std::atomic<size_t>* stop_regs = nullptr;  // the core's count of registered callbacks
  void unregister_stop() noexcept {
    if (!on_stop) return;
    on_stop.reset();
    stop_regs->fetch_sub(1, std::memory_order_relaxed);
  }
  ~QueueItem() { unregister_stop(); }
};
using ItemPtr = std::unique_ptr<QueueItem>;

// Higher priority first, then first in, first out.
struct ItemKey {
  int priority;
  uint64_t id;
  bool operator<(const ItemKey& o) const noexcept {
    return priority != o.priority ? priority > o.priority : id < o.id;
  }
};

struct GroupEntry;
// A place in the order of the groups: virtual time, ties by first submission.
struct VKey {
  uint64_t vtime;
  uint64_t order;
  GroupEntry* entry;
  bool operator<(const VKey& o) const noexcept {
    return vtime != o.vtime ? vtime < o.vtime : order < o.order;
  }
};

// A group with queued items (or one being tried), or an idle group whose virtual time is ahead
// of where it would re-enter (a lead: no reference, no statistics; AdmissionQueueCore::leads).
struct GroupEntry {
  uint64_t gid = 0;                  // Group::id()
  GroupRef group;                    // null while idle
  QueueGroupState* stats = nullptr;  // the group's, alive while `group` is held
  uint64_t order = 0;                // first submission (since idle): breaks ties
  uint64_t vtime = 0;
  std::map<ItemKey, ItemPtr> items;  // queued, not being tried
  uint64_t trying = 0;               // id of the item a worker is trying (0: none)
  bool cancel_trying = false;        // Ticket::cancel() of that item came meanwhile
  // In AdmissionQueueCore::backlog unless held back or idle: then its node of the index is kept
  // here (no allocation when it comes back); held back, held_by is the starved group and the
  // entry is in its list (hprev/hnext).
  GroupEntry* held_by = nullptr;
  GroupEntry *hprev = nullptr, *hnext = nullptr;
  std::set<VKey>::node_type parked;
  uint64_t pass = 0;  // the last scan that looked at it (each looks at a group once)
  // Starved: the level above the group (an ancestor, shared with other groups) where its head
  // was last refused for lack of room; null when it was not, or was admitted since.
  const Group* starved_at = nullptr;
  bool holding = false;     // it held another group back since it was starved there...
  uint64_t hold_since = 0;  // ...first at this time (controller clock)
  bool hold_timed = false;  // in AdmissionQueueCore::hold_ends
  GroupEntry* held = nullptr;                  // the first of the groups it holds back now
  GroupEntry *sprev = nullptr, *snext = nullptr;  // in AdmissionQueueCore::starved
  bool backlogged() const noexcept { return !items.empty() || trying != 0; }
  VKey key() noexcept { return {vtime, order, this}; }
};

// An item leaving the queue without running: done(status) is called outside the lock.
struct Completion {
  ItemPtr item;
  ReserveStatus status;
  QueueGroupState* stats;
};

struct AdmissionQueueCore {
  AdmissionQueueCore(Controller& c, const AdmissionQueueOptions& o)
      : ctl(c), clock(c.clock()), options(o) {}

  Controller& ctl;
  Clock& clock;
  const AdmissionQueueOptions options;
  std::mutex mu;
  // ---- guarded by mu ----
  bool stopping = false;
  std::unordered_map<uint64_t, std::unique_ptr<GroupEntry>> entries;  // by group id, leads too
  std::set<VKey> backlog;  // backlogged groups not held back, by virtual time
  GroupEntry* starved = nullptr;  // groups with a starved_at (a list through sprev/snext)
  std::set<std::pair<uint64_t, GroupEntry*>> hold_ends;  // (end of the hold, starved group)
  // The idle entries (leads) by virtual time, to drop them once the others pass them. No
  // reference to their group is held.
  std::set<std::pair<uint64_t, GroupEntry*>> leads;
  struct Where {
    GroupEntry* entry;
    int priority;
  };
  std::unordered_map<uint64_t, Where> where;          // every queued item (tried ones too)
  std::set<std::pair<uint64_t, uint64_t>> deadlines;  // (deadline, id), finite deadlines only
  std::vector<Completion> stopped;  // taken out by their stop callback, not completed yet
  uint64_t next_order = 0;
  uint64_t passes = 0;  // scans started
  uint64_t vclock = 0;  // virtual time of the last admission: where an idle group re-enters
  uint64_t epoch = 0;   // bumped by whatever may make a head admissible (submit, an item's end)
  std::vector<ClockWaiter*> idle;  // workers asleep until woken
  ClockWaiter* poller = nullptr;   // the worker polling on the clock, if any
  std::vector<std::thread::id> worker_ids;
  ClockWaiter timer_waiter;              // the queue's timer thread (admission_queue_worker.cpp)
  uint64_t timer_until = Clock::kMaxNs;  // when it looks next
  bool timer_asleep = false;
  // ---- readable without mu ----
  std::atomic<uint64_t> next_id{1};
  std::atomic<size_t> nqueued{0}, nrunning{0};
  std::atomic<size_t> stop_regs{0};  // registered stop callbacks (queued items with a token)
  std::atomic<uint64_t> errors{0};
  // Time spent holding mu in submit (measured only while lock_timing is on: the benchmark).
  std::atomic<bool> lock_timing{false};
  std::atomic<uint64_t> submit_lock_ns{0}, submits_timed{0};

  // Wakes one sleeping worker (an idle one first, else the poller) so that it scans.
  void wake_one() noexcept {
    if (!idle.empty()) {
      ClockWaiter* w = idle.back();
      idle.pop_back();
      clock.wake(*w);
    } else if (poller != nullptr) {
      clock.wake(*poller);
    }
  }
  void wake_all() noexcept {
    for (ClockWaiter* w : idle) clock.wake(*w);
    idle.clear();
    if (poller != nullptr) clock.wake(*poller);
    clock.wake(timer_waiter);
  }
  // The timer looks again now if it sleeps past `at`.
  void wake_timer(uint64_t at) noexcept {
    if (timer_asleep && at < timer_until) {
      timer_until = at;
      clock.wake(timer_waiter);
    }
  }

  // ---- the items (admission_queue_worker.cpp) ----
  // Takes queued item `id` out of the queue (not one being tried) to be completed with `why`.
  // False if it is not queued.
  bool take(uint64_t id, ReserveStatus why, std::vector<Completion>* out);
  // Drops the bookkeeping of an item that leaves the queue (taken, or admitted by a try).
  void forget(const QueueItem& item, GroupEntry* e);
  // After an item left `e`: its entry goes if the group has nothing queued any more.
  void settle(GroupEntry* e) noexcept {
    if (!e->backlogged()) drop_entry(e);
  }
  // Items whose deadline passed (not those being tried) and items stopped by their token.
  void sweep(uint64_t now, std::vector<Completion>* out);
  void stop_requested(uint64_t id) noexcept;
  // Calls done(status) of each, with no lock held, and counts the outcome.
  void complete(std::vector<Completion>& list) noexcept;
  void count_error(QueueGroupState* s) noexcept {
    errors.fetch_add(1, std::memory_order_relaxed);
    if (s != nullptr) add(s->errors, 1);
  }

  // ---- the order of the groups (admission_queue_fairness.cpp) ----
  // The entry of `g` for a new item, made (from its lead, or at the others' smallest virtual
  // time) if the group had nothing queued. Throws std::bad_alloc.
  GroupEntry* entry_for(Group& g, QueueGroupState* stats);
  // The group has nothing queued: its entry goes (its lead is kept if it is ahead).
  void drop_entry(GroupEntry* e) noexcept;
  void set_vtime(GroupEntry* e, uint64_t v) noexcept;
  uint64_t min_vtime() const noexcept;
  // Below every virtual time the queue can give a group from now on: a lead under it is moot.
  uint64_t floor() const noexcept { return std::min(min_vtime(), vclock); }
  uint64_t min_vtime_of(const GroupEntry* except, const Group* level) const noexcept;
  void prune_leads() noexcept;
  void catch_up(GroupEntry* e, const Group* level) noexcept;
  void starve(GroupEntry* e, const Group* level) noexcept;
  void untime(GroupEntry* s) noexcept;
  void unstarve(GroupEntry* e) noexcept;
  void release_held(GroupEntry* s) noexcept;
  void release(GroupEntry* x) noexcept;  // one held group back into the order
  bool held_back(GroupEntry* x);
  void end_holds(uint64_t now);
  void admitted(GroupEntry* e, uint64_t units) noexcept;
  void rebase() noexcept;

  void work();
  void timer();
  // One pass over the backlogged groups in virtual-time order. Returns with `lock` held; true
  // when it admitted (and ran) or completed something.
  bool scan(std::unique_lock<std::mutex>& lock, std::vector<Completion>& done);
  void run_admitted(std::unique_lock<std::mutex>& lock, GroupRef group, ItemPtr item);
};

}  // namespace internal
}  // namespace memcg
