// PageCache: one sqlite3_pcache of the Engine (SQLITE_CONFIG_PCACHE2), charged to a group, its
// unpinned pages an LRU that memcg's reclaim may free.
//
// A page is one malloc block: this file's Page header, SQLite's page buffer (szPage) and SQLite's
// extra (szExtra). Pages are found by key through a chained hash table; unpinned pages sit on an
// LRU list, oldest first. SQLite only unpins clean pages (dirty ones stay pinned until written),
// so any unpinned page may be freed at any time: by recycling, cache_size, xShrink, discard, or
// memcg's reclaim.
//
// Accounting (reclaim.hpp, contract 5): the cache keeps its byte total and holds
// ceil(total / unit) units of its group as `sqlite_cache`. A new page charges ceil(page / unit)
// units first, without the lock, then gives back the surplus of the rounded total; every removal
// gives back the difference of the rounded totals (uncharge_direct inside reclaim).
//
// Locking: `mu_` guards everything below it. It is never held while charging with reclaim
// allowed (a charge may call this very cache's reclaim) nor while calling SQLite or memcg
// callbacks; charges made under it run in an allocator-hook scope (counters only, never reclaim).
// The Engine's registry lock comes before it. The owner's calls (SQLite's, serialized by the
// connection) race only with reclaim() and the Engine's release for the heap.
#ifndef MEMCG_SRC_SQLITE_PAGE_CACHE_HPP_
#define MEMCG_SRC_SQLITE_PAGE_CACHE_HPP_

#include <sqlite3.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/sqlite/engine.hpp"

namespace memcg::sqlite::internal {

// Per-thread state of the component (engine.hpp, "Which group").
struct ThreadState {
  Group* scope = nullptr;               // innermost ConnectionScope
  Group* bind_target = nullptr;         // set by bind(): xShrink moves the cache there
};
inline thread_local ThreadState tl_state;

class PageCache final : public Reclaimer {
 public:
  struct Page;

  PageCache(Engine& engine, Group& group, int sz_page, int sz_extra, bool purgeable,
            bool by_default);
  ~PageCache() override;
  PageCache(const PageCache&) = delete;
  PageCache& operator=(const PageCache&) = delete;

  // xCreate: a cache of the calling thread's group (engine.hpp, "Which group"); null when no
  // Engine is installed or memory ran out.
  static PageCache* create(int sz_page, int sz_extra, bool purgeable) noexcept;
  // The pcache2 methods (sqlite3.h describes each).
  void set_cache_size(int pages) noexcept;
  int page_count() noexcept;
  sqlite3_pcache_page* fetch(unsigned key, int create) noexcept;
  void unpin(sqlite3_pcache_page* page, bool discard) noexcept;
  void rekey(sqlite3_pcache_page* page, unsigned old_key, unsigned new_key) noexcept;
  void truncate(unsigned limit) noexcept;
  void shrink() noexcept;
  // Frees every page and gives the charge back; unregisters first. Before delete.
  void destroy() noexcept;

  // Moves the cache and its charge to `to` (bind()). Never reclaims; may force `to` past
  // memory.max (counted, and left to the thread's next safe point).
  void move_to(Group& to) noexcept;
  // Frees up to `units` of unpinned pages (the Engine's release for the heap); returns the units
  // given back.
  int64_t release(int64_t units) noexcept;

  Group& group() const noexcept { return *group_; }
  bool by_default() const noexcept { return by_default_; }
  uint64_t pages() const noexcept { return nr_pages_pub_.load(std::memory_order_relaxed); }
  uint64_t bytes() const noexcept { return pages() * page_bytes_; }

  // Reclaimer
  int64_t reclaimable() const noexcept override {
    return lru_units_.load(std::memory_order_relaxed);
  }
  ReclaimResult reclaim(int64_t nr_to_scan, int priority) override;

 private:
  // REQUIRES mu_ for all of these.
  Page* lookup(unsigned key) const noexcept;
  void hash_insert(Page* p) noexcept;
  void hash_remove(Page* p) noexcept;
  void grow_hash() noexcept;
  void lru_remove(Page* p) noexcept;
  void lru_append(Page* p) noexcept;
  // Takes the oldest unpinned page off the LRU and the hash, for reuse or to free.
  Page* take_oldest() noexcept;
  // Frees `p` (already off the hash and LRU); surplus_units() then says what to uncharge.
  void free_page(Page* p) noexcept;
  // Sets up `p` as a new, pinned page under `key`.
  sqlite3_pcache_page* install(Page* p, unsigned key) noexcept;
  // Units held beyond ceil(bytes / unit), taken off units_: what to uncharge.
  int64_t surplus_units() noexcept;
  void publish() noexcept;
  // Registers on `group` when the cache is purgeable; an allocation failure leaves it unregistered.
  void register_reclaimer(Group& group) noexcept;

  Engine* const engine_;
  const int sz_page_;
  const int sz_extra_;
  const bool purgeable_;
  const uint64_t page_bytes_;
  const int64_t page_units_;  // ceil(page_bytes_ / unit): what a new page charges first
  const unsigned unit_shift_;

  mutable std::mutex mu_;
  GroupRef group_;           // guarded by mu_ for writes (move_to); read by the owner
  bool by_default_;          // the group came from the attachment or fallback, not a scope
  unsigned max_pages_ = 0;   // cache_size bound (purgeable caches)
  unsigned nr_pages_ = 0;
  unsigned nr_unpinned_ = 0;
  Page** buckets_ = nullptr;
  unsigned nr_buckets_ = 0;  // a power of two
  Page* lru_head_ = nullptr;  // oldest
  Page* lru_tail_ = nullptr;  // youngest
  int64_t bytes_ = 0;         // bytes of the pages
  int64_t units_ = 0;         // units charged to group_
  std::atomic<int64_t> lru_units_{0};
  std::atomic<uint64_t> nr_pages_pub_{0};

  ReclaimerRegistration registration_;  // last: see reclaim.hpp, contract 4
};

// SQLITE_CONFIG_PCACHE2's table.
extern const sqlite3_pcache_methods2 kPageCacheMethods;

}  // namespace memcg::sqlite::internal

#endif  // MEMCG_SRC_SQLITE_PAGE_CACHE_HPP_
