// Per-CPU critical sections built on restartable sequences (rseq), and the fence that lets
// another CPU take over a CPU's data.
//
// Internal header: users of memcg must not include it or rely on it.
//
// Why: updating per-CPU data with a locked read-modify-write costs about 6 ns even without
// contention. A restartable sequence does the same update with plain loads and one plain store:
// the kernel guarantees that if the thread is preempted, migrated or interrupted by a signal
// between the start of the sequence and its final ("commit") store, execution resumes at an
// abort handler instead, so the store happens only if the thread stayed on the CPU for the
// whole sequence. Two threads can therefore never interleave inside sequences on one CPU.
//
// Protocol for data owned by CPU c (one "disabled" word plus the data it guards):
//  - On CPU c, a thread updates the data only inside a critical section that checks, in this
//    order, that it runs on c and that disabled == 0, and ends with the commit store.
//  - Any other thread (on another CPU, or on c but outside a critical section) that wants to read
//    or modify the data:
//      1. sets disabled to non-zero with a sequentially consistent atomic (an exchange, so that
//         it doubles as a try-lock among such threads);
//      2. calls fence_cpu(c): when it returns, every critical section on c that read the old
//         disabled == 0 has either committed or been aborted, and every later one sees the flag
//         and fails its compare;
//      3. reads and modifies the data with ordinary atomics;
//      4. clears disabled with a release store.
//    Step 2 can be skipped when the thread reads current_cpu() == c after step 1: it then ran on
//    c after setting the flag, so any critical section on c that read disabled == 0 was
//    preempted before that instant (and aborts) or had already committed.
//
// These sections exist only on x86-64 and not under ThreadSanitizer (MEMCG_RSEQ_CS == 1);
// callers must check internal::rseq_mode() before using them and have a lock-based path for the
// other case.

#ifndef MEMCG_INTERNAL_RSEQ_HPP_
#define MEMCG_INTERNAL_RSEQ_HPP_

#include <cstddef>
#include <cstdint>

#include "memcg/base/internal/cpu.hpp"

#if defined(__SANITIZE_THREAD__)
#define MEMCG_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MEMCG_TSAN 1
#endif
#endif
#ifndef MEMCG_TSAN
#define MEMCG_TSAN 0
#endif

#if defined(__x86_64__) && MEMCG_HAVE_GLIBC_RSEQ && !MEMCG_TSAN
#define MEMCG_RSEQ_CS 1
#else
#define MEMCG_RSEQ_CS 0
#endif

namespace memcg::internal {

// Signature placed before every abort handler; the C library registered the thread's rseq area
// with it, and the kernel refuses to jump to a handler not preceded by it. The x86 value.
inline constexpr uint32_t kRseqSig = 0x53053053;

enum class CsResult {
  kOk,             // the commit store happened
  kCompareFailed,  // a check failed (disabled set, owner changed, out of bounds); nothing stored
  kAborted,        // not on `cpu`, or preempted/migrated/signalled inside; nothing stored.
                   // The caller re-reads its CPU and retries, or takes the slow path.
};

// On CPU `cpu`: if *disabled == 0 and *owner_slot == expected_owner, let v = *count + delta; if
// lo <= v <= hi (and the addition does not overflow), store v into *count.
// REQUIRES: rseq_mode(); the words are 8-byte aligned and only updated as the protocol says.
inline CsResult cs_add_bounded(int cpu, const uint64_t* disabled, const void* const* owner_slot,
                               const void* expected_owner, int64_t* count, int64_t delta,
                               int64_t lo, int64_t hi) noexcept;

// On CPU `cpu`: if *disabled == 0 and *owner_slot == expected_owner, let v = *word + add; if
// (v & mask) == expect, (v & 0xff) <= hi and the signed field v >> 16 lies in [-dmax, dmax],
// store v into *word. The packed word of a stock slot (stock.hpp): units in bits 0-7, a tag in
// bits 8-15, a signed count in bits 16-63; `mask`/`expect` pin the tag (and the count, when the
// caller re-tags the slot). REQUIRES: as for cs_add_bounded; 0 <= dmax < 2^46.
inline CsResult cs_slot_update(int cpu, const uint64_t* disabled, const void* const* owner_slot,
                               const void* expected_owner, uint64_t* word, uint64_t add,
                               uint64_t mask, uint64_t expect, uint64_t hi,
                               uint64_t dmax) noexcept;

// The hot-path forms of the two above: the caller passes its rseq area (read once for the CPU
// and the section), and the data as references, so that the section addresses them straight
// from the shard's base and index and needs no register of its own for them.
//
// cs_slot_add: as cs_slot_update for a slot whose tag the caller expects, checked together with
// the units: let v = word + add; store it if ((v & low_mask) - expect) <= hi as a 32-bit
// unsigned difference (low_mask 0xffff, expect = tag << 8: the tag is the expected one and the
// units at most hi; low_mask 0xff, expect 0: the units alone) and v >> 16 lies in
// [-hi, span - hi]. hi and span are read in the section: pass them as the caller's fields.
// REQUIRES: as for cs_slot_update; hi < 256, span = 2 * hi (the count in [-hi, hi]).
inline CsResult cs_slot_add(struct rseq* rs, int cpu, const uint64_t& disabled,
                            const void* const& owner_slot, const void* expected_owner,
                            uint64_t& word, uint64_t add, uint32_t low_mask, uint32_t expect,
                            const uint64_t& hi, const uint64_t& span) noexcept;
// cs_add_floor / cs_add_ceil: as cs_add_bounded with only one bound, lo <= v (signed) or
// v <= hi (signed). REQUIRES: as for cs_add_bounded, and count + delta cannot overflow.
inline CsResult cs_add_floor(struct rseq* rs, int cpu, const uint64_t& disabled,
                             const void* const& owner_slot, const void* expected_owner,
                             int64_t& count, int64_t delta, int64_t lo) noexcept;
inline CsResult cs_add_ceil(struct rseq* rs, int cpu, const uint64_t& disabled,
                            const void* const& owner_slot, const void* expected_owner,
                            int64_t& count, int64_t delta, int64_t hi) noexcept;

// On CPU `cpu`: if *disabled == 0 and *slot == expected, store newv into *slot.
// REQUIRES: as for cs_add_bounded.
inline CsResult cs_cmpeq_store_ptr(int cpu, const uint64_t* disabled, void** slot,
                                   const void* expected, void* newv) noexcept;

// Membarrier (expedited, rseq flavour) aimed at one CPU: when it returns, no critical section of
// this process that started on `cpu` before the call is still running there un-aborted, and that
// CPU observes every store made before the call. A CPU that is offline, or runs another process,
// costs nothing. About one system call plus an interrupt of the target CPU.
// REQUIRES: rseq_mode() (the process registered for this membarrier).
void fence_cpu(int cpu) noexcept;

// ---------------------------------------------------------------------------------------------
// Implementation details.

#if MEMCG_RSEQ_CS

// Offsets into the kernel's struct rseq (a stable ABI).
inline constexpr int kRseqCpuIdOffset = 4;
inline constexpr int kRseqCsOffset = 8;
static_assert(offsetof(struct rseq, cpu_id) == kRseqCpuIdOffset);
static_assert(offsetof(struct rseq, rseq_cs) == kRseqCsOffset);

// Each section below emits:
//  - its descriptor (version 0, flags 0, start address, length up to just after the commit
//    store, abort address) in section __rseq_cs, 32-byte aligned as the kernel requires, and its
//    address in __rseq_cs_ptr_array (where debuggers and checkers look for descriptors);
//  - the store of the descriptor's address into the thread's rseq_cs field, which arms it;
//  - the body, from the start label to the commit store, which is its last instruction;
//  - the abort handler in section __rseq_failure, preceded by the 4-byte signature (encoded as
//    the operand of an undefined instruction, so that the bytes never execute as code), which
//    jumps back to a C++ label.
// The kernel clears rseq_cs itself when it finds the thread outside the armed range, so nothing
// disarms it here. %= makes the labels unique for each emitted copy.
#define MEMCG_RSEQ_CS_PROLOGUE                   \
  ".pushsection __rseq_cs, \"aw\"\n\t"           \
  ".balign 32\n\t"                               \
  ".Lmemcg_cs_desc%=:\n\t"                       \
  ".long 0, 0\n\t"                               \
  ".quad .Lmemcg_cs_start%=, "                   \
  "(.Lmemcg_cs_end%= - .Lmemcg_cs_start%=), "    \
  ".Lmemcg_cs_abort%=\n\t"                       \
  ".popsection\n\t"                              \
  ".pushsection __rseq_cs_ptr_array, \"aw\"\n\t" \
  ".quad .Lmemcg_cs_desc%=\n\t"                  \
  ".popsection\n\t"                              \
  "leaq .Lmemcg_cs_desc%=(%%rip), %%rax\n\t"     \
  "movq %%rax, 8(%[rs])\n\t"                     \
  ".Lmemcg_cs_start%=:\n\t"                      \
  "cmpl %[cpu], 4(%[rs])\n\t"                    \
  "jnz %l[aborted]\n\t"

#define MEMCG_RSEQ_CS_EPILOGUE              \
  ".Lmemcg_cs_end%=:\n\t"                   \
  ".pushsection __rseq_failure, \"ax\"\n\t" \
  ".byte 0x0f, 0xb9, 0x3d\n\t"              \
  ".long 0x53053053\n\t"                    \
  ".Lmemcg_cs_abort%=:\n\t"                 \
  "jmp %l[aborted]\n\t"                     \
  ".popsection\n\t"

// Always inlined, even at -O0: an out-of-line copy would be a COMDAT function that the linker
// may discard in favour of another object's copy, leaving this object's __rseq_cs descriptor
// pointing into a discarded section (a link error).
__attribute__((always_inline)) inline CsResult cs_add_bounded(
    int cpu, const uint64_t* disabled, const void* const* owner_slot, const void* expected_owner,
    int64_t* count, int64_t delta, int64_t lo, int64_t hi) noexcept {
  struct rseq* rs = rseq_area();
  asm goto(MEMCG_RSEQ_CS_PROLOGUE
           "cmpq $0, (%[disabled])\n\t"
           "jnz %l[failed]\n\t"
           "cmpq %[expected], (%[owner])\n\t"
           "jnz %l[failed]\n\t"
           "movq (%[count]), %%rax\n\t"
           "addq %[delta], %%rax\n\t"
           "jo %l[failed]\n\t"
           "cmpq %[lo], %%rax\n\t"
           "jl %l[failed]\n\t"
           "cmpq %[hi], %%rax\n\t"
           "jg %l[failed]\n\t"
           "movq %%rax, (%[count])\n\t"  // commit
           MEMCG_RSEQ_CS_EPILOGUE
           :
           : [rs] "r"(rs), [cpu] "r"(cpu), [disabled] "r"(disabled), [owner] "r"(owner_slot),
             [expected] "r"(expected_owner), [count] "r"(count), [delta] "rm"(delta), [lo] "rm"(lo),
             [hi] "rm"(hi)
           : "rax", "memory", "cc"
           : failed, aborted);
  return CsResult::kOk;
failed:
  return CsResult::kCompareFailed;
aborted:
  return CsResult::kAborted;
}

// The field checks run on the value to be stored: a borrow out of the units byte (too few units)
// leaves it above `hi`, since every committed value has at most 127 units and |add| is at most
// 127 there, so one unsigned compare covers both ends. The count's range [-dmax, dmax] is one
// unsigned compare of count + dmax against 2 dmax.
__attribute__((always_inline)) inline CsResult cs_slot_update(
    int cpu, const uint64_t* disabled, const void* const* owner_slot, const void* expected_owner,
    uint64_t* word, uint64_t add, uint64_t mask, uint64_t expect, uint64_t hi,
    uint64_t dmax) noexcept {
  struct rseq* rs = rseq_area();
  const uint64_t dspan = 2 * dmax;
  asm goto(MEMCG_RSEQ_CS_PROLOGUE
           "cmpq $0, (%[disabled])\n\t"
           "jnz %l[failed]\n\t"
           "cmpq %[expected], (%[owner])\n\t"
           "jnz %l[failed]\n\t"
           "movq (%[word]), %%rax\n\t"
           "addq %[add], %%rax\n\t"
           "movq %%rax, %%rcx\n\t"
           "andq %[mask], %%rcx\n\t"
           "cmpq %[expect], %%rcx\n\t"
           "jnz %l[failed]\n\t"
           "movzbl %%al, %%ecx\n\t"
           "cmpq %[hi], %%rcx\n\t"
           "ja %l[failed]\n\t"
           "movq %%rax, %%rcx\n\t"
           "sarq $16, %%rcx\n\t"
           "addq %[dmax], %%rcx\n\t"
           "cmpq %[dspan], %%rcx\n\t"
           "ja %l[failed]\n\t"
           "movq %%rax, (%[word])\n\t"  // commit
           MEMCG_RSEQ_CS_EPILOGUE
           :
           : [rs] "r"(rs), [cpu] "r"(cpu), [disabled] "r"(disabled), [owner] "r"(owner_slot),
             [expected] "r"(expected_owner), [word] "r"(word), [add] "rm"(add), [mask] "rm"(mask),
             [expect] "rm"(expect), [hi] "rm"(hi), [dmax] "rm"(dmax), [dspan] "rm"(dspan)
           : "rax", "rcx", "memory", "cc"
           : failed, aborted);
  return CsResult::kOk;
failed:
  return CsResult::kCompareFailed;
aborted:
  return CsResult::kAborted;
}

__attribute__((always_inline)) inline CsResult cs_cmpeq_store_ptr(int cpu,
                                                                   const uint64_t* disabled,
                                                                   void** slot,
                                                                   const void* expected,
                                                                   void* newv) noexcept {
  struct rseq* rs = rseq_area();
  asm goto(MEMCG_RSEQ_CS_PROLOGUE
           "cmpq $0, (%[disabled])\n\t"
           "jnz %l[failed]\n\t"
           "cmpq %[expected], (%[slot])\n\t"
           "jnz %l[failed]\n\t"
           "movq %[newv], (%[slot])\n\t"  // commit
           MEMCG_RSEQ_CS_EPILOGUE
           :
           : [rs] "r"(rs), [cpu] "r"(cpu), [disabled] "r"(disabled), [slot] "r"(slot),
             [expected] "r"(expected), [newv] "r"(newv)
           : "rax", "memory", "cc"
           : failed, aborted);
  return CsResult::kOk;
failed:
  return CsResult::kCompareFailed;
aborted:
  return CsResult::kAborted;
}

// The sections below take their data as memory operands (the compiler forms base + index
// addressing) and store into the word operand: the "memory" clobber tells the compiler so.
__attribute__((always_inline)) inline CsResult cs_slot_add(
    struct rseq* rs, int cpu, const uint64_t& disabled, const void* const& owner_slot,
    const void* expected_owner, uint64_t& word, uint64_t add, uint32_t low_mask, uint32_t expect,
    const uint64_t& hi, const uint64_t& span) noexcept {
  asm goto(MEMCG_RSEQ_CS_PROLOGUE
           "cmpq $0, %[disabled]\n\t"
           "jnz %l[failed]\n\t"
           "cmpq %[expected], %[owner]\n\t"
           "jnz %l[failed]\n\t"
           "movq %[word], %%rax\n\t"
           "addq %[add], %%rax\n\t"
           "movl %%eax, %%ecx\n\t"
           "andl %[mask], %%ecx\n\t"
           "subl %[expect], %%ecx\n\t"
           "cmpq %[hi], %%rcx\n\t"
           "ja %l[failed]\n\t"
           "movq %%rax, %%rcx\n\t"
           "sarq $16, %%rcx\n\t"
           "addq %[hi], %%rcx\n\t"
           "cmpq %[span], %%rcx\n\t"
           "ja %l[failed]\n\t"
           "movq %%rax, %[word]\n\t"  // commit
           MEMCG_RSEQ_CS_EPILOGUE
           :
           : [rs] "r"(rs), [cpu] "r"(cpu), [disabled] "m"(disabled), [owner] "m"(owner_slot),
             [expected] "r"(expected_owner), [word] "m"(word), [add] "re"(add),
             [mask] "ri"(low_mask), [expect] "ri"(expect), [hi] "m"(hi), [span] "m"(span)
           : "rax", "rcx", "memory", "cc"
           : failed, aborted);
  return CsResult::kOk;
failed:
  return CsResult::kCompareFailed;
aborted:
  return CsResult::kAborted;
}

__attribute__((always_inline)) inline CsResult cs_add_floor(
    struct rseq* rs, int cpu, const uint64_t& disabled, const void* const& owner_slot,
    const void* expected_owner, int64_t& count, int64_t delta, int64_t lo) noexcept {
  asm goto(MEMCG_RSEQ_CS_PROLOGUE
           "cmpq $0, %[disabled]\n\t"
           "jnz %l[failed]\n\t"
           "cmpq %[expected], %[owner]\n\t"
           "jnz %l[failed]\n\t"
           "movq %[count], %%rax\n\t"
           "addq %[delta], %%rax\n\t"
           "cmpq %[lo], %%rax\n\t"
           "jl %l[failed]\n\t"
           "movq %%rax, %[count]\n\t"  // commit
           MEMCG_RSEQ_CS_EPILOGUE
           :
           : [rs] "r"(rs), [cpu] "r"(cpu), [disabled] "m"(disabled), [owner] "m"(owner_slot),
             [expected] "r"(expected_owner), [count] "m"(count), [delta] "re"(delta),
             [lo] "re"(lo)
           : "rax", "memory", "cc"
           : failed, aborted);
  return CsResult::kOk;
failed:
  return CsResult::kCompareFailed;
aborted:
  return CsResult::kAborted;
}

__attribute__((always_inline)) inline CsResult cs_add_ceil(
    struct rseq* rs, int cpu, const uint64_t& disabled, const void* const& owner_slot,
    const void* expected_owner, int64_t& count, int64_t delta, int64_t hi) noexcept {
  asm goto(MEMCG_RSEQ_CS_PROLOGUE
           "cmpq $0, %[disabled]\n\t"
           "jnz %l[failed]\n\t"
           "cmpq %[expected], %[owner]\n\t"
           "jnz %l[failed]\n\t"
           "movq %[count], %%rax\n\t"
           "addq %[delta], %%rax\n\t"
           "cmpq %[hi], %%rax\n\t"
           "jg %l[failed]\n\t"
           "movq %%rax, %[count]\n\t"  // commit
           MEMCG_RSEQ_CS_EPILOGUE
           :
           : [rs] "r"(rs), [cpu] "r"(cpu), [disabled] "m"(disabled), [owner] "m"(owner_slot),
             [expected] "r"(expected_owner), [count] "m"(count), [delta] "re"(delta),
             [hi] "re"(hi)
           : "rax", "memory", "cc"
           : failed, aborted);
  return CsResult::kOk;
failed:
  return CsResult::kCompareFailed;
aborted:
  return CsResult::kAborted;
}

#undef MEMCG_RSEQ_CS_PROLOGUE
#undef MEMCG_RSEQ_CS_EPILOGUE

#else  // !MEMCG_RSEQ_CS: no critical sections; callers never get here when rseq_mode() is false.

inline CsResult cs_add_bounded(int, const uint64_t*, const void* const*, const void*, int64_t*,
                               int64_t, int64_t, int64_t) noexcept {
  return CsResult::kAborted;
}
inline CsResult cs_cmpeq_store_ptr(int, const uint64_t*, void**, const void*, void*) noexcept {
  return CsResult::kAborted;
}
inline CsResult cs_slot_update(int, const uint64_t*, const void* const*, const void*, uint64_t*,
                               uint64_t, uint64_t, uint64_t, uint64_t, uint64_t) noexcept {
  return CsResult::kAborted;
}

inline CsResult cs_slot_add(struct rseq*, int, const uint64_t&, const void* const&, const void*,
                            uint64_t&, uint64_t, uint32_t, uint32_t, const uint64_t&,
                            const uint64_t&) noexcept {
  return CsResult::kAborted;
}
inline CsResult cs_add_floor(struct rseq*, int, const uint64_t&, const void* const&, const void*,
                             int64_t&, int64_t, int64_t) noexcept {
  return CsResult::kAborted;
}
inline CsResult cs_add_ceil(struct rseq*, int, const uint64_t&, const void* const&, const void*,
                            int64_t&, int64_t, int64_t) noexcept {
  return CsResult::kAborted;
}

#endif  // MEMCG_RSEQ_CS

}  // namespace memcg::internal

#endif  // MEMCG_INTERNAL_RSEQ_HPP_
