// The admission queue (admission_queue.hpp): per-group queues ordered by priority, a pool of
// workers that try heads without waiting, the public calls. The shared state and its locking
// are in admission_queue_core.hpp; the order of the groups (weighted fair queueing of the
// memory admitted, the hold-back) in admission_queue_fairness.cpp.

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
#include "memcg/base/internal/lazy_state.hpp"
#include "memcg/core/admission/admission.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"
#include "memcg/core/admission/internal/admission_queue_state.hpp"
#include "memcg/core/admission/internal/admission_state.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/signal/psi.hpp"
#include "admission_queue_core.hpp"

namespace memcg {
namespace internal {

QueueGroupState* queue_state(Group& g) noexcept {
  return lazy_state(QueueAccess::slot(g));
}

void admit_queue_group_freed(Group& g) noexcept {
  HookBypass bypass;
  delete QueueAccess::slot(g).exchange(nullptr, std::memory_order_acq_rel);
}

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
  const GroupRef group = e->group;  // the entry may go while the item runs
  lock.unlock();
  {
    WorkScope task(*group);  // the worker is a task of the item's group while it runs (psi.hpp)
    try {
      item->run(item->res);
    } catch (...) {
      count_error(s);
    }
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
