#include "memcg/limits.hpp"

#include "memcg/controller.hpp"
#include "memcg/internal/int128.hpp"
#include "memcg/stock.hpp"

namespace memcg {
namespace {
constexpr int kMaxReclaimRetries = 16;
}  // namespace

void write_high(Group& group, uint64_t bytes, bool nonblocking) {
  group.set_high(bytes);
  if (nonblocking) return;
  Controller& ctl = group.controller();
  PageCounter& mem = group.memory();
  bool drained = false;
  int retries = kMaxReclaimRetries;
  for (;;) {
    const int64_t usage = mem.usage();
    const int64_t high = mem.high();
    if (usage <= high) return;
    if (!drained) {
      ctl.stock().drain_all(&group);
      drained = true;
      continue;
    }
    if (ctl.reclaim_for_charge(group, usage - high) == 0 && --retries == 0) return;
  }
}

void write_max(Group& group, uint64_t bytes, bool nonblocking) {
  group.set_max(bytes);
  if (nonblocking) return;
  Controller& ctl = group.controller();
  PageCounter& mem = group.memory();
  bool drained = false;
  int retries = kMaxReclaimRetries;
  for (;;) {
    const int64_t usage = mem.usage();
    const int64_t max = mem.max();
    if (usage <= max) return;
    if (!drained) {
      ctl.stock().drain_all(&group);
      drained = true;
      continue;
    }
    if (retries > 0) {
      if (ctl.reclaim_for_charge(group, usage - max) == 0) --retries;
      continue;
    }
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
