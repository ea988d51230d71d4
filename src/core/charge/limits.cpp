#include "memcg/core/charge/limits.hpp"

#include "memcg/core/tree/controller.hpp"
#include "memcg/base/internal/int128.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/percpu/internal/stock.hpp"
#include "memcg/core/wait/internal/charge_wait_hooks.hpp"

namespace memcg {
namespace {

constexpr int kMaxReclaimRetries = 16;

// The shared first half of a blocking memory.high/max write: drain the subtree's stocks once
// (the object reserves first: they return their units to the unit stock or the counters, as
// charge_slow does), then reclaim the excess over `limit` until there is none or 16 passes
// freed nothing. True when usage ended at or below the limit.
bool reclaim_down_to(Group& group, int64_t (PageCounter::*limit)() const noexcept) {
  Controller& ctl = group.controller();
  const PageCounter& mem = group.memory();
  if (mem.usage() <= (mem.*limit)()) return true;
  ctl.obj_stock().drain_all(&group);
  ctl.stock().drain_all(&group);
  for (int retries = kMaxReclaimRetries;;) {
    const int64_t excess = mem.usage() - (mem.*limit)();
    if (excess <= 0) return true;
    if (ctl.reclaim_for_charge(group, excess) == 0 && --retries == 0) return false;
  }
}

}  // namespace

void write_high(Group& group, uint64_t bytes, bool nonblocking) {
  group.set_high(bytes);
  if (!nonblocking) reclaim_down_to(group, &PageCounter::high);
}

void write_max(Group& group, uint64_t bytes, bool nonblocking) {
  group.set_max(bytes);
  internal::wake_charge_waiters(group);  // a raised limit may serve waiting charges
  if (nonblocking || reclaim_down_to(group, &PageCounter::max)) return;
  // Reclaim gave up: kill, one unit's worth at a time, until usage fits or no victim is left.
  Controller& ctl = group.controller();
  while (group.memory().usage() > group.memory().max()) {
    group.raise(Event::kOom);
    if (!ctl.out_of_memory(group, 1)) return;
  }
}

}  // namespace memcg

namespace memcg {

uint64_t high_overage(int64_t usage, int64_t high) noexcept {
  if (usage <= high) return 0;
  // Guard against a zero high: any usage is then a huge overage rather than a division by 0.
  const uint64_t h = high > 0 ? static_cast<uint64_t>(high) : 1;
  return (static_cast<uint64_t>(usage - high) << 20) / h;
}

uint64_t high_penalty_ms(uint64_t max_overage, uint64_t nr_pages) noexcept {
  if (max_overage == 0) return 0;
  // penalty = overage^2 * HZ >> 20 >> 14, scaled by the pages charged relative to a batch of 64.
  // The square of a large overage can pass 64 bits; 128 bits keep it exact (it is capped later).
  const internal::u128 sq = static_cast<internal::u128>(max_overage) * max_overage * 1000;
  const internal::u128 ticks = ((sq >> 20) >> 14) * nr_pages / 64;
  return ticks > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(ticks);
}

}  // namespace memcg
