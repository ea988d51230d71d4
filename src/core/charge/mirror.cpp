#include "memcg/core/charge/mirror.hpp"

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/charge/obj_stock.hpp"

namespace memcg {

MirroredCharge::MirroredCharge(Group& group, int kind, uint32_t flags)
    : group_(&group), kind_(kind), flags_(flags | kNoSpin) {}

MirroredCharge::~MirroredCharge() {
  const int64_t units = charged_units_.exchange(0, std::memory_order_relaxed);
  if (units > 0) uncharge_direct(*group_, units, kind_);
}

uint64_t MirroredCharge::charged_bytes() const noexcept {
  return group_->controller().to_bytes(charged_units_.load(std::memory_order_relaxed));
}

int MirroredCharge::set(uint64_t bytes) noexcept {
  if (bytes > ObjStock::kMaxBytes) return EINVAL;
  // A charge's callback runs with the reclaim depth raised: a growth charged from there would be
  // forced without reclaim, and an uncharge could free what the ladder is counting on.
  if (internal::tl_reclaim_depth > 0) return EBUSY;
  target_.store(bytes, std::memory_order_release);
  int rc = 0;
  // One setter charges at a time; the others leave their report for it. After releasing, the
  // setter looks again, so a report that arrived meanwhile is never left unapplied.
  while (!busy_.exchange(true, std::memory_order_acquire)) {
    const uint64_t target = target_.load(std::memory_order_acquire);
    rc = apply(target);
    busy_.store(false, std::memory_order_release);
    if (rc != 0 || target_.load(std::memory_order_acquire) == target) break;
  }
  return rc;
}

int MirroredCharge::apply(uint64_t target) noexcept {
  const int64_t want = group_->controller().to_units_ceil(target);
  const int64_t have = charged_units_.load(std::memory_order_relaxed);
  if (want > have) {
    const ChargeStatus s = try_charge(*group_, want - have, flags_, kind_);
    if (!charged(s)) return ENOMEM;
    if (s == ChargeStatus::kForced) {
      forced_.fetch_add(1, std::memory_order_relaxed);
      forced_bytes_.fetch_add(group_->controller().to_bytes(want - have),
                              std::memory_order_relaxed);
    }
    charged_units_.store(want, std::memory_order_relaxed);
  } else if (want < have) {
    // Memory the other library freed: the counters show it at once, as a waiting charge needs.
    charged_units_.store(want, std::memory_order_relaxed);
    uncharge_direct(*group_, have - want, kind_);
  }
  return 0;
}

}  // namespace memcg
