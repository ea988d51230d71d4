// The admission queue (admission_queue.hpp): the public calls (submission, cancellation, the
// queue's start and end) and the groups' weights and statistics. The shared state and its
// locking are in admission_queue_core.hpp; the workers and the timer in
// admission_queue_worker.cpp; the order of the groups (weighted fair queueing of the memory
// admitted, the hold-back) in admission_queue_fairness.cpp.

#include "memcg/core/admission/admission_queue.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
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
    // The timer (admission_queue_worker.cpp) runs done callables too: listed with the workers.
    workers_.emplace_back([core] { core->timer(); });
    core->worker_ids.push_back(workers_.back().get_id());
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
  {
    std::lock_guard<std::mutex> lock(c.mu);
    internal::HookBypass bypass;
    std::vector<uint64_t> ids;
    ids.reserve(c.where.size());
    for (const auto& [id, w] : c.where) ids.push_back(id);
    std::sort(ids.begin(), ids.end());  // in the order they were submitted
    for (uint64_t id : ids) c.take(id, ReserveStatus::kCancelled, &done);
    for (internal::Completion& s : c.stopped) done.push_back(std::move(s));
    c.stopped.clear();
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
  if (c.nqueued.load(std::memory_order_relaxed) >= c.options.max_queued)
    return SubmitStatus::kFull;  // checked again under the lock
  internal::HookBypass bypass;
  // The item is made before the lock is taken, and destroyed after it is released when it is
  // refused (its stop callback may be running on another thread, waiting for the lock).
  auto item = std::make_unique<internal::QueueItem>();
  const uint64_t id = c.next_id.fetch_add(1, std::memory_order_relaxed);
  item->id = id;
  item->priority = w.priority;
  item->bytes = w.bytes;
  item->units = static_cast<uint64_t>(std::max<int64_t>(0, c.ctl.to_units_ceil(w.bytes)));
  item->deadline_ns = std::min(w.deadline_ns, Clock::kMaxNs);
  item->stop = w.stop;
  item->res = member != nullptr ? Reservation(*member, w.options, w.stop)
                                : Reservation(group, w.options, w.stop);
  item->stop_regs = &c.stop_regs;
  // Registered before the item is queued: a stop requested before it is queued finds nothing
  // (the check under the lock below sees it); one after takes it out of the queue.
  if (item->stop.stop_possible()) {
    item->on_stop.emplace(item->stop, internal::StopHook{&c, id});
    c.stop_regs.fetch_add(1, std::memory_order_relaxed);
  }
  SubmitStatus result = SubmitStatus::kOk;
  {
    std::unique_lock<std::mutex> lock(c.mu);
    const bool timed = c.lock_timing.load(std::memory_order_relaxed);
    const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    if (c.stopping) {
      result = SubmitStatus::kStopped;
    } else if (c.nqueued.load(std::memory_order_relaxed) >= c.options.max_queued) {
      result = SubmitStatus::kFull;
    } else {
      item->submit_ns = c.clock.now_ns();
      item->run = std::move(w.run);
      item->done = std::move(w.done);
      internal::GroupEntry* e = c.entry_for(group, stats);
      try {
        c.where.emplace(id, internal::AdmissionQueueCore::Where{e, item->priority});
        if (item->deadline_ns < Clock::kMaxNs) c.deadlines.emplace(item->deadline_ns, id);
        e->items.emplace(internal::ItemKey{item->priority, id}, std::move(item));
      } catch (...) {
        c.where.erase(id);
        c.deadlines.erase({item ? item->deadline_ns : 0, id});
        c.settle(e);
        throw;
      }
      c.nqueued.fetch_add(1, std::memory_order_relaxed);
      internal::add(stats->queued, 1);
      internal::add(stats->submitted, 1);
      ++c.epoch;
      c.wake_one();
      const internal::QueueItem& queued = *e->items.find({w.priority, id})->second;
      if (queued.deadline_ns < Clock::kMaxNs) c.wake_timer(queued.deadline_ns);
      // Stopped before its callback was registered, or meanwhile: out at once, done(kCancelled)
      // on the timer.
      if (queued.stop.stop_requested() && c.take(id, ReserveStatus::kCancelled, &c.stopped))
        c.wake_timer(0);
      if (ticket != nullptr) {
        ticket->core_ = core_;
        ticket->id_ = id;
      }
    }
    if (timed) {
      const auto held = std::chrono::steady_clock::now() - t0;
      c.submit_lock_ns.fetch_add(
          static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(held).count()),
          std::memory_order_relaxed);
      c.submits_timed.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return result;  // a refused item is destroyed here, with no lock held
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
    if (!core->take(id_, ReserveStatus::kCancelled, &done)) return false;
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

namespace internal {

AdmissionQueueShape AdmissionQueueAccess::shape(const AdmissionQueue& q) {
  AdmissionQueueCore& c = *q.core_;
  std::lock_guard<std::mutex> lock(c.mu);
  AdmissionQueueShape s;
  s.leads = c.leads.size();
  s.groups = c.entries.size() - s.leads;
  for (const GroupEntry* e = c.starved; e != nullptr; e = e->snext) ++s.starved;
  s.stop_callbacks = c.stop_regs.load(std::memory_order_relaxed);
  return s;
}
void AdmissionQueueAccess::time_submits(AdmissionQueue& q, bool on) noexcept {
  q.core_->lock_timing.store(on, std::memory_order_relaxed);
}
uint64_t AdmissionQueueAccess::submit_lock_ns(const AdmissionQueue& q) noexcept {
  return q.core_->submit_lock_ns.load(std::memory_order_relaxed);
}
uint64_t AdmissionQueueAccess::submits_timed(const AdmissionQueue& q) noexcept {
  return q.core_->submits_timed.load(std::memory_order_relaxed);
}

}  // namespace internal
}  // namespace memcg
