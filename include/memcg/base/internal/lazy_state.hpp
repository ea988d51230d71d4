// State that an object (a group, a controller) gets only when a feature is first used on it:
// most groups never wait, admit by learned peak or sit in an admission queue, so the state is
// allocated by its first user and published through an atomic pointer, without a lock.
//
// Internal header: users of memcg must not include it or rely on it.
#ifndef MEMCG_INTERNAL_LAZY_STATE_HPP_
#define MEMCG_INTERNAL_LAZY_STATE_HPP_

#include <atomic>
#include <new>
#include <utility>

#include "memcg/base/internal/hook_bypass.hpp"

namespace memcg::internal {

// Returns the state in `slot`, creating it from `args` if it has none yet; null when the
// allocation fails. Racing first users each allocate, one wins and the others free their copy.
// The allocation is never charged (it is the library's own bookkeeping).
template <typename T, typename... Args>
T* lazy_state(std::atomic<T*>& slot, Args&&... args) noexcept {
  T* s = slot.load(std::memory_order_acquire);  // pairs with the winner's release below
  if (s != nullptr) return s;
  HookBypass bypass;
  T* fresh = new (std::nothrow) T(std::forward<Args>(args)...);
  if (fresh == nullptr) return nullptr;
  // acq_rel: publishes the new state; acquire on failure sees the winner's.
  if (slot.compare_exchange_strong(s, fresh, std::memory_order_acq_rel,
                                   std::memory_order_acquire))
    return fresh;
  delete fresh;
  return s;
}

}  // namespace memcg::internal

#endif  // MEMCG_INTERNAL_LAZY_STATE_HPP_
