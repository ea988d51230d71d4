#include "memcg/core/cache_governor.hpp"

#include <algorithm>
#include <stdexcept>

#include "memcg/core/controller.hpp"

namespace memcg {

namespace {
uint64_t sat_sub(uint64_t a, uint64_t b) noexcept { return a > b ? a - b : 0; }
}  // namespace

CacheGovernor::CacheGovernor(Group& group, GovernedCache& cache, CacheGovernorOptions options)
    : group_(&group), cache_(cache), options_(options) {
  if (options_.min_bytes > options_.max_bytes)
    throw std::invalid_argument("CacheGovernor: min_bytes is above max_bytes");
  {
    std::lock_guard<std::mutex> lock(apply_mu_);
    apply(target());
  }
  registration_ = ReclaimerRegistration(group, *this);
}

CacheGovernor::~CacheGovernor() { registration_.reset(); }

uint64_t CacheGovernor::target() const noexcept { return compute().target; }

CacheGovernor::Target CacheGovernor::compute() const noexcept {
  const uint64_t cache = cache_.usage_bytes();
  uint64_t own_room = UINT64_MAX;
  uint64_t ancestor_room = UINT64_MAX;
  for (const Group* g = group_.get(); g != nullptr && !g->is_root(); g = g->parent()) {
    const uint64_t limit = std::min(g->high(), g->max());
    if (limit >= kUnlimited) continue;
    const uint64_t other = sat_sub(g->current(), cache);
    const uint64_t headroom =
        options_.headroom_bytes != 0 ? options_.headroom_bytes : limit / 32;
    const uint64_t room = sat_sub(sat_sub(limit, other), headroom);
    if (g == group_.get())
      own_room = room;
    else
      ancestor_room = std::min(ancestor_room, room);
  }
  const uint64_t protection = std::max(group_->min(), group_->low());
  const uint64_t floor = sat_sub(protection, sat_sub(group_->current(), cache));
  const uint64_t t = std::min(own_room, std::max(ancestor_room, floor));
  const uint64_t protected_part = std::min(own_room, floor);
  return {std::clamp(t, options_.min_bytes, options_.max_bytes),
          std::clamp(protected_part, options_.min_bytes, options_.max_bytes)};
}

void CacheGovernor::apply(uint64_t bytes) noexcept {
  capacity_.store(bytes, std::memory_order_relaxed);
  cache_.set_capacity_bytes(bytes);
}

uint64_t CacheGovernor::update() noexcept {
  std::lock_guard<std::mutex> lock(apply_mu_);
  const uint64_t cap = capacity_.load(std::memory_order_relaxed);
  const Target tt = compute();
  const uint64_t t = tt.target;
  if (t < cap) {
    apply(t);
    lowered_.fetch_add(1, std::memory_order_relaxed);
    return t;
  }
  // Below the protected part the capacity comes back at once: protection has no hysteresis.
  const bool under_protection = cap < tt.floor;
  const uint64_t hysteresis = options_.hysteresis_bytes != 0 ? options_.hysteresis_bytes : t / 16;
  if (t - cap <= hysteresis && !under_protection) return cap;
  if (reclaimed_once_.load(std::memory_order_relaxed) && !under_protection) {
    const uint64_t now = group_->controller().clock().now_ns();
    if (now - last_reclaim_ns_.load(std::memory_order_relaxed) < options_.grow_delay_ns)
      return cap;
  }
  apply(t);
  raised_.fetch_add(1, std::memory_order_relaxed);
  return t;
}

int64_t CacheGovernor::reclaimable() const noexcept {
  const uint64_t over = sat_sub(cache_.usage_bytes(), options_.min_bytes);
  return static_cast<int64_t>(over >> group_->controller().unit_shift());
}

ReclaimResult CacheGovernor::reclaim(int64_t nr_to_scan, int /*priority*/) {
  ReclaimResult r;
  if (nr_to_scan <= 0) return r;
  std::unique_lock<std::mutex> lock(apply_mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    // update() is applying a capacity right now (perhaps this very reclaim runs inside it):
    // waiting could deadlock, and that update follows the counters anyway.
    reclaim_busy_.fetch_add(1, std::memory_order_relaxed);
    return r;
  }
  const unsigned shift = group_->controller().unit_shift();
  const uint64_t before = cache_.usage_bytes();
  const uint64_t ask = static_cast<uint64_t>(nr_to_scan) << shift;
  const uint64_t base = std::min(before, capacity_.load(std::memory_order_relaxed));
  const uint64_t cap = std::max(sat_sub(base, ask), options_.min_bytes);
  last_reclaim_ns_.store(group_->controller().clock().now_ns(), std::memory_order_relaxed);
  reclaimed_once_.store(true, std::memory_order_relaxed);
  apply(cap);
  reclaims_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t after = cache_.usage_bytes();
  const int64_t freed = static_cast<int64_t>(sat_sub(before, after) >> shift);
  r.scanned = nr_to_scan;
  r.reclaimed = std::min(freed, nr_to_scan);
  return r;
}

CacheGovernor::Stats CacheGovernor::stats() const noexcept {
  return {lowered_.load(std::memory_order_relaxed), raised_.load(std::memory_order_relaxed),
          reclaims_.load(std::memory_order_relaxed),
          reclaim_busy_.load(std::memory_order_relaxed)};
}

}  // namespace memcg
