#include "page_cache.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/charge/internal/alloc_hook.hpp"

namespace memcg::sqlite::internal {

struct PageCache::Page {
  sqlite3_pcache_page base;  // first: SQLite's handle is the page's address
  unsigned key;
  bool pinned;
  Page* hash_next;
  Page* lru_prev;
  Page* lru_next;
};
static_assert(sizeof(PageCache::Page) % 8 == 0, "SQLite's buffer follows the header, 8-aligned");

namespace {
constexpr unsigned kFirstBuckets = 64;
// Charge flags of a new page. createFlag 1: one reclaim pass, no OOM, never forced, so SQLite
// spills a dirty page before asking harder. createFlag 2 tries the same first (then recycles,
// then forces: PageCache::fetch).
constexpr uint32_t kPageCharge = kMayBlock | kNoRetry | kRetryMayFail;
}  // namespace

PageCache::PageCache(Engine& engine, Group& group, int sz_page, int sz_extra, bool purgeable,
                     bool by_default)
    : engine_(&engine),
      sz_page_(sz_page),
      sz_extra_(sz_extra),
      purgeable_(purgeable),
      page_bytes_(sizeof(Page) + static_cast<uint64_t>(sz_page) + static_cast<uint64_t>(sz_extra)),
      page_units_(group.controller().to_units_ceil(page_bytes_)),
      unit_shift_(group.controller().unit_shift()),
      group_(&group),
      by_default_(by_default) {
  // Only purgeable caches have pages memcg may take: an in-memory database's pages are its data.
  // First, as it may throw (PageCache::create turns that into NULL): nothing is linked yet.
  if (purgeable_) registration_ = ReclaimerRegistration(group, *this);
  engine_->link(this, &group);
}

PageCache::~PageCache() = default;

PageCache* PageCache::create(int sz_page, int sz_extra, bool purgeable) noexcept {
  Engine* engine = Engine::current();
  if (engine == nullptr || sz_page <= 0 || sz_extra < 0) return nullptr;
  const bool scoped = tl_state.scope != nullptr &&
                      &tl_state.scope->controller() == &engine->controller();
  Group& group = engine->current_group();
  try {
    return new PageCache(*engine, group, sz_page, sz_extra, purgeable, !scoped);
  } catch (...) {  // std::bad_alloc (the registry, the registration): SQLITE_NOMEM at open
    return nullptr;
  }
}

// ---- the hash table and the LRU (REQUIRES mu_) ------------------------------------------------

PageCache::Page* PageCache::lookup(unsigned key) const noexcept {
  if (nr_buckets_ == 0) return nullptr;
  for (Page* p = buckets_[key & (nr_buckets_ - 1)]; p != nullptr; p = p->hash_next)
    if (p->key == key) return p;
  return nullptr;
}

void PageCache::hash_insert(Page* p) noexcept {
  Page** b = &buckets_[p->key & (nr_buckets_ - 1)];
  p->hash_next = *b;
  *b = p;
}

void PageCache::hash_remove(Page* p) noexcept {
  Page** b = &buckets_[p->key & (nr_buckets_ - 1)];
  while (*b != p) b = &(*b)->hash_next;
  *b = p->hash_next;
}

void PageCache::grow_hash() noexcept {
  const unsigned n = nr_buckets_ == 0 ? kFirstBuckets : nr_buckets_ * 2;
  if (n < nr_buckets_) return;
  // calloc, not new: nothing under mu_ may reach an allocator hook that charges.
  auto** fresh = static_cast<Page**>(std::calloc(n, sizeof(Page*)));
  if (fresh == nullptr) return;  // longer chains, still correct
  for (unsigned i = 0; i < nr_buckets_; ++i) {
    for (Page* p = buckets_[i]; p != nullptr;) {
      Page* next = p->hash_next;
      p->hash_next = fresh[p->key & (n - 1)];
      fresh[p->key & (n - 1)] = p;
      p = next;
    }
  }
  std::free(buckets_);
  buckets_ = fresh;
  nr_buckets_ = n;
}

void PageCache::lru_remove(Page* p) noexcept {
  (p->lru_prev ? p->lru_prev->lru_next : lru_head_) = p->lru_next;
  (p->lru_next ? p->lru_next->lru_prev : lru_tail_) = p->lru_prev;
  p->lru_prev = p->lru_next = nullptr;
  --nr_unpinned_;
}

void PageCache::lru_append(Page* p) noexcept {
  p->lru_next = nullptr;
  p->lru_prev = lru_tail_;
  (lru_tail_ ? lru_tail_->lru_next : lru_head_) = p;
  lru_tail_ = p;
  ++nr_unpinned_;
}

PageCache::Page* PageCache::take_oldest() noexcept {
  Page* p = lru_head_;
  if (p == nullptr) return nullptr;
  lru_remove(p);
  hash_remove(p);
  --nr_pages_;
  return p;
}

void PageCache::free_page(Page* p) noexcept {
  std::free(p);
  bytes_ -= static_cast<int64_t>(page_bytes_);
}

sqlite3_pcache_page* PageCache::install(Page* p, unsigned key) noexcept {
  p->key = key;
  p->pinned = true;
  p->lru_prev = p->lru_next = nullptr;
  p->base.pBuf = reinterpret_cast<char*>(p + 1);
  p->base.pExtra = reinterpret_cast<char*>(p + 1) + sz_page_;
  // SQLite tells a new page by a zero at the start of its extra (PgHdr::pPage); all of it is
  // cleared, as cheap as the check.
  std::memset(p->base.pExtra, 0, static_cast<size_t>(sz_extra_));
  hash_insert(p);
  ++nr_pages_;
  return &p->base;
}

int64_t PageCache::surplus_units() noexcept {
  const int64_t unit_mask = (int64_t{1} << unit_shift_) - 1;
  const int64_t need = (bytes_ + unit_mask) >> unit_shift_;
  const int64_t surplus = units_ - need;
  units_ = need;
  return surplus;
}

void PageCache::publish() noexcept {
  const int64_t unit_mask = (int64_t{1} << unit_shift_) - 1;
  // Relaxed: estimates for the reclaim driver and the stats; a stale one sizes one request.
  lru_units_.store(purgeable_ ? (static_cast<int64_t>(nr_unpinned_ * page_bytes_) + unit_mask) >>
                                    unit_shift_
                              : 0,
                   std::memory_order_relaxed);
  nr_pages_pub_.store(nr_pages_, std::memory_order_relaxed);
}

// ---- the pcache2 methods ----------------------------------------------------------------------

void PageCache::set_cache_size(int pages) noexcept {
  Group* g;
  int64_t surplus = 0;
  {
    std::lock_guard lock(mu_);
    max_pages_ = pages > 0 ? static_cast<unsigned>(pages) : 0;
    g = group_.get();
    if (purgeable_) {
      while (nr_pages_ > max_pages_ && lru_head_ != nullptr) free_page(take_oldest());
      surplus = surplus_units();
    }
    publish();
  }
  if (surplus > 0) uncharge(*g, surplus, engine_->cache_kind_);
}

int PageCache::page_count() noexcept {
  std::lock_guard lock(mu_);
  return static_cast<int>(nr_pages_);
}

sqlite3_pcache_page* PageCache::fetch(unsigned key, int create) noexcept {
  Group* g;
  {
    std::lock_guard lock(mu_);
    // Hot path: the page is cached.
    if (Page* p = lookup(key)) [[likely]] {
      if (!p->pinned) {
        if (purgeable_) lru_remove(p);
        else --nr_unpinned_;
        p->pinned = true;
        publish();
      }
      return &p->base;
    }
    if (create == 0) return nullptr;
    g = group_.get();
    if (purgeable_ && nr_pages_ >= max_pages_) {
      // cache_size is the bound: reuse the oldest unpinned page, as pcache1 does.
      if (Page* old = take_oldest()) {
        engine_->recycled_.fetch_add(1, std::memory_order_relaxed);
        sqlite3_pcache_page* page = install(old, key);
        publish();
        return page;
      }
      // Every page pinned: let SQLite spill a dirty page before it insists.
      if (create == 1) return nullptr;
    }
  }
  // Slow path: a new page. Charged with mu_ released, since the charge may reclaim from here.
  const int kind = engine_->cache_kind_;
  if (!charged(try_charge(*g, page_units_, kPageCharge, kind))) {
    {
      std::lock_guard lock(mu_);
      // The group has no room: our own oldest unpinned page first.
      if (purgeable_) {
        if (Page* old = take_oldest()) {
          engine_->recycled_.fetch_add(1, std::memory_order_relaxed);
          sqlite3_pcache_page* page = install(old, key);
          publish();
          return page;
        }
      }
    }
    if (create == 1 || !purgeable_) {
      // SQLite spills and asks again with 2; an in-memory database gets SQLITE_NOMEM.
      engine_->fetch_refusals_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    // createFlag 2 is SQLite's last resort: charged past memory.max, counted; the thread's next
    // safe point reclaims for it.
    memcg::internal::AllocHookScope no_reclaim;
    if (!charged(try_charge(*g, page_units_, kNoFail | kNoSpin, kind))) return nullptr;
    engine_->fetch_forced_.fetch_add(1, std::memory_order_relaxed);
  }
  auto* p = static_cast<Page*>(std::malloc(page_bytes_));
  int64_t surplus = page_units_;  // given back whole if the page cannot be added
  sqlite3_pcache_page* page = nullptr;
  if (p != nullptr) {
    std::lock_guard lock(mu_);
    if (nr_pages_ >= nr_buckets_) grow_hash();
    if (nr_buckets_ != 0) {
      page = install(p, key);
      bytes_ += static_cast<int64_t>(page_bytes_);
      units_ += page_units_;
      surplus = surplus_units();
      publish();
    }
  }
  if (page == nullptr) std::free(p);
  if (surplus > 0) uncharge(*g, surplus, kind);
  return page;
}

void PageCache::unpin(sqlite3_pcache_page* page, bool discard) noexcept {
  auto* p = reinterpret_cast<Page*>(page);
  Group* g;
  int64_t surplus = 0;
  {
    std::lock_guard lock(mu_);
    g = group_.get();
    if (discard) {
      hash_remove(p);
      --nr_pages_;
      free_page(p);
    } else {
      p->pinned = false;
      if (purgeable_) {
        lru_append(p);
        // Over cache_size (lowered while pages were pinned): back to the bound.
        while (nr_pages_ > max_pages_ && lru_head_ != nullptr) free_page(take_oldest());
      } else {
        ++nr_unpinned_;
      }
    }
    surplus = surplus_units();
    publish();
  }
  if (surplus > 0) uncharge(*g, surplus, engine_->cache_kind_);
}

void PageCache::rekey(sqlite3_pcache_page* page, unsigned old_key, unsigned new_key) noexcept {
  auto* p = reinterpret_cast<Page*>(page);
  Group* g;
  int64_t surplus = 0;
  {
    std::lock_guard lock(mu_);
    g = group_.get();
    (void)old_key;  // p->key
    // SQLite guarantees that a page already under new_key is not pinned: it is discarded.
    if (Page* other = lookup(new_key); other != nullptr && other != p) {
      if (!other->pinned) {
        if (purgeable_) lru_remove(other);
        else --nr_unpinned_;
      }
      hash_remove(other);
      --nr_pages_;
      free_page(other);
    }
    hash_remove(p);
    p->key = new_key;
    hash_insert(p);
    surplus = surplus_units();
    publish();
  }
  if (surplus > 0) uncharge(*g, surplus, engine_->cache_kind_);
}

void PageCache::truncate(unsigned limit) noexcept {
  Group* g;
  int64_t surplus = 0;
  {
    std::lock_guard lock(mu_);
    g = group_.get();
    for (unsigned i = 0; i < nr_buckets_; ++i) {
      for (Page** pp = &buckets_[i]; *pp != nullptr;) {
        Page* p = *pp;
        if (p->key < limit) {
          pp = &p->hash_next;
          continue;
        }
        // Pinned pages at or past the limit are unpinned implicitly (sqlite3.h).
        if (!p->pinned) {
          if (purgeable_) lru_remove(p);
          else --nr_unpinned_;
        }
        *pp = p->hash_next;
        --nr_pages_;
        free_page(p);
      }
    }
    surplus = surplus_units();
    publish();
  }
  if (surplus > 0) uncharge(*g, surplus, engine_->cache_kind_);
}

void PageCache::shrink() noexcept {
  if (Group* to = tl_state.bind_target) {
    move_to(*to);
    return;
  }
  Group* g;
  int64_t surplus = 0;
  {
    std::lock_guard lock(mu_);
    g = group_.get();
    if (purgeable_)
      while (lru_head_ != nullptr) free_page(take_oldest());
    surplus = surplus_units();
    publish();
  }
  if (surplus > 0) uncharge(*g, surplus, engine_->cache_kind_);
}

void PageCache::destroy() noexcept {
  engine_->unlink(this, group_.get());
  registration_.reset();  // waits for a reclaim in flight (it takes mu_, which is free)
  Group* g;
  int64_t surplus = 0;
  {
    std::lock_guard lock(mu_);
    g = group_.get();
    for (unsigned i = 0; i < nr_buckets_; ++i) {
      for (Page* p = buckets_[i]; p != nullptr;) {
        Page* next = p->hash_next;
        free_page(p);
        p = next;
      }
    }
    std::free(buckets_);
    buckets_ = nullptr;
    nr_buckets_ = 0;
    nr_pages_ = nr_unpinned_ = 0;
    lru_head_ = lru_tail_ = nullptr;
    surplus = surplus_units();
    publish();
  }
  if (surplus > 0) uncharge(*g, surplus, engine_->cache_kind_);
}

// ---- moving, releasing, reclaim ---------------------------------------------------------------

void PageCache::move_to(Group& to) noexcept {
  if (&to == group_.get()) return;
  engine_->unlink(this, group_.get());
  registration_.reset();  // no reclaim of the old group runs on it from here
  GroupRef old;           // dropped last, with no lock held
  {
    std::lock_guard lock(mu_);
    // Counters only (no reclaim under mu_): forced where `to` has no room, and left to the next
    // safe point of this thread.
    memcg::internal::AllocHookScope no_reclaim;
    const int kind = engine_->cache_kind_;
    if (units_ > 0) {
      if (!charged(try_charge(to, units_, kNoFail | kNoSpin, kind))) {
        // Past what can be counted at all: keep the cache where it is.
        engine_->link(this, group_.get());
        register_reclaimer(*group_);
        return;
      }
      uncharge(*group_, units_, kind);
    }
    old = std::exchange(group_, GroupRef(&to));
    by_default_ = false;
  }
  engine_->link(this, &to);
  register_reclaimer(to);
}

void PageCache::register_reclaimer(Group& group) noexcept {
  if (!purgeable_) return;
  try {
    registration_ = ReclaimerRegistration(group, *this);
  } catch (...) {
    // Out of memory for the registration: the cache keeps working; memcg's reclaim does not see
    // it (cache_size, xShrink and the heap's release still bound it).
  }
}

int64_t PageCache::release(int64_t units) noexcept {
  if (!purgeable_) return 0;
  Group* g;
  int64_t freed = 0;
  uint64_t pages = 0;
  {
    std::lock_guard lock(mu_);
    g = group_.get();
    const int64_t before = units_;
    while (lru_head_ != nullptr) {
      free_page(take_oldest());
      ++pages;
      const int64_t unit_mask = (int64_t{1} << unit_shift_) - 1;
      if (before - ((bytes_ + unit_mask) >> unit_shift_) >= units) break;
    }
    freed = surplus_units();
    publish();
  }
  // Straight to the counters: the heap charge that asked retries against them at once.
  if (freed > 0) uncharge_direct(*g, freed, engine_->cache_kind_);
  engine_->heap_cache_releases_.fetch_add(pages, std::memory_order_relaxed);
  return freed;
}

ReclaimResult PageCache::reclaim(int64_t nr_to_scan, int /*priority*/) {
  Group* g;
  int64_t freed = 0;
  uint64_t pages = 0;
  {
    std::lock_guard lock(mu_);
    g = group_.get();
    const int64_t before = units_;
    const int64_t unit_mask = (int64_t{1} << unit_shift_) - 1;
    while (lru_head_ != nullptr &&
           before - ((bytes_ + unit_mask) >> unit_shift_) < nr_to_scan) {
      free_page(take_oldest());
      ++pages;
    }
    freed = surplus_units();
    publish();
  }
  if (freed > 0) uncharge_direct(*g, freed, engine_->cache_kind_);
  engine_->reclaimed_.fetch_add(pages, std::memory_order_relaxed);
  // Freeing a page of a little over one unit may return two: the report stays within what was
  // asked (under-reporting costs nothing, reclaim.hpp).
  ReclaimResult r;
  r.reclaimed = freed < nr_to_scan ? freed : nr_to_scan;
  const int64_t looked = static_cast<int64_t>((pages * page_bytes_ + ((uint64_t{1} << unit_shift_) - 1)) >> unit_shift_);
  r.scanned = looked > r.reclaimed ? looked : r.reclaimed;
  if (r.scanned > nr_to_scan) r.scanned = nr_to_scan;
  return r;
}

// ---- the methods table ------------------------------------------------------------------------

namespace {

int pc_init(void*) { return SQLITE_OK; }
void pc_shutdown(void*) {}

sqlite3_pcache* pc_create(int sz_page, int sz_extra, int purgeable) {
  return reinterpret_cast<sqlite3_pcache*>(PageCache::create(sz_page, sz_extra, purgeable != 0));
}

PageCache* of(sqlite3_pcache* c) { return reinterpret_cast<PageCache*>(c); }

void pc_cachesize(sqlite3_pcache* c, int n) { of(c)->set_cache_size(n); }
int pc_pagecount(sqlite3_pcache* c) { return of(c)->page_count(); }
sqlite3_pcache_page* pc_fetch(sqlite3_pcache* c, unsigned key, int create) {
  return of(c)->fetch(key, create);
}
void pc_unpin(sqlite3_pcache* c, sqlite3_pcache_page* p, int discard) {
  of(c)->unpin(p, discard != 0);
}
void pc_rekey(sqlite3_pcache* c, sqlite3_pcache_page* p, unsigned old_key, unsigned new_key) {
  of(c)->rekey(p, old_key, new_key);
}
void pc_truncate(sqlite3_pcache* c, unsigned limit) { of(c)->truncate(limit); }
void pc_destroy(sqlite3_pcache* c) {
  PageCache* cache = of(c);
  cache->destroy();
  delete cache;
}
void pc_shrink(sqlite3_pcache* c) { of(c)->shrink(); }

}  // namespace

const sqlite3_pcache_methods2 kPageCacheMethods = {
    1,       nullptr,      pc_init,  pc_shutdown, pc_create,   pc_cachesize, pc_pagecount,
    pc_fetch, pc_unpin,    pc_rekey, pc_truncate, pc_destroy,  pc_shrink,
};

}  // namespace memcg::sqlite::internal
