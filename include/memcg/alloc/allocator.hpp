// Allocator<T>: an STL allocator that charges a group, for containers that take an allocator
// type rather than a std::pmr::memory_resource.
//
// allocate(n) charges n * sizeof(T) bytes to the group through the object layer (obj_stock.hpp)
// and then takes the memory from the global operator new (aligned form for over-aligned T);
// deallocate(p, n) frees it and uncharges the same bytes. A refused charge throws std::bad_alloc.
// The memory is not charged again by the global operator new hook (memcg_hook).
//
// Equality: two allocators are equal when they charge the same group as the same kind; then
// memory allocated by one may be deallocated by the other (both free through operator delete and
// uncharge the same group). Like std::pmr::polymorphic_allocator it does not propagate on copy
// assignment, move assignment or swap: a container keeps charging the group it was built with,
// and a move assignment between containers of different groups moves element by element, so
// that each group is charged for what it holds. (Swapping containers whose allocators differ is
// undefined, as for pmr.)
//
// Thread safety: as the global operator new. Cost: one object charge and uncharge per
// allocation; copying an allocator copies a group reference (an atomic increment).
// REQUIRES: memory is deallocated before the controller is destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <type_traits>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/group.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/charge/obj_stock.hpp"

namespace memcg {

template <typename T>
class Allocator {
 public:
  using value_type = T;
  using propagate_on_container_copy_assignment = std::false_type;
  using propagate_on_container_move_assignment = std::false_type;
  using propagate_on_container_swap = std::false_type;
  using is_always_equal = std::false_type;

  // A kind that is not one of the controller's counts as kNoStatKind (obj_stock.hpp).
  explicit Allocator(Group& group, int kind = kDefaultKind,
                     uint32_t flags = kDefaultCharge) noexcept
      : group_(&group), kind_(kind), flags_(flags) {}
  template <typename U>
  Allocator(const Allocator<U>& o) noexcept  // NOLINT: rebinding converts implicitly
      : group_(o.group_), kind_(o.kind_), flags_(o.flags_) {}

  T* allocate(size_t n) {
    if (n > std::numeric_limits<size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    const size_t bytes = n * sizeof(T);
    if (!charged(try_charge_object(*group_, bytes, flags_, kind_))) throw std::bad_alloc();
    try {
      internal::HookBypass bypass;
      if constexpr (alignof(T) > __STDCPP_DEFAULT_NEW_ALIGNMENT__) {
        return static_cast<T*>(::operator new (bytes, std::align_val_t{alignof(T)}));
      } else {
        return static_cast<T*>(::operator new(bytes));
      }
    } catch (...) {
      uncharge_object(*group_, bytes, kind_);
      throw;
    }
  }

  void deallocate(T* p, size_t n) noexcept {
    const size_t bytes = n * sizeof(T);
    // No HookBypass: the global hook recorded the block as uncharged when it was allocated.
    if constexpr (alignof(T) > __STDCPP_DEFAULT_NEW_ALIGNMENT__) {
      ::operator delete (p, bytes, std::align_val_t{alignof(T)});
    } else {
      ::operator delete(p, bytes);
    }
    uncharge_object(*group_, bytes, kind_);
  }

  Group& group() const noexcept { return *group_; }
  int kind() const noexcept { return kind_; }

  template <typename U>
  bool operator==(const Allocator<U>& o) const noexcept {
    return group_.get() == o.group_.get() && kind_ == o.kind_;
  }

 private:
  template <typename U>
  friend class Allocator;
  GroupRef group_;
  int kind_;
  uint32_t flags_;
};

}  // namespace memcg
