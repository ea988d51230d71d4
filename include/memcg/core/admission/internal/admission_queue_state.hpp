// Internal: the per-group state of the admission queues (admission_queue.hpp): the group's
// memory.admit.weight and the statistics of memory.admit.queue. Users must not include it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memcg {
class Group;
class AdmissionQueue;
namespace internal {

// What a queue keeps now, for tests and benchmarks: its cost must follow the work queued, not
// the groups it has seen.
struct AdmissionQueueShape {
  size_t groups = 0;          // groups with an entry (items queued or being tried)
  size_t leads = 0;           // idle groups whose virtual time ahead is remembered (no reference)
  size_t starved = 0;         // groups starved at a shared level
  size_t stop_callbacks = 0;  // registered stop callbacks (queued items with a stop token)
};
#define MEMCG_ADMISSION_QUEUE_ACCESS 1  // AdmissionQueueAccess exists (bench/admission_queue_bench.cpp)
struct AdmissionQueueAccess {
  static AdmissionQueueShape shape(const AdmissionQueue& q);
  // The time submit() holds the queue's mutex, summed, while measuring is on (it costs two clock
  // reads per submit): for the benchmark.
  static void time_submits(AdmissionQueue& q, bool on) noexcept;
  static uint64_t submit_lock_ns(const AdmissionQueue& q) noexcept;
  static uint64_t submits_timed(const AdmissionQueue& q) noexcept;
};

// Group::~Group: frees the group's queue state.
void admit_queue_group_freed(Group& group) noexcept;

}  // namespace internal
}  // namespace memcg
