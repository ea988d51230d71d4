// Per-group counts of what befell a group's own work, for operators: the time its charges slept
// throttled on memory.high, and the OOM kills of its members split by whether the victim ran
// within its admitted size. memory.events counts that a group was throttled or that a member was
// killed; these say how long, and whether the victim was a well-behaved member (a page-worthy
// kill) or a runaway past what it was admitted with (the killer doing its job).
//
// Counted on slow paths only (the throttling sleep, the kill); reads are relaxed loads. Local:
// each count is the group's own (the sleeping charge's group, the victim's group), not its
// descendants'.
#pragma once

#include <cstdint>

#include "memcg/core/tree/group.hpp"

namespace memcg {

// How a killed member stood against its admission when it was chosen.
enum class KillAdmission : uint8_t {
  kWithin,  // charged at most max(admitted, tolerated peak): a well-behaved member
  kOver,    // charged past both: a runaway beyond what it was admitted with
  kNone,    // admitted nothing and had no expected peak: admission says nothing about it
};
inline constexpr int kNumKillAdmissions = 3;
const char* kill_admission_name(KillAdmission a) noexcept;  // "within", "over", "none"

struct GroupTrouble {
  uint64_t throttled_ns = 0;  // memory.high throttling sleeps of charges of the group
  uint64_t oom_kills[kNumKillAdmissions] = {};  // its members OOM-killed, by KillAdmission
};

GroupTrouble group_trouble(const Group& group) noexcept;

namespace internal {
void count_throttle(Group& group, uint64_t ns) noexcept;
void count_oom_kill(Group& group, KillAdmission a) noexcept;
}  // namespace internal

}  // namespace memcg
