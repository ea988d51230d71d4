// The library's lock guards. Every lock memcg takes inside its own code goes through one of
// these, and each holds a HookBypass (hook_bypass.hpp) for as long as it holds the lock.
//
// Why: with the global operator new hook linked (hook.hpp), an allocation on an attached
// thread is a charge, and a charge can reclaim, run the OOM killer, update statistics, or drop
// the last reference of a removed group, all of which take library locks. An allocation made
// while holding one of those locks (a vector growing under the tree lock, the rstat flush stack
// under a shard lock) would then take the same lock again on the same thread: a self-deadlock,
// or std::system_error(EDEADLK) from a shared_mutex. Under these guards nothing the library
// allocates is charged (the hook records it as the root's), so no charge, and nothing a charge
// does, can nest inside a library lock.
//
// The rule, for code in src/:
//   - take every mutex through LockGuard, UniqueLock or SharedLock, never std::lock_guard & co.;
//   - public entry points that allocate outside a lock (path splitting, formatting a file's
//     contents, building a group) hold a HookBypass around that work as well;
//   - never call back into user code (reclaimers, OOM kill callbacks, listeners, triggers) while
//     holding a library lock. Callbacks therefore run outside these bypass scopes, and their own
//     allocations are charged as before. The exceptions are the per-callback call mutexes
//     (a reclaimer's or a listener's), which serialise one callback with its unregistration and
//     are held across the call on purpose; they are plain std::mutex and nothing allocates under
//     them.
//
// Internal header: users of memcg must not include it or rely on it.
#ifndef MEMCG_INTERNAL_LOCK_HPP_
#define MEMCG_INTERNAL_LOCK_HPP_

#include <mutex>
#include <shared_mutex>

#include "memcg/base/internal/hook_bypass.hpp"

namespace memcg::internal {

// std::lock_guard plus a HookBypass. The bypass is taken before the lock and dropped after it.
template <typename Mutex>
class [[nodiscard]] LockGuard {
 public:
  explicit LockGuard(Mutex& m) : lock_(m) {}
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  HookBypass bypass_;  // declared first: constructed before, destroyed after the lock
  std::lock_guard<Mutex> lock_;
};

// std::shared_lock (reader side) plus a HookBypass.
template <typename Mutex>
class [[nodiscard]] SharedLock {
 public:
  explicit SharedLock(Mutex& m) : lock_(m) {}
  SharedLock(const SharedLock&) = delete;
  SharedLock& operator=(const SharedLock&) = delete;

 private:
  HookBypass bypass_;
  std::shared_lock<Mutex> lock_;
};

// std::unique_lock plus a HookBypass held exactly while the lock is owned (it follows lock(),
// unlock() and a failed try). native() is for condition variables: the bypass stays counted
// while a wait has the mutex released, which is harmless (a blocked thread allocates nothing).
template <typename Mutex>
class [[nodiscard]] UniqueLock {
 public:
  explicit UniqueLock(Mutex& m) : lock_(m, std::defer_lock) { lock(); }
  UniqueLock(Mutex& m, std::try_to_lock_t) : lock_(m, std::defer_lock) {
    ++tl_hook_bypass;
    if (!lock_.try_lock()) --tl_hook_bypass;
  }
  ~UniqueLock() {
    if (lock_.owns_lock()) unlock();
  }
  UniqueLock(const UniqueLock&) = delete;
  UniqueLock& operator=(const UniqueLock&) = delete;

  void lock() {
    ++tl_hook_bypass;
    try {
      lock_.lock();
    } catch (...) {
      --tl_hook_bypass;
      throw;
    }
  }
  void unlock() {
    lock_.unlock();
    --tl_hook_bypass;
  }
  bool owns_lock() const noexcept { return lock_.owns_lock(); }
  std::unique_lock<Mutex>& native() noexcept { return lock_; }

 private:
  std::unique_lock<Mutex> lock_;
};

}  // namespace memcg::internal

#endif  // MEMCG_INTERNAL_LOCK_HPP_
