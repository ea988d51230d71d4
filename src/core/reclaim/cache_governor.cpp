#include "memcg/core/reclaim/cache_governor.hpp"

#include <algorithm>
#include <stdexcept>

#include "memcg/core/tree/controller.hpp"
#include "memcg/counter/protection.hpp"

namespace memcg {

namespace {
uint64_t sat_sub(uint64_t a, uint64_t b) noexcept { return a > b ? a - b : 0; }

ProtectionInput input_of(const Group& g) noexcept {
  const PageCounter& m = g.memory();
  return {m.usage(), m.min(), m.low(), m.children_min_usage(), m.children_low_usage()};
}

// `g`'s effective protection (units) in a reclaim walk rooted at its ancestor `root`, computed
// top-down as the walk does (reclaim.cpp): a child of the root gets its declared values, a deeper
// group what compute_protection() shares out of its parent's. Recursion up the path, no
// allocation (called from inside charges, through the deferred shrinks of BlockCache).
EffectiveProtection effective_under(const Group& root, const Group& g, const ProtectionInput& self,
                                    bool recursive) noexcept {
  const Group* parent = g.parent();
  if (parent == &root) return {self.min, self.low};
  if (self.usage == 0) return {};
  const ProtectionInput pin = input_of(*parent);
  return compute_protection(self, pin, effective_under(root, *parent, pin, recursive), recursive);
}
}  // namespace

CacheGovernor::CacheGovernor(Group& group, GovernedCache& cache, CacheGovernorOptions options)
    : group_(&group), cache_(cache), options_(options) {
  if (options_.min_bytes > options_.max_bytes)
    throw std::invalid_argument("CacheGovernor: min_bytes is above max_bytes");
  {
    std::lock_guard<std::mutex> lock(apply_mu_);
    // A cache that defers even this first capacity reports it through applied().
    static_cast<void>(apply(target()));
  }
  registration_ = ReclaimerRegistration(group, *this);
}

CacheGovernor::~CacheGovernor() { registration_.reset(); }

uint64_t CacheGovernor::target() const noexcept { return compute().target; }

uint64_t CacheGovernor::protection_under(const Group& root) const noexcept {
  const Group& g = *group_;
  const bool recursive = g.controller().options().recursive_protection;
  ProtectionInput self = input_of(g);
  if (g.parent() == &root) {
    // A child of the level that presses: its declared values, whatever its usage.
    return g.controller().to_bytes(std::max(self.min, self.low));
  }
  // What the group may hold, not only what it holds: its usage taken as at least its own
  // protection, and its parent's sums (its claims, its usage) as they would be then.
  ProtectionInput pin = input_of(*g.parent());
  const int64_t grown = std::max({self.usage, self.min, self.low});
  pin.usage += grown - self.usage;
  pin.children_min_usage += std::min(grown, self.min) - std::min(self.usage, self.min);
  pin.children_low_usage += std::min(grown, self.low) - std::min(self.usage, self.low);
  self.usage = grown;
  if (self.usage == 0) return 0;
  const EffectiveProtection pe =
      effective_under(root, *g.parent(), input_of(*g.parent()), recursive);
  const EffectiveProtection e = compute_protection(self, pin, pe, recursive);
  return g.controller().to_bytes(std::max<int64_t>(0, std::max(e.emin, e.elow)));
}

CacheGovernor::Target CacheGovernor::compute() const noexcept {
  const uint64_t cache = cache_.usage_bytes();
  const uint64_t own_other = sat_sub(group_->current(), cache);
  uint64_t own_room = UINT64_MAX;
  uint64_t ancestor_target = UINT64_MAX;
  uint64_t floor = UINT64_MAX;
  for (const Group* g = group_.get(); g != nullptr && !g->is_root(); g = g->parent()) {
    const uint64_t limit = std::min(g->high(), g->max());
    if (limit >= kUnlimited) continue;
    const uint64_t other = sat_sub(g->current(), cache);
    const uint64_t headroom =
        options_.headroom_bytes != 0 ? options_.headroom_bytes : limit / 32;
    const uint64_t room = sat_sub(sat_sub(limit, other), headroom);
    if (g == group_.get()) {
      own_room = room;  // the group's own limit: its protection does not count against it
      continue;
    }
    // This level's pressure reclaims the group only above its effective protection there.
    const uint64_t level_floor = sat_sub(protection_under(*g), own_other);
    ancestor_target = std::min(ancestor_target, std::max(room, level_floor));
    floor = std::min(floor, level_floor);
  }
  const uint64_t t = std::min(own_room, ancestor_target);
  const uint64_t protected_part = floor == UINT64_MAX ? 0 : std::min(own_room, floor);
  return {std::clamp(t, options_.min_bytes, options_.max_bytes),
          std::clamp(protected_part, options_.min_bytes, options_.max_bytes)};
}

bool CacheGovernor::apply(uint64_t bytes) noexcept {
  if (!cache_.set_capacity_bytes(bytes)) {
    // Kept by the cache for later: nothing is in force yet (applied() records it then).
    deferred_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  capacity_.store(bytes, std::memory_order_relaxed);
  return true;
}

void CacheGovernor::note_cut() noexcept {
  last_reclaim_ns_.store(group_->controller().clock().now_ns(), std::memory_order_relaxed);
  reclaimed_once_.store(true, std::memory_order_relaxed);
  reclaims_.fetch_add(1, std::memory_order_relaxed);
}

void CacheGovernor::applied(uint64_t bytes) noexcept {
  // Relaxed: an update() racing with this reads the old or the new capacity, and the next update
  // follows the new one either way.
  const uint64_t before = capacity_.exchange(bytes, std::memory_order_relaxed);
  if (bytes < before) note_cut();
}

uint64_t CacheGovernor::update() noexcept {
  std::lock_guard<std::mutex> lock(apply_mu_);
  const uint64_t cap = capacity_.load(std::memory_order_relaxed);
  const Target tt = compute();
  const uint64_t t = tt.target;
  if (t < cap) {
    if (!apply(t)) return cap;
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
  if (!apply(t)) return cap;
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
  // The cut is recorded when it is in force: now, or when a cache that deferred it applies it.
  if (apply(cap)) note_cut();
  const uint64_t after = cache_.usage_bytes();
  const int64_t freed = static_cast<int64_t>(sat_sub(before, after) >> shift);
  r.scanned = nr_to_scan;
  r.reclaimed = std::min(freed, nr_to_scan);
  return r;
}

CacheGovernor::Stats CacheGovernor::stats() const noexcept {
  return {lowered_.load(std::memory_order_relaxed), raised_.load(std::memory_order_relaxed),
          reclaims_.load(std::memory_order_relaxed),
          reclaim_busy_.load(std::memory_order_relaxed),
          deferred_.load(std::memory_order_relaxed)};
}

}  // namespace memcg
