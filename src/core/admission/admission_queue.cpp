// The admission queue (admission_queue.hpp): per-group queues ordered by priority, weighted fair
// queueing of the memory admitted across groups with a bounded hold-back for starved large
// heads, a pool of workers that try heads without waiting.
//
// Locking: one mutex per queue (Core::mu), a leaf for the library: it is never held across a
// try (which may reclaim, calling reclaimers), a run or a done. An item being tried is out of
// its group's map, owned by the trying worker; its group is marked busy so that no other worker
// tries the same group at the same time.

#include "memcg/core/admission/admission_queue.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/admission/admission.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"
#include "memcg/core/admission/internal/admission_queue_state.hpp"
#include "memcg/core/admission/internal/admission_state.hpp"
#include "memcg/core/oom/oom.hpp"

namespace memcg {
namespace internal {

struct QueueGroupState {
  std::atomic<uint32_t> weight{kAdmitWeightDefault};
  std::atomic<uint64_t> queued{0}, running{0}, submitted{0}, admitted{0}, timed_out{0},
      cancelled{0}, never_fits{0}, refused{0}, tries{0}, errors{0}, wait_ns_sum{0},
      max_wait_ns{0};
};

struct QueueAccess {
  static std::atomic<QueueGroupState*>& slot(Group& g) noexcept { return g.admit_queue_; }
  static QueueGroupState* peek(const Group& g) noexcept {
    return g.admit_queue_.load(std::memory_order_acquire);  // pairs with the creator's release
  }
};

namespace {

// The state of `g`, created on first use (null when out of memory).
QueueGroupState* queue_state(Group& g) noexcept {
  std::atomic<QueueGroupState*>& slot = QueueAccess::slot(g);
  QueueGroupState* s = slot.load(std::memory_order_acquire);
  if (s != nullptr) return s;
  HookBypass bypass;  // library bookkeeping is never charged
  auto* fresh = new (std::nothrow) QueueGroupState;
  if (fresh == nullptr) return nullptr;
  if (slot.compare_exchange_strong(s, fresh, std::memory_order_acq_rel,
                                   std::memory_order_acquire))
    return fresh;
  delete fresh;
  return s;
}

void add(std::atomic<uint64_t>& c, int64_t d) noexcept {
  c.fetch_add(static_cast<uint64_t>(d), std::memory_order_relaxed);
}

// Virtual time advances per admission by the item's size in units (at least 1, at most
// kMaxCostUnits) times kVirtualPerUnit / weight: at least 100 per unit (weight 10000), so the
// integer division loses under 1 %. A step is below 2^53; the virtual times are moved down
// together (rebase) before they pass kRebaseAt, and additions saturate.
constexpr uint64_t kVirtualPerUnit = 1'000'000;
constexpr uint64_t kMaxCostUnits = uint64_t{1} << 32;
constexpr uint64_t kRebaseAt = uint64_t{1} << 62;

// The hold-back (admission_queue.hpp): another group is held back for a starved one once it is
// this many of its own head items ahead of it in virtual time.
constexpr uint64_t kHoldLagItems = 4;

// What admitting `units` costs a group of weight `w` in virtual time.
uint64_t virtual_cost(uint64_t units, uint32_t w) noexcept {
  return std::clamp<uint64_t>(units, 1, kMaxCostUnits) * (kVirtualPerUnit / std::max(w, 1u));
}

// The lowest level of `g`'s path (root excluded) with a memory.max where `need` more units do
// not fit beside its usage and the running admissions' promises (admission.hpp); null when every
// level has room now. Reads counters only (admit_stats takes the level's leaf lock): called with
// no queue lock held.
const Group* blocking_level(const Group& g, int64_t need) noexcept {
  const int64_t unlimited = g.controller().max_units();
  for (const Group* a = &g; a != nullptr && !a->is_root(); a = a->parent()) {
    const int64_t max = a->memory().max();
    if (max >= unlimited) continue;
    const int64_t promised = std::max<int64_t>(0, admit_stats(*a).promised_units);
    if (a->memory().usage() + promised + need > max) return a;
  }
  return nullptr;
}

bool under(const Group& g, const Group* level) noexcept {
  for (const Group* a = &g; a != nullptr; a = a->parent())
    if (a == level) return true;
  return false;
}

}  // namespace

void admit_queue_group_freed(Group& g) noexcept {
  HookBypass bypass;
  delete QueueAccess::slot(g).exchange(nullptr, std::memory_order_acq_rel);
}

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
  std::unordered_map<uint64_t, Where> where;       // every queued item (tried ones too)
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
  // The smallest virtual time of the backlogged groups, or vclock when none is.
  uint64_t min_vtime() const noexcept {
    uint64_t m = UINT64_MAX;
    for (const auto& e : groups)
      if (e->backlogged()) m = std::min(m, e->vtime);
    return m == UINT64_MAX ? vclock : m;
  }

  // The smallest virtual time of the backlogged groups under `level` (all when null) but
  // `except`; UINT64_MAX when there is none.
  uint64_t min_vtime_of(const GroupEntry* except, const Group* level) const noexcept {
    uint64_t m = UINT64_MAX;
    for (const auto& e : groups)
      if (e.get() != except && e->backlogged() && (level == nullptr || under(*e->group, level)))
        m = std::min(m, e->vtime);
    return m;
  }
  // Virtual time not used for lack of room that only the group's own items can give back (its
  // own memory.max), or given up at the end of a hold-back, is not credit: like a group back
  // from idle, it moves up to the others' smallest.
  void catch_up(GroupEntry* e, const Group* level) noexcept {
    const uint64_t m = min_vtime_of(e, level);
    if (m != UINT64_MAX) e->vtime = std::max(e->vtime, m);
  }
  void starve(GroupEntry* e, const Group* level) noexcept {
    if (e->starved_at == nullptr) ++nstarved;
    if (e->starved_at != level) e->holding = false;
    e->starved_at = level;
  }
  void unstarve(GroupEntry* e) noexcept {
    if (e->starved_at != nullptr) --nstarved;
    e->starved_at = nullptr;
    e->holding = false;
  }
  // Whether `x`'s head waits for a starved group (the hold-back, admission_queue.hpp): one that
  // is starved at a level above x, and that x is ahead of by kHoldLagItems of its own head item
  // in virtual time. A hold that lasted options.hold_ns ends: the starved group gives up its
  // lag (catch_up).
  bool held_back(const GroupEntry* x) noexcept {
    if (nstarved == 0 || options.hold_ns == 0) return false;
    const uint32_t w = std::max<uint32_t>(x->stats->weight.load(std::memory_order_relaxed), 1);
    const uint64_t lag = kHoldLagItems * virtual_cost(x->items.begin()->second->units, w);
    for (const auto& sp : groups) {
      GroupEntry* s = sp.get();
      if (s == x || s->starved_at == nullptr) continue;
      if (!s->backlogged()) {
        unstarve(s);
        continue;
      }
      if (x->vtime < s->vtime || x->vtime - s->vtime < lag || !under(*x->group, s->starved_at))
        continue;
      const uint64_t now = clock.now_ns();
      if (!s->holding) {
        s->holding = true;
        s->hold_since = now;
      } else if (now - std::min(now, s->hold_since) >= options.hold_ns) {
        catch_up(s, s->starved_at);
        unstarve(s);
        continue;
      }
      return true;
    }
    return false;
  }

  // Moves every virtual time down by the smallest of the backlogged groups (those below it, idle,
  // to 0: they re-enter at the smallest anyway), keeping their differences.
  void rebase() noexcept {
    const uint64_t base = min_vtime();
    for (auto& e : groups) e->vtime = e->vtime > base ? e->vtime - base : 0;
    vclock = vclock > base ? vclock - base : 0;
  }

  void count_error(QueueGroupState* s) noexcept {
    errors.fetch_add(1, std::memory_order_relaxed);
    if (s != nullptr) add(s->errors, 1);
  }
  // Calls done(status) of each, with no lock held, and counts the outcome.
  void complete(std::vector<Completion>& list) noexcept {
    for (Completion& c : list) {
      QueueGroupState* s = c.stats;
      switch (c.status) {
        case ReserveStatus::kTimedOut: add(s->timed_out, 1); break;
        case ReserveStatus::kCancelled: add(s->cancelled, 1); break;
        case ReserveStatus::kNeverFits: add(s->never_fits, 1); break;
        default: add(s->refused, 1); break;
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

void AdmissionQueueCore::run_admitted(std::unique_lock<std::mutex>& lock, GroupEntry* e,
                                      ItemPtr item) {
  QueueGroupState* s = e->stats;
  const uint64_t now = clock.now_ns();
  const uint64_t waited = now > item->submit_ns ? now - item->submit_ns : 0;
  add(s->admitted, 1);
  add(s->running, 1);
  add(s->wait_ns_sum, static_cast<int64_t>(waited));
  for (uint64_t m = s->max_wait_ns.load(std::memory_order_relaxed);
       waited > m && !s->max_wait_ns.compare_exchange_weak(m, waited, std::memory_order_relaxed);) {
  }
  nrunning.fetch_add(1, std::memory_order_relaxed);
  // Others may be admissible too: one more worker looks (it wakes the next in turn).
  for (const auto& g : groups)
    if (!g->items.empty()) {
      wake_one();
      break;
    }
  lock.unlock();
  try {
    item->run(item->res);
  } catch (...) {
    count_error(s);
  }
  item.reset();  // the reservation gives its memory back (unless run moved it)
  lock.lock();
  add(s->running, -1);
  nrunning.fetch_sub(1, std::memory_order_relaxed);
  ++epoch;  // memory came back: heads may be admissible now
}

bool AdmissionQueueCore::scan(std::unique_lock<std::mutex>& lock, std::vector<GroupEntry*>& order,
                              std::vector<Completion>& done) {
  {
    HookBypass bypass;
    order.clear();
    for (const auto& e : groups)
      if (!e->items.empty() && e->trying == 0) order.push_back(e.get());
    std::sort(order.begin(), order.end(), [](const GroupEntry* a, const GroupEntry* b) {
      return a->vtime != b->vtime ? a->vtime < b->vtime : a->order < b->order;
    });
  }
  for (GroupEntry* e : order) {
    if (stopping) return false;
    if (e->items.empty() || e->trying != 0) continue;  // changed while the lock was dropped
    if (held_back(e)) continue;
    auto head = e->items.begin();
    ItemPtr item = std::move(head->second);
    e->items.erase(head);
    e->trying = item->id;
    e->cancel_trying = false;
    add(e->stats->tries, 1);
    lock.unlock();
    const uint64_t now = clock.now_ns();
    // One try: the expected-peak check and the ladder without the OOM killer, no wait.
    const ReserveStatus st = now >= item->deadline_ns
                                 ? ReserveStatus::kTimedOut
                                 : item->res.reserve_until(item->bytes, now);
    // Refused for lack of room: where (the hold-back needs the level), read with no lock held.
    const bool no_room = st == ReserveStatus::kTimedOut && now < item->deadline_ns;
    const Group* blocked = nullptr;
    if (no_room) {
      const Group& g = *e->group;
      const auto units = static_cast<int64_t>(std::min<uint64_t>(item->units, INT64_MAX));
      blocked = blocking_level(g, admit_expected(g, units) - item->res.units());
    }
    lock.lock();
    bool cancelled = e->cancel_trying || (!held(st) && item->stop.stop_requested());
    if (held(st) && !cancelled && !stopping) {
      e->trying = 0;
      forget(*item, e);
      unstarve(e);
      vclock = e->vtime;
      const uint32_t w = e->stats->weight.load(std::memory_order_relaxed);
      const uint64_t cost = virtual_cost(item->units, w);
      e->vtime = e->vtime > UINT64_MAX - cost ? UINT64_MAX : e->vtime + cost;
      if (e->vtime >= kRebaseAt) rebase();
      run_admitted(lock, e, std::move(item));
      return true;
    }
    if (held(st)) {
      // Admitted while it was cancelled or the queue stops: it does not run.
      lock.unlock();
      item->res.release();
      lock.lock();
      cancelled = cancelled || e->cancel_trying;
    }
    e->trying = 0;
    e->cancel_trying = false;
    if (no_room && !cancelled && !stopping) {
      if (blocked == e->group.get()) {
        unstarve(e);  // its own items must give memory back: holding others back is no use
        catch_up(e, nullptr);
      } else if (blocked != nullptr) {
        starve(e, blocked);
      } else {
        unstarve(e);  // there is room now: the next try will tell
      }
    }
    const bool again = !cancelled && (held(st) || (st == ReserveStatus::kTimedOut &&
                                                    clock.now_ns() < item->deadline_ns));
    if (again) {
      // Not admitted (or the queue stops): back at its place, the head.
      HookBypass bypass;
      const ItemKey key{item->priority, item->id};
      e->items.emplace(key, std::move(item));
      continue;
    }
    forget(*item, e);
    const ReserveStatus why = cancelled ? ReserveStatus::kCancelled : st;
    done.push_back({std::move(item), why, e->stats});
    return true;
  }
  return false;
}

void AdmissionQueueCore::work() {
  ClockWaiter me;
  std::vector<GroupEntry*> order;
  std::vector<Completion> done;
  {
    HookBypass bypass;
    order.reserve(16);
  }
  std::unique_lock<std::mutex> lock(mu);
  while (!stopping) {
    {
      HookBypass bypass;
      sweep(clock.now_ns(), &done);
    }
    if (!done.empty()) {
      lock.unlock();
      complete(done);
      lock.lock();
      continue;
    }
    const uint64_t seen = epoch;
    // The poll period counts from this look: a clock that moved during the scan's tries
    // already counts towards the next look.
    const uint64_t looked = clock.now_ns();
    if (scan(lock, order, done)) {
      if (!done.empty()) {
        lock.unlock();
        complete(done);
        lock.lock();
      }
      continue;
    }
    if (stopping) break;
    if (epoch != seen) continue;  // something came back or arrived while it looked
    bool any = false;
    for (const auto& e : groups) any = any || !e->items.empty();
    // Nothing admissible: one worker polls on the clock (memory freed outside the queue), the
    // others sleep until woken.
    if (any && poller == nullptr) {
      poller = &me;
      const uint64_t until = Clock::after(looked, options.poll_ns);
      bool woken = false;
      // A clock's wait may return early (a ManualClock's every ms of real time): the poll is
      // measured on the controller's clock.
      while (!woken && !stopping && epoch == seen && clock.now_ns() < until)
        woken = clock.wait_until(me, lock, until, {});
      if (poller == &me) poller = nullptr;
    } else {
      {
        HookBypass bypass;
        idle.push_back(&me);
      }
      bool woken = false;
      while (!woken && !stopping) woken = clock.wait_until(me, lock, Clock::kMaxNs, {});
      std::erase(idle, &me);  // when woken by stop or returned early
    }
  }
}

}  // namespace internal

// ---- the group's weight and statistics --------------------------------------------------------

int set_admit_weight(Group& group, uint32_t weight) noexcept {
  if (group.is_root()) return ENOENT;
  if (weight < kAdmitWeightMin || weight > kAdmitWeightMax) return EINVAL;
  internal::QueueGroupState* s = internal::queue_state(group);
  if (s == nullptr) return ENOMEM;
  s->weight.store(weight, std::memory_order_relaxed);
  return 0;
}

uint32_t admit_weight(const Group& group) noexcept {
  const internal::QueueGroupState* s = internal::QueueAccess::peek(group);
  return s ? s->weight.load(std::memory_order_relaxed) : kAdmitWeightDefault;
}

AdmitQueueStats admit_queue_stats(const Group& group) noexcept {
  AdmitQueueStats st;
  const internal::QueueGroupState* s = internal::QueueAccess::peek(group);
  if (s == nullptr) return st;
  auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  st.queued = r(s->queued);
  st.running = r(s->running);
  st.submitted = r(s->submitted);
  st.admitted = r(s->admitted);
  st.timed_out = r(s->timed_out);
  st.cancelled = r(s->cancelled);
  st.never_fits = r(s->never_fits);
  st.refused = r(s->refused);
  st.tries = r(s->tries);
  st.errors = r(s->errors);
  st.wait_ns_sum = r(s->wait_ns_sum);
  st.max_wait_ns = r(s->max_wait_ns);
  return st;
}

const char* submit_status_name(SubmitStatus s) noexcept {
  switch (s) {
    case SubmitStatus::kOk: return "ok";
    case SubmitStatus::kFull: return "full";
    case SubmitStatus::kStopped: return "stopped";
    case SubmitStatus::kInvalid: return "invalid";
  }
  return "unknown";
}

// ---- the queue ----------------------------------------------------------------------------------

AdmissionQueue::AdmissionQueue(Controller& controller, AdmissionQueueOptions options) {
  if (options.workers < 1 || options.workers > 1024)
    throw std::invalid_argument("AdmissionQueue: workers must be 1..1024");
  if (options.max_queued < 1 || options.max_queued > (size_t{1} << 24))
    throw std::invalid_argument("AdmissionQueue: max_queued must be 1..2^24");
  if (options.poll_ns < 1'000 || options.poll_ns > 1'000'000'000)
    throw std::invalid_argument("AdmissionQueue: poll_ns must be 1 us..1 s");
  if (options.hold_ns > 10'000'000'000)
    throw std::invalid_argument("AdmissionQueue: hold_ns must be 0..10 s");
  core_ = std::make_shared<internal::AdmissionQueueCore>(controller, options);
  internal::AdmissionQueueCore* core = core_.get();
  std::lock_guard<std::mutex> lock(core->mu);  // the workers start once their ids are listed
  try {
    for (int i = 0; i < options.workers; ++i) {
      workers_.emplace_back([core] { core->work(); });
      core->worker_ids.push_back(workers_.back().get_id());
    }
  } catch (...) {
    core->stopping = true;
    core->wake_all();
    core->mu.unlock();
    for (std::thread& t : workers_) t.join();
    core->mu.lock();
    throw;
  }
}

AdmissionQueue::~AdmissionQueue() {
  internal::AdmissionQueueCore& c = *core_;
  std::vector<internal::Completion> done;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    const std::thread::id self = std::this_thread::get_id();
    if (std::find(c.worker_ids.begin(), c.worker_ids.end(), self) != c.worker_ids.end()) {
      std::fputs("memcg: AdmissionQueue destroyed from its own run or done callable\n", stderr);
      std::abort();
    }
    c.stopping = true;
    c.wake_all();
  }
  for (std::thread& t : workers_) t.join();  // running items return first
  std::vector<std::unique_ptr<internal::GroupEntry>> groups;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    internal::HookBypass bypass;
    for (auto& e : c.groups)
      while (!e->items.empty()) {
        internal::ItemPtr item = c.take(e->items.begin()->second->id);
        done.push_back({std::move(item), ReserveStatus::kCancelled, e->stats});
      }
    groups.swap(c.groups);  // their references go below, unlocked
    c.by_group.clear();
  }
  c.complete(done);
}

SubmitStatus AdmissionQueue::submit(Group& group, WorkItem item, Ticket* ticket) {
  return submit_item(group, nullptr, std::move(item), ticket);
}

SubmitStatus AdmissionQueue::submit(Member& member, WorkItem item, Ticket* ticket) {
  return submit_item(member.group(), &member, std::move(item), ticket);
}

SubmitStatus AdmissionQueue::submit_item(Group& group, Member* member, WorkItem&& w,
                                         Ticket* ticket) {
  internal::AdmissionQueueCore& c = *core_;
  if (!w.run || &group.controller() != &c.ctl || !group.is_online()) return SubmitStatus::kInvalid;
  internal::QueueGroupState* stats = internal::queue_state(group);
  if (stats == nullptr) return SubmitStatus::kFull;  // out of memory for its bookkeeping
  std::unique_lock<std::mutex> lock(c.mu);
  if (c.stopping) return SubmitStatus::kStopped;
  if (c.nqueued.load(std::memory_order_relaxed) >= c.options.max_queued)
    return SubmitStatus::kFull;
  internal::HookBypass bypass;
  internal::GroupEntry*& slot = c.by_group[&group];
  if (slot == nullptr) {
    auto e = std::make_unique<internal::GroupEntry>();
    e->group = GroupRef(&group);
    e->stats = stats;
    e->order = c.next_order++;
    e->vtime = c.min_vtime();
    slot = e.get();
    c.groups.push_back(std::move(e));
  } else if (!slot->backlogged()) {
    slot->vtime = std::max(slot->vtime, c.min_vtime());  // idle time is not credit
  }
  internal::GroupEntry* e = slot;
  auto item = std::make_unique<internal::QueueItem>();
  item->id = c.next_id++;
  item->priority = w.priority;
  item->bytes = w.bytes;
  item->units = static_cast<uint64_t>(std::max<int64_t>(0, c.ctl.to_units_ceil(w.bytes)));
  item->deadline_ns = std::min(w.deadline_ns, Clock::kMaxNs);
  item->submit_ns = c.clock.now_ns();
  item->stop = w.stop;
  item->res = member != nullptr ? Reservation(*member, w.options, w.stop)
                                : Reservation(group, w.options, w.stop);
  item->run = std::move(w.run);
  item->done = std::move(w.done);
  const uint64_t id = item->id;
  c.where.emplace(id, internal::AdmissionQueueCore::Where{e, item->priority});
  if (item->deadline_ns < Clock::kMaxNs) c.deadlines.emplace(item->deadline_ns, id);
  if (item->stop.stop_possible()) ++c.stoppable;
  e->items.emplace(internal::ItemKey{item->priority, id}, std::move(item));
  c.nqueued.fetch_add(1, std::memory_order_relaxed);
  internal::add(stats->queued, 1);
  internal::add(stats->submitted, 1);
  ++c.epoch;
  c.wake_one();
  if (ticket != nullptr) {
    ticket->core_ = core_;
    ticket->id_ = id;
  }
  return SubmitStatus::kOk;
}

bool AdmissionQueue::Ticket::cancel() noexcept {
  std::shared_ptr<internal::AdmissionQueueCore> core = core_.lock();
  if (!core) return false;
  std::vector<internal::Completion> done;
  {
    std::lock_guard<std::mutex> lock(core->mu);
    auto w = core->where.find(id_);
    if (w == core->where.end()) return false;  // running, ran or completed
    internal::GroupEntry* e = w->second.entry;
    if (e->trying == id_) {
      e->cancel_trying = true;  // its worker completes it after the try, and does not run it
      return true;
    }
    internal::HookBypass bypass;
    internal::ItemPtr item = core->take(id_);
    if (!item) return false;
    done.push_back({std::move(item), ReserveStatus::kCancelled, e->stats});
  }
  core->complete(done);
  return true;
}

size_t AdmissionQueue::queued() const noexcept {
  return core_->nqueued.load(std::memory_order_relaxed);
}
size_t AdmissionQueue::running() const noexcept {
  return core_->nrunning.load(std::memory_order_relaxed);
}
uint64_t AdmissionQueue::callback_errors() const noexcept {
  return core_->errors.load(std::memory_order_relaxed);
}

}  // namespace memcg
