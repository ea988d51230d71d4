#include "memcg/limits.hpp"

#include "memcg/controller.hpp"
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
