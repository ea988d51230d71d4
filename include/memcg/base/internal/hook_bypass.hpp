// The thread-local switch that keeps the global operator new hook (memcg_hook) from charging an
// allocation: set while the library charges (the controller's own allocations must not recurse
// into charging) and while a memcg resource or allocator calls its upstream (that memory is
// charged by the resource already).
//
// Internal header: users of memcg must not include it or rely on it.
#ifndef MEMCG_INTERNAL_HOOK_BYPASS_HPP_
#define MEMCG_INTERNAL_HOOK_BYPASS_HPP_

namespace memcg::internal {

// Non-zero: operator new on this thread charges nothing (the block is recorded as the root's).
inline thread_local int tl_hook_bypass = 0;

struct HookBypass {
  HookBypass() noexcept { ++tl_hook_bypass; }
  ~HookBypass() { --tl_hook_bypass; }
  HookBypass(const HookBypass&) = delete;
  HookBypass& operator=(const HookBypass&) = delete;
};

// Non-zero: operator delete on this thread uncharges nothing. Set while a Controller is being
// destroyed: its own structures, allocated by attached threads, are freed after its groups.
inline thread_local int tl_hook_teardown = 0;

struct HookTeardown {
  HookTeardown() noexcept { ++tl_hook_teardown; }
  ~HookTeardown() { --tl_hook_teardown; }
  HookTeardown(const HookTeardown&) = delete;
  HookTeardown& operator=(const HookTeardown&) = delete;
};

}  // namespace memcg::internal

#endif  // MEMCG_INTERNAL_HOOK_BYPASS_HPP_
