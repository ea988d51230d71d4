// memcg::sqlite: SQLite's page caches and heap charged to the tenants' groups.
//
// SQLite lets a host replace two things process-wide: the page cache (SQLITE_CONFIG_PCACHE2) and
// the heap (SQLITE_CONFIG_MALLOC). The Engine installs both:
//
//  - Page cache: every sqlite3_pcache SQLite creates (one per open database file of a connection)
//    is charged to a group, as `sqlite_cache` in memory.stat. Its unpinned pages form an LRU that
//    is a memcg Reclaimer, so memcg's reclaim takes them back under pressure, within the group's
//    memory.min/low. `PRAGMA cache_size` stays an upper bound. Past the group's room a fetch
//    recycles the cache's own oldest unpinned page instead of growing; with none left, a fetch
//    SQLite may retry (createFlag 1) returns NULL, so that SQLite spills a dirty page first, and
//    only SQLite's last resort (createFlag 2) is charged past memory.max, counted.
//  - Heap: sqlite3_malloc and friends charge the group of the calling thread (below), as
//    `sqlite_heap`, byte-exact through the object layer, with the size in a 16-byte header so
//    that every free uncharges exactly what was charged, from any thread, after any move. A
//    charge that does not fit takes room from the same group's own page caches, then from one
//    reclaim pass of the level that is full (memory.low/min holding), then is refused: SQLite
//    turns the NULL into SQLITE_NOMEM for that statement, and the database stays consistent.
//    Heap charges never sleep, throttle or wait for memory (SQLite holds its global memory mutex
//    around them); the rest of the ladder runs at the thread's next safe point. So reclaimers
//    registered by the application must not call SQLite (docs/sqlite.md).
//
// Which group: a connection's caches and the heap its calls allocate go, in this order, to
//  1. the group of the innermost ConnectionScope on the thread (Connection's own calls open one:
//     open, exec, close; a service opens one around its prepared statements);
//  2. the group the thread is attached to (attach.hpp), when it belongs to the Engine's controller;
//  3. the fallback group (EngineOptions::fallback; the root by default, where nothing is counted).
// bind() moves an open connection's caches to a group afterwards.
//
// Process-wide: sqlite3_config() works only before sqlite3_initialize() (or after
// sqlite3_shutdown()), so install() must run before any other use of SQLite in the process and at
// most one Engine exists at a time. A host that initialized SQLite first gets EBUSY with a
// sentence saying so (SQLite's SQLITE_MISUSE). ~Engine shuts SQLite down and restores its own
// page cache and malloc.
//
// Thread safety: every call may be made from any thread. SQLite calls the page cache from the
// connections' threads; memcg's reclaim calls it from any charging thread: each cache has its own
// lock, never held while a charge may reclaim nor while calling SQLite.
// Cost: docs/BENCHMARKS-sqlite.md (point reads and scans against SQLite's own pcache1 and malloc).
#ifndef MEMCG_SQLITE_ENGINE_HPP_
#define MEMCG_SQLITE_ENGINE_HPP_

#include <sqlite3.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"

namespace memcg::sqlite {

// memory.stat items of the component. Register them with add_stat_kinds() before creating the
// Controller; a controller without them counts the cache as `file` and the heap as `anon`.
inline constexpr const char* kCacheKindName = "sqlite_cache";
inline constexpr const char* kHeapKindName = "sqlite_heap";
// Appends kCacheKindName and kHeapKindName to options.stat_kinds (once).
void add_stat_kinds(Options& options);

struct EngineOptions {
  // Where the heap and caches go that no ConnectionScope or attachment names (SQLite's own
  // global state, connections used outside the component on unattached threads). Null: the
  // controller's root, whose charges are counted nowhere (as an unattached thread's).
  Group* fallback = nullptr;
  // Install SQLITE_CONFIG_PCACHE2 / SQLITE_CONFIG_MALLOC. Either may be left to SQLite.
  bool page_cache = true;
  bool heap = true;
};

// Figures of the whole engine (per group: memory.stat's sqlite_cache and sqlite_heap).
struct EngineStats {
  uint64_t caches = 0;          // live page caches
  uint64_t pages = 0;           // pages in them (pinned or not)
  uint64_t cache_bytes = 0;     // their bytes (header, page and SQLite's extra)
  uint64_t heap_refusals = 0;   // heap allocations refused (NULL to SQLite)
  uint64_t fetch_refusals = 0;  // xFetch createFlag 1 answered NULL at the group's limit
  uint64_t fetch_forced = 0;    // xFetch createFlag 2 charged past memory.max
  uint64_t recycled = 0;        // pages reused in place at cache_size or at the group's limit
  uint64_t reclaimed = 0;       // pages freed by memcg's reclaim
  uint64_t heap_cache_releases = 0;  // pages freed to make room for the same group's heap
};

namespace internal {
class PageCache;
}

class Engine {
 public:
  // Installs the page cache and/or heap of `options` into SQLite for `controller` (which must
  // outlive the Engine), then initializes SQLite (its global state is the fallback group's).
  // Errors, nothing changed, `error` (when given) set to a sentence:
  //   EBUSY   SQLite is initialized already in this process (sqlite3_config says SQLITE_MISUSE:
  //           install before any other SQLite call, or call sqlite3_shutdown() first), or
  //           another Engine is installed;
  //   EINVAL  the fallback group belongs to another controller or is removed;
  //   EIO     SQLite refused the configuration or its initialization otherwise.
  [[nodiscard]] static int install(Controller& controller, const EngineOptions& options,
                                   std::unique_ptr<Engine>* out, std::string* error = nullptr);
  // Shuts SQLite down and restores its default page cache and malloc.
  // REQUIRES: every connection of the process is closed (SQLite's own rule for
  // sqlite3_shutdown), and no thread uses SQLite meanwhile.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The installed Engine, or null.
  static Engine* current() noexcept;

  Controller& controller() const noexcept { return *controller_; }
  Group& fallback() const noexcept { return *fallback_; }
  int cache_kind() const noexcept { return cache_kind_; }
  int heap_kind() const noexcept { return heap_kind_; }
  EngineStats stats() const;
  // Bytes of page cache charged to `group` itself (its caches only, not its descendants').
  uint64_t cache_bytes(const Group& group) const;

  // Fault injection, as SQLite's own test harness fails its malloc: after `countdown` more heap
  // allocations succeed, the next one is refused (every one from then on when `persistent`).
  // countdown < 0 turns it off. Refusals count in heap_refusals.
  void set_heap_fault(int64_t countdown, bool persistent = false) noexcept;

 private:
  friend class internal::PageCache;
  friend struct HeapAccess;
  friend int bind(sqlite3* db, Group& group, std::string* error);
  Engine(Controller& controller, Group& fallback);

  // The group an allocation or a new cache of the calling thread goes to (the order above).
  Group& current_group() const noexcept;
  // Frees up to `units` of unpinned pages from `group`'s own caches; returns the units freed.
  int64_t release_cache(Group& group, int64_t units) noexcept;
  // The cache registry (by group), for release_cache and stats.
  void link(internal::PageCache* cache, Group* group) noexcept;
  void unlink(internal::PageCache* cache, Group* group) noexcept;
  // True when the injected fault refuses this allocation.
  bool heap_fault() noexcept;

  Controller* controller_;
  GroupRef fallback_;
  int cache_kind_;
  int heap_kind_;
  bool installed_ = false;
  bool page_cache_ = false;
  bool heap_ = false;
  sqlite3_mem_methods saved_malloc_{};
  sqlite3_pcache_methods2 saved_pcache_{};

  mutable std::mutex caches_mu_;  // before any cache's own lock; guards caches_
  std::unordered_map<const Group*, std::vector<internal::PageCache*>> caches_;

  std::atomic<int64_t> fault_countdown_{-1};
  std::atomic<bool> fault_persistent_{false};
  std::atomic<uint64_t> heap_refusals_{0};
  std::atomic<uint64_t> fetch_refusals_{0};
  std::atomic<uint64_t> fetch_forced_{0};
  std::atomic<uint64_t> recycled_{0};
  std::atomic<uint64_t> reclaimed_{0};
  std::atomic<uint64_t> heap_cache_releases_{0};
};

// Sets the group of the calling thread's SQLite work for a scope (rule 1 above): the heap it
// allocates and the caches SQLite creates meanwhile. Scopes nest; the previous one comes back at
// the end. REQUIRES: `group` outlives the scope (a Connection holds its group).
class ConnectionScope {
 public:
  explicit ConnectionScope(Group& group) noexcept;
  ~ConnectionScope();
  ConnectionScope(const ConnectionScope&) = delete;
  ConnectionScope& operator=(const ConnectionScope&) = delete;

 private:
  Group* previous_;
};

// Moves the page caches of the open connection `db` (main, temp and attached databases) to
// `group`: their pages are charged there (past memory.max if need be, counted as forced) and
// uncharged from where they were. The heap it allocated stays where it was charged. It runs
// sqlite3_db_release_memory(db), the one call through which SQLite names a connection's caches;
// during bind() that call frees nothing, the pages move. Errors: ENOENT (no Engine
// with a page cache installed, or `group` removed), EINVAL (null db, a group of another
// controller). REQUIRES: `db` is not closed meanwhile.
[[nodiscard]] int bind(sqlite3* db, Group& group, std::string* error = nullptr);

}  // namespace memcg::sqlite

#endif  // MEMCG_SQLITE_ENGINE_HPP_
