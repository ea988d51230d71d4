// The global operator new/delete hook: a separate library (CMake target memcg::hook, built
// without sanitizers only) that, once linked into a program, charges every allocation made by
// an attached thread (attach.hpp) to that thread's group.
//
// What it does: each block gets a 16-byte header in front of it (max(alignment, 16) bytes for
// over-aligned forms) recording the group charged and the bytes charged, which are
// malloc_usable_size() of the whole block (header included: what the process really spends).
// The charge goes through the object layer (obj_stock.hpp), so it is byte-exact and a few
// nanoseconds on a hit. operator delete reads the header and uncharges exactly that, from that
// group, whichever thread frees the block and whatever happened to the allocating thread since
// (moved, exited) or to the group (removed: it stays alive while it has charged bytes).
// Allocations by unattached threads, before attachment, during thread exit, and those the
// library makes for itself (while it charges, under any of its locks, and in its tree and file
// calls: internal/lock.hpp) are recorded as the root's and never uncharged, so an attached
// thread can create, remove, look up and read groups even when its own group is full. Memory that a
// memcg::MemoryResource or memcg::Allocator takes from upstream is not charged a second time.
//
// A refused charge (memory.max held, nothing reclaimable) makes operator new throw
// std::bad_alloc, or return null for the nothrow forms; the new-handler is not called for it.
// Inside a NoFailScope the charge is forced instead.
//
// Why a header rather than a side table: the header costs one cache line the allocator touches
// anyway and 16 bytes per block; a side table keyed by address would need a concurrent hash
// map probe on every free. Why not under sanitizers: ASan and TSan replace operator new/delete
// themselves (to poison, track and check every block) and a second replacement hides blocks
// from them, so the hook is neither built nor tested there.
//
// Hazard: a charge may reclaim, and reclaim calls the group's reclaimers. A thread must not
// allocate while holding a lock that one of its group's reclaimers takes (the reclaimer would
// wait for it forever); grow such structures from an unattached thread, or with set_flags()
// without kMayBlock.
//
// REQUIRES: every block charged to a controller's group is freed before the controller is
// destroyed, except the controller's own structures, which its destructor frees without
// uncharging (a process-wide controller that is never destroyed is the usual arrangement).
//
// Functions declared here are defined by memcg::hook; all are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memcg::hook {

// Bytes in front of every block (more for over-aligned forms: the alignment).
inline constexpr size_t kHeaderBytes = 16;

// The memory.stat item blocks allocated from now on are counted under (default
// StatRegistry::kAnon). Each block remembers its own. The setting is process-wide, while kinds
// are per controller: a block charged to a group whose controller has no such kind (kind >=
// Controller::stats().size()) is counted as StatRegistry::kAnon instead (checked at each
// charge, one compare). Returns false, changing nothing, for a kind outside 0 .. 255.
bool set_kind(int kind) noexcept;
int kind() noexcept;
// Charge flags of the hook's charges (default kDefaultCharge: reclaim before failing).
void set_flags(uint32_t flags) noexcept;
uint32_t flags() noexcept;
// What a block is charged: malloc_usable_size() of the whole block, header included (on, the
// default: what the heap really spends on it), or the requested size plus the header (off: a
// library call less per allocation, about 5 % of a malloc-heavy workload's time; the heap's own
// rounding and chunk headers are then not counted). Each block remembers what it was charged.
void set_charge_usable_size(bool on) noexcept;
// Allocations that failed because their charge was refused.
uint64_t failed_charges() noexcept;

}  // namespace memcg::hook
