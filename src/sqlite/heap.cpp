// SQLITE_CONFIG_MALLOC: sqlite3_malloc and friends charged to the calling thread's group
// (engine.hpp, "Which group"), byte-exact through the object layer.
//
// Each block carries a 16-byte header (its group and usable size, keeping malloc's 16-byte
// alignment), so a free uncharges exactly what was charged, from any thread, after the thread
// moved and after the group was removed (the object layer holds the group while bytes are
// charged). SQLite calls xMalloc with its global memory mutex held (SQLITE_CONFIG_MEMSTATUS, on
// by default), so a charge here never reclaims, sleeps or waits: it runs in an allocator-hook
// scope (counters only; the ladder is left to the thread's next safe point). Before it refuses,
// it frees unpinned pages of the same group's own caches, whose locks are never held while
// anything takes SQLite's mutexes. Nothing here calls back into SQLite: no re-entry.
#include <cstdlib>
#include <cstring>

#include "memcg/core/charge/internal/alloc_hook.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/percpu/internal/stock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "page_cache.hpp"

namespace memcg::sqlite {

// Engine's private parts the heap methods use.
struct HeapAccess {
  static Group& group(Engine& e) noexcept { return e.current_group(); }
  static int kind(Engine& e) noexcept { return e.heap_kind_; }
  static bool fault(Engine& e) noexcept { return e.heap_fault(); }
  static int64_t release_cache(Engine& e, Group& g, int64_t units) noexcept {
    return e.release_cache(g, units);
  }
  static void refused(Engine& e) noexcept {
    e.heap_refusals_.fetch_add(1, std::memory_order_relaxed);
  }
};

namespace internal {
namespace {

struct alignas(16) Header {
  Group* group;    // null: not charged (no Engine, or the root)
  uint64_t bytes;  // usable size; the charge is bytes + sizeof(Header)
};
static_assert(sizeof(Header) == 16);

// Recorded for the safe point's ladder: reclaim with retries, never the OOM killer (a refusal
// is SQLITE_NOMEM for one statement, not worth a kill).
constexpr uint32_t kHeapCharge = kMayBlock | kRetryMayFail;

uint64_t round8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

Header* header_of(void* p) { return static_cast<Header*>(p) - 1; }

// The deepest level from `g` up (the root excluded) without room for `units` more, or null.
Group* level_short_of(Group& g, int64_t units) noexcept {
  for (Group* l = &g; l != nullptr && !l->is_root(); l = l->parent()) {
    const int64_t usage = l->memory().usage();
    const int64_t max = l->memory().max();
    if (usage > max || max - usage < units) return l;
  }
  return nullptr;
}

// Charges `bytes` to `g`. On a refusal: the group's own unpinned cache pages first, then one
// reclaim pass of the level that is full (memory.low and memory.min hold there as everywhere:
// other tenants' protected pages stay), then once more. False: refused, nothing charged.
bool charge(Engine& e, Group& g, uint64_t bytes) noexcept {
  ObjStock& objects = g.controller().obj_stock();
  const int kind = HeapAccess::kind(e);
  {
    memcg::internal::AllocHookScope in_hook;
    if (charged(objects.charge(g, bytes, kHeapCharge, kind))) return true;
  }
  const int64_t units = g.controller().to_units_ceil(bytes);
  if (HeapAccess::release_cache(e, g, units) > 0) {
    memcg::internal::AllocHookScope in_hook;
    if (charged(objects.charge(g, bytes, kHeapCharge, kind))) return true;
  }
  // Reclaim runs reclaimers (SQLite page caches take only their own lock; a reclaimer of the
  // application must not call SQLite: docs/sqlite.md) and never waits for a charge.
  if (memcg::internal::tl_reclaim_depth == 0) {
    if (Group* full = level_short_of(g, units)) {
      (void)reclaim(*full, units, ReclaimReason::kLimit);
      {
        memcg::internal::AllocHookScope in_hook;
        if (charged(objects.charge(g, bytes, kHeapCharge, kind))) return true;
      }
      // Units pre-charged in other CPUs' stocks count against the limit (up to a batch per
      // CPU): given back before the group is called full, as the charge path's ladder does.
      // Try-locks and a membarrier: nothing that waits for a thread inside SQLite.
      objects.drain_all(full);
      g.controller().stock().drain_all(full);
      memcg::internal::AllocHookScope in_hook;
      if (charged(objects.charge(g, bytes, kHeapCharge, kind))) return true;
    }
  }
  HeapAccess::refused(e);
  return false;
}

void uncharge(Group& g, uint64_t bytes, int kind) noexcept {
  memcg::internal::AllocHookScope in_hook;  // the wake of waiting charges: at a safe point
  g.controller().obj_stock().uncharge(g, bytes, kind);
}

void* heap_malloc(int n) {
  if (n <= 0) return nullptr;
  Engine* e = Engine::current();
  const uint64_t usable = round8(static_cast<uint64_t>(n));
  Group* g = nullptr;
  if (e != nullptr) {
    if (HeapAccess::fault(*e)) return nullptr;
    g = &HeapAccess::group(*e);
    if (g->is_root()) g = nullptr;  // counted nowhere: no charge to make
  }
  auto* h = static_cast<Header*>(std::malloc(sizeof(Header) + usable));
  if (h == nullptr) return nullptr;
  if (g != nullptr && !charge(*e, *g, sizeof(Header) + usable)) {
    std::free(h);
    return nullptr;
  }
  h->group = g;
  h->bytes = usable;
  return h + 1;
}

void heap_free(void* p) {
  if (p == nullptr) return;
  Header* h = header_of(p);
  Group* g = h->group;
  const uint64_t bytes = sizeof(Header) + h->bytes;
  std::free(h);
  if (g != nullptr) {
    Engine* e = Engine::current();
    uncharge(*g, bytes, e != nullptr ? HeapAccess::kind(*e) : kNoStatKind);
  }
}

void* heap_realloc(void* p, int n) {
  if (p == nullptr) return heap_malloc(n);
  if (n <= 0) return nullptr;  // SQLite never asks; the block stays
  Header* h = header_of(p);
  Group* g = h->group;
  const uint64_t old_usable = h->bytes;
  const uint64_t usable = round8(static_cast<uint64_t>(n));
  Engine* e = Engine::current();
  if (g != nullptr && e == nullptr) return nullptr;  // a charged block outlives no Engine
  if (usable > old_usable && e != nullptr && HeapAccess::fault(*e)) return nullptr;
  // Growth is charged first: a refusal leaves the old block as it was (SQLite's rule).
  if (g != nullptr && usable > old_usable && !charge(*e, *g, usable - old_usable)) return nullptr;
  auto* fresh = static_cast<Header*>(std::realloc(h, sizeof(Header) + usable));
  if (fresh == nullptr) {
    if (g != nullptr && usable > old_usable) uncharge(*g, usable - old_usable, HeapAccess::kind(*e));
    return nullptr;
  }
  fresh->bytes = usable;
  if (g != nullptr && usable < old_usable) uncharge(*g, old_usable - usable, HeapAccess::kind(*e));
  return fresh + 1;
}

int heap_size(void* p) { return p == nullptr ? 0 : static_cast<int>(header_of(p)->bytes); }
int heap_roundup(int n) { return static_cast<int>(round8(static_cast<uint64_t>(n))); }
int heap_init(void*) { return SQLITE_OK; }
void heap_shutdown(void*) {}

}  // namespace

extern const sqlite3_mem_methods kHeapMethods;
const sqlite3_mem_methods kHeapMethods = {heap_malloc, heap_free,     heap_realloc, heap_size,
                                          heap_roundup, heap_init, heap_shutdown, nullptr};

}  // namespace internal
}  // namespace memcg::sqlite
