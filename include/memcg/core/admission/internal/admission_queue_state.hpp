// Internal: the per-group state of the admission queues (admission_queue.hpp): the group's
// memory.admit.weight and the statistics of memory.admit.queue. Users must not include it.
#pragma once

namespace memcg {
class Group;
namespace internal {

// Group::~Group: frees the group's queue state.
void admit_queue_group_freed(Group& group) noexcept;

}  // namespace internal
}  // namespace memcg
