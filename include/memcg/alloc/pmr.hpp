// MemoryResource: a std::pmr::memory_resource whose allocations are charged to a group.
//
// Every allocate() charges its bytes through the object layer (obj_stock.hpp: byte-exact, a few
// nanoseconds on a hit) and then takes the memory from an upstream resource; deallocate() gives
// the memory back and uncharges exactly what allocate() charged, from the group it was charged
// to. A charge that the controller refuses (memory.max held and nothing could be reclaimed)
// throws std::bad_alloc: the resource never lets a group exceed its limit silently. Inside a
// NoFailScope (nofail.hpp) the charge is forced instead.
//
// Two ways to choose the group:
//  - MemoryResource(group, ...): every allocation charges `group`, held by reference for the
//    resource's lifetime. Blocks carry nothing extra.
//  - MemoryResource(controller, ...): each allocation charges the allocating thread's group
//    (current_group(), attach.hpp) and records it in a 16-byte header in front of the block
//    (alignment-aware: the header takes max(alignment, 16) bytes), so that a block freed by
//    another thread, or after its thread moved or exited, is uncharged from the right group. The
//    header is charged too.
//
// The upstream's own allocations are not charged again by the global operator new hook
// (memcg_hook). Two resources compare equal only when they are the same object (memory from one
// may be freed only through it).
//
// Thread safety: as safe as the upstream (new_delete_resource by default: fully thread-safe).
// REQUIRES: every block is deallocated before the controller is destroyed; the upstream outlives
// the resource.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <new>
#include <stdexcept>

#include "memcg/core/charge/attach.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/charge/obj_stock.hpp"

namespace memcg {

// How a MemoryResource charges (outside the class so that it can be a default argument).
struct MemoryResourceOptions {
  // memory.stat item the bytes count under: one of the controller's kinds, or kNoStatKind.
  int kind = kDefaultKind;
  uint32_t flags = kDefaultCharge;  // charge flags (kMayBlock: reclaim before failing)
};

class MemoryResource : public std::pmr::memory_resource {
 public:
  using Options = MemoryResourceOptions;

  // Charges `group` for every allocation. Throws std::invalid_argument when options.kind is
  // neither kNoStatKind nor one of the controller's kinds (Controller::stats()).
  explicit MemoryResource(Group& group,
                          std::pmr::memory_resource* upstream = std::pmr::new_delete_resource(),
                          Options options = {})
      : controller_(&group.controller()),
        objects_(&controller_->obj_stock()),
        group_(&group),
        upstream_(upstream),
        newdel_(upstream == std::pmr::new_delete_resource()),
        options_(checked(*controller_, options)) {}
  MemoryResource(Group& group, Options options)
      : MemoryResource(group, std::pmr::new_delete_resource(), options) {}
  // Charges the allocating thread's group of `controller` (the root when unattached). Throws
  // std::invalid_argument for a kind as above.
  explicit MemoryResource(Controller& controller,
                          std::pmr::memory_resource* upstream = std::pmr::new_delete_resource(),
                          Options options = {})
      : controller_(&controller),
        objects_(&controller.obj_stock()),
        upstream_(upstream),
        newdel_(upstream == std::pmr::new_delete_resource()),
        options_(checked(controller, options)) {}

  MemoryResource(const MemoryResource&) = delete;
  MemoryResource& operator=(const MemoryResource&) = delete;

  // The group charged, or null for the per-thread mode.
  Group* group() const noexcept { return group_.get(); }
  std::pmr::memory_resource* upstream() const noexcept { return upstream_; }
  const Options& options() const noexcept { return options_; }

 protected:
  void* do_allocate(size_t bytes, size_t alignment) override {
    if (group_) return allocate_bound(bytes, alignment);
    return allocate_tagged(bytes, alignment);
  }
  void do_deallocate(void* p, size_t bytes, size_t alignment) override {
    if (group_) {
      upstream_deallocate(p, bytes, alignment);
      objects_->uncharge(*group_, bytes, options_.kind);
      return;
    }
    deallocate_tagged(p, bytes, alignment);
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

  // -------------------------------------------------------------------------------------------
  // Implementation details.
 private:
  struct alignas(16) Header {
    Group* group;  // null: nothing charged (the root)
    uint64_t reserved;
  };
  static_assert(sizeof(Header) == 16);
  static Options checked(const Controller& ctl, Options o) {
    const auto kind = static_cast<size_t>(static_cast<unsigned>(o.kind));
    if (o.kind != kNoStatKind && kind >= ctl.stats().size())
      throw std::invalid_argument("memcg: MemoryResource kind is not one of the controller's");
    return o;
  }
  // Bytes in front of the user block: the header, padded to keep the block's alignment.
  static size_t prefix(size_t alignment) noexcept { return alignment > 16 ? alignment : 16; }

  // The upstream's memory, which is charged already: the global hook must not charge it again
  // (HookBypass; a free needs no bypass, the hook finds the block recorded as uncharged). With
  // new_delete_resource the operators are called directly, as that resource would, without
  // its virtual call.
  void* upstream_allocate(size_t bytes, size_t alignment) {
    internal::HookBypass bypass;
    if (!newdel_) return upstream_->allocate(bytes, alignment);
    if (alignment > __STDCPP_DEFAULT_NEW_ALIGNMENT__)
      return ::operator new (bytes, std::align_val_t{alignment});
    return ::operator new(bytes);
  }
  void upstream_deallocate(void* p, size_t bytes, size_t alignment) noexcept {
    if (!newdel_) {
      upstream_->deallocate(p, bytes, alignment);
    } else if (alignment > __STDCPP_DEFAULT_NEW_ALIGNMENT__) {
      ::operator delete (p, bytes, std::align_val_t{alignment});
    } else {
      ::operator delete(p, bytes);
    }
  }

  void* allocate_bound(size_t bytes, size_t alignment) {
    Group& g = *group_;
    if (!charged(objects_->charge(g, bytes, options_.flags, options_.kind))) [[unlikely]]
      throw std::bad_alloc();
    try {
      return upstream_allocate(bytes, alignment);
    } catch (...) {
      objects_->uncharge(g, bytes, options_.kind);
      throw;
    }
  }

  void* allocate_tagged(size_t bytes, size_t alignment) {
    const size_t pre = prefix(alignment);
    if (bytes > SIZE_MAX - pre) throw std::bad_alloc();
    const size_t total = bytes + pre;
    Group* g = &current_group(*controller_);
    if (g->is_root()) {
      g = nullptr;
    } else if (!charged(objects_->charge(*g, total, options_.flags, options_.kind))) {
      throw std::bad_alloc();
    }
    char* base;
    try {
      base = static_cast<char*>(upstream_allocate(total, pre));
    } catch (...) {
      if (g) objects_->uncharge(*g, total, options_.kind);
      throw;
    }
    auto* h = reinterpret_cast<Header*>(base + pre - sizeof(Header));
    h->group = g;
    h->reserved = 0;
    return base + pre;
  }

  void deallocate_tagged(void* p, size_t bytes, size_t alignment) noexcept {
    const size_t pre = prefix(alignment);
    char* base = static_cast<char*>(p) - pre;
    Group* g = reinterpret_cast<Header*>(static_cast<char*>(p) - sizeof(Header))->group;
    upstream_deallocate(base, bytes + pre, pre);
    if (g) objects_->uncharge(*g, bytes + pre, options_.kind);
  }

  Controller* controller_;
  ObjStock* objects_;  // the controller's, cached: saves two dependent loads a call
  GroupRef group_;
  std::pmr::memory_resource* upstream_;
  bool newdel_;  // upstream_ is new_delete_resource(): call the operators directly
  Options options_;
};

}  // namespace memcg
