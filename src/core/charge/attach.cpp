#include "memcg/core/charge/attach.hpp"

#include <cerrno>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/signal/psi.hpp"

namespace memcg {
namespace {

// The calling thread's attachment. Owning: holds one reference and one attach count. The
// destructor runs at thread exit and detaches.
struct Attachment {
  Group* group = nullptr;
  ~Attachment() { set(nullptr); }
  int set(Group* g) noexcept {
    if (g) {
      if (int err = g->attach()) return err;
    }
    internal::psi_attach_moved(group, g);  // PSI counts attached threads as tasks
    if (group) group->detach();
    group = g;
    internal::tl_attached = g;
    return 0;
  }
};

thread_local Attachment tl_attachment;

}  // namespace

int attach_current_thread(Group& group) noexcept {
  return tl_attachment.set(&group);
}

void detach_current_thread() noexcept {
  tl_attachment.set(nullptr);
}

ScopedAttach::ScopedAttach(Group& group) noexcept : previous_(attached_group()) {
  ok_ = attach_current_thread(group) == 0;
}

ScopedAttach::~ScopedAttach() {
  if (!ok_) return;
  // The previous group may have been removed meanwhile; then the thread ends up unattached.
  if (!previous_ || tl_attachment.set(previous_.get()) != 0) detach_current_thread();
}

ChargeStatus try_charge_current(Controller& controller, uint64_t bytes, uint32_t flags) noexcept {
  return try_charge_bytes(current_group(controller), bytes, flags);
}

ChargeHandle charge_current(Controller& controller, uint64_t bytes, uint32_t flags) noexcept {
  return ChargeHandle(current_group(controller), bytes, flags);
}

}  // namespace memcg
