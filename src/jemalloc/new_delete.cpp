// The global operator new and delete of programs linking memcg::jemalloc: jemalloc's mallocx and
// dallocx, followed by the safe point (safe_point.hpp) whenever an extent hook of this thread left
// work. The hooks run inside jemalloc with its locks held and so only take or refuse the
// counters; the return of operator new is the first place the thread may reclaim, sleep and run
// the OOM policy, as the kernel does on the return to user space. What this costs when nothing is
// pending: one thread-local load per call.
//
// mallocx/dallocx rather than malloc/free: GCC treats malloc and free as calls that touch no
// program state, and could move the thread-local read across them.
#include <jemalloc/jemalloc.h>

#include <cstddef>
#include <new>

#include "memcg/core/internal/alloc_hook.hpp"
#include "memcg/core/safe_point.hpp"

namespace {

inline void after_jemalloc() noexcept {
  if (memcg::internal::tl_deferred_pending != 0) [[unlikely]]
    memcg::safe_point();
}

inline int align_flags(size_t align) noexcept {
  return align > alignof(std::max_align_t) ? static_cast<int>(MALLOCX_ALIGN(align)) : 0;
}

void* allocate(size_t size, size_t align) noexcept {
  void* p = ::mallocx(size == 0 ? 1 : size, align_flags(align));
  after_jemalloc();
  return p;
}

// The standard's loop: on an empty heap call the new-handler and retry, or fail.
void* new_throwing(size_t size, size_t align) {
  for (;;) {
    if (void* p = allocate(size, align)) [[likely]]
      return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

void* new_nothrow(size_t size, size_t align) noexcept {
  try {
    return new_throwing(size, align);
  } catch (...) {
    return nullptr;
  }
}

void deallocate(void* p, size_t align) noexcept {
  if (p == nullptr) return;
  ::dallocx(p, align_flags(align));
  after_jemalloc();
}

void deallocate_sized(void* p, size_t size, size_t align) noexcept {
  if (p == nullptr) return;
  ::sdallocx(p, size == 0 ? 1 : size, align_flags(align));
  after_jemalloc();
}

constexpr size_t kDefaultAlign = alignof(std::max_align_t);

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
