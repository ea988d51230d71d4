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
//               during Arena::create, is charged forced: it can pass memory.max by that block.
//   commit      charges `length` bytes, counters only (see "Safe points"). Refused (kRefuse):
//               returns failure, jemalloc fails the allocation, malloc returns null and operator
//               new throws std::bad_alloc. Never-fail: forced past memory.max and counted.
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
// built-in reclaimer returns its dirty pages (arena.<i>.purge) at the next safe point. Not
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
// on top of its pages (both replace operator new). Direct use without binding: ArenaResource
// (a std::pmr::memory_resource), or mallocx()/dallocx() with Arena::mallocx_flags(). A block goes
// back to its own arena whoever frees it.
//
// Lifetime: an Arena holds a reference to its group. Destroying the Arena unregisters its
// reclaimer; the jemalloc arena (and with it the group reference) is destroyed when it holds no
// block any more: at once when already empty, else later by collect_released(), which every
// Arena creation and destruction calls and a collector thread of this component calls every
// 100 ms while released arenas with live blocks remain. Until then the group, even removed,
// stays charged and counted in its ancestors for the arena's pages, as a removed cgroup with page
// cache does.
//
// Safe points (docs/jemalloc.md). jemalloc calls the hooks with its locks held (the arena's
// growth mutex through commit, the decay mutex through decommit), so nothing in a hook blocks:
// no reclaim, sleep, OOM kill, callback, notification or library lock. A hook charge takes the
// page counters or is refused / forced (core/internal/alloc_hook.hpp), and leaves a per-thread
// record; an uncharge leaves the wake of waiting charges to it. The thread's next safe point
// runs the record outside jemalloc, on jemalloc's arena 0: the `max` event, reclaim of the group
// (this arena's purge included), the stock drain, the OOM decision, the memory.high throttle and
// the wake. Safe points: this component's global operator new and delete (after jemalloc
// returned), ScopedArenaAttach construction and end, ArenaResource calls, every charge slow path
// outside a hook, and safe_point(). A refused allocation counts one failure and runs one ladder
// whatever jemalloc retries underneath (a refused commit is followed by an alloc hook call for a
// fresh committed region). Kill callbacks therefore never run inside jemalloc: oom.hpp's
// pattern (cancel the victim's work, join its worker) holds for workers bound to the arena.
//
// What never-fail bounds, and what it does not. A refused commit would crash code that cannot
// take a failure, so under kNeverFail a commit past memory.max is forced and the limit is
// enforced afterwards, at the thread's next safe point, by the ladder (reclaim, then the OOM
// decision). Per safe point: a thread takes past memory.max, before its next safe point runs
// the ladder, at most the pages of the allocations it makes meanwhile plus kNeverFailSlackBytes
// (one jemalloc metadata block); for C++ code that is one allocation (operator new is a safe
// point), and a C loop calling malloc gets the same by calling safe_point() between items.
// Over time there is no bound: when the ladder cannot bring the group back (nothing reclaimable
// and no OOM victim, or a victim that does not unwind), every later forced commit adds to the
// overshoot, and the group grows at the rate its threads allocate for as long as that lasts.
// memory.max is then held only by the OOM killer (give the group killable members) or by
// kRefuse. A pass that ends with the group still over memory.max pauses the group's ladder for
// forced charges, on every thread, for kStalledLadderBackoffNs (safe_point.hpp; the ladder acts
// on the group, so a second thread's pass would find the same held memory and take a second OOM
// decision for one overshoot): safe points within the pause run nothing, refusals are not
// paused, and the OOM policy runs again at the first safe point after it. Reported:
// ArenaStats::forced and the memory.stat item kArenaForcedKindName when registered (forced
// bytes, below), ChargeCounters::forced (forced charges, one per hook call), and a `max` event
// per ladder pass: a group whose forced bytes keep growing is one the limit does not hold.
//
// Forced bytes measure the overshoot, not the traffic: a forced charge adds the part of it that
// puts the group further past memory.max (at the level furthest past its limit) than this
// arena's forced charges had put it since the group last took one of the arena's charges within
// its limit. One excursion past the limit therefore adds its peak overshoot, and pages that
// reclaim purged and jemalloc committed again while the group stayed over the limit add nothing
// (counting every forced commit gave 2.3 GiB for a 116 MiB peak). Per arena: the arenas of one
// Arena (ArenaOptions::nr_arenas) each count their own.
//
// While the library holds one of its locks on the thread (internal/lock.hpp), a commit is forced
// whatever the failure model (the library's own allocation cannot fail). Allocations made inside
// the hooks are served by jemalloc's arena 0 and charged to nobody.
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
// Idle memory: with ArenaOptions::background_purge, the freed pages of an arena that no longer
// allocates are uncharged within kIdleDecayFactor x dirty_decay_ms + kIdleSlackMs.
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

#include "memcg/core/charge/attach.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/group.hpp"
#include "memcg/core/charge/safe_point.hpp"

namespace memcg::jemalloc {

// The memory.stat kind that Options::kind selects by default: the controller's application kind
// of this name if it registered one (Options::stat_kinds), else `anon`.
inline constexpr const char* kArenaKindName = "arena";
inline constexpr int kAutoKind = -2;
// The memory.stat item that counts the bytes the hooks forced past memory.max (never-fail
// arenas, and charges under library locks; the overshoot, as defined in "Safe points" above),
// when the controller registered an application kind of this name (an event kind: it only
// grows). ArenaStats::forced has the same figure per arena.
inline constexpr const char* kArenaForcedKindName = "arena_forced";

// The most a never-fail thread takes past max(memory.max, the group's usage at its previous safe
// point) beyond the pages of the allocations it makes between two safe points: one jemalloc
// metadata block those allocations may need (arena.hpp, "Safe points").
inline constexpr uint64_t kNeverFailSlackBytes = 2u << 20;
// With ArenaOptions::background_purge, the freed pages of an arena that allocates no more are
// uncharged within kIdleDecayFactor x dirty_decay_ms + kIdleSlackMs: jemalloc decays along a
// smooth curve over dirty_decay_ms and its purge threads sleep between passes (measured on
// this VM: 0.4 s at 200 ms, 2.7 s at 1 s, 8.1 s at 3 s). At jemalloc's default of 10 s: 31 s.
inline constexpr int64_t kIdleDecayFactor = 3;
inline constexpr int64_t kIdleSlackMs = 1000;

// What an allocation does when its pages do not fit under memory.max (arena.hpp, "Failure
// model").
enum class ArenaFailure : uint8_t {
  // The allocation fails: malloc returns null, operator new throws std::bad_alloc. The ladder
  // (reclaim, OOM decision) runs at the thread's next safe point, for the allocations after it.
  kRefuse,
  // The allocation never fails: the pages are charged past memory.max and counted (forced); the
  // next safe point reclaims until the group is back under memory.max and applies the OOM policy
  // when reclaim cannot get there.
  kNeverFail,
};

struct ArenaOptions {
  // The default is never-fail because the threads bound to an arena usually run code the
  // application does not own (a storage engine, a parser, the C++ library), and such code takes
  // a null from malloc or a bad_alloc as fatal or, worse, as a corrupted state: RocksDB crashes
  // on a null in its block cache and hangs its write path after a bad_alloc. Pick kRefuse for an
  // arena used only by code written to handle failure (ArenaResource users, own containers).
  ArenaFailure failure = ArenaFailure::kNeverFail;
  // memory.stat item the pages are counted under: kAutoKind, or a StatRegistry index of the
  // group's controller.
  int kind = kAutoKind;
  // Flags of the deferred ladder (charge.hpp): kRetryMayFail runs no OOM killer for a refused
  // allocation, kNoRetry reclaims once. A NoFailScope open on the allocating thread forces the
  // charge of a kRefuse arena instead of refusing it.
  uint32_t charge_flags = kDefaultCharge;
  // Start jemalloc's background purge threads (mallctl background_thread, process-wide, once),
  // so that freed pages of an arena that no longer allocates are returned on time (arena.hpp,
  // "Idle memory"). Without them jemalloc decays an arena only when it allocates again.
  bool background_purge = true;
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
  uint64_t failed_charges = 0;    // allocations refused (once per safe-point interval)
  uint64_t forced = 0;            // overshoot past memory.max, summed over excursions (above)
};

class Arena {
 public:
  // Creates a jemalloc arena with the group's hooks and registers its reclaimer on the group.
  // Errors, changing nothing: EINVAL for the root group, a kind that is not the controller's, a
  // controller unit larger than jemalloc's page, or an option out of range; ENOENT for an offline
  // group; EAGAIN when jemalloc refuses a new arena (its limit of arenas, or no memory);
  // ENOTSUP when jemalloc is not the allocator serving malloc in this process (another
  // allocator preloaded, a sanitizer): bound threads would charge nothing.
  [[nodiscard]] static int create(Group& group, std::unique_ptr<Arena>* out,
                                  const ArenaOptions& options = {});

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

// A safe point (memcg/core/charge/safe_point.hpp) for threads bound to an arena: runs what this thread's
// hook charges left (the ladder of a refused or forced allocation, the memory.high throttle, the
// wake of waiting charges). A long-running loop that allocates with plain malloc calls it between
// items; operator new and delete and ScopedArenaAttach call it on their own. Returns true if
// anything was pending.
bool safe_point() noexcept;

// Whether jemalloc serves malloc in this process (what Arena::create checks).
bool jemalloc_serves_malloc() noexcept;

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
