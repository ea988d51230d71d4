// The waiting charges' own types (a waiter, a group's queue, a controller's wait state) and what
// charge_wait_api.cpp (the public overloads) needs of charge_wait.cpp (the queues and the
// policy). Private to src/core.

#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <stop_token>

#include "memcg/base/clock.hpp"
#include "memcg/core/wait/charge_wait.hpp"

namespace memcg {
class Group;

namespace internal {

// One waiting charge. It lives on the waiting thread's stack (nothing is allocated to queue it)
// and is linked into the queue of the group whose limit held while it waits.
struct Waiter {
  enum State : uint8_t { kWaiting, kGranted, kRemoved };
  Waiter(Group* g, int64_t n, int c) noexcept : group(g), units(n), cls(c) {}
  Waiter* prev = nullptr;  // in its class's list, arrival order; guarded by the queue's mutex
  Waiter* next = nullptr;
  Group* group;            // charged group (a reference is held while waiting)
  int64_t units;           // asked
  int64_t reserved = 0;    // already charged to `group` for it (aged waiters)
  uint64_t since_ns = 0;   // queued at, on the controller's clock (grows along its list)
  uint64_t arrival = 0;    // the queue's arrival number: orders waiters queued at the same time
  uint64_t seen = 0;       // ...in which it was served or reserved for (round 2 skips it)
  const int cls;           // WaitPriority kLow..kHigh
  State state = kWaiting;
  // The waiting Member's killed flag (Member::charge_wait), or null: a kill ends the wait, as a
  // fatal signal ends a task's wait for its memcg in the kernel.
  const std::atomic<bool>* killed = nullptr;
  ClockWaiter clock_waiter;  // what the controller's clock blocks and wakes
  bool was_killed() const noexcept {
    return killed != nullptr && killed->load(std::memory_order_acquire);
  }
};

struct WaiterList {
  Waiter* head = nullptr;
  Waiter* tail = nullptr;
  void push_back(Waiter* w) noexcept {
    w->prev = tail;
    w->next = nullptr;
    (tail ? tail->next : head) = w;
    tail = w;
  }
  void erase(Waiter* w) noexcept {
    (w->prev ? w->prev->next : head) = w->next;
    (w->next ? w->next->prev : tail) = w->prev;
    w->prev = w->next = nullptr;
  }
};

// The charges waiting on one group's memory.max, and what became of those that waited.
struct WaitQueue {
  explicit WaitQueue(Group& g) noexcept : owner(&g) {}
  std::mutex mu;  // a leaf but for the other queues of a path, taken root first
  Group* const owner;
  // Guarded by mu.
  WaiterList lists[kWaitPriorities];
  uint64_t epoch = 0;  // dispatches so far
  uint64_t arrivals = 0;
  WaitStats::Class counts[kWaitPriorities];
  uint64_t last_wait_ns = 0, max_wait_ns = 0, wait_ns_sum = 0;
  uint64_t buckets[WaitStats::kBuckets] = {};
  // The class of the owner's own charges that ask for kDefault.
  std::atomic<uint8_t> default_cls{static_cast<uint8_t>(WaitPriority::kNormal)};
  // Cooperative preemption for the waiters of this queue (set_wait_preempt).
  std::atomic<bool> preempt{false};
  // An uncharge in an allocator hook skipped this queue's wake (defer_wake_in_hook).
  std::atomic<bool> hook_wake{false};
  // In ControllerWaits::queues; guarded by ControllerWaits::mu.
  WaitQueue* ctl_prev = nullptr;
  WaitQueue* ctl_next = nullptr;
};

struct ControllerWaits {
  // Taken by waiters on entry and exit, by a queue's creation and freeing, by a removal and by
  // ~Controller; never by an uncharge. Before any queue's mutex.
  std::mutex mu;
  std::atomic<int64_t> aging_ns;
  std::atomic<bool> dying{false};  // written under mu; read under a queue's mutex too
  int active = 0;                  // threads inside a wait (guarded by mu)
  ClockWaiter* destroyer = nullptr;  // ~Controller, waiting for `active` to drop to 0
  WaitQueue* queues = nullptr;       // every queue of the controller
  // Some queue's hook_wake is set (set after the queue's; cleared before they are read).
  std::atomic<bool> hook_wake{false};
  explicit ControllerWaits(int64_t aging) noexcept : aging_ns(aging) {}
};

// Ends a wait: the state is final, the clock wakes the thread. Under the waiter's queue mutex.
inline void finish(Clock& clock, Waiter& w, Waiter::State state) noexcept {
  w.state = state;
  clock.wake(w.clock_waiter);
}

// Queues of one path served together (root first). A path with more levels that have waiters
// serves the ones nearest the root together; the others are served by their own waiters' looks.
inline constexpr int kMaxJointQueues = 16;
struct LockedQueues {
  WaitQueue* q[kMaxJointQueues];
  int n = 0;
};

// The policy (charge_wait_policy.cpp): offers the room there is to the waiters of the queues in
// `l`, the queues of one path, all locked by the caller.
void dispatch_locked(LockedQueues& l, Clock& clock, uint64_t aging) noexcept;

// A deadline on the controller's clock, computed only when it is needed: called once, when the
// ladder failed, so that a charge that succeeds at once reads no clock.
struct LazyDeadline {
  uint64_t (*fn)(const void* arg) noexcept;
  const void* arg;
  uint64_t operator()() const noexcept { return fn(arg); }
};

// Charges `units` (checked, > 0) to `group` (not the root), waiting on the limit that holds.
// `killed`: the waiting Member's flag, or null; once it is set the wait ends as kCancelled.
WaitStatus charge_or_wait(Group& group, int64_t units, const LazyDeadline& deadline,
                          const std::stop_token& stop, int cls, int kind,
                          const std::atomic<bool>* killed = nullptr) noexcept;

// try_charge_wait_for for a Member (oom.cpp): the wait also ends, kCancelled, when `killed`
// (the member's flag) is set; the killer then calls wake_killed_waiters().
WaitStatus member_charge_wait_for(Group& group, int64_t units, std::chrono::nanoseconds timeout,
                                  const std::stop_token& stop, const WaitOptions& options,
                                  const std::atomic<bool>* killed) noexcept;

// Wakes the waiters queued on `group`'s path whose member was killed, so that they leave at
// once instead of at their next poll. REQUIRES: no library lock held.
void wake_killed_waiters(Group& group) noexcept;

// Cooperative preemption (preempt.cpp): asks members of a class below `cls` in the subtree of
// `domain` (the group whose limit holds the waiter) to give memory back for a waiter of `group`
// that still needs `need` units. REQUIRES: no library lock held.
void preempt_for(Group& domain, Group& group, int cls, int64_t need) noexcept;

// The least room over every level from `g` to the root, and the least max.
void room_and_limit(const Group& g, int64_t& room, int64_t& limit) noexcept;

// The wait class of `p` for `group` (kDefault: the group's own), or -1 when `p` is out of range.
int wait_class_of(const Group& group, WaitPriority p) noexcept;

}  // namespace internal
}  // namespace memcg
