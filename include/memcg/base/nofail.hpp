// NoFailScope: a region of a thread in which charges must not fail.
//
// Code that cannot take a failure (a destructor that allocates, a reclaimer building its
// bookkeeping, a rollback) opens a scope; every charge the thread makes inside it carries kNoFail:
// it still reclaims and retries as its flags allow, and where it would have failed it is charged
// past memory.max instead. Each such forced charge is counted in ChargeCounters::forced (and
// raises the `max` event, as every forced charge does). Scopes nest.
//
// Thread safety: the scope is thread-local state; it affects only the thread that opened it.
// Cost: two thread-local increments; the flag is read only on the charge slow path.
#pragma once

namespace memcg {

namespace internal {
// Depth of NoFailScopes open on this thread.
inline thread_local int tl_nofail_depth = 0;
}  // namespace internal

class NoFailScope {
 public:
  NoFailScope() noexcept { ++internal::tl_nofail_depth; }
  ~NoFailScope() { --internal::tl_nofail_depth; }
  NoFailScope(const NoFailScope&) = delete;
  NoFailScope& operator=(const NoFailScope&) = delete;

  // Whether the calling thread is inside a scope.
  static bool active() noexcept { return internal::tl_nofail_depth > 0; }
};

}  // namespace memcg
