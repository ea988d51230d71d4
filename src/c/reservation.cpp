// The C API's reservations (include/memcg/c/memcg.h).
#include <chrono>
#include "handles.hpp"

using memcg::capi::guarded;
using memcg::capi::ReservationCall;

// Extend here when the C++ API gains a status: a status without a C name maps to
// MEMCG_RESERVE_REFUSED, which like every refusal means nothing was charged.
memcg_reserve_status memcg::capi::to_c(ReserveStatus status) noexcept {
  switch (status) {
    case ReserveStatus::kOk: return MEMCG_RESERVE_OK;
    case ReserveStatus::kForced: return MEMCG_RESERVE_FORCED;
    case ReserveStatus::kNoMem: return MEMCG_RESERVE_NOMEM;
    case ReserveStatus::kNoMemCostly: return MEMCG_RESERVE_NOMEM_COSTLY;
    case ReserveStatus::kTimedOut: return MEMCG_RESERVE_TIMED_OUT;
    case ReserveStatus::kCancelled: return MEMCG_RESERVE_CANCELLED;
    case ReserveStatus::kKilled: return MEMCG_RESERVE_KILLED;
    case ReserveStatus::kRemoved: return MEMCG_RESERVE_REMOVED;
    case ReserveStatus::kInvalid: return MEMCG_RESERVE_INVALID;
    case ReserveStatus::kNeverFits: return MEMCG_RESERVE_NEVER_FITS;
    default: return MEMCG_RESERVE_REFUSED;
  }
}

namespace {

using memcg::capi::to_c;

// Waits longer than the clock can count are waits without a deadline worth the name: clamp.
std::chrono::nanoseconds to_timeout(uint64_t ns) noexcept {
  constexpr uint64_t kMax = static_cast<uint64_t>(INT64_MAX);
  return std::chrono::nanoseconds(static_cast<int64_t>(ns > kMax ? kMax : ns));
}

}  // namespace

void memcg::capi::release(memcg_reservation* reservation) noexcept {
  if (reservation->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  memcg_member* const member = reservation->member;
  delete reservation;  // gives back what it holds, through its member, which is still alive
  if (member != nullptr) release(member);
}

extern "C" {

const char* memcg_reserve_status_name(int status) {
  switch (status) {
    case MEMCG_RESERVE_OK: return "ok";
    case MEMCG_RESERVE_FORCED: return "forced";
    case MEMCG_RESERVE_NOMEM: return "nomem";
    case MEMCG_RESERVE_NOMEM_COSTLY: return "nomem-costly";
    case MEMCG_RESERVE_TIMED_OUT: return "timed-out";
    case MEMCG_RESERVE_CANCELLED: return "cancelled";
    case MEMCG_RESERVE_KILLED: return "killed";
    case MEMCG_RESERVE_REMOVED: return "removed";
    case MEMCG_RESERVE_INVALID: return "invalid";
    case MEMCG_RESERVE_NEVER_FITS: return "never-fits";
    case MEMCG_RESERVE_REFUSED: return "refused";
    default: return "unknown";
  }
}

int memcg_reservation_create(memcg_group* group, memcg_member* member, int oom_policy,
                             int priority, memcg_reservation** out) {
  if (out == nullptr || (group == nullptr) == (member == nullptr)) return EINVAL;
  if (oom_policy < MEMCG_OOM_KERNEL || oom_policy > MEMCG_OOM_NEVER) return EINVAL;
  if (priority != MEMCG_PRIORITY_DEFAULT &&
      (priority < MEMCG_PRIORITY_LOW || priority > MEMCG_PRIORITY_HIGH))
    return EINVAL;
  memcg::ReserveOptions options;
  options.oom = static_cast<memcg::OomPolicy>(oom_policy);
  options.priority = priority == MEMCG_PRIORITY_DEFAULT
                         ? memcg::WaitPriority::kDefault
                         : static_cast<memcg::WaitPriority>(priority);
  // A member the program destroyed (its reservations keep it alive) takes no new ones.
  if (member != nullptr && member->abandoned->load(std::memory_order_acquire)) return EINVAL;
  return guarded([&] {
    memcg_controller* owner = group != nullptr ? group->count.owner() : member->count.owner();
    auto handle = std::make_unique<memcg_reservation>(owner, member);
    handle->cpp = group != nullptr
                      ? memcg::Reservation(*group->ref, options, handle->stop.get_token())
                      : memcg::Reservation(*member->cpp, options, handle->stop.get_token());
    if (member != nullptr) memcg::capi::retain(member);  // last: nothing below can fail
    *out = handle.release();
    return 0;
  });
}

void memcg_reservation_destroy(memcg_reservation* reservation) {
  if (reservation == nullptr) return;
  // The program's reference, once (a second destroy from a callback drops nothing more).
  if (reservation->destroyed.exchange(true, std::memory_order_acq_rel)) return;
  memcg::capi::release(reservation);
}

memcg_reserve_status memcg_reserve(memcg_reservation* reservation, uint64_t total) {
  if (reservation == nullptr) return MEMCG_RESERVE_INVALID;
  const ReservationCall call(reservation);
  return to_c(reservation->cpp.reserve(total));
}

memcg_reserve_status memcg_reserve_for(memcg_reservation* reservation, uint64_t total,
                                       uint64_t timeout_ns) {
  if (reservation == nullptr) return MEMCG_RESERVE_INVALID;
  const ReservationCall call(reservation);
  return to_c(reservation->cpp.reserve_for(total, to_timeout(timeout_ns)));
}

memcg_reserve_status memcg_reserve_until(memcg_reservation* reservation, uint64_t total,
                                         uint64_t deadline_ns) {
  if (reservation == nullptr) return MEMCG_RESERVE_INVALID;
  const ReservationCall call(reservation);
  return to_c(reservation->cpp.reserve_until(total, deadline_ns));
}

memcg_reserve_status memcg_reservation_grow(memcg_reservation* reservation, uint64_t bytes) {
  if (reservation == nullptr) return MEMCG_RESERVE_INVALID;
  const ReservationCall call(reservation);
  return to_c(reservation->cpp.grow(bytes));
}

memcg_reserve_status memcg_reservation_grow_for(memcg_reservation* reservation, uint64_t bytes,
                                                uint64_t timeout_ns) {
  if (reservation == nullptr) return MEMCG_RESERVE_INVALID;
  const ReservationCall call(reservation);
  return to_c(reservation->cpp.grow_for(bytes, to_timeout(timeout_ns)));
}

memcg_reserve_status memcg_reservation_grow_until(memcg_reservation* reservation, uint64_t bytes,
                                                  uint64_t deadline_ns) {
  if (reservation == nullptr) return MEMCG_RESERVE_INVALID;
  const ReservationCall call(reservation);
  memcg::Reservation& r = reservation->cpp;
  // The C++ call takes a timeout: what is left of the deadline on the controller's clock (a
  // deadline passed tries once without waiting, as a timeout of 0 does).
  const uint64_t now = r.group() != nullptr ? r.group()->controller().clock().now_ns() : 0;
  return to_c(r.grow_for(bytes, to_timeout(deadline_ns > now ? deadline_ns - now : 0)));
}

void memcg_reservation_shrink(memcg_reservation* reservation, uint64_t bytes) {
  if (reservation == nullptr) return;
  const ReservationCall call(reservation);
  reservation->cpp.shrink(bytes);
}

void memcg_reservation_release(memcg_reservation* reservation) {
  if (reservation == nullptr) return;
  const ReservationCall call(reservation);
  reservation->cpp.release();
}

uint64_t memcg_reservation_bytes(const memcg_reservation* reservation) {
  return reservation == nullptr ? 0 : reservation->cpp.bytes();
}

void memcg_reservation_cancel(memcg_reservation* reservation) {
  if (reservation != nullptr) reservation->stop.request_stop();
}

}  // extern "C"
