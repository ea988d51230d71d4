// Which CPU is this thread on, how many CPUs can exist, and whether the per-CPU code of this
// process may rely on restartable sequences (rseq).
//
// Internal header: users of memcg must not include it or rely on it.
//
// current_cpu() is the shard selector of every per-CPU structure. It reads the cpu_id field that
// the kernel keeps up to date in the thread's rseq area (about 0.3 ns: one load from
// thread-local memory) and falls back to sched_getcpu() (about 3 ns: a vDSO call) when the C
// library did not register rseq for the thread. The answer may be stale as soon as it is read:
// a thread can migrate at any instant. Code that needs "still on this CPU" must check it inside
// an rseq critical section (see rseq.hpp) or under a per-CPU lock.
//
// All functions are thread-safe.

#ifndef MEMCG_INTERNAL_CPU_HPP_
#define MEMCG_INTERNAL_CPU_HPP_

#include <cstdint>

// glibc 2.35 and later register an rseq area for every thread they create and export where it
// lives. Elsewhere current_cpu() always takes the sched_getcpu() route. Defining
// MEMCG_HAVE_GLIBC_RSEQ=0 on the command line forces that route (to test it).
#ifndef MEMCG_HAVE_GLIBC_RSEQ
#if defined(__GLIBC__) && defined(__has_include)
#if __has_include(<sys/rseq.h>)
#define MEMCG_HAVE_GLIBC_RSEQ 1
#endif
#endif
#endif
#ifndef MEMCG_HAVE_GLIBC_RSEQ
#define MEMCG_HAVE_GLIBC_RSEQ 0
#endif
#if MEMCG_HAVE_GLIBC_RSEQ
#include <sys/rseq.h>
#endif

namespace memcg::internal {

// Returns the CPU this thread runs on (a hint that may already be stale). Never negative: 0
// when neither rseq nor sched_getcpu() can answer.
inline int current_cpu() noexcept;

// Number of possible CPU ids (highest possible id + 1), read once. Use it to size per-CPU
// arrays: every value current_cpu() returns is below it (unless CPUs appear that the kernel did
// not declare possible at boot, which callers must still tolerate).
int nr_cpu_ids() noexcept;

// Whether per-CPU structures may use rseq critical sections. Decided once per process, at the
// first call. True iff all of these hold:
//  - the library is built for x86-64 (the only architecture with critical sections here);
//  - it is not built with ThreadSanitizer (the sanitizer cannot see the accesses made inside
//    inline assembly, so under TSan the lock-based path runs and every access is checked);
//  - the environment variable MEMCG_NO_RSEQ is unset, empty or "0";
//  - the C library registered rseq for the calling thread;
//  - the process registered for expedited rseq membarrier (needed by fence_cpu()).
bool rseq_mode() noexcept;

// The rule applied to MEMCG_NO_RSEQ: true when `value` (nullptr = unset) turns rseq off.
bool env_disables_rseq(const char* value) noexcept;

// ---------------------------------------------------------------------------------------------
// Implementation details.

#if MEMCG_HAVE_GLIBC_RSEQ
// The calling thread's rseq area (registered by the C library; check cpu_id >= 0 before use).
inline struct rseq* rseq_area() noexcept {
  return reinterpret_cast<struct rseq*>(static_cast<char*>(__builtin_thread_pointer()) +
                                        __rseq_offset);
}
#endif

int current_cpu_slow() noexcept;

inline int current_cpu() noexcept {
#if MEMCG_HAVE_GLIBC_RSEQ
  if (__builtin_expect(__rseq_size != 0, 1)) {
    // Relaxed: only the kernel writes this field, on this thread's behalf, between two of its
    // instructions; any value read is a CPU the thread ran on.
    const auto cpu = static_cast<int32_t>(__atomic_load_n(&rseq_area()->cpu_id, __ATOMIC_RELAXED));
    if (__builtin_expect(cpu >= 0, 1)) return cpu;
  }
#endif
  return current_cpu_slow();
}

}  // namespace memcg::internal

#endif  // MEMCG_INTERNAL_CPU_HPP_
