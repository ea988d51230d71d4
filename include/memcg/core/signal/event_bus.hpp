// The event bus: one ordered stream of what happened in a Controller (memory.events increments,
// vmpressure level changes, PSI triggers firing, OOM and preemption reports, groups created and
// removed, writes and actions applied, budget progress), for watchers that must not poll every
// group's files. The HTTP endpoint's GET /v1/events (Server-Sent Events) is built on it; an
// application may subscribe in-process the same way.
//
// Model. Each Controller owns one EventBus (Controller::events()). Producers append an event to a
// bounded ring (EventBusOptions::capacity events and max_bytes of text, the oldest dropped first);
// every event gets the next id (monotonic, starting from the wall clock in microseconds at
// enable(), so that ids of a later run of the process are larger) and the wall-clock time. A
// Subscription is a cursor into that ring with a filter (a group subtree, a set of types): it
// resumes after any id the ring still holds, and an id the ring no longer holds is answered by a
// `gap` event that names what was lost (so Last-Event-ID works across reconnects).
//
// Who pays what.
//   - Before enable() (or the first subscribe()), every producer point costs one relaxed load.
//   - Once enabled, each producer point, all of them already slow paths (a memory.events raise,
//     a vmpressure window, a PSI trigger firing, an OOM report, a group's creation or removal, a
//     write), formats a small JSON payload and appends it under the bus's mutex: a few hundred
//     nanoseconds, independent of the number of subscribers. The charge fast path is untouched.
//   - Delivery runs on the bus's own notifier thread (started by the first subscribe()): it wakes
//     the subscribers that have something new, outside every library lock, and drops the ones
//     that fell behind. Producers never wait for a subscriber, never call one, and wake the
//     notifier at most once per batch.
//
// Slow subscribers. A subscriber may be at most `max_lag` events behind the newest (its bounded
// queue, counted in events of any type); past it, or once the ring has overwritten an event it
// had not taken, it is dropped: dropped() turns true with the reason, and the reason is counted
// in EventBus::stats(). Nothing is ever buffered for a subscriber beyond the shared ring.
//
// Thread safety: every method may be called from any thread. No callback runs under a library
// lock; the wake callback of a subscription runs on the notifier thread (or on the thread that
// destroys the bus) and must be short and must not block (set a flag, resume a connection).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace memcg {

class Group;

// What an event reports. The names (event_type_name) are the SSE `event:` field.
enum class BusEventType : uint8_t {
  kMemoryEvent,   // "memory_event": a memory.events counter of the group went up (payload:
                  // counter, local and hierarchical values)
  kVmpressure,    // "vmpressure": the vmpressure level of a reclaim root changed
  kPsiTrigger,    // "psi_trigger": a PSI trigger of the group fired (payload: its spec)
  kOom,           // "oom": an OOM report (payload: the report as /v1/oom gives it)
  kPreempt,       // "preempt": a preemption report
  kBudget,        // "budget": progress of the process budget
  kGroupCreated,  // "group_created"
  kGroupRemoved,  // "group_removed"
  kWrite,         // "write": a group file written through the HTTP endpoint
  kAction,        // "action": an operator's action applied (kill, preempt, ...)
  kGap,           // "gap": events a subscriber asked for that the ring no longer holds
};
inline constexpr int kNumBusEventTypes = 11;
// Bit of a type in a BusFilter's mask.
constexpr uint32_t bus_type_bit(BusEventType t) noexcept { return uint32_t{1} << static_cast<int>(t); }
inline constexpr uint32_t kAllBusEventTypes = (uint32_t{1} << kNumBusEventTypes) - 1;

const char* bus_event_type_name(BusEventType t) noexcept;
// The type named `name`; false (and nothing written) for an unknown name.
bool parse_bus_event_type(std::string_view name, BusEventType* out) noexcept;

struct BusEvent {
  uint64_t id = 0;
  BusEventType type = BusEventType::kGap;
  uint64_t time_ns = 0;  // wall clock (CLOCK_REALTIME), nanoseconds since the epoch
  std::string group;     // the group's path ("/" for the root, "a/b" below it)
  std::string payload;   // one JSON object on one line
};

// Which events a subscriber gets: those of `subtree` (a group path; "" or "/" for every group)
// and its descendants, whose type's bit is in `types`. A gap event is always delivered.
struct BusFilter {
  std::string subtree;
  uint32_t types = kAllBusEventTypes;
  bool matches(const BusEvent& e) const noexcept;
};
// True when `path` may be a BusFilter's subtree: "" or "/" (every group), or segments that are
// group names (controller.hpp: [A-Za-z0-9_.:@+-], not "." or "..", 1..255 bytes), leading and
// trailing '/' allowed.
bool bus_subtree_valid(std::string_view path) noexcept;

struct EventBusOptions {
  // Events the ring holds (the oldest go first), 16..1'000'000.
  size_t capacity = 4096;
  // Bytes of group paths and payloads the ring holds, 64 KiB..1 GiB: a burst of large OOM
  // reports cannot hold more than this.
  size_t max_bytes = size_t{8} << 20;
  // Subscriptions at once; subscribe() refuses more with EAGAIN. 1..100'000.
  size_t max_subscribers = 1024;
  // Largest payload kept; a longer one is replaced by {"truncated":true,"bytes":N}. 256..1 MiB.
  size_t max_payload_bytes = 64 * 1024;
};

// Why a subscriber was dropped; counted by EventBus::stats().
enum class BusDropReason : uint8_t {
  kNone,
  kLagging,  // more than its max_lag events behind the newest
  kOverrun,  // the ring overwrote an event it had not taken yet
  kClosed,   // the bus went away (the Controller was destroyed)
};
inline constexpr int kNumBusDropReasons = 4;
const char* bus_drop_reason_name(BusDropReason r) noexcept;  // "none", "lagging", ...

struct EventBusStats {
  bool recording = false;
  uint64_t first_id = 0;     // oldest event held (0 when empty)
  uint64_t last_id = 0;      // newest event given an id (0 before the first)
  uint64_t published = 0;    // events appended
  uint64_t evicted = 0;      // events pushed out of the ring by newer ones
  uint64_t lost = 0;         // events not recorded for want of memory
  uint64_t truncated = 0;    // payloads over max_payload_bytes
  size_t held = 0;           // events in the ring
  size_t held_bytes = 0;     // their paths' and payloads' bytes
  size_t subscribers = 0;    // subscriptions now
  uint64_t subscribed = 0;   // subscriptions ever made
  uint64_t refused = 0;      // subscribe() refused at max_subscribers
  uint64_t dropped[kNumBusDropReasons] = {};  // by BusDropReason
  uint64_t wakeups = 0;      // wake callbacks run by the notifier
};

namespace internal {
struct BusCore;
struct SubscriptionCore;
}  // namespace internal

// One subscriber's cursor. Destroying it (or close()) unsubscribes.
class Subscription {
 public:
  // Called when the subscription has new events, was dropped, or the bus closes. Runs on the
  // bus's notifier thread with no library lock held; must be short and must not block, and must
  // not destroy or close() this subscription.
  using WakeFn = std::function<void()>;

  ~Subscription();
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;

  // Moves up to `max_events` of the events that match the filter, oldest first, into `out`
  // (appended), stopping early past `max_bytes` of paths and payloads (at least one event is
  // taken when any is ready). Returns the number taken; 0 when none is ready, or dropped.
  size_t take(std::vector<BusEvent>* out, size_t max_events = 256,
              size_t max_bytes = size_t{1} << 20);
  // Waits up to `timeout` until take() has something, or the subscription is dropped or closed.
  // True when something is ready. REQUIRES: no wake callback (it would not be told).
  bool wait(std::chrono::milliseconds timeout);
  // Id of the last event taken (or skipped by the filter): resume after it.
  uint64_t cursor() const noexcept;
  bool dropped() const noexcept;
  BusDropReason drop_reason() const noexcept;
  // Unsubscribes. When it returns the wake callback is not running and does not run again.
  // Idempotent. REQUIRES: not called from this subscription's own wake callback.
  void close() noexcept;

 private:
  friend class EventBus;
  explicit Subscription(std::shared_ptr<internal::SubscriptionCore> core);
  std::shared_ptr<internal::SubscriptionCore> core_;
};

class EventBus {
 public:
  EventBus();
  // Drops every subscription (reason kClosed, their wake callbacks called once) and joins the
  // notifier. Subscriptions may outlive the bus: they are dropped and take nothing.
  ~EventBus();
  EventBus(const EventBus&) = delete;
  EventBus& operator=(const EventBus&) = delete;

  // Starts recording with `options` (EINVAL when one is out of range; the first call that
  // succeeds fixes them: later calls return 0 and keep them). subscribe() enables with the
  // defaults if nothing did. An HTTP server enables the bus when it starts, so that a client
  // reconnecting can resume from the ring.
  [[nodiscard]] int enable(const EventBusOptions& options = {});
  // One relaxed load: producers test it before formatting anything.
  bool recording() const noexcept { return recording_.load(std::memory_order_relaxed); }

  // Appends an event (payload: one JSON object; a payload with a line break is refused). Returns
  // its id, or 0 when the bus is not recording, the payload is malformed (not an object on one
  // line) or there is no memory for it (counted in lost). Never blocks on a subscriber; never
  // calls one. For producers outside the library as well (actions, budgets).
  uint64_t publish(BusEventType type, std::string_view group, std::string_view payload) noexcept;
  // Whether publish() takes `payload`: braces first and last, no line break (not parsed).
  static bool takes_payload(std::string_view payload) noexcept {
    return payload.size() >= 2 && payload.front() == '{' && payload.back() == '}' &&
           payload.find_first_of("\r\n") == std::string_view::npos;
  }
  // The same for an event about `group` (its path is taken here).
  uint64_t publish(BusEventType type, const Group& group, std::string_view payload) noexcept;

  // Subscribes with `filter`, resuming after `after_id` (0: only events from now on; an id
  // older than the ring's oldest gives a gap event first, then the oldest held; an id past the
  // newest, e.g. of an earlier run, gives a gap event and then new events). `max_lag` bounds how
  // far behind it may fall before it is dropped (0, or more than the ring's capacity: the
  // capacity). `wake` may be empty (then use Subscription::wait()).
  // Errors: EAGAIN at max_subscribers (counted in refused), EINVAL for a subtree that is not a
  // group path (bus_subtree_valid), ENOMEM, EAGAIN when the notifier thread cannot start.
  [[nodiscard]] int subscribe(const BusFilter& filter, uint64_t after_id, size_t max_lag,
                              Subscription::WakeFn wake, std::unique_ptr<Subscription>* out);

  EventBusStats stats() const noexcept;
  // The events held now that match `filter`, oldest first (at most `max_events`): for tests and
  // one-shot readers.
  std::vector<BusEvent> snapshot(const BusFilter& filter = {}, size_t max_events = SIZE_MAX) const;

 private:
  std::atomic<bool> recording_{false};
  std::shared_ptr<internal::BusCore> core_;
};

// JSON string body of `s` (no quotes): ", \ and control characters escaped, bytes that are not
// UTF-8 replaced by U+FFFD, so the result is valid JSON whatever `s` holds.
// For producers that build payloads.
void append_json_escaped(std::string* out, std::string_view s);

}  // namespace memcg

// ---------------------------------------------------------------------------------------------
// Implementation details below; not part of the interface.
namespace memcg::internal {
// A memory.events counter of `group` went up (Group::raise, when the bus records): the event
// carries the counter's name and its local and hierarchical values.
void publish_memory_event(Group& group, int event) noexcept;
}  // namespace memcg::internal
