// ProcessBudget: the whole process asked, from outside, to fit a smaller budget (memcg::http's
// PUT /v1/budget; a Kubernetes in-place resize, docs/kubernetes.md), and told when it does.
//
// While a budget is set, the root's memory.max is the smaller of the budget's limit and the
// limit that holds without it (the kernel's, through memcg::host, or the root's memory.max when
// the budget was set). The budget's limit is
//     target                                     unbound
//     target - headroom - outside usage          bound (set_outside(): memcg::host)
// where the outside usage is what the kernel counts in the process's cgroup beyond the root's
// usage (page cache included, as the kubelet counts it before it applies a decrease). Each
// counts once: the root's limit is min(budget's, host's), never one taken off the other, so when
// the kernel limit drops to the target the host's limit takes over without the shortfall being
// counted twice (status().limited_by then says "host").
//
// The limit is stored at once (nothing is refused that was charged); a worker thread of this
// object then brings usage under it with the steps the library has for memory.max below usage,
// in this order each round, until usage <= limit:
//   1. drain the per-CPU stocks;
//   2. reclaim (the reclaim driver: caches above their protection first);
//   3. ask members of the lower classes (below WaitPriority::kHigh, lowest class first, largest
//      first) to give memory back (preempt_member(), reason "operator"), and wait for them;
//   4. only with `force`: write memory.max the blocking way, which OOM-kills by policy.
// State: reaching, then reached (usage under the limit) or failed (no progress for
// kBudgetStallNs, after step 4 when forced). The root's limit stays in force in every state
// until clear().
//
// Thread safety: any thread. No lock of this object is held while the library reclaims, writes a
// limit or runs member callbacks, nor while the listener runs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/tree/controller.hpp"

namespace memcg {

enum class BudgetState : uint8_t { kNone, kReaching, kReached, kFailed };
const char* budget_state_name(BudgetState s) noexcept;  // "none", "reaching", "reached", "failed"

// A budget with no progress for this long fails (steady clock).
inline constexpr uint64_t kBudgetStallNs = 2'000'000'000;

struct BudgetStatus {
  BudgetState state = BudgetState::kNone;
  uint64_t generation = 0;    // 1, 2, ... one per set()
  uint64_t target_bytes = 0;  // as set
  bool force = false;
  bool bound = false;         // set_outside() was called: the limit is in the kernel's terms
  uint64_t limit_bytes = kUnlimited;  // the budget's limit on the root (see the file comment)
  uint64_t root_max_bytes = kUnlimited;  // the root's memory.max in force
  const char* limited_by = "none";       // "budget", "host" (the outside limit) or "none"
  // What is compared with the target: the root's usage, plus the outside usage when bound.
  uint64_t current_bytes = 0;
  // What was done for this budget so far.
  uint64_t drains = 0;
  uint64_t reclaimed_bytes = 0;
  uint64_t preempted = 0;  // members asked to give memory back
  uint64_t killed = 0;     // members the forced write's OOM killer killed
  uint64_t elapsed_ns = 0; // since set(), until reached or failed (steady clock)
  std::string error;       // why it failed
};

// What holds the root from outside the library (memcg::host's refresh).
struct BudgetOutside {
  uint64_t max = kUnlimited;   // the root's memory.max the outside limit derives
  uint64_t extra = 0;          // outside usage: the kernel's usage - the root's usage
  uint64_t headroom = 0;       // kept free below the target
  bool enforce = true;         // the outside limit is written the blocking way (host's enforce)
};

class ProcessBudget {
 public:
  // REQUIRES: `controller` outlives the budget.
  explicit ProcessBudget(Controller& controller);
  // Stops the worker and clears the budget (the root's limit is the outside one again).
  ~ProcessBudget();
  ProcessBudget(const ProcessBudget&) = delete;
  ProcessBudget& operator=(const ProcessBudget&) = delete;

  // Sets the target and starts reaching it. EINVAL for 0 or less than one charge unit, ERANGE
  // above the largest limit the controller holds, EBUSY while a budget is being reached (clear it
  // first, or wait for reached or failed); EAGAIN when the worker thread cannot be started.
  // Nothing changes on error; `error` (if given) says why.
  [[nodiscard]] int set(uint64_t bytes, bool force = false, std::string* error = nullptr);
  // Removes the budget: the root's limit is the outside one again. ENOENT when none is set.
  [[nodiscard]] int clear();
  BudgetStatus status() const;

  // Called by what sets the root's limit from outside (memcg::host) instead of writing the
  // root's memory.max itself: the root gets min(outside.max, the budget's limit). Also without a
  // budget set (the outside limit is then written as the outside would).
  void set_outside(const BudgetOutside& outside);
  // Called with each change of state, in order, with no library lock held, on the thread that
  // made the change or the next one to tell (the worker, or a caller of set() or clear()); each
  // change is also a `budget` event on the controller's event stream (event_bus.hpp). Replaces
  // the previous one; empty to remove. It must not call set_listener().
  void set_listener(std::function<void(const BudgetStatus&)> fn);

 private:
  struct Limits {
    uint64_t root_max;
    uint64_t budget_limit;
    bool host_binds;
  };
  Limits limits_locked() const;
  void apply(bool enforce_outside);
  void run();
  void step(uint64_t generation);
  void finish(uint64_t generation, BudgetState state, std::string error);
  // A change of state, queued under mu_ in the order it happened; flush() tells the listener and
  // the event stream in that order, whichever thread calls it.
  void queue_locked();
  void flush();

  Controller& ctl_;
  mutable std::mutex mu_;          // guards what follows; never held over library calls
  std::mutex apply_mu_;            // serializes writes of the root's limit (held over them)
  std::condition_variable cv_;
  BudgetStatus status_;
  BudgetOutside outside_;
  bool have_outside_ = false;
  uint64_t base_max_ = kUnlimited;  // the root's memory.max when set() was called, unbound
  uint64_t started_ns_ = 0;
  uint64_t best_ns_ = 0;           // when usage last dropped to a new low
  uint64_t best_ = UINT64_MAX;     // that low
  bool forced_done_ = false;
  uint64_t kills_before_ = 0;      // the OOM log's kill count when the forced write started
  bool stopping_ = false;
  bool work_ = false;              // a state change for the worker to look at
  struct Change {
    BudgetState state;
    uint64_t generation;
  };
  std::vector<Change> changes_;    // guarded by mu_; at most kMaxChanges, the oldest dropped
  static constexpr size_t kMaxChanges = 16;
  std::function<void(const BudgetStatus&)> listener_;
  std::mutex listener_mu_;         // held while flushing (taken before mu_, never after it)
  std::thread worker_;
};

}  // namespace memcg
