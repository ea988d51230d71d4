// The per-group state of admission by learned peak (memcg/core/admission.hpp): a decayed
// histogram of peak/admitted ratios. Fixed size, kept in the Group; updated only when a
// reservation finishes (a slow path), read when one is admitted.
#ifndef MEMCG_INTERNAL_ADMIT_MODEL_HPP_
#define MEMCG_INTERNAL_ADMIT_MODEL_HPP_

#include <atomic>
#include <cstdint>
#include <mutex>

namespace memcg::internal {

struct AdmitModel {
  static constexpr int kBuckets = 10;
  std::mutex mu;                      // guards weights (a leaf: nothing is called under it)
  uint32_t weights[kBuckets] = {};    // thousandths of a sample, decayed
  // The learned factor (permille), recomputed under mu at each sample; read without it.
  std::atomic<uint32_t> learned{1000};
  std::atomic<uint32_t> fixed{0};     // 0: learned; else the fixed factor (permille)
  std::atomic<uint32_t> total{0};     // the sum of weights, for readers
};

}  // namespace memcg::internal

#endif  // MEMCG_INTERNAL_ADMIT_MODEL_HPP_
