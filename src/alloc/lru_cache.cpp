#include "memcg/alloc/lru_cache.hpp"
#include "memcg/base/internal/lock.hpp"

#include <algorithm>

namespace memcg {

LruCache::LruCache(Group& group, std::string name, int referenced_percent)
    : group_(&group),
      name_(std::move(name)),
      referenced_percent_(std::clamp(referenced_percent, 0, 100)),
      registration_(group, *this) {}

LruCache::~LruCache() {
  // Unregister first: once that returns no reclaim is running on this cache.
  registration_.reset();
  uncharge_direct(*group_, size_.exchange(0, std::memory_order_relaxed), StatRegistry::kFile);
}

void LruCache::set_evict_callback(EvictFn fn) {
  internal::LockGuard lock(mu_);
  on_evict_ = std::move(fn);
}

void LruCache::set_rotate_callback(RotateFn fn) {
  internal::LockGuard lock(mu_);
  on_rotate_ = std::move(fn);
  rotation_stopped_ = false;
}

int64_t LruCache::grow(int64_t units, uint32_t flags) {
  int64_t added = 0;
  for (; added < units; ++added) {
    // Charged before the lock is taken: the charge may reclaim from this very cache.
    if (!charged(try_charge(*group_, 1, flags, StatRegistry::kFile))) break;
    internal::LockGuard lock(mu_);
    append_young(next_unit_);
    ++next_unit_;
    size_.fetch_add(1, std::memory_order_relaxed);
  }
  return added;
}

// A unit that follows the young end's last unit extends that run: units rotated one after the
// other (the scan takes them in order) stay one run, so the list holds as many runs as there
// are gaps between its units, whatever reclaim rotated.
void LruCache::append_young(uint64_t unit) {
  if (!runs_.empty() && runs_.back().first + static_cast<uint64_t>(runs_.back().count) == unit)
    ++runs_.back().count;
  else
    runs_.push_back({unit, 1});
}

size_t LruCache::nr_runs() const {
  internal::LockGuard lock(mu_);
  return runs_.size();
}

int64_t LruCache::pop_oldest(int64_t n, std::vector<Run>* freed) {
  int64_t taken = 0;
  while (taken < n && !runs_.empty()) {
    Run& r = runs_.front();
    const int64_t k = std::min(n - taken, r.count);
    freed->push_back({r.first, k});
    r.first += k;
    r.count -= k;
    taken += k;
    if (r.count == 0) runs_.pop_front();
  }
  size_.fetch_sub(taken, std::memory_order_relaxed);
  return taken;
}

void LruCache::notify(const std::vector<Run>& freed) {
  EvictFn fn;
  {
    internal::LockGuard lock(mu_);
    fn = on_evict_;
  }
  if (fn)
    for (const Run& r : freed) fn(r.first, r.count);
}

int64_t LruCache::shrink(int64_t units) {
  std::vector<Run> freed;
  int64_t taken;
  {
    internal::LockGuard lock(mu_);
    taken = pop_oldest(units, &freed);
  }
  uncharge_direct(*group_, taken, StatRegistry::kFile);
  notify(freed);
  return taken;
}

ReclaimResult LruCache::reclaim(int64_t nr_to_scan, int /*priority*/) {
  ReclaimResult result;
  std::vector<Run> freed;
  int64_t rotated = 0;
  RotateFn on_rotate;
  {
    internal::LockGuard lock(mu_);
    while (result.scanned < nr_to_scan && !runs_.empty()) {
      ++result.scanned;
      if (!rotation_stopped_) ref_accumulator_ += referenced_percent_;
      if (ref_accumulator_ >= 100) {
        // Referenced since the last scan: rotate to the young end instead of freeing.
        ref_accumulator_ -= 100;
        Run& r = runs_.front();
        const uint64_t unit = r.first;
        ++r.first;
        if (--r.count == 0) runs_.pop_front();
        append_young(unit);
        ++rotated;
        continue;
      }
      result.reclaimed += pop_oldest(1, &freed);
    }
    if (rotated != 0) on_rotate = on_rotate_;
  }
  if (rotated != 0) {
    rotated_.fetch_add(static_cast<uint64_t>(rotated), std::memory_order_relaxed);
    if (on_rotate && !on_rotate(rotated)) {
      internal::LockGuard lock(mu_);
      rotation_stopped_ = true;
    }
  }
  // Straight from the counters: the charge that asked for this must see the room at once.
  uncharge_direct(*group_, result.reclaimed, StatRegistry::kFile);
  evicted_.fetch_add(static_cast<uint64_t>(result.reclaimed), std::memory_order_relaxed);
  notify(freed);
  return result;
}

}  // namespace memcg
