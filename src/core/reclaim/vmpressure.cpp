// vmpressure: windows of reclaim efficiency, listener routing, socket pressure.
#include "memcg/core/reclaim/vmpressure.hpp"
#include "memcg/base/internal/lock.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <utility>

#include "memcg/core/tree/controller.hpp"
#include "core/signal/pressure_state.hpp"
#include "memcg/core/signal/event_bus.hpp"

namespace memcg {
namespace internal {

NotifyEntry::~NotifyEntry() {
  if (efd >= 0) ::close(efd);
}

void NotifyEntry::fire(int arg) noexcept {
  if (!gate.begin(nullptr)) return;  // the callbacks are given no group
  gate.finish(nullptr, [&]() noexcept {
    delivered.fetch_add(1, std::memory_order_relaxed);
    notify(arg);
  });
}

void NotifyEntry::notify(int arg) noexcept {
  if (efd >= 0) {
    const uint64_t one = 1;
    // The counter saturates at 2^64 - 2 (EAGAIN): the reader still sees a pending event.
    [[maybe_unused]] ssize_t n = ::write(efd, &one, sizeof(one));
  }
  if (fn) {
    try {
      fn(arg);
    } catch (...) {
      // A listener's failure is its own; delivery to the others goes on.
    }
  }
}

int dup_eventfd(int fd) noexcept {
  return ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

}  // namespace internal

namespace {

using internal::PressureListenerEntry;
using ListenerList = std::vector<std::shared_ptr<PressureListenerEntry>>;

// Bumped when the listener count goes from 0 to 1: windows gathered under an older generation
// predate every current listener and are thrown away.
std::atomic<uint64_t> g_generation{1};
std::atomic<bool> g_gate_off{false};
std::atomic<uint64_t> g_windows{0};
std::atomic<uint64_t> g_deliveries{0};

internal::VmpressureState& state_of(const Group& g) noexcept {
  return g.pressure_state().vmp;
}

// The gate: one relaxed load while nobody listens. A listener registered concurrently may miss
// the reclaim in flight; it was going to need a fresh window anyway.
bool tree_mode_active() noexcept {
  return internal::g_vmpressure_listeners.load(std::memory_order_relaxed) != 0 ||
         g_gate_off.load(std::memory_order_relaxed);
}

std::shared_ptr<const ListenerList> snapshot(internal::VmpressureState& s) {
  internal::LockGuard lock(s.listeners_mutex);
  return s.listeners;
}

// The worker of the kernel, run on the thread that completed the window: walk from `source` to
// the root and signal whom the listener modes let through.
void deliver(Group& source, PressureLevel level) noexcept {
  bool signalled = false;
  for (Group* g = &source; g; g = g->parent()) {
    const bool ancestor = g != &source;
    const auto list = snapshot(state_of(*g));
    bool fired_here = false;
    if (list) {
      for (const auto& e : *list) {
        if (ancestor && e->mode == PressureMode::kLocal) continue;
        if (signalled && e->mode == PressureMode::kDefault) continue;
        if (level < e->level) continue;
        // A rate-limited listener's dropped event still counts as its own: the event was for
        // it, so default-mode listeners further up stay silent as they would have.
        fired_here = true;
        if (!e->admit(source.controller().clock().now_ns())) continue;
        e->fire(static_cast<int>(level));
        g_deliveries.fetch_add(1, std::memory_order_relaxed);
        fired_here = true;
      }
    }
    // Every listener of one level saw the same `signalled`; it covers the levels above.
    signalled = signalled || fired_here;
  }
}

void add_tree(Group& root, int64_t scanned, int64_t reclaimed) noexcept {
  internal::VmpressureState& s = state_of(root);
  const int64_t window = vmpressure_window(root);
  int64_t s_win = 0;
  int64_t r_win = 0;
  {
    internal::LockGuard lock(s.tree_mutex);
    const uint64_t gen = g_generation.load(std::memory_order_relaxed);
    if (s.generation != gen) {
      s.generation = gen;
      s.tree = {};
    }
    if (!s.tree.add(scanned, reclaimed, window, &s_win, &r_win)) return;
  }
  g_windows.fetch_add(1, std::memory_order_relaxed);
  deliver(root, vmpressure_level(s_win, r_win));
}

}  // namespace

// ---- level computation --------------------------------------------------------------------------

int vmpressure_percent(int64_t scanned, int64_t reclaimed) noexcept {
  if (scanned <= 0 || reclaimed >= scanned) return 0;
  if (reclaimed < 0) reclaimed = 0;
  // t = s + r keeps the division exact enough for small windows, as the kernel's formula does.
  const uint64_t s = static_cast<uint64_t>(scanned);
  const uint64_t r = static_cast<uint64_t>(reclaimed);
  const uint64_t t = s + r;
  const uint64_t kept = t - r * t / s;
  return static_cast<int>(kept * 100 / t);
}

PressureLevel vmpressure_level(int64_t scanned, int64_t reclaimed) noexcept {
  const int p = vmpressure_percent(scanned, reclaimed);
  if (p >= kVmpressureCritical) return PressureLevel::kCritical;
  if (p >= kVmpressureMedium) return PressureLevel::kMedium;
  return PressureLevel::kLow;
}

int64_t vmpressure_window(const Group& group) noexcept {
  const unsigned shift = group.controller().unit_shift();
  const int64_t bytes = kVmpressureWindowPages * 4096;
  return std::max<int64_t>(1, bytes >> shift);
}

// ---- inputs -------------------------------------------------------------------------------------

void vmpressure_group(Group& group, ReclaimReason reason, int64_t scanned,
                      int64_t reclaimed) noexcept {
  if (reason == ReclaimReason::kProactive || group.is_root() || scanned <= 0) return;
  internal::VmpressureState& s = state_of(group);
  const int64_t window = vmpressure_window(group);
  int64_t s_win = 0;
  int64_t r_win = 0;
  {
    internal::LockGuard lock(s.group_mutex);
    if (!s.own.add(scanned, reclaimed, window, &s_win, &r_win)) return;
  }
  const PressureLevel level = vmpressure_level(s_win, r_win);
  s.levels[static_cast<int>(level)].fetch_add(1, std::memory_order_relaxed);
  EventBus& bus = group.controller().events();
  if (bus.recording()) [[unlikely]] {
    const auto mark = static_cast<uint8_t>(static_cast<int>(level) + 1);
    if (s.bus_level.exchange(mark, std::memory_order_relaxed) != mark) {
      static constexpr const char* kPayload[] = {"{\"level\":\"low\"}", "{\"level\":\"medium\"}",
                                                 "{\"level\":\"critical\"}"};
      bus.publish(BusEventType::kVmpressure, group, kPayload[static_cast<int>(level)]);
    }
  }
  if (level > PressureLevel::kLow) {
    const uint64_t until = group.controller().clock().now_ns() + kSocketPressureHoldNs;
    s.socket_deadline_ns.store(until, std::memory_order_relaxed);
  }
}

void vmpressure_tree(Group& root, ReclaimReason reason, int64_t scanned,
                     int64_t reclaimed) noexcept {
  if (!tree_mode_active() || reason == ReclaimReason::kProactive || scanned <= 0) return;
  add_tree(root, scanned, reclaimed);
}

void vmpressure_prio(Group& root, ReclaimReason reason, int priority) noexcept {
  if (priority > kVmpressureCriticalPriority) return;
  // A whole window with nothing freed: critical, whatever came before in this window.
  vmpressure_tree(root, reason, vmpressure_window(root), 0);
}

void vmpressure_level_counts(const Group& group, uint64_t out[3]) noexcept {
  const internal::VmpressureState& s = state_of(group);
  for (int i = 0; i < 3; ++i) out[i] = s.levels[i].load(std::memory_order_relaxed);
}

bool under_socket_pressure(const Group& group) noexcept {
  // Most groups never had pressure: read the clock only if some deadline was ever set.
  uint64_t latest = 0;
  for (const Group* g = &group; g; g = g->parent())
    latest = std::max(latest, state_of(*g).socket_deadline_ns.load(std::memory_order_relaxed));
  return latest != 0 && group.controller().clock().now_ns() < latest;
}

// ---- listeners ----------------------------------------------------------------------------------

PressureListener::PressureListener(PressureListener&& o) noexcept
    : entry_(std::move(o.entry_)) {}

PressureListener& PressureListener::operator=(PressureListener&& o) noexcept {
  if (this != &o) {
    reset();
    entry_ = std::move(o.entry_);
  }
  return *this;
}

int PressureListener::listen(Group& group, PressureLevel level, PressureMode mode,
                             Callback callback, int eventfd) {
  if (entry_) return EBUSY;
  if (!callback && eventfd < 0) return EINVAL;
  if (!group.is_online()) return ENOENT;
  int efd = -1;
  if (eventfd >= 0 && (efd = internal::dup_eventfd(eventfd)) < 0) return EBADF;
  std::function<void(int)> fn;
  if (callback) fn = [cb = std::move(callback)](int l) { cb(static_cast<PressureLevel>(l)); };
  auto e = std::make_shared<PressureListenerEntry>(std::move(fn), efd, level, mode);
  internal::VmpressureState& s = state_of(group);
  {
    internal::LockGuard lock(s.listeners_mutex);
    // Under the lock the removal takes after the group went offline: either this sees it
    // offline, or the removal finds the listener.
    if (!group.is_online()) return ENOENT;
    auto next = s.listeners ? std::make_shared<ListenerList>(*s.listeners)
                            : std::make_shared<ListenerList>();
    next->push_back(e);
    s.listeners = std::move(next);
    e->gate.hold(group);
    if (internal::g_vmpressure_listeners.fetch_add(1, std::memory_order_relaxed) == 0)
      g_generation.fetch_add(1, std::memory_order_relaxed);
  }
  entry_ = std::move(e);
  return 0;
}

int PressureListener::listen(Group& group, std::string_view args, Callback callback, int eventfd) {
  PressureLevel level;
  PressureMode mode;
  if (int err = parse_pressure_level(args, &level, &mode)) return err;
  return listen(group, level, mode, std::move(callback), eventfd);
}

namespace {
// Takes `e` off `s`'s list; true if it was listed. REQUIRES: s.listeners_mutex held.
bool unlink_locked(internal::VmpressureState& s, const std::shared_ptr<PressureListenerEntry>& e) {
  if (!s.listeners) return false;
  auto next = std::make_shared<ListenerList>();
  for (const auto& x : *s.listeners)
    if (x != e) next->push_back(x);
  const bool found = next->size() != s.listeners->size();
  s.listeners = std::move(next);
  return found;
}
}  // namespace

void PressureListener::reset() noexcept {
  if (!entry_) return;
  auto e = std::static_pointer_cast<PressureListenerEntry>(entry_);
  // The registration's reference: null when the group's removal took it (and unlinked `e`).
  Group* held = e->gate.release();
  if (held) {
    internal::VmpressureState& s = state_of(*held);
    internal::LockGuard lock(s.listeners_mutex);
    // Whoever unlinks a listener (this or the removal) counts it out.
    if (unlink_locked(s, e)) internal::g_vmpressure_listeners.fetch_sub(1, std::memory_order_relaxed);
  }
  e->retire();
  entry_.reset();
  if (held) held->put();
}

bool PressureListener::removed() const noexcept {
  return entry_ && static_cast<const PressureListenerEntry*>(entry_.get())->gate.removed();
}

void internal::vmpressure_group_removed(Group& g) noexcept {
  internal::VmpressureState& s = state_of(g);
  std::shared_ptr<const ListenerList> told;
  {
    internal::LockGuard lock(s.listeners_mutex);
    if (!s.listeners || s.listeners->empty()) return;
    told = std::exchange(s.listeners, nullptr);
    internal::g_vmpressure_listeners.fetch_sub(static_cast<int64_t>(told->size()),
                                               std::memory_order_relaxed);
    for (const auto& e : *told) e->gate.begin_removal(g);
  }
  // The kernel signals a vmpressure eventfd once when its cgroup goes (memcg_event_remove):
  // here the eventfd too, and the callback with the listener's own level, removed() true.
  for (const auto& e : *told)
    e->gate.finish_removal(g, [&]() noexcept { e->notify(static_cast<int>(e->level)); });
}

int PressureListener::set_rate_limit(std::chrono::nanoseconds min_interval) noexcept {
  if (!entry_ || min_interval.count() < 0) return EINVAL;
  auto* e = static_cast<PressureListenerEntry*>(entry_.get());
  e->min_interval_ns.store(static_cast<uint64_t>(min_interval.count()),
                           std::memory_order_relaxed);
  return 0;
}

uint64_t PressureListener::suppressed() const noexcept {
  if (!entry_) return 0;
  return static_cast<const PressureListenerEntry*>(entry_.get())
      ->suppressed.load(std::memory_order_relaxed);
}

uint64_t PressureListener::delivered() const noexcept {
  if (!entry_) return 0;
  return static_cast<const PressureListenerEntry*>(entry_.get())
      ->delivered.load(std::memory_order_relaxed);
}

int register_event_control(Group& group, std::string_view line, PressureListener* out) {
  int event_fd = -1;
  int level_fd = -1;
  PressureLevel level;
  PressureMode mode;
  if (int err = parse_event_control(line, &event_fd, &level_fd, &level, &mode)) return err;
  return out->listen(group, level, mode, nullptr, event_fd);
}

int64_t nr_pressure_listeners() noexcept {
  return internal::g_vmpressure_listeners.load(std::memory_order_relaxed);
}

VmpressureStats vmpressure_stats() noexcept {
  return {g_windows.load(std::memory_order_relaxed), g_deliveries.load(std::memory_order_relaxed)};
}

void internal::set_vmpressure_gate(bool on) noexcept {
  g_gate_off.store(!on, std::memory_order_relaxed);
}

}  // namespace memcg
