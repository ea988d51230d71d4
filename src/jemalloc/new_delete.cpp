// The global operator new and delete of programs linking memcg::jemalloc: jemalloc's own fast
// paths, followed by the safe point (safe_point.hpp) whenever an extent hook of this thread left
// work. The hooks run inside jemalloc with its locks held and so only take or refuse the
// counters; the return of operator new is the first place the thread may reclaim, sleep and run
// the OOM policy, as the kernel does on the return to user space.
//
// Fast path, beyond what jemalloc's own operator new/delete run: one thread-local load and one
// branch (taken only when a hook left a record, or on an empty heap). malloc, free and
// sdallocx(flags 0) are jemalloc 5.3's fast paths (its operator new calls the same one as
// malloc); mallocx and dallocx go through its generic path, 60-90 instructions more per call,
// and are left to the aligned forms, as jemalloc does.
//
// All three come from the object that defines the mallocx this file calls, looked up once at
// startup, so that a block always goes back to the allocator it came from: called by name,
// malloc and free would be another allocator's under LD_PRELOAD, sdallocx still jemalloc's.
// Until the lookup ran (operator new called by an earlier static constructor) and when it
// fails, the generic mallocx / dallocx / sdallocx serve, which mix with the fast ones.
#include <dlfcn.h>
#include <jemalloc/jemalloc.h>

#include <cstddef>
#include <cstdlib>
#include <new>

#include "memcg/core/charge/internal/alloc_hook.hpp"
#include "memcg/core/charge/safe_point.hpp"

namespace {

constexpr size_t kDefaultAlign = __STDCPP_DEFAULT_NEW_ALIGNMENT__;

using MallocFn = void* (*)(size_t);
using FreeFn = void (*)(void*);
using SizedFreeFn = void (*)(void*, size_t, int);

void* generic_malloc(size_t size) noexcept {
  return ::mallocx(size == 0 ? 1 : size, 0);
}
void generic_free(void* p) noexcept {
  ::dallocx(p, 0);
}
void generic_sized_free(void* p, size_t size, int flags) noexcept {
  ::sdallocx(p, size == 0 ? 1 : size, flags);
}

// Written once, by find_jemalloc_fast_paths(), a constructor that runs before main while the
// program is single-threaded; plain pointers so that each call is one memory-indirect call.
// Either value is right: the generic entry and the fast one of the same jemalloc mix.
MallocFn g_malloc = generic_malloc;
FreeFn g_free = generic_free;
SizedFreeFn g_sized_free = generic_sized_free;

// The object that defines `p`, or null.
const void* object_of(const void* p) noexcept {
  Dl_info info{};
  return p != nullptr && ::dladdr(p, &info) != 0 ? info.dli_fbase : nullptr;
}

[[gnu::constructor]] void find_jemalloc_fast_paths() noexcept {
  // The jemalloc the calls by name below reach, as the program resolves them.
  void* const mx = ::dlsym(RTLD_DEFAULT, "mallocx");
  Dl_info info{};
  if (mx == nullptr || ::dladdr(mx, &info) == 0 || info.dli_fname == nullptr) return;
  void* lib = ::dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (lib == nullptr) return;
  void* const m = ::dlsym(lib, "malloc");
  void* const f = ::dlsym(lib, "free");
  void* const sf = ::dlsym(lib, "sdallocx");
  // All from that one object (where jemalloc is linked into the program itself, its malloc may
  // be another allocator's: then the generic entries stay).
  const void* const home = info.dli_fbase;
  if (object_of(m) == home && object_of(f) == home && object_of(sf) == home &&
      object_of(::dlsym(RTLD_DEFAULT, "dallocx")) == home &&
      object_of(::dlsym(RTLD_DEFAULT, "sdallocx")) == home) {
    g_malloc = reinterpret_cast<MallocFn>(m);
    g_free = reinterpret_cast<FreeFn>(f);
    g_sized_free = reinterpret_cast<SizedFreeFn>(sf);
  }
  ::dlclose(lib);  // NOLOAD: drops the reference it took; the library stays
}

inline bool deferred_pending() noexcept {
  return memcg::internal::tl_deferred_pending != 0;
}

inline int align_flags(size_t align) noexcept {
  return align > kDefaultAlign ? static_cast<int>(MALLOCX_ALIGN(align)) : 0;
}

// The calls go through pointers the compiler knows nothing of: the thread-local read after them
// stays after them (GCC would move it across a call to malloc or free by name, which it treats
// as touching no program state).
inline void* allocate(size_t size, size_t align) noexcept {
  if (align <= kDefaultAlign) return g_malloc(size);
  return ::mallocx(size == 0 ? 1 : size, align_flags(align));
}

// Out of line: a hook left a record (run the safe point), or the heap is empty (the standard's
// loop: call the new-handler and retry, or fail).
[[gnu::noinline]] void* new_slow(void* p, size_t size, size_t align) {
  for (;;) {
    if (deferred_pending()) memcg::safe_point();
    if (p != nullptr) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
    p = allocate(size, align);
  }
}

inline void* new_throwing(size_t size, size_t align) {
  void* p = allocate(size, align);
  // One branch for both rare cases.
  if ((p == nullptr) | deferred_pending()) [[unlikely]]
    return new_slow(p, size, align);
  return p;
}

void* new_nothrow(size_t size, size_t align) noexcept {
  try {
    return new_throwing(size, align);
  } catch (...) {
    return nullptr;
  }
}

[[gnu::noinline]] void after_free_slow() noexcept {
  memcg::safe_point();
}

inline void after_free() noexcept {
  if (deferred_pending()) [[unlikely]]
    after_free_slow();
}

inline void deallocate(void* p, size_t align) noexcept {
  if (p == nullptr) return;
  if (align <= kDefaultAlign) {
    g_free(p);
  } else {
    ::dallocx(p, align_flags(align));
  }
  after_free();
}

// The size is the one asked of operator new; jemalloc's own sized delete passes it as it is, 0
// included (the size class of 0 and 1 is the same).
inline void deallocate_sized(void* p, size_t size, size_t align) noexcept {
  if (p == nullptr) return;
  if (align <= kDefaultAlign) {
    g_sized_free(p, size, 0);
  } else {
    ::sdallocx(p, size == 0 ? 1 : size, align_flags(align));
  }
  after_free();
}

}  // namespace

#include "memcg/base/internal/replaceable_new_delete.inc"
