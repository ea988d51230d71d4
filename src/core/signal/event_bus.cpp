// The event bus (event_bus.hpp): the ring, the subscriptions' cursors and the notifier thread.
//
// Objects and their lifetimes:
//   - BusCore: the ring, the subscription list and the counters, shared by the EventBus and by
//     every Subscription, so a subscription that outlives its bus still has something to ask
//     (it is dropped with kClosed and takes nothing).
//   - SubscriptionCore: one subscriber's filter, cursor and wake callback; listed in the core
//     from subscribe() to close(), shared with the notifier while it wakes it.
//
// Ids are consecutive in the ring: ring[i].id == ring.front().id + i, because an id is given
// under the mutex only to an event that was appended. A cursor is the id of the last event a
// subscriber took or skipped; it is lapped when the ring's oldest id is past cursor + 1.
//
// Locks: BusCore::mu guards the ring, the subscription list and every cursor; a publisher holds
// it only to append, nothing is called under it (its LockGuard keeps the allocations uncharged).
// SubscriptionCore::call_mu is held across the wake callback, as the library's other
// per-callback call mutexes are: close() takes it after unlisting, to wait for a running call.
// A callback may take mu (stats(), publish()) under call_mu; mu is never held while call_mu or
// wait_mu is taken (the notifier drops mu before it calls). wait_mu guards the wait() count.
#include "memcg/core/signal/event_bus.hpp"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>

#include "memcg/base/events.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/base/internal/lock.hpp"
#include "memcg/base/internal/utf8.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"

namespace memcg {
namespace {

constexpr const char* kTypeNames[kNumBusEventTypes] = {
    "memory_event", "vmpressure",    "psi_trigger", "oom",   "preempt", "budget",
    "group_created", "group_removed", "write",       "action", "gap"};
constexpr const char* kDropNames[kNumBusDropReasons] = {"none", "lagging", "overrun", "closed"};

// Events a take() looks at per hold of the mutex: a subscriber whose filter matches little
// cannot hold producers off for a whole large ring at once.
constexpr size_t kScanPerLock = 4096;

uint64_t wall_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

bool name_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.' || c == ':' || c == '@' || c == '+';
}

// `path` as the bus writes group paths ("" for every group, "a/b" below the root), or false
// when a segment is empty, "." or "..", longer than 255 bytes or has a byte a group name cannot.
bool normalize_subtree(std::string_view path, std::string* out) {
  while (!path.empty() && path.front() == '/') path.remove_prefix(1);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (path.size() > 4096) return false;
  for (size_t start = 0; start < path.size();) {
    const size_t slash = std::min(path.find('/', start), path.size());
    const std::string_view seg = path.substr(start, slash - start);
    if (seg.empty() || seg.size() > 255 || seg == "." || seg == "..") return false;
    if (!std::all_of(seg.begin(), seg.end(), name_char)) return false;
    start = slash + 1;
  }
  out->assign(path);
  return true;
}

bool options_valid(const EventBusOptions& o) noexcept {
  return o.capacity >= 16 && o.capacity <= 1'000'000 && o.max_bytes >= (size_t{64} << 10) &&
         o.max_bytes <= (size_t{1} << 30) && o.max_subscribers >= 1 &&
         o.max_subscribers <= 100'000 && o.max_payload_bytes >= 256 &&
         o.max_payload_bytes <= (size_t{1} << 20);
}

size_t event_bytes(const BusEvent& e) noexcept { return e.group.size() + e.payload.size(); }

}  // namespace

const char* bus_event_type_name(BusEventType t) noexcept {
  const auto i = static_cast<size_t>(t);
  return i < static_cast<size_t>(kNumBusEventTypes) ? kTypeNames[i] : "unknown";
}

bool parse_bus_event_type(std::string_view name, BusEventType* out) noexcept {
  for (int i = 0; i < kNumBusEventTypes; ++i)
    if (name == kTypeNames[i]) {
      *out = static_cast<BusEventType>(i);
      return true;
    }
  return false;
}

const char* bus_drop_reason_name(BusDropReason r) noexcept {
  const auto i = static_cast<size_t>(r);
  return i < static_cast<size_t>(kNumBusDropReasons) ? kDropNames[i] : "unknown";
}

bool bus_subtree_valid(std::string_view path) noexcept {
  std::string ignored;
  try {
    return normalize_subtree(path, &ignored);
  } catch (...) {
    return false;
  }
}

bool BusFilter::matches(const BusEvent& e) const noexcept {
  if (e.type == BusEventType::kGap) return true;
  if ((types & bus_type_bit(e.type)) == 0) return false;
  std::string_view sub = subtree;
  if (sub.empty() || sub == "/") return true;
  std::string_view g = e.group;
  return g.size() >= sub.size() && g.compare(0, sub.size(), sub) == 0 &&
         (g.size() == sub.size() || g[sub.size()] == '/');
}

void append_json_escaped(std::string* out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  while (!s.empty()) {
    const size_t n = internal::utf8_char_length(s);
    if (n == 0) {  // not UTF-8: one replacement character for the invalid start
      out->append("\\ufffd");
      s.remove_prefix(internal::utf8_invalid_length(s));
      continue;
    }
    const auto c = static_cast<unsigned char>(s[0]);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(s[0]);
    } else if (c < 0x20 || c == 0x7f) {
      out->append("\\u00");
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 15]);
    } else {
      out->append(s.substr(0, n));
    }
    s.remove_prefix(n);
  }
}

namespace internal {

struct SubscriptionCore {
  // Fixed at subscribe().
  BusFilter filter;  // subtree normalized
  size_t max_lag = 0;
  Subscription::WakeFn wake;
  std::shared_ptr<BusCore> bus;

  // Guarded by BusCore::mu.
  uint64_t cursor = 0;
  uint64_t woken_for = 0;  // newest id the notifier woke it for
  bool listed = false;
  bool gap_pending = false;
  BusEvent gap;  // the gap event to give first, when gap_pending

  std::atomic<uint8_t> drop{static_cast<uint8_t>(BusDropReason::kNone)};
  std::atomic<bool> closed{false};

  std::mutex call_mu;  // held across the wake callback; close() takes it after unlisting
  std::mutex wait_mu;
  std::condition_variable wait_cv;
  uint64_t signals = 0;  // guarded by wait_mu

  // Runs the wake callback (outside BusCore::mu) and wakes wait().
  void notify() noexcept;
};

struct BusCore {
  mutable std::mutex mu;
  std::condition_variable cv;  // the notifier's; signalled with `signaled`
  EventBusOptions options;     // fixed once enabled
  bool enabled = false;
  std::deque<BusEvent> ring;
  uint64_t next_id = 1;
  size_t bytes = 0;
  std::vector<std::shared_ptr<SubscriptionCore>> subs;
  bool signaled = false;
  bool stopping = false;
  bool notifier_started = false;
  std::thread notifier;

  uint64_t published = 0, evicted = 0, subscribed = 0, refused = 0;
  uint64_t dropped[kNumBusDropReasons] = {};
  std::atomic<uint64_t> lost{0}, truncated{0}, wakeups{0};

  // REQUIRES: mu held.
  uint64_t first_id() const noexcept { return ring.empty() ? next_id : ring.front().id; }
  uint64_t last_id() const noexcept { return next_id - 1; }
  // REQUIRES: mu held. True when it dropped `s` now (it was not dropped before).
  bool drop(SubscriptionCore& s, BusDropReason why) noexcept {
    uint8_t none = static_cast<uint8_t>(BusDropReason::kNone);
    if (!s.drop.compare_exchange_strong(none, static_cast<uint8_t>(why))) return false;
    ++dropped[static_cast<size_t>(why)];
    return true;
  }
  // REQUIRES: mu held. Drops `s` if it fell behind; true when it is dropped (now or before).
  bool check_behind(SubscriptionCore& s) noexcept {
    if (s.drop.load(std::memory_order_relaxed) != 0) return true;
    if (s.cursor + 1 < first_id()) return drop(s, BusDropReason::kOverrun), true;
    if (last_id() > s.cursor && last_id() - s.cursor > s.max_lag)
      return drop(s, BusDropReason::kLagging), true;
    return false;
  }
  void notifier_loop() noexcept;
};

void SubscriptionCore::notify() noexcept {
  {
    std::lock_guard<std::mutex> call(call_mu);
    if (!closed.load(std::memory_order_acquire) && wake) {
      bus->wakeups.fetch_add(1, std::memory_order_relaxed);
      wake();
    }
  }
  {
    std::lock_guard<std::mutex> lock(wait_mu);
    ++signals;
  }
  wait_cv.notify_all();
}

// Wakes, once per batch of new events, the subscribers that have something (or were just
// dropped), outside the lock. Producers set `signaled` when they append with subscribers listed.
void BusCore::notifier_loop() noexcept {
  std::vector<std::shared_ptr<SubscriptionCore>> to_wake;
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    cv.wait(lock, [&] { return signaled || stopping; });
    if (stopping) break;
    signaled = false;
    {
      HookBypass bypass;
      const uint64_t last = last_id();
      try {
        for (const auto& s : subs) {
          const bool was_dropped = s->drop.load(std::memory_order_relaxed) != 0;
          if (check_behind(*s)) {
            if (!was_dropped) to_wake.push_back(s);
            continue;
          }
          if (s->gap_pending || (s->cursor < last && s->woken_for < last)) {
            s->woken_for = last;
            to_wake.push_back(s);
          }
        }
      } catch (...) {  // no memory for the list: the ones listed are woken, the others next time
        signaled = true;
      }
    }
    lock.unlock();
    for (const auto& s : to_wake) s->notify();
    {
      HookBypass bypass;
      to_wake.clear();
    }
    lock.lock();
  }
}

}  // namespace internal

// ---- Subscription -------------------------------------------------------------------------------

Subscription::Subscription(std::shared_ptr<internal::SubscriptionCore> core)
    : core_(std::move(core)) {}

Subscription::~Subscription() {
  close();
  internal::HookBypass bypass;
  core_.reset();
}

void Subscription::close() noexcept {
  internal::SubscriptionCore& s = *core_;
  if (s.closed.exchange(true, std::memory_order_acq_rel)) return;
  {
    internal::LockGuard lock(s.bus->mu);
    if (s.listed) {
      auto& subs = s.bus->subs;
      auto it = std::find_if(subs.begin(), subs.end(), [&](const auto& p) { return p.get() == &s; });
      if (it != subs.end()) subs.erase(it);
      s.listed = false;
    }
  }
  // A wake callback running now finishes before this returns; none starts after (closed).
  { std::lock_guard<std::mutex> call(s.call_mu); }
  {
    std::lock_guard<std::mutex> lock(s.wait_mu);
    ++s.signals;
  }
  s.wait_cv.notify_all();
}

size_t Subscription::take(std::vector<BusEvent>* out, size_t max_events, size_t max_bytes) {
  internal::SubscriptionCore& s = *core_;
  internal::BusCore& b = *s.bus;
  if (max_events == 0) return 0;
  size_t n = 0, bytes = 0;
  for (;;) {
    internal::LockGuard lock(b.mu);
    if (s.closed.load(std::memory_order_relaxed) || b.check_behind(s)) return n;
    if (s.gap_pending) {
      out->push_back(s.gap);
      s.gap_pending = false;
      ++n;
      if (n >= max_events) return n;
    }
    const uint64_t first = b.first_id();
    size_t i = static_cast<size_t>(s.cursor + 1 - first);
    const size_t end = std::min(b.ring.size(), i + kScanPerLock);
    for (; i < end; ++i) {
      const BusEvent& e = b.ring[i];
      if (s.filter.matches(e)) {
        out->push_back(e);
        s.cursor = e.id;
        ++n;
        bytes += event_bytes(e);
        if (n >= max_events || bytes >= max_bytes) return n;
      } else {
        s.cursor = e.id;
      }
    }
    if (n > 0 || i >= b.ring.size()) return n;
  }
}

bool Subscription::wait(std::chrono::milliseconds timeout) {
  internal::SubscriptionCore& s = *core_;
  internal::BusCore& b = *s.bus;
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> lock(s.wait_mu);
      seen = s.signals;
    }
    {
      internal::LockGuard lock(b.mu);
      if (s.closed.load(std::memory_order_relaxed) || s.drop.load(std::memory_order_relaxed) != 0)
        return false;
      if (s.gap_pending || s.cursor < b.last_id()) return true;
    }
    std::unique_lock<std::mutex> lock(s.wait_mu);
    if (!s.wait_cv.wait_until(lock, until, [&] { return s.signals != seen; })) return false;
  }
}

uint64_t Subscription::cursor() const noexcept {
  internal::LockGuard lock(core_->bus->mu);
  return core_->cursor;
}

bool Subscription::dropped() const noexcept {
  return core_->drop.load(std::memory_order_acquire) != 0;
}

BusDropReason Subscription::drop_reason() const noexcept {
  return static_cast<BusDropReason>(core_->drop.load(std::memory_order_acquire));
}

// ---- EventBus -----------------------------------------------------------------------------------

EventBus::EventBus() : core_(std::make_shared<internal::BusCore>()) {}

EventBus::~EventBus() {
  internal::HookBypass bypass;
  recording_.store(false, std::memory_order_relaxed);
  std::vector<std::shared_ptr<internal::SubscriptionCore>> subs;
  {
    internal::LockGuard lock(core_->mu);
    core_->stopping = true;
    for (const auto& s : core_->subs) {
      core_->drop(*s, BusDropReason::kClosed);
      s->listed = false;
    }
    subs.swap(core_->subs);
  }
  core_->cv.notify_all();
  if (core_->notifier.joinable()) core_->notifier.join();
  for (const auto& s : subs) s->notify();
}

int EventBus::enable(const EventBusOptions& options) {
  if (!options_valid(options)) return EINVAL;
  internal::LockGuard lock(core_->mu);
  if (core_->enabled || core_->stopping) return 0;
  core_->options = options;
  // Ids of a later run of the process start higher: a client resuming with an id of an earlier
  // run gets a gap, not the wrong events.
  core_->next_id = std::max<uint64_t>(1, wall_ns() / 1000);
  core_->enabled = true;
  recording_.store(true, std::memory_order_release);
  return 0;
}

uint64_t EventBus::publish(BusEventType type, const Group& group, std::string_view payload) noexcept {
  if (!recording()) return 0;
  internal::HookBypass bypass;
  try {
    return publish(type, group.path(), payload);
  } catch (...) {
    core_->lost.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
}

uint64_t EventBus::publish(BusEventType type, std::string_view group,
                           std::string_view payload) noexcept {
  if (!recording_.load(std::memory_order_acquire)) return 0;
  if (static_cast<int>(type) >= kNumBusEventTypes || !takes_payload(payload)) return 0;
  internal::BusCore& b = *core_;
  internal::HookBypass bypass;  // the ring is the library's memory
  try {
    BusEvent e;
    e.type = type;
    e.time_ns = wall_ns();
    e.group.assign(group.empty() ? std::string_view("/") : group);
    if (payload.size() > b.options.max_payload_bytes) {
      e.payload = "{\"truncated\":true,\"bytes\":" + std::to_string(payload.size()) + "}";
      b.truncated.fetch_add(1, std::memory_order_relaxed);
    } else {
      e.payload.assign(payload);
    }
    const size_t size = event_bytes(e);
    bool wake = false;
    uint64_t id;
    {
      internal::LockGuard lock(b.mu);
      if (b.stopping) return 0;
      e.id = b.next_id;
      b.ring.push_back(std::move(e));  // may throw: nothing changed then
      id = b.next_id++;
      b.bytes += size;
      ++b.published;
      while (b.ring.size() > 1 &&
             (b.ring.size() > b.options.capacity || b.bytes > b.options.max_bytes)) {
        b.bytes -= event_bytes(b.ring.front());
        b.ring.pop_front();
        ++b.evicted;
      }
      if (!b.subs.empty() && !b.signaled) {
        b.signaled = true;
        wake = true;
      }
    }
    if (wake) b.cv.notify_one();
    return id;
  } catch (...) {
    b.lost.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
}

int EventBus::subscribe(const BusFilter& filter, uint64_t after_id, size_t max_lag,
                        Subscription::WakeFn wake, std::unique_ptr<Subscription>* out) {
  if (out == nullptr) return EINVAL;
  internal::HookBypass bypass;
  if (int err = enable()) return err;
  internal::BusCore& b = *core_;
  try {
    auto s = std::make_shared<internal::SubscriptionCore>();
    if (!normalize_subtree(filter.subtree, &s->filter.subtree)) return EINVAL;
    s->filter.types = filter.types & kAllBusEventTypes;
    s->wake = std::move(wake);
    s->bus = core_;
    std::unique_ptr<Subscription> sub(new Subscription(s));
    bool pending;
    {
      internal::LockGuard lock(b.mu);
      if (b.stopping) return EAGAIN;
      // Past the ring's capacity the ring laps it first: the same bound.
      s->max_lag = max_lag == 0 ? b.options.capacity : std::min(max_lag, b.options.capacity);
      if (b.subs.size() >= b.options.max_subscribers) {
        ++b.refused;
        return EAGAIN;
      }
      const uint64_t first = b.first_id(), last = b.last_id();
      auto gap = [&](uint64_t first_missed, uint64_t last_missed, const char* reason) {
        s->gap.id = last_missed;
        s->gap.type = BusEventType::kGap;
        s->gap.time_ns = wall_ns();
        s->gap.group = "/";
        s->gap.payload = "{\"after\":" + std::to_string(after_id) +
                         ",\"first_missed\":" + std::to_string(first_missed) +
                         ",\"last_missed\":" + std::to_string(last_missed) + ",\"reason\":\"" +
                         reason + "\"}";
        s->gap_pending = true;
      };
      if (after_id == 0) {
        s->cursor = last;
      } else if (after_id > last) {
        gap(0, last, "unknown_id");  // not an id of this bus (an earlier run, or made up)
        s->cursor = last;
      } else if (after_id + 1 < first) {
        gap(after_id + 1, first - 1, "evicted");
        s->cursor = first - 1;
      } else {
        s->cursor = after_id;
      }
      s->woken_for = s->cursor;
      b.subs.push_back(s);
      s->listed = true;
      ++b.subscribed;
      if (!b.notifier_started) {
        try {
          b.notifier = std::thread([&b] { b.notifier_loop(); });
        } catch (...) {
          b.subs.pop_back();
          s->listed = false;
          return EAGAIN;
        }
        b.notifier_started = true;
      }
      pending = s->gap_pending || s->cursor < last;
      if (pending) b.signaled = true;
    }
    if (pending) b.cv.notify_one();
    *out = std::move(sub);
    return 0;
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
}

EventBusStats EventBus::stats() const noexcept {
  const internal::BusCore& b = *core_;
  EventBusStats st;
  st.recording = recording();
  internal::LockGuard lock(b.mu);
  st.first_id = b.ring.empty() ? 0 : b.ring.front().id;
  st.last_id = b.enabled ? b.last_id() : 0;
  st.published = b.published;
  st.evicted = b.evicted;
  st.lost = b.lost.load(std::memory_order_relaxed);
  st.truncated = b.truncated.load(std::memory_order_relaxed);
  st.held = b.ring.size();
  st.held_bytes = b.bytes;
  st.subscribers = b.subs.size();
  st.subscribed = b.subscribed;
  st.refused = b.refused;
  for (int i = 0; i < kNumBusDropReasons; ++i) st.dropped[i] = b.dropped[i];
  st.wakeups = b.wakeups.load(std::memory_order_relaxed);
  return st;
}

std::vector<BusEvent> EventBus::snapshot(const BusFilter& filter, size_t max_events) const {
  internal::HookBypass bypass;
  std::vector<BusEvent> out;
  internal::LockGuard lock(core_->mu);
  for (const BusEvent& e : core_->ring) {
    if (out.size() >= max_events) break;
    if (filter.matches(e)) out.push_back(e);
  }
  return out;
}

namespace internal {

void publish_memory_event(Group& group, int event) noexcept {
  EventBus& bus = group.controller().events();
  if (!bus.recording()) return;
  HookBypass bypass;
  try {
    const auto e = static_cast<Event>(event);
    std::string p = "{\"counter\":\"";
    p += event_name(e);
    p += "\",\"local\":";
    p += std::to_string(group.events_local().get(e));
    p += ",\"value\":";
    p += std::to_string(group.events().get(e));
    p += '}';
    bus.publish(BusEventType::kMemoryEvent, group, p);
  } catch (...) {  // no memory for the payload: the event is lost
  }
}

}  // namespace internal

}  // namespace memcg
