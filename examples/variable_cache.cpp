// A reclaimer for entries of variable size, following the contract in reclaim.hpp:
//   - the cache keeps its byte total and holds ceil(total / unit) units: a put charges
//     ceil(size / unit), which is always enough, and gives back the surplus of the rounded
//     total, so that rounding never drifts;
//   - put() charges BEFORE it takes the cache's lock (the charge may call reclaim() of this very
//     cache, on this thread, and reclaim() takes that lock);
//   - reclaim() evicts oldest first, uncharges with uncharge_direct() and reports, in units, what
//     it looked at and exactly what it uncharged; erase() (the owner's own release) uses
//     uncharge();
//   - the ReclaimerRegistration is the last data member, so that it is destroyed first.
//
// The group "app" has memory.max = 1 MiB; the cache is offered 4 MiB of values from 100 bytes
// to 20 KiB. Every put beyond the limit is made room for by reclaim of the cache itself, the
// group never goes over its limit, and the charge always equals the rounded byte total.
#include <cstdio>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/reclaim/reclaim.hpp"

namespace {

class VariableCache final : public memcg::Reclaimer {
 public:
  explicit VariableCache(memcg::Group& group) : group_(group), registration_(group, *this) {}
  ~VariableCache() override {
    registration_.reset();  // first: no reclaim() may run while the entries go
    memcg::uncharge(group_, units_);
  }

  // Stores `value` under `key`; false (nothing stored) when the group cannot make room.
  bool put(const std::string& key, std::string value) {
    const uint64_t size = key.size() + value.size();
    // Charge first, without the lock: reclaim() of this cache may run inside the charge (and
    // change the total meanwhile). ceil(size) units are always enough, since ceil(a + b) <=
    // ceil(a) + ceil(b); the surplus of the rounded total is given back below.
    const int64_t need = units_for(size);
    if (!memcg::charged(memcg::try_charge(group_, need))) return false;
    std::lock_guard lock(mu_);
    units_ += need;
    erase_locked(key);
    lru_.push_back(key);
    entries_[key] = Entry{std::move(value), std::prev(lru_.end())};
    bytes_ += size;
    settle_locked(/*direct=*/false);  // a concurrent reclaim may have left surplus units
    return true;
  }

  // The owner's own release: uncharge(), through the per-CPU stock.
  void erase(const std::string& key) {
    std::lock_guard lock(mu_);
    erase_locked(key);
    settle_locked(/*direct=*/false);
  }

  int64_t reclaimable() const noexcept override {
    std::lock_guard lock(mu_);
    return units_;
  }

  memcg::ReclaimResult reclaim(int64_t nr_to_scan, int /*priority*/) override {
    std::lock_guard lock(mu_);
    memcg::ReclaimResult r;
    const int64_t before = units_;
    while (!lru_.empty() && r.scanned < nr_to_scan) {
      auto it = entries_.find(lru_.front());
      const uint64_t size = it->first.size() + it->second.value.size();
      r.scanned += units_for(size) > 0 ? units_for(size) : 1;  // looked at, in units
      erase_locked(it->first);
      ++evicted_;
    }
    settle_locked(/*direct=*/true);  // reclaim: straight from the counters
    r.reclaimed = before - units_;   // exactly what was uncharged here
    return r;
  }

  uint64_t bytes() const {
    std::lock_guard lock(mu_);
    return bytes_;
  }
  int64_t units() const {
    std::lock_guard lock(mu_);
    return units_;
  }
  uint64_t evicted() const {
    std::lock_guard lock(mu_);
    return evicted_;
  }

 private:
  struct Entry {
    std::string value;
    std::list<std::string>::iterator lru;
  };

  int64_t units_for(uint64_t bytes) const { return group_.controller().to_units_ceil(bytes); }

  void erase_locked(const std::string& key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    bytes_ -= key.size() + it->second.value.size();
    lru_.erase(it->second.lru);
    entries_.erase(it);
  }

  // Uncharges the units the byte total no longer needs.
  void settle_locked(bool direct) {
    const int64_t surplus = units_ - units_for(bytes_);
    if (surplus <= 0) return;
    if (direct)
      memcg::uncharge_direct(group_, surplus);
    else
      memcg::uncharge(group_, surplus);
    units_ -= surplus;
  }

  memcg::Group& group_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // oldest first
  uint64_t bytes_ = 0;          // keys and values held
  int64_t units_ = 0;           // charged: units_for(bytes_) once every put has settled
  uint64_t evicted_ = 0;
  // Last: destroyed first, so that no reclaim() runs on a half-destroyed cache.
  memcg::ReclaimerRegistration registration_;
};

}  // namespace

int main() {
  using namespace memcg;
  Controller ctl;
  GroupRef app;
  if (ctl.create("app", &app) != 0) return 1;
  app->set_max(uint64_t{1} << 20);

  uint64_t offered = 0;
  int refused = 0;
  bool ok = true;
  {
    VariableCache cache(*app);
    for (int i = 0; offered < (uint64_t{4} << 20); ++i) {
      const size_t size = 100 + static_cast<size_t>(i * 7919) % (20 << 10);
      offered += size;
      if (!cache.put("k" + std::to_string(i), std::string(size, 'v'))) ++refused;
      if (app->current() > app->max()) ok = false;
      if (cache.units() != ctl.to_units_ceil(cache.bytes())) ok = false;
      if (i % 3 == 0) cache.erase("k" + std::to_string(i / 2));
    }
    std::printf("offered %llu KiB; cache holds %llu bytes in %lld units, %llu entries evicted by "
                "reclaim, %d puts refused; memory.current %llu KiB of %llu KiB\n",
                static_cast<unsigned long long>(offered >> 10),
                static_cast<unsigned long long>(cache.bytes()),
                static_cast<long long>(cache.units()),
                static_cast<unsigned long long>(cache.evicted()), refused,
                static_cast<unsigned long long>(app->current() >> 10),
                static_cast<unsigned long long>(app->max() >> 10));
    if (cache.evicted() == 0 || refused != 0) ok = false;
  }
  ctl.drain_stocks();
  if (app->memory().usage() != 0) ok = false;  // everything went back
  if (!ok) {
    std::fprintf(stderr, "variable_cache: limit exceeded, charge drifted or puts refused\n");
    return 1;
  }
  return 0;
}
