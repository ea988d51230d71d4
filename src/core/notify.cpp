// memory.events change notification: listeners, the per-file rate limit and the deferred
// deliveries. See notify.hpp for the contract.
//
// Objects and their lifetimes:
//   - EventListener::Core: a listener's callback and eventfd. Shared by the listener and by every
//     delivery in flight, so a delivery never writes to a closed (or reused) descriptor.
//   - FileState: one (group, file)'s listener list and rate-limit state. Owned (shared) by the
//     group's NotifyState, which the group frees with itself, and by deferred deliveries in
//     flight.
//   - The deferred queue: the FileStates with a notification waiting for its interval to end.
//     A FileState is queued only while it has listeners: it is queued (or requeued) under its mu
//     with a listener present, and the last listener to leave takes it off the queue under that
//     same mu, then waits until no deferred delivery of it is in flight. So once the last
//     listener's destructor returns, neither the queue nor the timer can reach the file again,
//     and its group (which the listener keeps alive) outlives every delivery.
//
// Locks: FileState::mu guards a file's listeners and rate limit; Deferred::mu the queue. Order:
// FileState::mu, then Deferred::mu (queueing a file happens under its mu); never the reverse.
// Neither is held while a callback runs. The timer thread and the queue's selection read only
// what a FileState caches (its controller, whether it runs on the SystemClock), never the group.
#include "memcg/core/notify.hpp"
#include "memcg/base/internal/lock.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "memcg/base/clock.hpp"
#include "memcg/core/controller.hpp"

namespace memcg {

struct EventListener::Core {
  Callback callback;
  int fd = -1;
  // Dekker pair with the deliverer: the remover sets `removed` then waits for `running` to be 0;
  // a deliverer bumps `running` then re-checks `removed`. Either the deliverer sees the removal
  // or the remover sees the delivery and waits for it.
  std::atomic<bool> removed{false};
  std::atomic<int> running{0};

  ~Core() {
    if (fd >= 0) ::close(fd);
  }
  void fire(Group& g, EventsFile file) noexcept;
};

namespace internal {

std::atomic<int64_t> g_nr_event_listeners{0};

namespace {

using ListenerList = std::vector<std::shared_ptr<EventListener::Core>>;

// Deliveries running on this thread: a thread inside a callback never waits for deliveries to
// end (it could be waiting for itself).
thread_local int tl_delivering = 0;

struct FileState {
  FileState(Group& g, EventsFile f)
      : group(&g),
        controller(&g.controller()),
        system_clock(dynamic_cast<const SystemClock*>(&g.controller().clock()) != nullptr),
        file(f) {}
  Group* const group;  // dereferenced only by deliveries, while a listener holds the group
  Controller* const controller;
  const bool system_clock;  // the controller's clock is the SystemClock: the timer delivers
  const EventsFile file;

  std::mutex mu;
  // Guarded by mu. Copied on write, so a delivery takes the list with one shared_ptr copy.
  std::shared_ptr<const ListenerList> listeners = std::make_shared<const ListenerList>();
  bool ever_notified = false;  // guarded by mu
  uint64_t last_ns = 0;        // guarded by mu: time of the last notification
  bool pending = false;        // guarded by mu: a change since then is not yet announced

  // Guarded by Deferred::mu; `queued` is set only while mu is held too.
  bool queued = false;
  uint64_t due_ns = 0;
  int inflight = 0;  // deferred deliveries of this file running now
};

}  // namespace

struct NotifyState {
  NotifyState(Group& g)
      : files{std::make_shared<FileState>(g, EventsFile::kEvents),
              std::make_shared<FileState>(g, EventsFile::kEventsLocal)} {}
  std::shared_ptr<FileState> files[2];
};

struct NotifyAccess {
  static NotifySlot& slot(Group& g) noexcept { return g.notify_; }
};

NotifySlot::~NotifySlot() {
  delete state_.load(std::memory_order_relaxed);
}

namespace {

// The queue of deferred notifications, and the timer thread that delivers the SystemClock ones.
// Created on first use and never destroyed: the timer thread is detached and may outlive every
// static object of the process.
struct Deferred {
  std::mutex mu;
  std::condition_variable timer_cv;  // a SystemClock entry was queued
  std::condition_variable idle_cv;   // an in-flight delivery ended
  std::vector<std::shared_ptr<FileState>> queue;
  bool timer_started = false;
};

Deferred& deferred() {
  static Deferred* const d = new Deferred;
  return *d;
}

}  // namespace

// Entries in the queue; lets tick() and raise() skip it with one relaxed load.
std::atomic<int64_t> g_nr_queued{0};
std::atomic<void (*)()> g_notify_defer_seam{nullptr};

int64_t deferred_notifications_queued() noexcept {
  return g_nr_queued.load(std::memory_order_relaxed);
}

namespace {

bool uses_system_clock(Controller& ctl) noexcept {
  return dynamic_cast<const SystemClock*>(&ctl.clock()) != nullptr;
}

void deliver(const ListenerList& list, Group& g, EventsFile file) noexcept {
  ++tl_delivering;
  for (const auto& core : list) core->fire(g, file);
  --tl_delivering;
}

void timer_loop();

// Starts the timer thread if it is not running yet. Called when a listener subscribes to a group
// on the SystemClock, so that queueing never creates a thread. Throws std::system_error if the
// thread cannot be created.
void start_timer_once() {
  Deferred& d = deferred();
  {
    internal::LockGuard lock(d.mu);
    if (d.timer_started) return;
    d.timer_started = true;  // a racer returns at once; entries it queues wait in the queue
  }
  try {
    std::thread(timer_loop).detach();
  } catch (...) {
    internal::LockGuard lock(d.mu);
    d.timer_started = false;
    throw;
  }
}

// REQUIRES: fs->mu held, and fs has a listener. Queueing under the file's lock is what lets the
// last listener's removal (under the same lock) find every entry and take it off.
void enqueue_locked(FileState& fs, const std::shared_ptr<FileState>& ref, uint64_t due_ns) {
  Deferred& d = deferred();
  internal::LockGuard lock(d.mu);
  fs.due_ns = due_ns;
  if (!fs.queued) {
    fs.queued = true;
    d.queue.push_back(ref);
    g_nr_queued.fetch_add(1, std::memory_order_relaxed);
  }
  if (fs.system_clock) d.timer_cv.notify_one();
}

void run_defer_seam() noexcept {
  if (auto* seam = g_notify_defer_seam.load(std::memory_order_acquire)) seam();
}

// A counter of `fs`'s file changed at `now`: notify at once, or remember it for the end of the
// interval.
void file_changed(const std::shared_ptr<FileState>& fs, uint64_t now) noexcept {
  std::shared_ptr<const ListenerList> to_notify;
  uint64_t due = 0;
  {
    internal::LockGuard lock(fs->mu);
    if (fs->listeners->empty()) return;
    if (!fs->ever_notified || now - fs->last_ns >= kEventNotifyIntervalNs) {
      fs->ever_notified = true;
      fs->last_ns = now;
      fs->pending = false;  // this notification covers it; a queued entry will find nothing
      to_notify = fs->listeners;
    } else if (!fs->pending) {
      fs->pending = true;
      due = fs->last_ns + kEventNotifyIntervalNs;
      enqueue_locked(*fs, fs, due);
    }
  }
  if (due != 0) run_defer_seam();
  if (to_notify) deliver(*to_notify, *fs->group, fs->file);
}

// Delivers the queued notifications that `select` picks and whose interval ended by `now`
// (`now` read from the clock of the groups it picks).
template <typename Select>
void deliver_due(Select select, uint64_t now) noexcept {
  Deferred& d = deferred();
  std::vector<std::shared_ptr<FileState>> due;
  {
    internal::LockGuard lock(d.mu);
    auto& q = d.queue;
    for (size_t i = 0; i < q.size();) {
      FileState& fs = *q[i];
      if (select(fs) && fs.due_ns <= now) {
        fs.queued = false;
        ++fs.inflight;
        due.push_back(std::move(q[i]));
        q[i] = std::move(q.back());
        q.pop_back();
        g_nr_queued.fetch_sub(1, std::memory_order_relaxed);
      } else {
        ++i;
      }
    }
  }
  for (const auto& fs : due) {
    // The group is alive while a listener remains: the last one waits for `inflight` to drop
    // before it lets go of the group (unless it leaves from inside a callback: then `pending` is
    // false and its listeners empty, so nothing below touches the group).
    std::shared_ptr<const ListenerList> to_notify;
    uint64_t requeue = 0;
    {
      internal::LockGuard lock(fs->mu);
      if (fs->pending && !fs->listeners->empty()) {
        if (now - fs->last_ns >= kEventNotifyIntervalNs) {
          fs->pending = false;
          fs->last_ns = now;
          to_notify = fs->listeners;
        } else {
          requeue = fs->last_ns + kEventNotifyIntervalNs;  // notified meanwhile; wait again
          enqueue_locked(*fs, fs, requeue);
        }
      }
    }
    if (requeue != 0) run_defer_seam();
    if (to_notify) deliver(*to_notify, *fs->group, fs->file);
  }
  if (due.empty()) return;
  internal::LockGuard lock(d.mu);
  for (const auto& fs : due) --fs->inflight;
  d.idle_cv.notify_all();
}

void timer_loop() {
  Deferred& d = deferred();
  internal::UniqueLock lock(d.mu);
  for (;;) {
    uint64_t earliest = UINT64_MAX;
    for (const auto& fs : d.queue)
      if (fs->system_clock) earliest = std::min(earliest, fs->due_ns);
    if (earliest == UINT64_MAX) {
      d.timer_cv.wait(lock.native());
      continue;
    }
    const uint64_t now = SystemClock::instance().now_ns();
    if (now < earliest) {
      d.timer_cv.wait_for(lock.native(), std::chrono::nanoseconds(earliest - now));
      continue;
    }
    lock.unlock();
    deliver_due([](const FileState& fs) { return fs.system_clock; }, now);
    lock.lock();
  }
}

const std::shared_ptr<FileState>* file_state(Group& g, EventsFile file) noexcept {
  NotifyState* st = NotifyAccess::slot(g).get();
  return st ? &st->files[static_cast<int>(file)] : nullptr;
}

}  // namespace

NotifyState& NotifySlot::get_or_create(Group& owner) {
  NotifyState* st = state_.load(std::memory_order_acquire);
  if (st) return *st;
  // Only subscriptions create state, and they are rare: a racer that loses frees its copy.
  auto fresh = std::make_unique<NotifyState>(owner);
  if (state_.compare_exchange_strong(st, fresh.get(), std::memory_order_acq_rel)) {
    return *fresh.release();
  }
  return *st;
}

void notify_events_raised(Group& g) noexcept {
  Controller& ctl = g.controller();
  const uint64_t now = ctl.clock().now_ns();
  if (g_nr_queued.load(std::memory_order_relaxed) != 0) deliver_due_notifications(ctl);
  if (g.is_root()) return;  // the root has neither file
  auto changed = [now](Group& a, EventsFile file) {
    if (const auto* fs = file_state(a, file)) file_changed(*fs, now);
  };
  changed(g, EventsFile::kEventsLocal);
  if (ctl.options().local_events) {
    changed(g, EventsFile::kEvents);
    return;
  }
  for (Group* a = &g; a && !a->is_root(); a = a->parent()) changed(*a, EventsFile::kEvents);
}

void deliver_due_notifications(Controller& controller) noexcept {
  if (g_nr_queued.load(std::memory_order_relaxed) == 0) return;
  Controller* const ctl = &controller;
  deliver_due([ctl](const FileState& fs) { return fs.controller == ctl; },
              controller.clock().now_ns());
}

}  // namespace internal

// ---- EventListener ----

const char* events_file_name(EventsFile file) noexcept {
  return file == EventsFile::kEvents ? "memory.events" : "memory.events.local";
}

void EventListener::Core::fire(Group& g, EventsFile file) noexcept {
  if (removed.load(std::memory_order_seq_cst)) return;
  running.fetch_add(1, std::memory_order_seq_cst);
  if (!removed.load(std::memory_order_seq_cst)) {
    const uint64_t one = 1;
    // Cannot fail short of a counter at its maximum (2^64 - 2 unconsumed notifications).
    [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
    if (callback) callback(g, file);
  }
  if (running.fetch_sub(1, std::memory_order_seq_cst) == 1) running.notify_all();
}

EventListener::EventListener(GroupRef group, EventsFile file, std::shared_ptr<Core> core)
    : group_(std::move(group)), file_(file), core_(std::move(core)) {}

int EventListener::open(Group& group, EventsFile file, Callback callback,
                        std::unique_ptr<EventListener>* out) {
  if (group.is_root()) return ENOENT;
  auto core = std::make_shared<Core>();
  core->callback = std::move(callback);
  core->fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (core->fd < 0) return errno;
  if (internal::uses_system_clock(group.controller())) {
    try {
      internal::start_timer_once();
    } catch (const std::system_error& e) {
      return e.code().value() != 0 ? e.code().value() : EAGAIN;
    }
  }

  internal::NotifyState& st = internal::NotifyAccess::slot(group).get_or_create(group);
  internal::FileState& fs = *st.files[static_cast<int>(file)];
  {
    internal::LockGuard lock(fs.mu);
    auto list = std::make_shared<internal::ListenerList>(*fs.listeners);
    list->push_back(core);
    fs.listeners = std::move(list);
  }
  internal::g_nr_event_listeners.fetch_add(1, std::memory_order_relaxed);
  out->reset(new EventListener(GroupRef(&group), file, std::move(core)));
  return 0;
}

EventListener::~EventListener() {
  Group& g = *group_;
  const auto& fsp = internal::NotifyAccess::slot(g).get()->files[static_cast<int>(file_)];
  internal::FileState& fs = *fsp;
  internal::Deferred& d = internal::deferred();
  bool last = false;
  {
    internal::LockGuard lock(fs.mu);
    auto list = std::make_shared<internal::ListenerList>(*fs.listeners);
    list->erase(std::find(list->begin(), list->end(), core_));
    last = list->empty();
    fs.listeners = std::move(list);
    if (last) {
      // Off the deferred queue, under the lock every queueing holds: with no listener left,
      // nothing queues this file again.
      fs.pending = false;
      internal::LockGuard qlock(d.mu);
      if (fs.queued) {
        fs.queued = false;
        auto& q = d.queue;
        q.erase(std::find(q.begin(), q.end(), fsp));
        internal::g_nr_queued.fetch_sub(1, std::memory_order_relaxed);
      }
    }
  }
  internal::g_nr_event_listeners.fetch_sub(1, std::memory_order_relaxed);
  core_->removed.store(true, std::memory_order_seq_cst);
  const bool may_wait = internal::tl_delivering == 0;
  if (may_wait) {
    for (int r; (r = core_->running.load(std::memory_order_seq_cst)) != 0;) core_->running.wait(r);
  }
  if (!last || !may_wait) return;
  // No deferred delivery of this file may still be using the group when this listener's
  // reference to it goes.
  std::unique_lock lock(d.mu);
  d.idle_cv.wait(lock, [&] { return fs.inflight == 0; });
}

int EventListener::fd() const noexcept {
  return core_->fd;
}

uint64_t EventListener::consume() noexcept {
  uint64_t count = 0;
  if (::read(core_->fd, &count, sizeof count) != sizeof count) return 0;  // EAGAIN: none
  return count;
}

uint64_t EventListener::wait(int timeout_ms) noexcept {
  pollfd p{core_->fd, POLLIN, 0};
  while (::poll(&p, 1, timeout_ms) < 0 && errno == EINTR) {
  }
  return consume();
}

}  // namespace memcg
