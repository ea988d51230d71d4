// The C API's handles (include/memcg/c/memcg.h): each opaque C type is a struct holding the C++
// object it stands for and the controller it belongs to, whose count of live handles lets
// memcg_controller_destroy refuse while any is left instead of aborting in ~Controller.
#pragma once
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>
// The implementation defines every declaration, the experimental ones included.
#ifndef MEMCG_C_EXPERIMENTAL
#define MEMCG_C_EXPERIMENTAL
#endif
#include "memcg/c/memcg.h"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/signal/notify.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/admission/reservation.hpp"
#include "memcg/core/reclaim/vmpressure.hpp"
#include "memcg/core/signal/event_bus.hpp"

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

// Copies `text` into `buf` of `size` bytes with a NUL, the length to `*length`; ERANGE (and `buf`
// untouched) when it does not fit.
inline int copy_out(const std::string& text, char* buf, size_t size, size_t* length) noexcept {
  if (length != nullptr) *length = text.size();
  if (buf == nullptr || text.size() >= size) return ERANGE;
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  return 0;
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

// Members and reservations are reference-counted, because the program may destroy them while
// the library still uses them: a kill callback that destroys its member while a reservation is
// bound to it (the reservation charges and uncharges through the member), or one that destroys
// the reservation whose own request ran the OOM killer. The program's reference is dropped by
// *_destroy; the library holds one more for each reservation bound to a member and for each
// reservation request in progress. The C++ object goes with the last reference.
struct memcg_member {
  explicit memcg_member(memcg_controller* owner)
      : count(owner), abandoned(std::make_shared<std::atomic<bool>>(false)) {}
  memcg::capi::HandleCount count;
  // The program's reference plus one per reservation bound to the member.
  std::atomic<int64_t> refs{1};
  // Set by memcg_member_destroy: the kill callback is not called any more. Shared with the
  // callback's wrapper, which the OOM killer moves out of the member while it runs and which
  // may therefore outlive this handle.
  const std::shared_ptr<std::atomic<bool>> abandoned;
  std::unique_ptr<memcg::Member> cpp;
};

struct memcg_reservation {
  memcg_reservation(memcg_controller* owner, memcg_member* member) noexcept
      : count(owner), member(member) {}
  memcg::capi::HandleCount count;
  // The program's reference plus one per request in progress (memcg::capi::ReservationCall).
  std::atomic<int64_t> refs{1};
  std::atomic<bool> destroyed{false};  // memcg_reservation_destroy was called
  // The member it is bound to (a reference of it, dropped after `cpp` is gone), or null.
  memcg_member* const member;
  std::stop_source stop;  // memcg_reservation_cancel; before `cpp`, which holds its token
  memcg::Reservation cpp;
};

namespace memcg::capi {

// Reference counting of the two handles above. The last release frees: a member's C++ object
// uncharges what it still holds and leaves its group; a reservation gives back what it holds,
// then releases its member.
void retain(memcg_member* member) noexcept;
void release(memcg_member* member) noexcept;
void release(memcg_reservation* reservation) noexcept;

// Holds a reference of a reservation for the length of a request, so that a callback run by
// the request (a kill, a preemption) may destroy the reservation: it is freed when the request
// returns. Two uncontended atomic operations; reservation requests are not the charge hot path.
class ReservationCall {
 public:
  explicit ReservationCall(memcg_reservation* r) noexcept : r_(r) {
    r_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  ~ReservationCall() { release(r_); }
  ReservationCall(const ReservationCall&) = delete;
  ReservationCall& operator=(const ReservationCall&) = delete;

 private:
  memcg_reservation* const r_;
};

}  // namespace memcg::capi

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

// A subscription to the controller's event bus, with the events taken and not yet handed out:
// memcg_subscription_next gives one at a time, and the strings of the one it gave stay in
// `current` until the next call.
struct memcg_subscription {
  explicit memcg_subscription(memcg_controller* owner) noexcept : count(owner) {}
  memcg::capi::HandleCount count;
  std::unique_ptr<memcg::Subscription> cpp;
  std::vector<memcg::BusEvent> batch;  // taken, not yet handed out (from `next` on)
  size_t next = 0;
  memcg::BusEvent current;             // the one handed out last
  std::atomic<bool> closed{false};     // memcg_subscription_close was called
};
