// The public waiting-charge calls (charge_wait.hpp): argument checks, deadlines given as a
// timeout or a steady-clock time point, handles, and the overloads that take a stat kind. The
// queues and the policy are in charge_wait.cpp.

#include <algorithm>
#include <chrono>
#include <stop_token>
#include <utility>

#include "memcg/base/clock.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"
#include "charge_wait_internal.hpp"

namespace memcg {

namespace internal {

struct ChargeHandleAccess {
  static void fill(ChargeHandle& h, Group& group, uint64_t bytes, int kind) noexcept {
    group.get();
    h.group_ = &group;
    h.bytes_ = bytes;
    h.kind_ = kind;
  }
};

}  // namespace internal

namespace {

// `timeout` from now on `clock`, saturated at kMaxNs; a negative timeout is 0.
uint64_t deadline_after(const Clock& clock, std::chrono::nanoseconds timeout) noexcept {
  return Clock::after(clock.now_ns(),
                      static_cast<uint64_t>(std::max<int64_t>(0, timeout.count())));
}

// A timeout from the call (the _for overloads): measured from when the call started.
struct AfterTimeout {
  uint64_t deadline_ns;
  AfterTimeout(const Group& g, std::chrono::nanoseconds timeout) noexcept
      : deadline_ns(deadline_after(g.controller().clock(), timeout)) {}
  static uint64_t get(const void* self) noexcept {
    return static_cast<const AfterTimeout*>(self)->deadline_ns;
  }
  internal::LazyDeadline lazy() const noexcept { return {&get, this}; }
};

// A steady-clock deadline: what is left of it (0 once passed) becomes a timeout on the
// controller's clock, looked at when the wait starts.
struct AtSteadyDeadline {
  const Group& group;
  WaitClock::time_point deadline;
  static uint64_t get(const void* self) noexcept {
    const auto& d = *static_cast<const AtSteadyDeadline*>(self);
    const auto now = WaitClock::now();
    // Compared first: deadline - now could overflow for a deadline far in the past.
    const auto left = d.deadline > now
                          ? std::chrono::duration_cast<std::chrono::nanoseconds>(d.deadline - now)
                          : std::chrono::nanoseconds(0);
    return deadline_after(d.group.controller().clock(), left);
  }
  internal::LazyDeadline lazy() const noexcept { return {&get, this}; }
};

WaitStatus charge_units(Group& group, int64_t units, const internal::LazyDeadline& deadline,
                        const std::stop_token& stop, const WaitOptions& o,
                        const std::atomic<bool>* killed = nullptr) noexcept {
  const Controller& ctl = group.controller();
  if (static_cast<uint64_t>(units) > static_cast<uint64_t>(ctl.max_units())) [[unlikely]]
    return WaitStatus::kInvalid;
  const int cls = internal::wait_class_of(group, o.priority);
  if (cls < 0) [[unlikely]]
    return WaitStatus::kInvalid;
  if (units == 0 || group.is_root()) return WaitStatus::kOk;
  return internal::charge_or_wait(group, units, deadline, stop, cls, o.kind, killed);
}

WaitStatus charge_bytes(Group& group, uint64_t bytes, const internal::LazyDeadline& deadline,
                        const std::stop_token& stop, const WaitOptions& o) noexcept {
  const Controller& ctl = group.controller();
  if (bytes > (static_cast<uint64_t>(ctl.max_units()) << ctl.unit_shift())) [[unlikely]]
    return WaitStatus::kInvalid;
  return charge_units(group, ctl.to_units_ceil(bytes), deadline, stop, o);
}

WaitStatus charge_handle(ChargeHandle& out, Group& group, uint64_t bytes, const internal::LazyDeadline& deadline,
                         const std::stop_token& stop, const WaitOptions& o) noexcept {
  out.release();
  const WaitStatus s = charge_bytes(group, bytes, deadline, stop, o);
  if (s == WaitStatus::kOk && !group.is_root() && bytes > 0)
    internal::ChargeHandleAccess::fill(out, group, bytes, o.kind);
  return s;
}

WaitOptions of_kind(int kind) noexcept {
  WaitOptions o;
  o.kind = kind;
  return o;
}

}  // namespace


WaitStatus try_charge_wait_for(Group& group, int64_t units, std::chrono::nanoseconds timeout,
                               std::stop_token stop, const WaitOptions& options) noexcept {
  return charge_units(group, units, AfterTimeout(group, timeout).lazy(), stop, options);
}
WaitStatus internal::member_charge_wait_for(Group& group, int64_t units,
                                            std::chrono::nanoseconds timeout,
                                            const std::stop_token& stop,
                                            const WaitOptions& options,
                                            const std::atomic<bool>* killed) noexcept {
  return charge_units(group, units, AfterTimeout(group, timeout).lazy(), stop, options, killed);
}
WaitStatus try_charge_bytes_wait_for(Group& group, uint64_t bytes, std::chrono::nanoseconds timeout,
                                     std::stop_token stop, const WaitOptions& options) noexcept {
  return charge_bytes(group, bytes, AfterTimeout(group, timeout).lazy(), stop, options);
}
WaitStatus charge_wait_for(ChargeHandle& out, Group& group, uint64_t bytes,
                           std::chrono::nanoseconds timeout, std::stop_token stop,
                           const WaitOptions& options) noexcept {
  return charge_handle(out, group, bytes, AfterTimeout(group, timeout).lazy(), stop, options);
}
WaitStatus try_charge_wait(Group& group, int64_t units, WaitClock::time_point deadline,
                           std::stop_token stop, const WaitOptions& options) noexcept {
  return charge_units(group, units, AtSteadyDeadline{group, deadline}.lazy(), stop, options);
}
WaitStatus try_charge_bytes_wait(Group& group, uint64_t bytes, WaitClock::time_point deadline,
                                 std::stop_token stop, const WaitOptions& options) noexcept {
  return charge_bytes(group, bytes, AtSteadyDeadline{group, deadline}.lazy(), stop, options);
}
WaitStatus charge_wait(ChargeHandle& out, Group& group, uint64_t bytes,
                       WaitClock::time_point deadline, std::stop_token stop,
                       const WaitOptions& options) noexcept {
  return charge_handle(out, group, bytes, AtSteadyDeadline{group, deadline}.lazy(), stop, options);
}

WaitStatus try_charge_wait_for(Group& group, int64_t units, std::chrono::nanoseconds timeout,
                               std::stop_token stop, int kind) noexcept {
  return try_charge_wait_for(group, units, timeout, std::move(stop), of_kind(kind));
}
WaitStatus try_charge_bytes_wait_for(Group& group, uint64_t bytes, std::chrono::nanoseconds timeout,
                                     std::stop_token stop, int kind) noexcept {
  return try_charge_bytes_wait_for(group, bytes, timeout, std::move(stop), of_kind(kind));
}
WaitStatus charge_wait_for(ChargeHandle& out, Group& group, uint64_t bytes,
                           std::chrono::nanoseconds timeout, std::stop_token stop,
                           int kind) noexcept {
  return charge_wait_for(out, group, bytes, timeout, std::move(stop), of_kind(kind));
}
WaitStatus try_charge_wait(Group& group, int64_t units, WaitClock::time_point deadline,
                           std::stop_token stop, int kind) noexcept {
  return try_charge_wait(group, units, deadline, std::move(stop), of_kind(kind));
}
WaitStatus try_charge_bytes_wait(Group& group, uint64_t bytes, WaitClock::time_point deadline,
                                 std::stop_token stop, int kind) noexcept {
  return try_charge_bytes_wait(group, bytes, deadline, std::move(stop), of_kind(kind));
}
WaitStatus charge_wait(ChargeHandle& out, Group& group, uint64_t bytes,
                       WaitClock::time_point deadline, std::stop_token stop, int kind) noexcept {
  return charge_wait(out, group, bytes, deadline, std::move(stop), of_kind(kind));
}

}  // namespace memcg
