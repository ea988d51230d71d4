// The C API's notifications and reclaimers (include/memcg/c/memcg.h): the C++ listeners with a
// function pointer and its `void*` captured by value, so that a callback that destroys its own
// handle leaves nothing of the handle in use.
#include "handles.hpp"

using memcg::capi::guarded;

namespace {

// The level as the header numbers it (0 low, 1 medium, 2 critical).
int level_value(memcg::PressureLevel level) noexcept {
  switch (level) {
    case memcg::PressureLevel::kLow: return 0;
    case memcg::PressureLevel::kMedium: return 1;
    case memcg::PressureLevel::kCritical: return 2;
  }
  return 2;
}

}  // namespace

int64_t memcg_reclaimer::reclaimable() const noexcept {
  const memcg::Controller& ctl = count.owner()->cpp;
  return ctl.to_units_floor(reclaimable_fn(user));
}

memcg::ReclaimResult memcg_reclaimer::reclaim(int64_t nr_to_scan, int priority) {
  const memcg::Controller& ctl = count.owner()->cpp;
  if (nr_to_scan <= 0) return {};
  const uint64_t freed = reclaim_fn(ctl.to_bytes(nr_to_scan), priority, user);
  return {nr_to_scan, ctl.to_units_floor(freed)};
}

extern "C" {

int memcg_listener_create_events(memcg_group* group, int local, memcg_notify_fn fn, void* user,
                                 memcg_listener** out) {
  if (group == nullptr || fn == nullptr || out == nullptr || (local != 0 && local != 1))
    return EINVAL;
  return guarded([&] {
    auto handle = std::make_unique<memcg_listener>(group->count.owner());
    memcg_listener* const self = handle.get();
    const memcg::EventsFile file =
        local != 0 ? memcg::EventsFile::kEventsLocal : memcg::EventsFile::kEvents;
    // The final notification of a removal comes when the group is already offline.
    auto callback = [self, fn, user, local](memcg::Group& g, memcg::EventsFile) {
      const bool removed = !g.is_online();
      if (!removed) self->events_delivered.fetch_add(1, std::memory_order_relaxed);
      fn(self, local, removed ? 1 : 0, user);
    };
    if (int err = memcg::EventListener::open(*group->ref, file, callback, &handle->events))
      return err;
    *out = handle.release();
    return 0;
  });
}

int memcg_listener_create_vmpressure(memcg_group* group, const char* args, memcg_notify_fn fn,
                                     void* user, memcg_listener** out) {
  if (group == nullptr || args == nullptr || fn == nullptr || out == nullptr) return EINVAL;
  return guarded([&] {
    auto handle = std::make_unique<memcg_listener>(group->count.owner());
    memcg_listener* const self = handle.get();
    auto callback = [self, fn, user](memcg::PressureLevel level) {
      fn(self, level_value(level), self->vmpressure.removed() ? 1 : 0, user);
    };
    if (int err = handle->vmpressure.listen(*group->ref, args, callback)) return err;
    *out = handle.release();
    return 0;
  });
}

int memcg_listener_create_psi(memcg_group* group, const char* spec, memcg_notify_fn fn,
                              void* user, memcg_listener** out) {
  if (group == nullptr || spec == nullptr || fn == nullptr || out == nullptr) return EINVAL;
  return guarded([&] {
    auto handle = std::make_unique<memcg_listener>(group->count.owner());
    memcg_listener* const self = handle.get();
    auto callback = [self, fn, user] { fn(self, 0, self->psi.removed() ? 1 : 0, user); };
    if (int err = handle->psi.arm(*group->ref, spec, callback)) return err;
    *out = handle.release();
    return 0;
  });
}

void memcg_listener_destroy(memcg_listener* listener) { delete listener; }

uint64_t memcg_listener_delivered(const memcg_listener* listener) {
  if (listener == nullptr) return 0;
  if (listener->events) return listener->events_delivered.load(std::memory_order_relaxed);
  if (listener->vmpressure) return listener->vmpressure.delivered();
  return listener->psi.delivered();
}

int memcg_listener_removed(const memcg_listener* listener) {
  if (listener == nullptr) return 0;
  if (listener->events) return listener->events->removed() ? 1 : 0;
  if (listener->vmpressure) return listener->vmpressure.removed() ? 1 : 0;
  return listener->psi.removed() ? 1 : 0;
}

int memcg_reclaimer_register(memcg_group* group, memcg_reclaimable_fn reclaimable,
                             memcg_reclaim_fn reclaim, void* user, memcg_reclaimer** out) {
  if (group == nullptr || reclaimable == nullptr || reclaim == nullptr || out == nullptr)
    return EINVAL;
  return guarded([&] {
    auto handle =
        std::make_unique<memcg_reclaimer>(group->count.owner(), reclaimable, reclaim, user);
    handle->registration = memcg::ReclaimerRegistration(*group->ref, *handle);
    *out = handle.release();
    return 0;
  });
}

void memcg_reclaimer_destroy(memcg_reclaimer* reclaimer) { delete reclaimer; }

}  // extern "C"
