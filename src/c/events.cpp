// The C API's event stream (include/memcg/c/memcg.h): a memcg::Subscription without a wake
// callback, so that memcg_subscription_next can wait on it; events are taken in batches and
// handed out one at a time.
#include <algorithm>
#include <chrono>
#include <cstddef>

#include "handles.hpp"

using memcg::capi::guarded;

namespace {

// Events taken per batch: one lock of the bus for several events, and a bounded buffer.
constexpr size_t kBatchEvents = 64;
constexpr size_t kBatchBytes = size_t{256} << 10;
// The first memcg_event's size (0.2): what every caller has. Fields added later at the end are
// filled only when `size` covers them.
constexpr size_t kFirstEventSize = offsetof(memcg_event, payload) + sizeof(const char*);
static_assert(kFirstEventSize == sizeof(memcg_event), "a field added: fill it only if it fits");
// memcg_subscription_next's longest wait, 2^31 ms (about 25 days).
constexpr int64_t kMaxTimeoutMs = int64_t{1} << 31;

}  // namespace

extern "C" {

const char* memcg_event_type_name(int type) {
  if (type < 0 || type >= memcg::kNumBusEventTypes) return "unknown";
  return memcg::bus_event_type_name(static_cast<memcg::BusEventType>(type));
}

int memcg_event_type_from_name(const char* name) {
  memcg::BusEventType type;
  if (name == nullptr || !memcg::parse_bus_event_type(name, &type)) return -1;
  return static_cast<int>(type);
}

const char* memcg_drop_reason_name(int reason) {
  if (reason < 0 || reason >= memcg::kNumBusDropReasons) return "unknown";
  return memcg::bus_drop_reason_name(static_cast<memcg::BusDropReason>(reason));
}

int memcg_subscribe(memcg_controller* controller, const char* subtree, uint32_t types,
                    uint64_t after_id, size_t max_lag, memcg_subscription** out) {
  if (controller == nullptr || out == nullptr || types == 0 ||
      (types & ~memcg::kAllBusEventTypes) != 0)
    return EINVAL;
  return guarded([&] {
    memcg::BusFilter filter;
    filter.subtree = subtree != nullptr ? subtree : "";
    filter.types = types;
    auto handle = std::make_unique<memcg_subscription>(controller);
    if (int err = controller->cpp.events().subscribe(filter, after_id, max_lag, nullptr,
                                                     &handle->cpp))
      return err;
    handle->batch.reserve(kBatchEvents);
    *out = handle.release();
    return 0;
  });
}

int memcg_subscription_next(memcg_subscription* subscription, int64_t timeout_ms,
                            memcg_event* event) {
  if (subscription == nullptr || event == nullptr || timeout_ms < 0 ||
      event->size < kFirstEventSize)
    return EINVAL;
  memcg_subscription& s = *subscription;
  return guarded([&] {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(std::min(timeout_ms, kMaxTimeoutMs));
    while (s.next >= s.batch.size()) {
      if (s.closed.load(std::memory_order_acquire)) return EBADF;
      s.batch.clear();
      s.next = 0;
      if (s.cpp->take(&s.batch, kBatchEvents, kBatchBytes) > 0) break;
      if (s.cpp->dropped()) return ECONNABORTED;
      // wait() may report events the filter then passes over: take again until the deadline.
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !s.cpp->wait(left)) {
        if (s.closed.load(std::memory_order_acquire)) return EBADF;
        if (s.cpp->dropped()) return ECONNABORTED;
        // A last look: an event may have come as the wait timed out.
        if (s.cpp->take(&s.batch, kBatchEvents, kBatchBytes) > 0) break;
        return EAGAIN;
      }
    }
    s.current = std::move(s.batch[s.next++]);
    event->id = s.current.id;
    event->type = static_cast<int>(s.current.type);
    event->time_ns = s.current.time_ns;
    event->group = s.current.group.c_str();
    event->payload = s.current.payload.c_str();
    return 0;
  });
}

uint64_t memcg_subscription_cursor(const memcg_subscription* subscription) {
  if (subscription == nullptr) return 0;
  // Events taken but not handed out yet are not "taken" for the program: resume before them.
  const memcg_subscription& s = *subscription;
  if (s.next < s.batch.size()) return s.batch[s.next].id - 1;
  return s.cpp->cursor();
}

int memcg_subscription_drop_reason(const memcg_subscription* subscription) {
  if (subscription == nullptr) return 0;
  return static_cast<int>(subscription->cpp->drop_reason());
}

void memcg_subscription_close(memcg_subscription* subscription) {
  if (subscription == nullptr) return;
  subscription->closed.store(true, std::memory_order_release);
  subscription->cpp->close();  // wakes a wait() in progress
}

void memcg_subscription_destroy(memcg_subscription* subscription) { delete subscription; }

int memcg_events_publish(memcg_controller* controller, int type, const char* group,
                         const char* payload, uint64_t* id) {
  if (id != nullptr) *id = 0;
  if (controller == nullptr || payload == nullptr || id == nullptr || type < 0 ||
      type >= memcg::kNumBusEventTypes || !memcg::EventBus::takes_payload(payload))
    return EINVAL;
  return guarded([&] {
    const char* path = group == nullptr || *group == '\0' ? "/" : group;
    const memcg::GroupRef g = controller->cpp.lookup(path);
    if (!g) return ENOENT;
    memcg::EventBus& bus = controller->cpp.events();
    if (!bus.recording()) return 0;  // nothing records: dropped, as the library's own events
    *id = bus.publish(static_cast<memcg::BusEventType>(type), *g, payload);
    return *id != 0 ? 0 : ENOMEM;  // valid and recording: only memory was missing
  });
}

}  // extern "C"
