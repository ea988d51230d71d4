// Replacement of every form of the global operator new and delete (see hook.hpp; the forms are
// in base/internal/replaceable_new_delete.inc).
//
// Hot path of a charged allocation: malloc, malloc_usable_size (unless turned off), the object
// layer's charge
// (a restartable sequence on this CPU's reserve), two header stores. Of a free: two header loads,
// free, the object layer's uncharge. The thread's group is read from its attachment.
#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "memcg/core/charge/attach.hpp"
#include "memcg/hook/hook.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/charge/obj_stock.hpp"

namespace memcg::hook {
namespace {

// In front of each block. `charged` holds the bytes in its low 56 bits and the kind above.
struct alignas(16) Header {
  Group* group;  // null: the root's, nothing charged
  uint64_t charged;
};
static_assert(sizeof(Header) == kHeaderBytes);
constexpr unsigned kKindShift = 56;
constexpr uint64_t kBytesMask = (uint64_t{1} << kKindShift) - 1;
constexpr size_t kDefaultAlign = __STDCPP_DEFAULT_NEW_ALIGNMENT__;
static_assert(kDefaultAlign <= kHeaderBytes);

// The settings an allocation reads, in one word so that it reads them with one load: the charge
// flags in bits 0-31, the kind in bits 32-39, "charge malloc_usable_size()" in bit 40. Setters
// change their field with a compare-exchange, leaving the others as they are.
constexpr unsigned kConfigKindShift = 32;
constexpr uint64_t kConfigUsableSize = uint64_t{1} << 40;
constexpr uint64_t make_config(uint32_t flags, int kind, bool usable_size) {
  return uint64_t{flags} | static_cast<uint64_t>(kind & 0xff) << kConfigKindShift |
         (usable_size ? kConfigUsableSize : 0);
}
std::atomic<uint64_t> g_config{make_config(kDefaultCharge, kDefaultKind, true)};
std::atomic<uint64_t> g_failed{0};

uint32_t config_flags(uint64_t c) noexcept {
  return static_cast<uint32_t>(c);
}
int config_kind(uint64_t c) noexcept {
  return static_cast<int>((c >> kConfigKindShift) & 0xff);
}

// Replaces the bits under `mask` with `bits`.
void set_config(uint64_t mask, uint64_t bits) noexcept {
  uint64_t c = g_config.load(std::memory_order_relaxed);
  while (!g_config.compare_exchange_weak(c, (c & ~mask) | bits, std::memory_order_relaxed)) {
  }
}

// Bytes in front of the user block: the header, padded to keep the block's alignment.
inline size_t prefix(size_t align) noexcept {
  return align > kHeaderBytes ? align : kHeaderBytes;
}

// The group this thread's allocations are charged to, or null.
inline Group* charge_target() noexcept {
  if (internal::tl_hook_bypass != 0) return nullptr;
  Group* g = attached_group();
  return g != nullptr && g->object_stock() != nullptr ? g : nullptr;  // null: the root
}

// Null on failure. `refused` tells a refused charge from an empty heap.
inline void* allocate(size_t size, size_t align, bool* refused) noexcept {
  const size_t pre = prefix(align);
  if (size > SIZE_MAX / 2) return nullptr;
  void* base;
  if (align <= kDefaultAlign) {
    base = std::malloc(size + pre);
  } else {
    base = std::aligned_alloc(align, (size + pre + align - 1) & ~(align - 1));
  }
  if (base == nullptr) [[unlikely]]
    return nullptr;
  Group* g = charge_target();
  uint64_t charged = 0;
  if (g != nullptr) {
    const uint64_t config = g_config.load(std::memory_order_relaxed);
    // The process-wide kind may not be one of this controller's: then anon (hook.hpp).
    const int kind = g->object_stock()->checked_kind(config_kind(config), kDefaultKind);
    const uint64_t bytes =
        (config & kConfigUsableSize) != 0 ? malloc_usable_size(base) : size + pre;
    // The library's own allocations while it charges (reclaim, statistics) are not charged:
    // the object layer's slow paths set HookBypass.
    if (!memcg::charged(g->object_stock()->charge(*g, bytes, config_flags(config), kind)))
        [[unlikely]] {
      std::free(base);
      g_failed.fetch_add(1, std::memory_order_relaxed);
      *refused = true;
      return nullptr;
    }
    charged = bytes | static_cast<uint64_t>(kind) << kKindShift;
  }
  char* user = static_cast<char*>(base) + pre;
  Header* h = reinterpret_cast<Header*>(user - kHeaderBytes);
  h->group = g;
  h->charged = charged;
  return user;
}

inline void deallocate(void* p, size_t align) noexcept {
  if (p == nullptr) return;
  const Header* h = reinterpret_cast<const Header*>(static_cast<char*>(p) - kHeaderBytes);
  Group* const g = h->group;
  const uint64_t charged = h->charged;
  std::free(static_cast<char*>(p) - prefix(align));
  if (g != nullptr && internal::tl_hook_teardown == 0) {
    // The object layer holds the group while it has charged bytes: no reference needed here.
    g->object_stock()->uncharge(*g, charged & kBytesMask, static_cast<int>(charged >> kKindShift));
  }
}

// The standard's loop: on an empty heap call the new-handler and retry, or fail.
void* new_throwing(size_t size, size_t align) {
  for (;;) {
    bool refused = false;
    if (void* p = allocate(size, align, &refused)) [[likely]]
      return p;
    if (refused) throw std::bad_alloc();
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

}  // namespace

bool set_kind(int kind) noexcept {
  // The header keeps the kind in the 8 bits above the bytes.
  if (kind < 0 || kind > 0xff) return false;
  set_config(uint64_t{0xff} << kConfigKindShift, make_config(0, kind, false));
  return true;
}
int kind() noexcept {
  return config_kind(g_config.load(std::memory_order_relaxed));
}
void set_flags(uint32_t flags) noexcept {
  set_config(0xffffffff, flags);
}
uint32_t flags() noexcept {
  return config_flags(g_config.load(std::memory_order_relaxed));
}
void set_charge_usable_size(bool on) noexcept {
  set_config(kConfigUsableSize, on ? kConfigUsableSize : 0);
}
uint64_t failed_charges() noexcept {
  return g_failed.load(std::memory_order_relaxed);
}

}  // namespace memcg::hook

namespace {
using memcg::hook::deallocate;
using memcg::hook::new_nothrow;
using memcg::hook::new_throwing;
// The header records what was charged: the size passed to a sized delete is not needed.
inline void deallocate_sized(void* p, size_t, size_t align) noexcept {
  deallocate(p, align);
}
}  // namespace

#include "memcg/base/internal/replaceable_new_delete.inc"
