// The "disabled" word of a per-CPU shard (the protocol of internal/rseq.hpp) used as the
// try-lock of the slow paths, shared by the unit stock (stock.hpp) and the object stock
// (obj_stock.hpp).
//
// Internal header: users of memcg must not include it or rely on it.

#ifndef MEMCG_INTERNAL_SHARD_WORD_HPP_
#define MEMCG_INTERNAL_SHARD_WORD_HPP_

#include <sched.h>

#include <atomic>
#include <cstdint>

#include "memcg/base/internal/cpu.hpp"
#include "memcg/base/internal/rseq.hpp"

namespace memcg::internal {

// The calling thread's shard among `nr_shards`: its CPU, reduced modulo the shard count in
// fallback mode. In rseq mode the shard must be the CPU itself (fences aim at it); a CPU beyond
// the shards (one that was not possible at start-up) gets -1 and the caller acts as if the shard
// were busy.
inline int local_shard(int nr_shards, bool rseq) noexcept {
  const int cpu = current_cpu();
  if (!rseq) return cpu % nr_shards;
  return cpu < nr_shards ? cpu : -1;
}

// In rseq mode, makes sure no critical section on CPU `idx` that read disabled == 0 can still
// commit. If the caller runs on that CPU after having set the word, such a section was
// preempted before that point and aborts when resumed, so no fence is needed (the common case
// for local slow paths); otherwise fence the CPU.
inline void make_exclusive(int idx, bool rseq) noexcept {
  if (rseq && current_cpu() != idx) fence_cpu(idx);
}

// Takes the word of shard `idx` unless another holder has it, and makes it exclusive.
inline bool shard_try_lock(std::atomic<uint64_t>& disabled, int idx, bool rseq) noexcept {
  // Sequentially consistent: in rseq mode the word must be visible before the CPU check (or the
  // fence) in make_exclusive; in fallback mode acquire would do.
  if (disabled.exchange(1, std::memory_order_seq_cst) != 0) return false;
  make_exclusive(idx, rseq);
  return true;
}

// Takes the word, waiting for its holder. Does not make it exclusive: callers that touch the
// shard's data call make_exclusive() (a drain first checks whether it needs to).
inline void shard_lock_wait(std::atomic<uint64_t>& disabled) noexcept {
  // Holders keep the word for a few dozen instructions; yielding lets a preempted holder on
  // this CPU finish.
  while (disabled.exchange(1, std::memory_order_seq_cst) != 0) {
    while (disabled.load(std::memory_order_relaxed) != 0) sched_yield();
  }
}

inline void shard_unlock(std::atomic<uint64_t>& disabled) noexcept {
  // Release: the next holder, and in rseq mode the next critical section on this CPU (x86 keeps
  // loads in order), see every word written under it.
  disabled.store(0, std::memory_order_release);
}

}  // namespace memcg::internal

#endif  // MEMCG_INTERNAL_SHARD_WORD_HPP_
