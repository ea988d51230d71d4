// The C API's charge path and OOM members (include/memcg/c/memcg.h). memcg_charge and
// memcg_uncharge are the hot path: a NULL check and a flag check in front of the C++ byte calls,
// nothing else (bench/c_charge_bench.cpp measures the difference).
#include "memcg/core/charge/charge.hpp"
#include "handles.hpp"

using memcg::capi::guarded;

namespace {

// The charge flags the C header names; any other bit makes a charge MEMCG_CHARGE_INVALID.
constexpr unsigned kKnownChargeFlags = MEMCG_CHARGE_MAY_BLOCK | MEMCG_CHARGE_NO_RETRY |
                                       MEMCG_CHARGE_RETRY_MAY_FAIL | MEMCG_CHARGE_NO_FAIL |
                                       MEMCG_CHARGE_HIGH_PRIO;
// The C flags are the C++ bits, so that memcg_charge passes them through unchanged.
constexpr bool same_bit(unsigned c_flag, memcg::ChargeFlags cpp_flag) {
  return c_flag == static_cast<unsigned>(cpp_flag);
}
static_assert(same_bit(MEMCG_CHARGE_MAY_BLOCK, memcg::kMayBlock) &&
              same_bit(MEMCG_CHARGE_NO_RETRY, memcg::kNoRetry) &&
              same_bit(MEMCG_CHARGE_RETRY_MAY_FAIL, memcg::kRetryMayFail) &&
              same_bit(MEMCG_CHARGE_NO_FAIL, memcg::kNoFail) &&
              same_bit(MEMCG_CHARGE_HIGH_PRIO, memcg::kHighPrio));

// More bytes than one charge may hold (charge.hpp, "Range"): MEMCG_CHARGE_INVALID.
bool too_large(const memcg::Controller& ctl, uint64_t bytes) noexcept {
  return bytes > (static_cast<uint64_t>(ctl.max_units()) << ctl.unit_shift());
}

// The one place C++ cancel reasons become C ones.
memcg_cancel_reason to_c(memcg::CancelReason reason) noexcept {
  switch (reason) {
    case memcg::CancelReason::kOomKill: return MEMCG_CANCEL_OOM_KILL;
    case memcg::CancelReason::kPreempt: return MEMCG_CANCEL_PREEMPT;
    case memcg::CancelReason::kOperator: return MEMCG_CANCEL_OPERATOR;
    default: return MEMCG_CANCEL_OTHER;  // a reason added later: extend here
  }
}

}  // namespace

void memcg::capi::retain(memcg_member* member) noexcept {
  member->refs.fetch_add(1, std::memory_order_relaxed);
}

void memcg::capi::release(memcg_member* member) noexcept {
  // acq_rel: the thread that frees sees every use made through the other references.
  if (member->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete member;
}

memcg_charge_status memcg::capi::to_c(ChargeStatus status) noexcept {
  switch (status) {
    case ChargeStatus::kOk: return MEMCG_CHARGE_OK;
    case ChargeStatus::kForced: return MEMCG_CHARGE_FORCED;
    case ChargeStatus::kNoMem: return MEMCG_CHARGE_NOMEM;
  }
  return MEMCG_CHARGE_NOMEM;  // a status added later: treated as not charged
}

extern "C" {

const char* memcg_charge_status_name(int status) {
  switch (status) {
    case MEMCG_CHARGE_OK: return "ok";
    case MEMCG_CHARGE_FORCED: return "forced";
    case MEMCG_CHARGE_NOMEM: return "nomem";
    case MEMCG_CHARGE_INVALID: return "invalid";
    default: return "unknown";
  }
}

memcg_charge_status memcg_charge(memcg_group* group, uint64_t bytes, unsigned flags) {
  if (group == nullptr || (flags & ~kKnownChargeFlags) != 0) [[unlikely]]
    return MEMCG_CHARGE_INVALID;
  // The common outcome tested first, so that the mapping stays off the hot path.
  const memcg::ChargeStatus s = memcg::try_charge_bytes(*group->ref, bytes, flags);
  if (s == memcg::ChargeStatus::kOk) [[likely]]
    return MEMCG_CHARGE_OK;
  // A size no counter can hold is a bad argument, told apart only once refused: no cost on the
  // hot path.
  if (too_large(group->ref->controller(), bytes)) [[unlikely]]
    return MEMCG_CHARGE_INVALID;
  return memcg::capi::to_c(s);
}

void memcg_uncharge(memcg_group* group, uint64_t bytes) {
  if (group == nullptr) [[unlikely]]
    return;
  memcg::uncharge_bytes(*group->ref, bytes);
}

void memcg_uncharge_direct(memcg_group* group, uint64_t bytes) {
  if (group == nullptr) return;
  memcg::Group& g = *group->ref;
  const int64_t units = g.controller().to_units_ceil(bytes);
  memcg::uncharge_direct(g, units);
}

int memcg_member_create(memcg_group* group, const char* name, int score_adj,
                        memcg_kill_fn on_kill, void* user, memcg_member** out) {
  if (group == nullptr || name == nullptr || out == nullptr) return EINVAL;
  if (score_adj < memcg::Member::kImmune || score_adj > 1000) return EINVAL;
  if (!group->ref->is_online()) return ENOENT;
  return guarded([&] {
    auto handle = std::make_unique<memcg_member>(group->count.owner());
    memcg::Member::KillFn fn;
    if (on_kill != nullptr) {
      // The function and its argument are captured by value: the callback may destroy the
      // handle, and nothing here touches it after the call. The flag is shared, not read
      // through the handle: the killer may run this wrapper after the handle is gone. Once the
      // program destroyed the member it is not called (the member may live on until its
      // reservations go, and may still be killed, but its program is done with it).
      memcg_member* const self = handle.get();
      std::shared_ptr<std::atomic<bool>> abandoned = handle->abandoned;
      fn = [self, on_kill, user, abandoned](memcg::Member&) {
        if (abandoned->load(std::memory_order_acquire)) return;
        on_kill(self, to_c(memcg::Member::cancel_reason()), user);
      };
    }
    // std::invalid_argument (EINVAL) when the group went offline meanwhile.
    handle->cpp = std::make_unique<memcg::Member>(*group->ref, name, std::move(fn), score_adj);
    *out = handle.release();
    return 0;
  });
}

void memcg_member_destroy(memcg_member* member) {
  if (member == nullptr) return;
  // The program's reference, once: a second destroy of a member that reservations keep alive
  // (a kill callback still running on another thread) drops nothing of theirs.
  if (member->abandoned->exchange(true, std::memory_order_acq_rel)) return;
  memcg::capi::release(member);
}

memcg_charge_status memcg_member_charge(memcg_member* member, uint64_t bytes, unsigned flags) {
  if (member == nullptr || (flags & ~kKnownChargeFlags) != 0) return MEMCG_CHARGE_INVALID;
  memcg::Member& m = *member->cpp;
  const memcg::Controller& ctl = m.group().controller();
  // The same range as a byte charge: more than max_units() units is refused, not truncated.
  if (too_large(ctl, bytes)) return MEMCG_CHARGE_INVALID;
  return memcg::capi::to_c(m.charge(ctl.to_units_ceil(bytes), flags));
}

uint64_t memcg_member_uncharge(memcg_member* member, uint64_t bytes) {
  if (member == nullptr) return 0;
  memcg::Member& m = *member->cpp;
  const memcg::Controller& ctl = m.group().controller();
  const int64_t done = m.uncharge(ctl.to_units_ceil(bytes));
  return ctl.to_bytes(done);
}

int memcg_member_set_score_adj(memcg_member* member, int score_adj) {
  if (member == nullptr || score_adj < memcg::Member::kImmune || score_adj > 1000) return EINVAL;
  member->cpp->set_score_adj(score_adj);
  return 0;
}

int memcg_member_score_adj(const memcg_member* member) {
  return member == nullptr ? 0 : member->cpp->score_adj();
}

int memcg_member_killed(const memcg_member* member) {
  return member != nullptr && member->cpp->killed() ? 1 : 0;
}

uint64_t memcg_member_charged(const memcg_member* member) {
  if (member == nullptr) return 0;
  return member->cpp->group().controller().to_bytes(member->cpp->charged());
}

uint64_t memcg_member_id(const memcg_member* member) {
  return member == nullptr ? 0 : member->cpp->id();
}

}  // extern "C"
