// Binding threads to arenas, the safe point's arena switch, the allocator check, and the pmr
// resource (arena.hpp).
#include <dlfcn.h>
#include <jemalloc/jemalloc.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <utility>

#include "internal.hpp"
#include "memcg/core/charge/internal/alloc_hook.hpp"
#include "memcg/core/charge/safe_point.hpp"
#include "memcg/jemalloc/arena.hpp"

namespace memcg::jemalloc {
namespace {

// Whether the malloc this process calls is the one in the jemalloc we link: the object that
// defines `malloc` as the program resolves it is the one that defines mallctl, and jemalloc knows
// a block malloc returned. Another allocator preloaded, or a sanitizer's malloc, fails the first
// test (then no jemalloc call is made on foreign memory).
bool check_jemalloc_serves_malloc() noexcept {
  void* m = ::dlsym(RTLD_DEFAULT, "malloc");
  void* c = reinterpret_cast<void*>(&::mallctl);
  Dl_info mi{}, ci{};
  if (m == nullptr || ::dladdr(m, &mi) == 0 || ::dladdr(c, &ci) == 0) return false;
  if (mi.dli_fbase != ci.dli_fbase) return false;
  void* p = std::malloc(64);
  if (p == nullptr) return false;
  const bool known = arena_of(p) != UINT32_MAX;
  std::free(p);
  return known;
}

// The ladder of a safe point runs on jemalloc's arena 0 (alloc_hook.hpp, g_ladder_scope): what
// reclaimers and kill callbacks allocate is the library's and the application's, not the
// tenant's, and must not keep the tenant's arena alive. Each change flushes the thread's cache.
thread_local unsigned tl_ladder_home = UINT32_MAX;
void ladder_scope(bool enter) noexcept {
  if (enter) {
    const unsigned home = current_thread_arena();
    if (home == 0) return;
    flush_thread_cache();
    unsigned zero = 0;
    if (::mallctl("thread.arena", nullptr, nullptr, &zero, sizeof zero) == 0) tl_ladder_home = home;
  } else if (tl_ladder_home != UINT32_MAX) {
    unsigned home = std::exchange(tl_ladder_home, UINT32_MAX);
    flush_thread_cache();
    ::mallctl("thread.arena", nullptr, nullptr, &home, sizeof home);
  }
}

}  // namespace

void install_ladder_scope() noexcept {
  internal::g_ladder_scope.store(&ladder_scope, std::memory_order_release);
}

// ---- binding ----------------------------------------------------------------------------------

unsigned current_thread_arena() noexcept {
  unsigned a = 0;
  size_t sz = sizeof a;
  ::mallctl("thread.arena", &a, &sz, nullptr, 0);
  return a;
}

unsigned arena_of(const void* p) noexcept {
  unsigned a = UINT32_MAX;
  size_t sz = sizeof a;
  if (::mallctl("arenas.lookup", &a, &sz, &p, sizeof p) != 0) return UINT32_MAX;
  return a;
}

void flush_thread_cache() noexcept {
  ::mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0);
}

namespace {
bool bind_thread(unsigned index) noexcept {
  flush_thread_cache();
  return ::mallctl("thread.arena", nullptr, nullptr, &index, sizeof index) == 0;
}
}  // namespace

bool safe_point() noexcept {
  return memcg::safe_point();
}



bool jemalloc_serves_malloc() noexcept {
  static const bool serves = check_jemalloc_serves_malloc();
  return serves;
}

// Both boundaries are safe points: what the previous binding's hooks left runs before the thread
// moves, and what this one's left runs when it ends.
ScopedArenaAttach::ScopedArenaAttach(Arena& arena) noexcept : attach_(arena.group()) {
  memcg::safe_point();
  if (!attach_.ok()) return;
  previous_arena_ = current_thread_arena();
  bound_ = bind_thread(arena.next_index());
}

ScopedArenaAttach::~ScopedArenaAttach() {
  if (bound_) bind_thread(previous_arena_);
  memcg::safe_point();
}

// ---- pmr --------------------------------------------------------------------------------------

void* ArenaResource::do_allocate(size_t bytes, size_t alignment) {
  int flags = flags_;
  if (alignment > alignof(std::max_align_t)) flags |= MALLOCX_ALIGN(alignment);
  void* p = ::mallocx(bytes == 0 ? 1 : bytes, flags);
  memcg::safe_point();  // jemalloc returned: the hooks' deferred ladder runs here
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void ArenaResource::do_deallocate(void* p, size_t bytes, size_t alignment) {
  int flags = MALLOCX_TCACHE_NONE;
  if (alignment > alignof(std::max_align_t)) flags |= MALLOCX_ALIGN(alignment);
  ::sdallocx(p, bytes == 0 ? 1 : bytes, flags);
  memcg::safe_point();
}

bool ArenaResource::do_is_equal(const std::pmr::memory_resource& other) const noexcept {
  const auto* o = dynamic_cast<const ArenaResource*>(&other);
  return o != nullptr && o->flags_ == flags_;
}

}  // namespace memcg::jemalloc
