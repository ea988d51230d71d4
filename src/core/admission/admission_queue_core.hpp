// The admission queue's shared state (admission_queue.hpp): the per-group statistics, the
// queued items, the groups' entries and the queue's core, for admission_queue.cpp (submission,
// the workers, the public calls) and admission_queue_fairness.cpp (weighted fair queueing of
// the memory admitted, the hold-back for starved heads). Private to src/core/admission.
//
// Locking: one mutex per queue (AdmissionQueueCore::mu), a leaf for the library: it is never
// held across a try (which may reclaim, calling reclaimers), a run or a done. An item being
// tried is out of its group's map, owned by the trying worker; its group is marked busy so that
// no other worker tries the same group at the same time.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stop_token>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memcg/base/clock.hpp"
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

struct GroupEntry {
  GroupRef group;
  QueueGroupState* stats = nullptr;  // the group's, alive while `group` is held
  uint64_t order = 0;                // first submission: breaks ties of virtual time
  uint64_t vtime = 0;
  std::map<ItemKey, ItemPtr> items;  // queued, not being tried
  uint64_t trying = 0;               // id of the item a worker is trying (0: none)
  bool cancel_trying = false;        // Ticket::cancel() of that item came meanwhile
  // Starved: the level above the group (an ancestor, shared with other groups) where its head
  // was last refused for lack of room; null when it was not, or was admitted since.
  const Group* starved_at = nullptr;
  bool holding = false;     // it held another group back since it was starved there...
  uint64_t hold_since = 0;  // ...first at this time (controller clock)
  bool backlogged() const noexcept { return !items.empty() || trying != 0; }
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
  std::vector<std::unique_ptr<GroupEntry>> groups;  // stable addresses
  std::unordered_map<const Group*, GroupEntry*> by_group;
  struct Where {
    GroupEntry* entry;
    int priority;
  };
  std::unordered_map<uint64_t, Where> where;          // every queued item (tried ones too)
  std::set<std::pair<uint64_t, uint64_t>> deadlines;  // (deadline, id), finite deadlines only
  size_t stoppable = 0;  // queued items whose stop token can be requested
  uint64_t next_id = 1, next_order = 0;
  uint64_t vclock = 0;  // virtual time of the last admission: where an idle group re-enters
  uint64_t epoch = 0;   // bumped by whatever may make a head admissible (submit, an item's end)
  size_t nstarved = 0;  // groups with a starved_at
  std::vector<ClockWaiter*> idle;  // workers asleep until woken
  ClockWaiter* poller = nullptr;   // the worker polling on the clock, if any
  std::vector<std::thread::id> worker_ids;
  // ---- readable without mu ----
  std::atomic<size_t> nqueued{0}, nrunning{0};
  std::atomic<uint64_t> errors{0};

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
  }

  // Takes queued item `id` out of the queue (not one being tried). Null if it is not queued.
  ItemPtr take(uint64_t id) {
    auto it = where.find(id);
    if (it == where.end()) return nullptr;
    GroupEntry* e = it->second.entry;
    auto node = e->items.find(ItemKey{it->second.priority, id});
    if (node == e->items.end()) return nullptr;  // being tried
    ItemPtr item = std::move(node->second);
    e->items.erase(node);
    forget(*item, e);
    return item;
  }
  // Drops the bookkeeping of an item that leaves the queue (taken, or admitted by a try).
  void forget(const QueueItem& item, GroupEntry* e) {
    where.erase(item.id);
    if (item.deadline_ns < Clock::kMaxNs) deadlines.erase({item.deadline_ns, item.id});
    if (item.stop.stop_possible()) --stoppable;
    nqueued.fetch_sub(1, std::memory_order_relaxed);
    add(e->stats->queued, -1);
  }
  // Items whose deadline passed or whose stop token fired (not those being tried).
  void sweep(uint64_t now, std::vector<Completion>* out) {
    while (!deadlines.empty() && deadlines.begin()->first <= now) {
      const uint64_t id = deadlines.begin()->second;
      auto w = where.find(id);
      GroupEntry* e = w != where.end() ? w->second.entry : nullptr;
      if (e != nullptr && e->trying == id) break;  // its worker completes it after the try
      if (ItemPtr item = take(id)) {
        out->push_back({std::move(item), ReserveStatus::kTimedOut, e->stats});
      } else {
        deadlines.erase(deadlines.begin());  // cannot happen; never loop on it
      }
    }
    if (stoppable == 0) return;
    for (auto& e : groups)
      for (auto it = e->items.begin(); it != e->items.end();) {
        auto next = std::next(it);
        if (it->second->stop.stop_requested()) {
          ItemPtr item = take(it->second->id);
          out->push_back({std::move(item), ReserveStatus::kCancelled, e->stats});
        }
        it = next;
      }
  }
  // Weighted fair queueing and the hold-back (admission_queue_fairness.cpp).
  uint64_t min_vtime() const noexcept;
  uint64_t min_vtime_of(const GroupEntry* except, const Group* level) const noexcept;
  void catch_up(GroupEntry* e, const Group* level) noexcept;
  void starve(GroupEntry* e, const Group* level) noexcept;
  void unstarve(GroupEntry* e) noexcept;
  bool held_back(const GroupEntry* x) noexcept;
  void rebase() noexcept;
  void count_error(QueueGroupState* s) noexcept {
    errors.fetch_add(1, std::memory_order_relaxed);
    if (s != nullptr) add(s->errors, 1);
  }
  // Calls done(status) of each, with no lock held, and counts the outcome.
  void complete(std::vector<Completion>& list) noexcept {
    for (Completion& c : list) {
      QueueGroupState* s = c.stats;
      switch (c.status) {
        case ReserveStatus::kTimedOut:
          add(s->timed_out, 1);
          break;
        case ReserveStatus::kCancelled:
          add(s->cancelled, 1);
          break;
        case ReserveStatus::kNeverFits:
          add(s->never_fits, 1);
          break;
        default:
          add(s->refused, 1);
          break;
      }
      try {
        if (c.item->done) c.item->done(c.status);
      } catch (...) {
        count_error(s);
      }
      c.item.reset();  // its reservation (holding nothing) and callables go here, unlocked
    }
    list.clear();
  }

  void work();
  // One pass over the backlogged groups in virtual-time order. Returns with `lock` held; true
  // when it admitted (and ran) or completed something.
  bool scan(std::unique_lock<std::mutex>& lock, std::vector<GroupEntry*>& order,
            std::vector<Completion>& done);
  void run_admitted(std::unique_lock<std::mutex>& lock, GroupEntry* e, ItemPtr item);
};

}  // namespace internal
}  // namespace memcg
