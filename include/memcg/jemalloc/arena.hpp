// memcg::jemalloc: whole-tenant accounting at page granularity. A group owns a jemalloc arena
// whose extent hooks charge the group when the arena commits pages and uncharge it when the
// arena gives them back; threads bound to the arena allocate from it with plain malloc/new at
// jemalloc's own cost (a thread-cache hit charges nothing). A separate library (CMake target
// memcg::jemalloc), built when jemalloc (pkg-config `jemalloc`, Debian libjemalloc-dev 5.3) is
// found and never under sanitizers: linking it makes jemalloc the process's malloc, and ASan /
// TSan replace malloc themselves.
//
// What is charged (memory.current, memory.stat under the arena's kind): the arena's committed
// pages, in bytes exactly (one unit per page at the default 4 KiB unit): pages holding live
// blocks (jemalloc's `active`), pages freed but not yet returned to the system (`dirty`), and
// the arena's own metadata blocks, which jemalloc asks for committed. Address space that the
// arena reserved but never committed (`retained`, the unused rest of a grown mapping) is not
// charged. The count equals jemalloc's `mapped` figure for the arena (stats.arenas.<i>.mapped),
// which counts the same extents; an arena starts with its first metadata block (2 MiB with
// Debian's build, mostly untouched) charged. Extent hooks and the charge path:
//
//   alloc       maps fresh anonymous memory. When jemalloc lets the hook choose (*commit false
//               on entry, the growth of the arena), the region is reported uncommitted and
//               nothing is charged: only the part jemalloc commits is. When jemalloc requires it
//               committed (its metadata; a fallback after the arena's growth failed), the whole
//               region is charged; a refused charge unmaps it and fails the allocation. The
//               arena's first metadata block, asked for while jemalloc holds its control lock
//               during Arena::create, is charged forced and without reclaim (a reclaimer's purge
//               would take that lock again): it can pass memory.max by that block.
//   commit      charges `length` bytes through the charge path's ladder (reclaim, drain,
//               retries; the OOM killer only for requests of at most 8 pages, the kernel's costly
//               order). A refused charge returns failure: jemalloc fails the allocation, malloc
//               returns null and operator new throws std::bad_alloc.
//   decommit    madvise(MADV_DONTNEED) on the range (the pages go back to the system and read
//               as zeros later), then uncharges `length` bytes (uncharge_direct: the counters
//               drop at once, as reclaim expects).
//   purge_lazy, purge_forced
//               refused. Purged-but-mapped pages would be reused by jemalloc without a hook
//               call, so a charge could never follow them back; with both purges refused,
//               jemalloc returns dirty pages by decommitting them instead, and calls commit
//               before it reuses them.
//   dalloc      refused while the arena lives (jemalloc keeps the range, decommitted, for reuse);
//               accepted once the arena is being destroyed: unmaps, and uncharges the range if
//               jemalloc says it is committed.
//   destroy     unmaps; uncharges the range if jemalloc says it is committed.
//   split, merge
//               allowed; they change no page's commit state, so no charge moves.
// Each committed page is thus charged exactly once (commit or committed alloc) and uncharged
// exactly once (decommit, committed dalloc or committed destroy).
//
// The count is what the arena holds of the machine's memory, not the bytes requested: size-class
// rounding, partly used slabs, and freed blocks whose pages jemalloc has not yet decayed (dirty
// pages, returned after `dirty_decay_ms`, 10 s by default) are in it. Under a limit, the arena's
// built-in reclaimer returns its dirty pages (arena.<i>.purge) before the charge fails. Not
// counted: blocks in threads' caches are counted as active by jemalloc, so a block of this
// arena freed into another thread's cache stays in this group's count until that cache is
// flushed, and may meanwhile be handed to that thread's allocations (jemalloc's thread caches
// are per thread, not per arena); the bound is the cache's capacity per thread.
//
// Binding a thread: ScopedArenaAttach attaches the thread to the arena's group (attach.hpp) and
// binds it to the arena (jemalloc's thread.arena), flushing the thread's cache on each change so
// that no cached block of the previous arena is handed out under the new group. A plain
// ScopedAttach changes the group that explicit charges go to but not the thread's arena. Do not
// link memcg::hook into the same program: the attachment would make it charge each block's bytes
// on top of its pages. Direct use without binding: ArenaResource (a std::pmr::memory_resource),
// or mallocx()/dallocx() with Arena::mallocx_flags(). A block goes back to its own arena whoever
// frees it.
//
// Lifetime: an Arena holds a reference to its group. Destroying the Arena unregisters its
// reclaimer; the jemalloc arena (and with it the group reference) is destroyed when it holds no
// block any more: at once when already empty, else later by collect_released() (called by every
// Arena creation and destruction). Until then the group, even removed, stays charged and counted
// in its ancestors for the arena's pages, as a removed cgroup with page cache does.
//
// Lock rules (docs/ARCHITECTURE.md): a charge from the hooks may reclaim and sleep; jemalloc
// may hold its arena's growth lock meanwhile, so other threads growing the same arena wait.
// While the library holds one of its locks on the thread (internal/lock.hpp), a commit is charged
// without reclaim and forced (it can neither recurse into the library nor fail the library's own
// allocation). Allocations made inside the hooks (by the charge path) are served by jemalloc's
// arena 0 and charged to nobody.
//
// What a bound thread allocates is in its arena, the library's own structures included (a group
// it creates, a string a file read returns): they count in the tenant's pages like any block, and
// an arena cannot be destroyed while one of them lives. Create and remove groups from threads
// that are not bound where that matters.
//
// Compilers: GCC treats malloc as a function that reads no program state, so thread-local state
// set around a bare malloc call (a NoFailScope, for one) may be moved past it or dropped; the
// state set by ScopedArenaAttach goes through calls into jemalloc and is not affected. Open a
// NoFailScope around operator new (or an opaque call) rather than around a bare malloc.
//
// REQUIRES: the controller's unit is at most jemalloc's page (4 KiB with Debian's build), so that
// every hook range is a whole number of units. Every thread's ScopedArenaAttach ends before the
// Arena is destroyed, and no mallocx() with its flags runs after that. The controller outlives
// its arenas' jemalloc arenas (free the blocks and call collect_released() before destroying it).
//
// All functions are thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <string>

#include "memcg/core/attach.hpp"
#include "memcg/core/charge.hpp"
#include "memcg/core/group.hpp"

namespace memcg::jemalloc {

// The memory.stat kind that Options::kind selects by default: the controller's application kind
// of this name if it registered one (Options::stat_kinds), else `anon`.
inline constexpr const char* kArenaKindName = "arena";
inline constexpr int kAutoKind = -2;

struct ArenaOptions {
  // memory.stat item the pages are counted under: kAutoKind, or a StatRegistry index of the
  // group's controller.
  int kind = kAutoKind;
  // Flags of the page charges (charge.hpp). kMayBlock (the default): reclaim, throttle at
  // memory.high and run the OOM ladder before failing. A NoFailScope open on the allocating
  // thread forces the charge instead of failing.
  uint32_t charge_flags = kDefaultCharge;
  // jemalloc's arena.<i>.dirty_decay_ms for this arena: -1 never decays, 0 returns freed pages
  // at once; kKeepDefault keeps jemalloc's setting (opt.dirty_decay_ms).
  static constexpr int64_t kKeepDefault = INT64_MIN;
  int64_t dirty_decay_ms = kKeepDefault;
  // jemalloc arenas for this group, 1..kMaxArenas, all charging it. Threads bound with
  // ScopedArenaAttach are spread over them in turn: several busy threads of one tenant then do
  // not contend on one arena's locks (docs/BENCHMARKS-alloc.md: up to +25 % for two threads
  // sharing one arena on the map workload). Each arena costs its own metadata block.
  static constexpr int kMaxArenas = 64;
  int nr_arenas = 1;
};

// jemalloc's own figures for a group's arenas (mallctl stats.arenas.<i>.*, refreshed by the read,
// summed over the arenas), in bytes, next to what the hooks charged.
struct ArenaStats {
  uint64_t charged = 0;   // committed bytes the hooks charged and have not uncharged
  uint64_t active = 0;    // pages of live blocks (pactive x page)
  uint64_t dirty = 0;     // freed pages not returned yet (pdirty x page)
  uint64_t muzzy = 0;     // lazily purged pages (pmuzzy x page; 0: lazy purge is refused)
  uint64_t mapped = 0;    // mapped bytes (active extents and metadata)
  uint64_t retained = 0;  // address space kept for reuse, decommitted or never committed
  uint64_t metadata = 0;  // the arena's own metadata (stats.arenas.<i>.base)
  uint64_t resident = 0;  // jemalloc's upper estimate of resident bytes
  uint64_t commits = 0;           // commit hook calls that charged
  uint64_t decommits = 0;         // decommit hook calls
  uint64_t failed_charges = 0;    // commits (and committed allocs) refused
};

class Arena {
 public:
  // Creates a jemalloc arena with the group's hooks and registers its reclaimer on the group.
  // Errors, changing nothing: EINVAL for the root group, a kind that is not the controller's, a
  // controller unit larger than jemalloc's page, or an option out of range; ENOENT for an offline
  // group; EAGAIN when jemalloc refuses a new arena (its limit of arenas, or no memory).
  static int create(Group& group, std::unique_ptr<Arena>* out, const ArenaOptions& options = {});

  // Unregisters the reclaimer and releases the jemalloc arena (see Lifetime above).
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  Group& group() const noexcept;
  // jemalloc's index of the (first) arena (for mallctl arena.<i>.*, stats.arenas.<i>.*).
  unsigned index() const noexcept;
  // The arenas of this group (ArenaOptions::nr_arenas): their number, the i-th's index
  // (UINT32_MAX out of range), and whether jemalloc's arena `index` is one of them.
  int nr_arenas() const noexcept;
  unsigned index(int i) const noexcept;
  bool owns(unsigned index) const noexcept;
  // The arena the next bound thread gets (round robin over the group's arenas).
  unsigned next_index() noexcept;
  int kind() const noexcept;
  // MALLOCX_ARENA(index()) | MALLOCX_TCACHE_NONE: "allocate this in the group's arena" with
  // mallocx(size, flags); free with free() or dallocx().
  int mallocx_flags() const noexcept;
  // Bytes the hooks charged and have not uncharged (no mallctl: one load).
  uint64_t charged_bytes() const noexcept;
  // Returns the arenas' dirty pages to the system now (arena.<i>.purge); returns the bytes
  // uncharged. What the built-in reclaimer does.
  uint64_t purge() noexcept;
  // jemalloc's per-arena statistics (refreshes jemalloc's statistics epoch: a few µs).
  ArenaStats stats() const noexcept;
  // The same as lines "name bytes", in memory.stat's format: charged, active, dirty, muzzy,
  // mapped, retained, metadata, resident.
  std::string format_stats() const;

  struct State;  // shared with the hooks; outlives the Arena while jemalloc's arena has blocks

 private:
  Arena() = default;
  struct Registration;  // the states and the reclaimer over them
  std::unique_ptr<Registration> states_;
  std::atomic<unsigned> next_{0};
};

// Destroys the jemalloc arenas of destroyed Arena handles that hold no block any more (after
// purging them), dropping their group references. Returns how many remain held by live blocks.
// Blocks freed into other threads' caches keep an arena alive until those caches are flushed
// (thread exit, or mallctl thread.tcache.flush on that thread).
size_t collect_released() noexcept;

// Attaches the calling thread to the arena's group (like ScopedAttach) and binds it to the
// arena, for the scope; restores the previous group and arena at its end. Each change flushes the
// thread's cache. ok() is false, nothing changed, when the group is offline.
class ScopedArenaAttach {
 public:
  explicit ScopedArenaAttach(Arena& arena) noexcept;
  ~ScopedArenaAttach();
  ScopedArenaAttach(const ScopedArenaAttach&) = delete;
  ScopedArenaAttach& operator=(const ScopedArenaAttach&) = delete;
  bool ok() const noexcept { return bound_; }

 private:
  ScopedAttach attach_;
  unsigned previous_arena_ = 0;
  bool bound_ = false;
};

// The jemalloc arena index the calling thread allocates from (thread.arena).
unsigned current_thread_arena() noexcept;
// Returns the blocks cached by the calling thread to their arenas (thread.tcache.flush).
void flush_thread_cache() noexcept;
// The arena index holding the block `p` (arenas.lookup); UINT32_MAX when jemalloc does not know
// it.
unsigned arena_of(const void* p) noexcept;

// A std::pmr::memory_resource allocating in an arena without binding any thread: mallocx with
// the arena's flags (no thread cache), so each block is taken from and returned to that arena.
// A refused charge throws std::bad_alloc. REQUIRES: the Arena outlives the resource's
// allocations (not its blocks: a block may be freed after the Arena is destroyed).
class ArenaResource final : public std::pmr::memory_resource {
 public:
  explicit ArenaResource(Arena& arena) noexcept : flags_(arena.mallocx_flags()) {}

 private:
  void* do_allocate(size_t bytes, size_t alignment) override;
  void do_deallocate(void* p, size_t bytes, size_t alignment) override;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override;
  int flags_;
};

}  // namespace memcg::jemalloc
