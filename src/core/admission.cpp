// Admission by learned peak (memcg/core/admission.hpp): the decayed histogram of peak/admitted
// ratios and the factor it gives.
#include "memcg/core/admission.hpp"

#include <cerrno>
#include <cstdio>
#include <mutex>

#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/group.hpp"
#include "memcg/core/internal/admit_model.hpp"

namespace memcg {
namespace {

using internal::AdmitModel;

// Upper bounds of the buckets, in thousandths; the last one holds every larger ratio.
constexpr uint32_t kBound[AdmitModel::kBuckets] = {1000, 1100, 1250, 1500, 1750,
                                                   2000, 2500, 3000, 4000, 4000};
constexpr uint32_t kSample = 1000;        // one sample's weight
constexpr uint32_t kDecayShift = 5;       // each sample decays the weights by 1/32
constexpr uint32_t kMinWeight = 8 * kSample;  // less history than this: factor 1
constexpr uint32_t kPercentile = 90;
constexpr uint32_t kMinFactor = 1000, kMaxFactor = 4000;

int bucket_of(uint64_t ratio_permille) noexcept {
  for (int i = 0; i < AdmitModel::kBuckets - 1; ++i)
    if (ratio_permille <= kBound[i]) return i;
  return AdmitModel::kBuckets - 1;
}

// REQUIRES: m.mu held.
uint32_t learned_factor(const AdmitModel& m, uint32_t total) noexcept {
  if (total < kMinWeight) return kMinFactor;
  const uint64_t want = (static_cast<uint64_t>(total) * kPercentile + 99) / 100;
  uint64_t sum = 0;
  for (int i = 0; i < AdmitModel::kBuckets; ++i) {
    sum += m.weights[i];
    if (sum >= want) return kBound[i];
  }
  return kMaxFactor;
}

}  // namespace

uint32_t admit_growth_permille(const Group& group) noexcept {
  const AdmitModel& m = group.admit_model();
  const uint32_t fixed = m.fixed.load(std::memory_order_relaxed);
  return fixed != 0 ? fixed : m.learned.load(std::memory_order_relaxed);
}

uint32_t admit_samples_permille(const Group& group) noexcept {
  return group.admit_model().total.load(std::memory_order_relaxed);
}

std::string admit_growth_text(const Group& group) {
  const AdmitModel& m = group.admit_model();
  const uint32_t fixed = m.fixed.load(std::memory_order_relaxed);
  const uint32_t f = fixed != 0 ? fixed : m.learned.load(std::memory_order_relaxed);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%u.%03u\n", fixed != 0 ? "" : "auto ", f / 1000, f % 1000);
  // Trailing zeros of the fraction off ("1.250" -> "1.25", "2.000" -> "2").
  std::string s(buf);
  size_t end = s.size() - 1;  // the newline
  while (s[end - 1] == '0') --end;
  if (s[end - 1] == '.') --end;
  return s.substr(0, end) + "\n";
}

int set_admit_growth(Group& group, std::string_view text) noexcept {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  AdmitModel& m = group.admit_model();
  if (text == "auto") {
    m.fixed.store(0, std::memory_order_relaxed);
    return 0;
  }
  // A decimal: digits, then optionally '.' and up to three digits.
  uint64_t whole = 0, frac = 0;
  size_t i = 0, digits = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9' && digits < 3) {
    whole = whole * 10 + static_cast<uint64_t>(text[i++] - '0');
    ++digits;
  }
  if (digits == 0) return EINVAL;
  if (i < text.size()) {
    if (text[i++] != '.') return EINVAL;
    int f = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && f < 3) {
      frac = frac * 10 + static_cast<uint64_t>(text[i++] - '0');
      ++f;
    }
    if (f == 0 || i != text.size()) return EINVAL;
    while (f++ < 3) frac *= 10;
  }
  const uint64_t permille = whole * 1000 + frac;
  if (permille < kMinFactor || permille > kMaxFactor) return EINVAL;
  m.fixed.store(static_cast<uint32_t>(permille), std::memory_order_relaxed);
  return 0;
}

void internal::record_admission(Group& group, uint64_t peak_bytes,
                                uint64_t admitted_bytes) noexcept {
  if (admitted_bytes == 0) return;
  // In thousandths, saturated at 1000x (every ratio past 4x lands in the last bucket anyway).
  const double r = static_cast<double>(peak_bytes) * 1000.0 / static_cast<double>(admitted_bytes);
  const uint64_t ratio = r >= 1e6 ? 1'000'000 : static_cast<uint64_t>(r);
  AdmitModel& m = group.admit_model();
  HookBypass bypass;  // a library mutex (internal/lock.hpp's rule)
  std::lock_guard<std::mutex> lock(m.mu);
  uint32_t total = 0;
  for (uint32_t& w : m.weights) {
    w -= w >> kDecayShift;
    total += w;
  }
  m.weights[bucket_of(ratio)] += kSample;
  total += kSample;
  m.total.store(total, std::memory_order_relaxed);
  m.learned.store(learned_factor(m, total), std::memory_order_relaxed);
}

}  // namespace memcg
