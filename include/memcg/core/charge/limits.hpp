// Writing memory.high and memory.max the cgroup-v2 way: the new value takes effect at once and,
// unless the writer asked not to block, the writer then brings usage down to it.
//
// These sit above Group::set_high/set_max (plain stores) because they reclaim, drain stocks and,
// for memory.max, may invoke the OOM handler: slow, policy-laden work that a knob store must not
// do implicitly.
#pragma once

#include <cstdint>

#include "memcg/core/tree/group.hpp"

namespace memcg {

// memory.high: store; unless `nonblocking`, drain this subtree's stocks once, then reclaim the
// excess until usage <= high or 16 reclaim passes made no progress. Raises no events; an excess
// that remains is handled later by throttling the charging threads.
void write_high(Group& group, uint64_t bytes, bool nonblocking = false);

// memory.max: exchange (never refused, even below usage); unless `nonblocking`, drain once, then
// reclaim the excess with 16 zero-progress retries, then raise `oom` and invoke the OOM handler
// for one unit per round until usage <= max or the handler makes no progress.
void write_max(Group& group, uint64_t bytes, bool nonblocking = false);

// memory.high throttling (the kernel's calculate_overage / calculate_high_delay, computed in
// milliseconds, i.e. HZ = 1000 ticks, so that integer truncation matches).
//
// Overage of `usage` over `high` in 2^-20 fixed point (0 when usage <= high).
uint64_t high_overage(int64_t usage, int64_t high) noexcept;
// The penalty in milliseconds for `nr_pages` 4 KiB pages charged at `max_overage` (the largest
// overage of the group and its ancestors), before the 2 s cap.
uint64_t high_penalty_ms(uint64_t max_overage, uint64_t nr_pages) noexcept;
// The cap of one throttling sleep and the smallest penalty worth sleeping for.
inline constexpr uint64_t kMaxHighDelayMs = 2000;
inline constexpr uint64_t kMinHighDelayMs = 10;

}  // namespace memcg
