// Acting on members from outside the process: list them with the key the OOM killer orders
// victims by, kill one, or ask one to give memory back (memcg::http's /v1/members, the process
// budget). An operator's decision goes through the same callback path as an OOM kill or a
// preemption (oom.hpp): the member's callback runs with CancelReason::kOperator, no library lock
// held, on the calling thread; the OOM log records it with the decider "operator".
//
// States (MemberState): a member is running until someone acts on it; killing from its kill
// until it holds nothing; preempting from a request until it holds nothing (then running
// again); gone once a killed member holds nothing, or once it was destroyed (its destructor
// uncharges what it held). A member counts as gone only when its bytes are uncharged, as a
// query coordinator counts a killed query gone only once its memory is freed.
//
// Ids are Member::id(): 1, 2, ... per controller. An id the controller never gave is unknown
// (ENOENT); one it gave to a member that was destroyed since is gone.
//
// Idempotent: killing a member that is killing or gone, or asking one that is preempting (or
// killing, or gone), runs no callback and reports its state. A kill whose callback throws leaves
// the member running (as an OOM kill does) and returns EIO.
//
// Thread safety: any thread; REQUIRES: no library lock held (callbacks run). Cost: a walk of the
// members under the OOM lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "memcg/core/oom/oom.hpp"

namespace memcg {

enum class MemberState : uint8_t { kRunning, kKilling, kPreempting, kGone };
const char* member_state_name(MemberState s) noexcept;  // "running", "killing", ...

// The tuple the OOM killer orders candidates by in the root's order (oom.hpp; docs/policy.md):
// with OomOrder::kExcess, (beyond, excess, -class, badness) compared from the left, larger
// first; with kKernel, badness alone. The same tuple in several processes lets an arbiter agree
// on one victim. Badness is charged units + score_adj x total / 1000, total being the root's
// memory.max (its usage when unlimited), as the killer computes it.
struct VictimKey {
  OomOrder order = OomOrder::kKernel;  // never kAuto: the order the root's killer would use
  int64_t beyond = 0;   // units past its tolerated peak (0 within it or with none)
  int64_t excess = 0;   // units past admitted (0 when nothing was admitted)
  int cls = 1;          // wait class of its group (WaitPriority)
  int64_t badness = 0;
  bool immune = false;  // score_adj -1000: never a victim
};

struct MemberInfo {
  uint64_t id = 0;
  std::string name;
  std::string group;
  uint64_t charged_bytes = 0;
  uint64_t admitted_bytes = 0;
  WaitPriority priority = WaitPriority::kNormal;  // its group's class
  int score_adj = 0;
  MemberState state = MemberState::kRunning;
  VictimKey key;
  uint64_t rank = 0;  // 1 = the root's killer would choose it first (immune members: 0)
};

inline constexpr size_t kMaxMemberInfos = 4096;

// The members of `group`'s subtree (at most `max`, in the killer's order, first victim first;
// immune members last), and in `*total` how many there are. EINVAL (nothing changed) for a null
// `out` or a `max` over kMaxMemberInfos.
[[nodiscard]] int list_members(Group& group, size_t max, std::vector<MemberInfo>* out,
                               size_t* total = nullptr);

// The member `id` of `controller`. 0 (with state kGone and only the id set when it was
// destroyed), or ENOENT for an id never given.
[[nodiscard]] int member_info(Controller& controller, uint64_t id, MemberInfo* out);

// Kills member `id`: marks it killed, runs its callback with kOperator and records an OOM report
// (decider kOperator) in the OOM log. 0 with its state after the call (killing until it holds
// nothing; a callback that released everything leaves it gone), ENOENT for an unknown id, EIO
// when its callback threw (it is not killed). Idempotent (see above).
[[nodiscard]] int kill_member(Controller& controller, uint64_t id, MemberInfo* out = nullptr);

// Asks member `id` to give memory back: runs its callback with kOperator, not killed(), and
// records a preemption report (by_operator) in the OOM log. A member that holds nothing is not
// asked (state running). ENOENT for an unknown id, EIO when its callback threw.
[[nodiscard]] int preempt_member(Controller& controller, uint64_t id, MemberInfo* out = nullptr);

}  // namespace memcg
