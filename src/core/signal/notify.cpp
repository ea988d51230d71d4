// memory.events change notification: listeners, the per-file rate limit, the deferred
// deliveries and the removal notice. See notify.hpp for the contract.
//
// Objects and their lifetimes:
//   - EventListener::Core: a listener's callback, eventfd, DeliveryGate (delivery.hpp) and its
//     reference to the group. Shared by the listener and by every delivery in flight, so a
//     delivery never writes to a closed (or reused) descriptor.
//   - FileState: one (group, file)'s listener list, rate-limit state and removal mark. Owned
//     (shared) by the group's NotifyState, which the group frees with itself, by the listeners'
//     cores and by queue entries, so it may outlive its group: `group` is dereferenced only under
//     `mu` while the list is non-empty (each listed core holds a reference), or by a delivery,
//     which took its own reference there.
//   - The deferred queue: the FileStates with a notification waiting for its interval to end.
//     A FileState is queued only while it has listeners: it is queued (or requeued) under its mu
//     with a listener present, and the last listener to leave (or the group's removal) takes it
//     off the queue under that same mu.
//
// Every delivery opens on each listed listener's gate under the file's mu (which takes a group
// reference per listener) and finishes outside every lock: destroying a listener waits for its
// own deliveries only, and a callback's group is never freed under it.
//
// Locks: FileState::mu guards a file's listeners and rate limit; Deferred::mu the queue. Order:
// FileState::mu, then Deferred::mu (queueing a file happens under its mu); never the reverse.
// Neither is held while a callback runs. The timer thread and the queue's selection read only
// what a FileState caches (its controller, whether it runs on the SystemClock), never the group.
#include "memcg/core/signal/notify.hpp"
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
#include <utility>
#include <vector>

#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "delivery.hpp"
#include "timer.hpp"

namespace memcg {

namespace internal {
struct FileState;
}

struct EventListener::Core {
  Callback callback;
  int fd = -1;
  std::shared_ptr<internal::FileState> file;
  // Also the listener's reference to the group (taken by open(), let go by the group's removal
  // after the final notification or by the destructor, whichever comes first) and the removal
  // mark: delivery.hpp.
  internal::DeliveryGate gate;

  ~Core() {
    if (fd >= 0) ::close(fd);
  }
  // One notification: the eventfd, then the callback. Called inside a delivery.
  void notify(Group& g, EventsFile f) noexcept;
};

namespace internal {

std::atomic<int64_t> g_nr_event_listeners{0};

using ListenerList = std::vector<std::shared_ptr<EventListener::Core>>;

struct FileState {
  FileState(Group& g, EventsFile f)
      : group(&g),
        controller(&g.controller()),
        system_clock(dynamic_cast<const SystemClock*>(&g.controller().clock()) != nullptr),
        file(f) {}
  Group* const group;  // see the top of the file for when it may be dereferenced
  Controller* const controller;
  const bool system_clock;  // the controller's clock is the SystemClock: the timer delivers
  const EventsFile file;

  std::mutex mu;
  // Guarded by mu. Copied on write, so a delivery takes the list with one shared_ptr copy.
  std::shared_ptr<const ListenerList> listeners = std::make_shared<const ListenerList>();
  bool ever_notified = false;  // guarded by mu
  uint64_t last_ns = 0;        // guarded by mu: time of the last notification
  bool pending = false;        // guarded by mu: a change since then is not yet announced
  bool removed = false;        // guarded by mu: the group was removed; no listener may join

  // Guarded by Deferred::mu; `queued` is set only while mu is held too.
  bool queued = false;
  uint64_t due_ns = 0;
};

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

// Opens a delivery on every listener of `fs`. REQUIRES: fs.mu held (so every listed core is
// linked, hence neither closed nor without its reference, which keeps the group alive).
void begin_all(FileState& fs, const ListenerList& list) noexcept {
  for (const auto& core : list) {
    [[maybe_unused]] const bool open = core->gate.begin(fs.group);
    // A gate closes only after its core was unlinked under fs.mu.
  }
}

// Finishes what begin_all() opened, with no lock held.
void finish_all(FileState& fs, const ListenerList& list) noexcept {
  for (const auto& core : list)
    core->gate.finish(fs.group, [&]() noexcept { core->notify(*fs.group, fs.file); });
}

// Takes `fs` off the deferred queue. REQUIRES: fs.mu held.
void dequeue_locked(FileState& fs, const std::shared_ptr<FileState>& ref) {
  Deferred& d = deferred();
  internal::LockGuard qlock(d.mu);
  if (!fs.queued) return;
  fs.queued = false;
  auto& q = d.queue;
  q.erase(std::find(q.begin(), q.end(), ref));
  g_nr_queued.fetch_sub(1, std::memory_order_relaxed);
}

void timer_loop();

}  // namespace

// Called when a listener subscribes to a group on the SystemClock or a PSI trigger is armed on
// one, so that queueing never creates a thread.
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

void timer_wake() noexcept {
  Deferred& d = deferred();
  // Under the lock: the timer reads the deadline under it, then waits (no lost wake-up).
  internal::LockGuard lock(d.mu);
  d.timer_cv.notify_one();
}

namespace {

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
      begin_all(*fs, *to_notify);
    } else if (!fs->pending) {
      fs->pending = true;
      due = fs->last_ns + kEventNotifyIntervalNs;
      enqueue_locked(*fs, fs, due);
    }
  }
  if (due != 0) run_defer_seam();
  if (to_notify) finish_all(*fs, *to_notify);
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
    // Only `fs` itself is known alive here (the entry's shared_ptr); its group is reached under
    // its mu while listeners remain, and each delivery holds its own reference.
    std::shared_ptr<const ListenerList> to_notify;
    uint64_t requeue = 0;
    {
      internal::LockGuard lock(fs->mu);
      if (fs->pending && !fs->listeners->empty()) {
        if (now - fs->last_ns >= kEventNotifyIntervalNs) {
          fs->pending = false;
          fs->last_ns = now;
          to_notify = fs->listeners;
          begin_all(*fs, *to_notify);
        } else {
          requeue = fs->last_ns + kEventNotifyIntervalNs;  // notified meanwhile; wait again
          enqueue_locked(*fs, fs, requeue);
        }
      }
    }
    if (requeue != 0) run_defer_seam();
    if (to_notify) finish_all(*fs, *to_notify);
  }
}

void timer_loop() {
  Deferred& d = deferred();
  internal::UniqueLock lock(d.mu);
  for (;;) {
    uint64_t earliest = psi_system_poll_due();
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
    psi_poll_system(now);
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
  // seq_cst: see get().
  if (state_.compare_exchange_strong(st, fresh.get(), std::memory_order_seq_cst)) {
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

void notify_group_removed(Group& g) noexcept {
  // The group is offline (seq_cst) before this reads the slot (seq_cst): an open() that created
  // the slot after this read sees the group offline under the file's mu and fails.
  NotifyState* st = NotifyAccess::slot(g).get();
  if (!st) return;
  for (const auto& fsp : st->files) {
    FileState& fs = *fsp;
    std::shared_ptr<const ListenerList> told;
    {
      internal::LockGuard lock(fs.mu);
      fs.removed = true;
      fs.pending = false;  // the final notification covers it
      if (fs.listeners->empty()) continue;
      told = std::move(fs.listeners);
      fs.listeners = std::make_shared<const ListenerList>();
      dequeue_locked(fs, fsp);
      // The listeners' references still keep the group here.
      for (const auto& core : *told) core->gate.begin_removal(g);
    }
    // The final notification, not rate-limited (the file is gone, as in the kernel), then each
    // listener's reference goes. The caller (remove) still holds the tree's, so none is last.
    for (const auto& core : *told)
      core->gate.finish_removal(g, [&]() noexcept { core->notify(g, fs.file); });
  }
}

}  // namespace internal

// ---- EventListener ----

const char* events_file_name(EventsFile file) noexcept {
  return file == EventsFile::kEvents ? "memory.events" : "memory.events.local";
}

void EventListener::Core::notify(Group& g, EventsFile f) noexcept {
  const uint64_t one = 1;
  // Cannot fail short of a counter at its maximum (2^64 - 2 unconsumed notifications).
  [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
  if (callback) callback(g, f);
}

EventListener::EventListener(EventsFile file, std::shared_ptr<Core> core)
    : file_(file), core_(std::move(core)) {}

int EventListener::open(Group& group, EventsFile file, Callback callback,
                        std::unique_ptr<EventListener>* out) {
  if (out == nullptr) return EINVAL;
  if (group.is_root() || !group.is_online()) return ENOENT;
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
  std::unique_ptr<EventListener> listener;
  try {
    internal::NotifyState& st = internal::NotifyAccess::slot(group).get_or_create(group);
    core->file = st.files[static_cast<int>(file)];
    listener.reset(new EventListener(file, core));
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
  internal::FileState& fs = *core->file;
  {
    internal::LockGuard lock(fs.mu);
    // Removed meanwhile: the removal notice has run (fs.removed) or will find this slot but no
    // listener; either way the group is gone for listeners.
    if (fs.removed || !group.is_online()) {
      listener->core_.reset();
      return ENOENT;
    }
    auto list = std::make_shared<internal::ListenerList>(*fs.listeners);
    list->push_back(core);
    fs.listeners = std::move(list);
    core->gate.hold(group);
  }
  internal::g_nr_event_listeners.fetch_add(1, std::memory_order_relaxed);
  *out = std::move(listener);
  return 0;
}

EventListener::~EventListener() {
  if (!core_) return;
  internal::FileState& fs = *core_->file;
  Group* held = nullptr;  // the listener's reference, unless the removal took it
  {
    internal::LockGuard lock(fs.mu);
    auto it = std::find(fs.listeners->begin(), fs.listeners->end(), core_);
    if (it != fs.listeners->end()) {  // not already unlinked by the group's removal
      auto list = std::make_shared<internal::ListenerList>(*fs.listeners);
      list->erase(list->begin() + (it - fs.listeners->begin()));
      const bool last = list->empty();
      fs.listeners = std::move(list);
      if (last) {
        // Off the deferred queue, under the lock every queueing holds: with no listener left,
        // nothing queues this file again.
        fs.pending = false;
        internal::dequeue_locked(fs, core_->file);
      }
    }
    held = core_->gate.release();
  }
  internal::g_nr_event_listeners.fetch_sub(1, std::memory_order_relaxed);
  // This listener's own deliveries only; each holds its own reference to the group.
  core_->gate.close();
  if (held) held->put();
}

Group* EventListener::group() const noexcept {
  return core_->gate.group();
}

bool EventListener::removed() const noexcept {
  return core_->gate.removed();
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
