// Thread attachment: the analogue of writing a thread's id to cgroup.procs. An attached thread's
// charges that name no group go to its group; unattached threads charge the root.
//
// A thread is attached to at most one group at a time (across controllers). The attachment holds
// a reference to the group, and a group with attached threads cannot be removed (EBUSY), as a
// cgroup with tasks cannot be. REQUIRES: the controller outlives its attached threads' attachment
// (detach or let the ScopedAttach end before destroying the controller).
#pragma once

#include <cstdint>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"

namespace memcg {

// Attaches the calling thread to `group`, replacing any previous attachment. ENOENT if the group
// is offline (removed).
[[nodiscard]] int attach_current_thread(Group& group) noexcept;
// Detaches the calling thread (no-op when unattached).
void detach_current_thread() noexcept;
// The calling thread's group, or null when unattached.
inline Group* attached_group() noexcept;
// The group that charges without an explicit group go to: the attached group if it belongs to
// `controller`, else the controller's root.
inline Group& current_group(Controller& controller) noexcept;

// Attaches for a scope and restores the previous attachment at its end.
class ScopedAttach {
 public:
  explicit ScopedAttach(Group& group) noexcept;
  ~ScopedAttach();
  ScopedAttach(const ScopedAttach&) = delete;
  ScopedAttach& operator=(const ScopedAttach&) = delete;
  bool ok() const noexcept { return ok_; }

 private:
  GroupRef previous_;
  bool ok_;
};

// Charge the calling thread's group (current_group()).
ChargeStatus try_charge_current(Controller& controller, uint64_t bytes,
                                uint32_t flags = kDefaultCharge) noexcept;
// Charges the calling thread's group and returns a handle that uncharges the same group later,
// wherever the thread has moved by then.
ChargeHandle charge_current(Controller& controller, uint64_t bytes,
                            uint32_t flags = kDefaultCharge) noexcept;

namespace internal {
// The calling thread's attached group, mirrored for the allocation paths: a trivially
// destructible thread_local is one TLS load, where the owning attachment (which detaches in its
// destructor at thread exit) is reached through a TLS wrapper call. Written only by attach.cpp.
inline thread_local Group* tl_attached = nullptr;
}  // namespace internal

inline Group* attached_group() noexcept {
  return internal::tl_attached;
}

inline Group& current_group(Controller& controller) noexcept {
  Group* g = internal::tl_attached;
  return g && &g->controller() == &controller ? *g : controller.root();
}

}  // namespace memcg
