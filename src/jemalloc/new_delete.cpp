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
// GCC treats malloc and free as calls that touch no program state and could move the
// thread-local read above them: a compiler barrier after each keeps it after jemalloc returned.
#include <jemalloc/jemalloc.h>

#include <cstddef>
#include <cstdlib>
#include <new>

#include "memcg/core/internal/alloc_hook.hpp"
#include "memcg/core/safe_point.hpp"

namespace {

constexpr size_t kDefaultAlign = __STDCPP_DEFAULT_NEW_ALIGNMENT__;

inline void compiler_barrier() noexcept {
  asm volatile("" ::: "memory");
}

inline bool deferred_pending() noexcept {
  return memcg::internal::tl_deferred_pending != 0;
}

inline int align_flags(size_t align) noexcept {
  return align > kDefaultAlign ? static_cast<int>(MALLOCX_ALIGN(align)) : 0;
}

inline void* allocate(size_t size, size_t align) noexcept {
  if (align <= kDefaultAlign) {
    void* p = std::malloc(size);
    compiler_barrier();
    return p;
  }
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
    std::free(p);
    compiler_barrier();
  } else {
    ::dallocx(p, align_flags(align));
  }
  after_free();
}

// The size is the one asked of operator new (jemalloc's sized delete takes it as it is, 0
// included).
inline void deallocate_sized(void* p, size_t size, size_t align) noexcept {
  if (p == nullptr) return;
  ::sdallocx(p, align <= kDefaultAlign || size != 0 ? size : 1, align_flags(align));
  after_free();
}

}  // namespace

void* operator new(std::size_t n) {
  return new_throwing(n, kDefaultAlign);
}
void* operator new[](std::size_t n) {
  return new_throwing(n, kDefaultAlign);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return new_nothrow(n, kDefaultAlign);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return new_nothrow(n, kDefaultAlign);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return new_throwing(n, static_cast<size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return new_throwing(n, static_cast<size_t>(a));
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return new_nothrow(n, static_cast<size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return new_nothrow(n, static_cast<size_t>(a));
}

void operator delete(void* p) noexcept {
  deallocate(p, kDefaultAlign);
}
void operator delete[](void* p) noexcept {
  deallocate(p, kDefaultAlign);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  deallocate(p, kDefaultAlign);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  deallocate(p, kDefaultAlign);
}
void operator delete(void* p, std::size_t n) noexcept {
  deallocate_sized(p, n, kDefaultAlign);
}
void operator delete[](void* p, std::size_t n) noexcept {
  deallocate_sized(p, n, kDefaultAlign);
}
void operator delete(void* p, std::align_val_t a) noexcept {
  deallocate(p, static_cast<size_t>(a));
}
void operator delete[](void* p, std::align_val_t a) noexcept {
  deallocate(p, static_cast<size_t>(a));
}
void operator delete(void* p, std::size_t n, std::align_val_t a) noexcept {
  deallocate_sized(p, n, static_cast<size_t>(a));
}
void operator delete[](void* p, std::size_t n, std::align_val_t a) noexcept {
  deallocate_sized(p, n, static_cast<size_t>(a));
}
void operator delete(void* p, std::align_val_t a, const std::nothrow_t&) noexcept {
  deallocate(p, static_cast<size_t>(a));
}
void operator delete[](void* p, std::align_val_t a, const std::nothrow_t&) noexcept {
  deallocate(p, static_cast<size_t>(a));
}
