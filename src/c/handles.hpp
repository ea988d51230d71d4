// The C API's handles (include/memcg/c/memcg.h): each opaque C type is a struct holding the C++
// object it stands for and the controller it belongs to, whose count of live handles lets
// memcg_controller_destroy refuse while any is left instead of aborting in ~Controller.
#pragma once
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <stop_token>
// The implementation defines every declaration, the experimental ones included.
#ifndef MEMCG_C_EXPERIMENTAL
#define MEMCG_C_EXPERIMENTAL
#endif
#include "memcg/c/memcg.h"
#include "memcg/core/controller.hpp"
#include "memcg/core/notify.hpp"
#include "memcg/core/oom.hpp"
#include "memcg/core/psi.hpp"
#include "memcg/core/reclaim.hpp"
#include "memcg/core/reservation.hpp"
#include "memcg/core/vmpressure.hpp"

struct memcg_controller {
  explicit memcg_controller(memcg::Options options) : cpp(std::move(options)) {}
  memcg::Controller cpp;
  // Handles made from this controller and not yet destroyed. Relaxed: destroying the controller
  // while another thread makes a handle of it is a use-after-free the count cannot prevent; the
  // count only catches handles the program forgot.
  std::atomic<int64_t> handles{0};
};

namespace memcg::capi {

// Counts one live handle of `owner` for its lifetime.
class HandleCount {
 public:
  explicit HandleCount(memcg_controller* owner) noexcept : owner_(owner) {
    owner_->handles.fetch_add(1, std::memory_order_relaxed);
  }
  ~HandleCount() { owner_->handles.fetch_sub(1, std::memory_order_relaxed); }
  HandleCount(const HandleCount&) = delete;
  HandleCount& operator=(const HandleCount&) = delete;
  memcg_controller* owner() const noexcept { return owner_; }

 private:
  memcg_controller* const owner_;
};

// Runs `fn` (returning an errno int) so that no exception leaves: std::bad_alloc becomes ENOMEM,
// std::invalid_argument (a constructor refusing its arguments) EINVAL, anything else EIO.
template <class Fn>
int guarded(Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  } catch (const std::invalid_argument&) {
    return EINVAL;
  } catch (...) {
    return EIO;
  }
}

// The one place C++ charge statuses become C ones.
memcg_charge_status to_c(ChargeStatus status) noexcept;
// The one place C++ reservation statuses become C ones: a status this file does not know maps
// to MEMCG_RESERVE_REFUSED (nothing was charged), so that a newer C++ status never reads as
// success.
memcg_reserve_status to_c(ReserveStatus status) noexcept;

}  // namespace memcg::capi

struct memcg_group {
  memcg_group(memcg_controller* owner, memcg::GroupRef ref) noexcept
      : count(owner), ref(std::move(ref)) {}
  memcg::capi::HandleCount count;
  memcg::GroupRef ref;  // never empty
};

struct memcg_member {
  explicit memcg_member(memcg_controller* owner) noexcept : count(owner) {}
  memcg::capi::HandleCount count;
  std::unique_ptr<memcg::Member> cpp;
};

struct memcg_reservation {
  explicit memcg_reservation(memcg_controller* owner) noexcept : count(owner) {}
  memcg::capi::HandleCount count;
  std::stop_source stop;  // memcg_reservation_cancel; before `cpp`, which holds its token
  memcg::Reservation cpp;
};

struct memcg_listener {
  explicit memcg_listener(memcg_controller* owner) noexcept : count(owner) {}
  memcg::capi::HandleCount count;
  // One of the three is in use.
  std::unique_ptr<memcg::EventListener> events;
  std::atomic<uint64_t> events_delivered{0};  // the C++ listener counts none; relaxed: a tally
  memcg::PressureListener vmpressure;
  memcg::PsiTrigger psi;
};

struct memcg_reclaimer final : memcg::Reclaimer {
  memcg_reclaimer(memcg_controller* owner, memcg_reclaimable_fn reclaimable_fn,
                  memcg_reclaim_fn reclaim_fn, void* user) noexcept
      : count(owner), reclaimable_fn(reclaimable_fn), reclaim_fn(reclaim_fn), user(user) {}
  int64_t reclaimable() const noexcept override;
  memcg::ReclaimResult reclaim(int64_t nr_to_scan, int priority) override;

  memcg::capi::HandleCount count;
  const memcg_reclaimable_fn reclaimable_fn;
  const memcg_reclaim_fn reclaim_fn;
  void* const user;
  memcg::ReclaimerRegistration registration;  // last: unregistered first
};
