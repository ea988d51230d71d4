// The per-group trouble counts (trouble.hpp), kept with the group's pressure state.
#include "memcg/core/signal/trouble.hpp"

#include "pressure_state.hpp"

namespace memcg {

const char* kill_admission_name(KillAdmission a) noexcept {
  switch (a) {
    case KillAdmission::kWithin: return "within";
    case KillAdmission::kOver: return "over";
    case KillAdmission::kNone: break;
  }
  return "none";
}

GroupTrouble group_trouble(const Group& group) noexcept {
  const internal::GroupTroubleCounts& t = group.pressure_state().trouble;
  GroupTrouble out;
  out.throttled_ns = t.throttled_ns.load(std::memory_order_relaxed);
  for (int i = 0; i < kNumKillAdmissions; ++i)
    out.oom_kills[i] = t.oom_kills[i].load(std::memory_order_relaxed);
  return out;
}

void internal::count_throttle(Group& group, uint64_t ns) noexcept {
  group.pressure_state().trouble.throttled_ns.fetch_add(ns, std::memory_order_relaxed);
}

void internal::count_oom_kill(Group& group, KillAdmission a) noexcept {
  group.pressure_state().trouble.oom_kills[static_cast<int>(a)].fetch_add(
      1, std::memory_order_relaxed);
}

}  // namespace memcg
