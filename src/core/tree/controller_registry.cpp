#include "controller_registry.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

#include "memcg/core/tree/group.hpp"
#include "memcg/base/internal/hook_bypass.hpp"

namespace memcg::internal {
namespace {

struct Registry {
  std::mutex mu;
  uint64_t next = 1;           // guarded by mu
  std::vector<uint64_t> live;  // guarded by mu; a handful of controllers per process
};

// Never destroyed: a thread that exits after static destruction began may still ask.
Registry& registry() {
  static Registry* const r = [] {
    HookBypass bypass;  // the library's own structure: never charged
    return new Registry;
  }();
  return *r;
}

}  // namespace

uint64_t register_controller() {
  Registry& r = registry();
  HookBypass bypass;  // growing `live` under the lock must not charge (and so reclaim)
  std::lock_guard lock(r.mu);
  const uint64_t serial = r.next++;
  r.live.push_back(serial);
  return serial;
}

void unregister_controller(uint64_t serial) noexcept {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.live.erase(std::remove(r.live.begin(), r.live.end(), serial), r.live.end());
}

bool controller_live(uint64_t serial) noexcept {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return std::find(r.live.begin(), r.live.end(), serial) != r.live.end();
}

void run_if_live(uint64_t serial, void (*fn)(void*), void* arg) noexcept {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (std::find(r.live.begin(), r.live.end(), serial) != r.live.end()) fn(arg);
}

void put_if_live(uint64_t serial, Group& group) noexcept {
  Registry& r = registry();
  // Held across put(): a last put frees the group under the controller's tree lock, which
  // nests inside this one (nothing takes them the other way round).
  std::lock_guard lock(r.mu);
  if (std::find(r.live.begin(), r.live.end(), serial) != r.live.end()) {
    group.thread_record_refs().fetch_sub(1, std::memory_order_relaxed);
    group.put();
  }
}

}  // namespace memcg::internal
