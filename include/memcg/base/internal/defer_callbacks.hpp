// The thread-local switch that keeps a read from delivering notifications (event listener and
// PSI trigger callbacks) on the calling thread. Set by servers that read the files on their own
// threads (memcg::http): an application callback must not run there. Notifications a read would
// deliver are left where they normally wait: due memory.events notifications stay queued for
// the timer thread or the next raise or tick elsewhere; a PSI trigger that fired stays pending
// and fires at the next evaluation on another thread.
//
// Internal header: users of memcg must not include it or rely on it.
#ifndef MEMCG_INTERNAL_DEFER_CALLBACKS_HPP_
#define MEMCG_INTERNAL_DEFER_CALLBACKS_HPP_

namespace memcg::internal {

// Non-zero: reads on this thread deliver no notification.
inline thread_local int tl_defer_callbacks = 0;

inline bool callbacks_deferred() noexcept { return tl_defer_callbacks != 0; }

struct DeferCallbacks {
  DeferCallbacks() noexcept { ++tl_defer_callbacks; }
  ~DeferCallbacks() { --tl_defer_callbacks; }
  DeferCallbacks(const DeferCallbacks&) = delete;
  DeferCallbacks& operator=(const DeferCallbacks&) = delete;
};

}  // namespace memcg::internal

#endif  // MEMCG_INTERNAL_DEFER_CALLBACKS_HPP_
