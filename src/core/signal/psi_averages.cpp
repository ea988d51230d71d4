// PSI's running averages (avg10/avg60/avg300): the kernel's fixed-point exponential decay,
// folded on the 2 s averaging grid.
#include "memcg/core/signal/psi.hpp"

#include "memcg/base/clock.hpp"

namespace memcg {

namespace internal {

uint64_t fixed_power(uint64_t x, unsigned frac_bits, uint64_t n) noexcept {
  // Square and multiply; every product is rounded to nearest at `frac_bits` fractional bits.
  const uint64_t half = uint64_t{1} << (frac_bits - 1);
  uint64_t result = uint64_t{1} << frac_bits;
  while (n) {
    if (n & 1) result = (result * x + half) >> frac_bits;
    n >>= 1;
    if (n) x = (x * x + half) >> frac_bits;
  }
  return result;
}

namespace {
// One decay step towards `x`: avg x e + x x (1 - e), rounded up when rising so that a constant
// input is reached rather than approached forever.
uint64_t decay(uint64_t avg, uint64_t e, uint64_t x) noexcept {
  uint64_t v = avg * e + x * (PsiAverages::kFixed1 - e);
  if (x >= avg) v += PsiAverages::kFixed1 - 1;
  return v / PsiAverages::kFixed1;
}
}  // namespace

void PsiAverages::reset(uint64_t start_ns) noexcept {
  *this = PsiAverages();
  if (start_ns > Clock::kMaxNs) start_ns = Clock::kMaxNs;  // clock.hpp
  last_ns_ = start_ns;
  next_ns_ = start_ns + kPeriodNs;
}

bool PsiAverages::skip_steady(uint64_t until_ns, const bool stalled[2],
                              const uint64_t total_ns[2]) noexcept {
  if (until_ns < next_ns_) return false;
  for (int s = 0; s < 2; ++s) {
    // A stalled state reports a full period each time (100 %, whatever is still unreported);
    // an idle one reports nothing once nothing is left over.
    if (!stalled[s] && total_ns[s] != reported_[s]) return false;
    const uint64_t x = stalled[s] ? 100 * kFixed1 : 0;
    for (int w = 0; w < 3; ++w)
      if (avg_[s][w] != x) return false;
  }
  // decay(x, e, x) == x: the averages stay; only the grid and the reported time move.
  const uint64_t periods = (until_ns - next_ns_) / kPeriodNs + 1;
  for (int s = 0; s < 2; ++s)
    if (stalled[s]) reported_[s] += periods * kPeriodNs;
  last_ns_ = next_ns_ + (periods - 1) * kPeriodNs;
  next_ns_ = last_ns_ + kPeriodNs;
  return true;
}

void PsiAverages::update(uint64_t now_ns, const uint64_t total_ns[2]) noexcept {
  // The grid is fixed: a late run folds in the periods it missed and keeps the schedule.
  uint64_t missed = 0;
  if (now_ns >= next_ns_ + kPeriodNs) missed = (now_ns - next_ns_) / kPeriodNs;
  next_ns_ += (1 + missed) * kPeriodNs;
  const uint64_t period = now_ns - (last_ns_ + missed * kPeriodNs);
  last_ns_ = now_ns;
  if (period == 0) return;
  for (int s = 0; s < 2; ++s) {
    // More stall than wall time (a late run): report a full period, keep the rest for later.
    const uint64_t sample = std::min(total_ns[s] - reported_[s], period);
    reported_[s] += sample;
    const uint64_t x = sample * 100 / period * kFixed1;  // integer percent, as the kernel
    for (int w = 0; w < 3; ++w) {
      if (missed) avg_[s][w] = decay(avg_[s][w], fixed_power(kDecay[w], 11, missed), 0);
      avg_[s][w] = decay(avg_[s][w], kDecay[w], x);
    }
  }
}

}  // namespace internal

}  // namespace memcg
