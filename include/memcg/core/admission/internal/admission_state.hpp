// Internal: the per-group state behind admission by learned peak and growth past admission
// (admission.hpp, reservation.hpp). Used by Reservation only.
#pragma once

#include <cstdint>
#include <stop_token>

namespace memcg {
class Group;
namespace internal {

struct AdmitState;

// Group::~Group: frees the group's admission state.
void admit_group_freed(Group& group) noexcept;

// Learns one finished admission of `group`: `peak` units held at most since it was admitted with
// `admitted` units (admitted > 0). A `cut_short` one (killed, preempted, growth refused) is only
// counted (AdmitStats::skipped), not learned.
void admit_learn(Group& group, int64_t admitted, int64_t peak, bool cut_short) noexcept;

// A reservation gave memory back: wakes the waiting admissions, if any, to look again.
void admit_uncharged() noexcept;

// The expected peak, in units, of a request for `total` units on `group` (clamped to the
// smallest memory.max of its path, never below `total`).
int64_t admit_expected(const Group& group, int64_t total) noexcept;

// The tolerated peak, in units, of a request for `total` units on `group`: total times the
// group's tolerance (admission.hpp), clamped to the smallest memory.max of its path, never below
// `total`.
int64_t admit_tolerated(const Group& group, int64_t total) noexcept;

// Adds `delta` to the promised units of `group` and each ancestor but the root. A negative delta
// re-checks the waiting admissions.
void admit_promise_add(Group& group, int64_t delta) noexcept;

enum class AdmitWait : uint8_t { kOk, kTimedOut, kCancelled };
// Waits until `need` units fit by expectation on every level of `group`'s path with a
// memory.max, then promises `need` units (admit_promise_add) under the admission mutex.
AdmitWait admit_wait(Group& group, int64_t need, uint64_t deadline_ns,
                     const std::stop_token& stop) noexcept;

// Growth past the tolerated peak (reservation.hpp): the first level of `group`'s path (root
// excluded) with a memory.max where others = promised - own > 0 and usage + others + need >
// max, i.e. where `need` more units would take memory promised to other admitted reservations
// (`own`: what the asking reservation itself has promised on its path); null when every level
// has room beside the promises (a level without others' promises is the ordinary limit). `*want` is set to need + the others' promise on that level: the room the OOM killer
// is asked to make there.
Group* promised_level(Group& group, int64_t need, int64_t own, int64_t* want) noexcept;

// Growth past admission (Reservation::grow): the level of `group`'s path (root excluded) that has
// no room for `units` more, the lowest limit first; null when all have room.
Group* full_level(Group& group, int64_t units) noexcept;
// Units charged by members under `limit` that were killed or asked to give memory back and have
// not released them yet: memory on its way back.
int64_t unwinding_units(Group& limit) noexcept;
// How long growth may wait for that memory now (derived from the observed waits, clamped).
uint64_t growth_bound_ns(const Group& limit) noexcept;
void growth_observe(Group& limit, bool granted, uint64_t waited_ns) noexcept;

}  // namespace internal
}  // namespace memcg
