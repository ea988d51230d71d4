// The policy of the waiting charges (charge_wait.hpp, docs/charge_wait.md): who gets freed
// room, with the queues of one path locked. The queues themselves, the waiters' path and the
// teardown are in charge_wait.cpp.
#include <algorithm>
#include <cstdint>

#include "memcg/base/clock.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/group.hpp"
#include "charge_wait_internal.hpp"

namespace memcg {

namespace {

using internal::finish;
using internal::kMaxJointQueues;
using internal::LockedQueues;
using internal::room_and_limit;
using internal::Waiter;
using internal::WaitQueue;

// The aging bound of a class: half for kHigh, twice for kLow (charge_wait.hpp).
uint64_t aging_of(int cls, uint64_t aging) noexcept {
  if (cls == static_cast<int>(WaitPriority::kHigh)) return aging / 2;
  if (cls == static_cast<int>(WaitPriority::kLow)) return aging > UINT64_MAX / 2 ? UINT64_MAX : 2 * aging;
  return aging;
}

// When `w` is aged (since + its class's bound, saturated).
uint64_t aged_at(const Waiter& w, uint64_t aging) noexcept {
  const uint64_t a = aging_of(w.cls, aging);
  return w.since_ns > UINT64_MAX - a ? UINT64_MAX : w.since_ns + a;
}

// Arrival order: the clock first, the queue's count for waiters queued at the same time.
bool earlier(const Waiter& a, const Waiter& b) noexcept {
  return a.since_ns != b.since_ns ? a.since_ns < b.since_ns : a.arrival < b.arrival;
}

// The levels (groups) that hold an aged waiter short in this dispatch: no later waiter whose
// charge goes through one of them gets anything in the same dispatch. Without it, units freed
// under such a level by an uncharge that runs while the dispatch does (the counters are
// lock-free; its own dispatch waits for these mutexes) went to whoever round 2 offered them to
// first, a younger waiter of a nested limit included, before the aged waiter's next look. Now
// they stay free until the uncharge's own dispatch, whose round 1 gives them to the aged waiter.
struct ClosedLevels {
  static constexpr int kMax = 16;
  const Group* g[kMax];
  int n = 0;
  bool all = false;  // more than kMax: every level is closed (round 2 serves nobody)
  void add(const Group* level) noexcept {
    for (int i = 0; i < n; ++i)
      if (g[i] == level) return;
    if (n == kMax)
      all = true;
    else
      g[n++] = level;
  }
  // Whether a charge of `from` goes through a closed level.
  bool on_path(const Group* from) const noexcept {
    if (all) return true;
    if (n == 0) return false;
    for (const Group* a = from; a != nullptr && !a->is_root(); a = a->parent())
      for (int i = 0; i < n; ++i)
        if (g[i] == a) return true;
    return false;
  }
  // Closes the full levels of the path of `w`, an aged waiter left short.
  void close_for(const Waiter& w) noexcept {
    for (const Group* a = w.group; a != nullptr && !a->is_root(); a = a->parent())
      if (a->memory().margin() <= 0) add(a);
  }
};

// The smallest need each level refused in this dispatch's round 2. A later waiter asking at
// least that much through the same level could only fit on units freed while this dispatch runs
// (the counters are lock-free); it is skipped, so those units stay free for the uncharge's own
// dispatch, which waits for these mutexes and offers them in order (higher classes, then arrival
// first). Without it such a unit went to whoever came next, a lower class or a later arrival.
// Past kMax levels it stops recording: the dispatch is then only less strict, never wrong.
struct RefusedLevels {
  static constexpr int kMax = 16;
  const Group* g[kMax];
  int64_t need[kMax];
  int n = 0;
  void add(const Group* level, int64_t units) noexcept {
    for (int i = 0; i < n; ++i)
      if (g[i] == level) {
        need[i] = std::min(need[i], units);
        return;
      }
    if (n < kMax) {
      g[n] = level;
      need[n++] = units;
    }
  }
  // Whether a level on the path of `from` refused `units` or fewer.
  bool refuses(const Group* from, int64_t units) const noexcept {
    if (n == 0) return false;
    for (const Group* a = from; a != nullptr && !a->is_root(); a = a->parent())
      for (int i = 0; i < n; ++i)
        if (g[i] == a && need[i] <= units) return true;
    return false;
  }
};

// The group of `from`'s path whose counter is `failed`.
const Group* level_of(const Group* from, const PageCounter* failed) noexcept {
  for (const Group* a = from; a != nullptr; a = a->parent())
    if (&a->memory() == failed) return a;
  return from;
}

// One list of one locked queue (a class), walked in list order. Along a list, since_ns and
// arrival only grow (the enqueue keeps it so), so it is in arrival order, and, its waiters
// sharing one class and aging bound, in the order they age.
struct Cursor {
  Waiter* w;
  WaitQueue* q;
};

}  // namespace

// The policy, with every queue of `l` locked (they are the queues of one path). Freed room is
// offered in two rounds:
//  1. aged waiters (waited their class's aging bound; never one larger than a limit on its path,
//     which can never be whole), the earliest aged first, across every queue of the path and
//     every class: granted if their (remaining) units fit, else the room there is on their path
//     is reserved for them (charged to their group) and they wait for the rest. A reserve takes
//     the room of the level that holds, so nobody younger whose charge goes through that level
//     gets it first: the oldest waiter cannot starve while memory is freed, whatever queue of the
//     path it is on (an outer limit's waiter against a nested limit's ones).
//  2. every other waiter, higher classes first, arrival order within a class across the queues:
//     granted if it fits, whatever waits before it (the bypass: a small request that fits is never
//     held behind a large one that does not).
// In both rounds a waiter whose charge goes through a level that holds an earlier aged waiter
// short (ClosedLevels) gets nothing: what is freed there belongs to the aged one. In round 2 a
// waiter is not offered what a level on its path refused an earlier one asking no more
// (RefusedLevels): the bypass is for smaller requests, not for units freed mid-dispatch.
// Cost: linear in the waiters of the path. Each round is a merge of sorted lists with one cursor
// per list (at most kMaxJointQueues x kWaitPriorities lists), and each waiter is passed once per
// round: O(waiters x lists), the number of lists bounded by a constant. (It was a fresh scan of
// every list per served waiter, quadratic in the waiters.) Nothing unlinks a waiter meanwhile:
// a waiter leaves its list under its queue's mutex, which this holds.
void internal::dispatch_locked(LockedQueues& l, Clock& clock, uint64_t aging) noexcept {
  const uint64_t now = clock.now_ns();
  for (int i = 0; i < l.n; ++i) ++l.q[i]->epoch;
  auto seen = [](const Waiter* w, const WaitQueue* q) { return w->seen == q->epoch; };
  Cursor c[kMaxJointQueues * kWaitPriorities];
  ClosedLevels closed;
  // Round 1: the aged prefix of every list, merged by the time they aged.
  int nc = 0;
  for (int i = 0; i < l.n; ++i)
    for (auto& list : l.q[i]->lists) c[nc++] = {list.head, l.q[i]};
  for (;;) {
    int bi = -1;
    uint64_t best_at = 0;
    for (int i = 0; i < nc; ++i) {
      Waiter*& w = c[i].w;
      while (w != nullptr && w->state != Waiter::kWaiting) w = w->next;
      if (w == nullptr) continue;
      const uint64_t at = aged_at(*w, aging);
      // Not aged: nor is the rest of its list. A clock that reads earlier than `since` (only a
      // broken one) leaves the waiter young.
      if (now < w->since_ns || now < at) continue;
      if (bi < 0 || at < best_at || (at == best_at && earlier(*w, *c[bi].w))) {
        bi = i;
        best_at = at;
      }
    }
    if (bi < 0) break;
    Waiter* best = c[bi].w;
    WaitQueue* best_q = c[bi].q;
    c[bi].w = best->next;
    if (closed.on_path(best->group)) continue;  // behind an earlier aged waiter; round 2 skips it
    const int64_t need = best->units - best->reserved;
    if (best->group->memory().try_charge(need) == nullptr) {
      best->seen = best_q->epoch;
      best->reserved = best->units;
      finish(clock, *best, Waiter::kGranted);
      continue;
    }
    int64_t room, limit;
    room_and_limit(*best->group, room, limit);
    if (best->units > limit) continue;  // can never be whole: blocks nobody; round 2 looks
    best->seen = best_q->epoch;
    if (room > 0 && room < need && best->group->memory().try_charge(room) == nullptr)
      best->reserved += room;
    closed.close_for(*best);
  }
  // Round 2: per class, high first, the lists of the queues merged in arrival order.
  RefusedLevels refused;
  for (int cls = kWaitPriorities - 1; cls >= 0; --cls) {
    nc = 0;
    for (int i = 0; i < l.n; ++i) c[nc++] = {l.q[i]->lists[cls].head, l.q[i]};
    for (;;) {
      int bi = -1;
      for (int i = 0; i < nc; ++i) {
        Waiter*& w = c[i].w;
        while (w != nullptr && (w->state != Waiter::kWaiting || seen(w, c[i].q))) w = w->next;
        if (w != nullptr && (bi < 0 || earlier(*w, *c[bi].w))) bi = i;
      }
      if (bi < 0) break;
      Waiter* best = c[bi].w;
      c[bi].w = best->next;
      best->seen = c[bi].q->epoch;
      if (closed.on_path(best->group)) continue;
      const int64_t need = best->units - best->reserved;
      if (refused.refuses(best->group, need)) continue;
      const PageCounter* failed = best->group->memory().try_charge(need);
      if (failed == nullptr) {
        best->reserved = best->units;
        finish(clock, *best, Waiter::kGranted);
      } else {
        refused.add(level_of(best->group, failed), need);
      }
    }
  }
}

}  // namespace memcg
