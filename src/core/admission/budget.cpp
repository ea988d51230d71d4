// The process budget (budget.hpp): the root's limit is min(outside, budget) and a worker thread
// brings usage under it by drain, reclaim, requests to lower classes, and with `force` the OOM
// killer.
#include "memcg/core/admission/budget.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <vector>

#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/charge/limits.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "memcg/core/oom/operator.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/signal/event_bus.hpp"
#include "memcg/core/wait/charge_wait.hpp"

namespace memcg {
namespace {

// One round of the worker, and the largest reclaim pass in it (as memcg::host's root reclaim).
constexpr auto kRoundPeriod = std::chrono::milliseconds(20);
constexpr uint64_t kReclaimStepBytes = 1ull << 20;

uint64_t sub_sat(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

uint64_t steady_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

const char* budget_state_name(BudgetState s) noexcept {
  switch (s) {
    case BudgetState::kNone:
      return "none";
    case BudgetState::kReaching:
      return "reaching";
    case BudgetState::kReached:
      return "reached";
    case BudgetState::kFailed:
      return "failed";
  }
  return "?";
}

ProcessBudget::ProcessBudget(Controller& controller) : ctl_(controller) {}

ProcessBudget::~ProcessBudget() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  static_cast<void>(clear());
}

ProcessBudget::Limits ProcessBudget::limits_locked() const {
  Limits l;
  const uint64_t outside = have_outside_ ? outside_.max : base_max_;
  l.budget_limit = kUnlimited;
  if (status_.state != BudgetState::kNone) {
    l.budget_limit = have_outside_
                         ? sub_sat(sub_sat(status_.target_bytes, outside_.headroom), outside_.extra)
                         : status_.target_bytes;
  }
  l.host_binds = outside <= l.budget_limit;
  l.root_max = std::min(outside, l.budget_limit);
  return l;
}

// Writes the root's limit when it changed: an unchanged one would drain every stock. The outside
// limit, when it is the lower, is written as the outside would (blocking when it enforces); the
// budget's is only stored, the worker brings usage under it.
void ProcessBudget::apply(bool enforce_outside) {
  internal::HookBypass bypass;
  std::lock_guard<std::mutex> writing(apply_mu_);
  Limits l;
  {
    std::lock_guard<std::mutex> lock(mu_);
    l = limits_locked();
  }
  Group& root = ctl_.root();
  if (ctl_.to_units_floor(l.root_max) == root.memory().max()) return;
  const bool block = l.host_binds && enforce_outside && have_outside_;
  write_max(root, l.root_max, !block);
}

int ProcessBudget::set(uint64_t bytes, bool force, std::string* error) {
  auto fail = [&](int err, const char* why) {
    if (error) *error = why;
    return err;
  };
  if (bytes == 0) return fail(EINVAL, "a budget of 0 bytes");
  if (bytes < ctl_.unit_size()) return fail(EINVAL, "a budget below one charge unit");
  if (bytes > ctl_.to_bytes(ctl_.max_units() - 1))
    return fail(ERANGE, "a budget above the largest limit the controller holds");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return fail(EAGAIN, "the budget is being destroyed");
    if (status_.state == BudgetState::kReaching)
      return fail(EBUSY, "a budget is being reached; clear it first or wait for it");
    if (!worker_.joinable()) {
      try {
        worker_ = std::thread([this] { run(); });
      } catch (...) {
        return fail(EAGAIN, "cannot start the budget's thread");
      }
    }
    if (status_.state == BudgetState::kNone && !have_outside_) base_max_ = ctl_.root().max();
    const uint64_t generation = status_.generation + 1;
    status_ = BudgetStatus{};
    status_.generation = generation;
    status_.state = BudgetState::kReaching;
    status_.target_bytes = bytes;
    status_.force = force;
    status_.bound = have_outside_;
    started_ns_ = best_ns_ = steady_ns();
    best_ = UINT64_MAX;
    forced_done_ = false;
    work_ = true;
    queue_locked();
  }
  apply(false);
  cv_.notify_all();
  flush();
  return 0;
}

int ProcessBudget::clear() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.state == BudgetState::kNone) return ENOENT;
    const uint64_t generation = status_.generation;
    status_ = BudgetStatus{};
    status_.generation = generation;
    work_ = true;
    queue_locked();
  }
  apply(false);
  cv_.notify_all();
  flush();
  return 0;
}

BudgetStatus ProcessBudget::status() const {
  BudgetStatus s;
  Limits l;
  bool have_outside;
  uint64_t extra;
  uint64_t started_ns;  // a set() on another thread rewrites it under mu_
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = status_;
    l = limits_locked();
    have_outside = have_outside_;
    extra = outside_.extra;
    started_ns = started_ns_;
  }
  s.bound = have_outside;
  Group& root = ctl_.root();
  s.root_max_bytes = root.max();
  s.limit_bytes = l.budget_limit;
  s.current_bytes = root.current() + (have_outside ? extra : 0);
  if (s.state != BudgetState::kNone) s.limited_by = l.host_binds ? "host" : "budget";
  if (s.state == BudgetState::kReaching) s.elapsed_ns = steady_ns() - started_ns;
  return s;
}

void ProcessBudget::set_outside(const BudgetOutside& outside) {
  bool reaching;
  {
    std::lock_guard<std::mutex> lock(mu_);
    outside_ = outside;
    have_outside_ = true;
    status_.bound = true;
    reaching = status_.state == BudgetState::kReaching;
  }
  apply(outside.enforce);
  if (reaching) cv_.notify_all();
}

void ProcessBudget::set_listener(std::function<void(const BudgetStatus&)> fn) {
  std::lock_guard<std::mutex> lock(listener_mu_);
  listener_ = std::move(fn);
}

void ProcessBudget::queue_locked() {
  try {
    if (changes_.size() >= kMaxChanges) changes_.erase(changes_.begin());
    changes_.push_back({status_.state, status_.generation});
  } catch (...) {
    // No memory for the notice: the state itself is right, GET /v1/budget shows it.
  }
}

void ProcessBudget::flush() {
  // Held across the whole flush: changes are told in the order they were queued.
  std::lock_guard<std::mutex> order(listener_mu_);
  for (;;) {
    Change c;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (changes_.empty()) return;
      c = changes_.front();
      changes_.erase(changes_.begin());
    }
    BudgetStatus s = status();
    s.state = c.state;  // the state it changed to, whatever it is by now
    s.generation = c.generation;
    try {
      // On the controller's event stream (event_bus.hpp), about the root.
      EventBus& bus = ctl_.events();
      if (bus.recording()) {
        std::string p = "{\"state\":\"";
        p += budget_state_name(s.state);
        p += "\",\"generation\":" + std::to_string(s.generation);
        p += ",\"target_bytes\":" + std::to_string(s.target_bytes);
        p += ",\"current_bytes\":" + std::to_string(s.current_bytes);
        p += ",\"root_max_bytes\":";
        p += s.root_max_bytes == kUnlimited ? std::string("null")
                                            : std::to_string(s.root_max_bytes);
        p += ",\"limited_by\":\"";
        p += s.limited_by;
        p += "\",\"drains\":" + std::to_string(s.drains);
        p += ",\"reclaimed_bytes\":" + std::to_string(s.reclaimed_bytes);
        p += ",\"preempted\":" + std::to_string(s.preempted);
        p += ",\"killed\":" + std::to_string(s.killed);
        p += ",\"error\":\"";
        append_json_escaped(&p, s.error);
        p += "\"}";
        bus.publish(BusEventType::kBudget, "/", p);
      }
      if (listener_) listener_(s);
    } catch (...) {
      // No memory for the payload, or a listener that throws: this notice is lost; the budget
      // goes on (GET /v1/budget shows its state).
    }
  }
}

void ProcessBudget::finish(uint64_t generation, BudgetState state, std::string error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.generation != generation || status_.state != BudgetState::kReaching) return;
    status_.state = state;
    status_.error = std::move(error);
    status_.elapsed_ns = steady_ns() - started_ns_;
    queue_locked();
  }
  flush();
}

// One round for budget `generation`: look, and do the next step if usage is still over.
void ProcessBudget::step(uint64_t generation) {
  internal::HookBypass bypass;  // nothing the worker allocates is charged to a tenant
  Group& root = ctl_.root();
  auto still = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return !stopping_ && status_.generation == generation &&
           status_.state == BudgetState::kReaching;
  };
  auto limit = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return limits_locked().budget_limit;
  };
  auto reached = [&] { return root.current() <= limit(); };
  if (reached()) return finish(generation, BudgetState::kReached, {});

  // 1. The stocks: units charged ahead, held by no one.
  ctl_.drain_stocks();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++status_.drains;
  }
  if (reached()) return finish(generation, BudgetState::kReached, {});

  // 2. Reclaim, in passes of at most 1 MiB with a look at clear() between them: the driver
  // takes what is above each group's protection first (reclaim.hpp).
  const uint64_t before = root.current();
  const int64_t step_units = std::max<int64_t>(1, ctl_.to_units_floor(kReclaimStepBytes));
  for (int fruitless = 0; fruitless < 16 && still();) {
    const uint64_t cur = root.current();
    const uint64_t lim = limit();
    if (cur <= lim) break;
    const int64_t want = std::clamp<int64_t>(ctl_.to_units_ceil(cur - lim), 1, step_units);
    if (reclaim(root, want, ReclaimReason::kProactive) == 0) ++fruitless;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_.reclaimed_bytes += sub_sat(before, root.current());
  }
  if (!still()) return;
  if (reached()) return finish(generation, BudgetState::kReached, {});

  // 3. Ask the lower classes for memory back, lowest class first, largest first, until what
  // they hold covers the excess. Asked members are asked once (preempt_member is idempotent).
  std::vector<MemberInfo> members;
  if (list_members(root, kMaxMemberInfos, &members) == 0) {
    std::stable_sort(members.begin(), members.end(), [](const MemberInfo& a, const MemberInfo& b) {
      if (a.priority != b.priority) return a.priority < b.priority;
      return a.charged_bytes > b.charged_bytes;
    });
    uint64_t excess = sub_sat(root.current(), limit());
    for (const MemberInfo& m : members) {
      if (excess == 0 || !still()) break;
      if (m.priority >= WaitPriority::kHigh || m.key.immune || m.charged_bytes == 0) continue;
      if (m.state == MemberState::kPreempting || m.state == MemberState::kKilling) {
        excess = sub_sat(excess, m.charged_bytes);  // on its way back
        continue;
      }
      if (m.state != MemberState::kRunning) continue;
      MemberInfo after;
      // Asked: it is preempting now, or it gave back (some of) what it held in its callback.
      if (preempt_member(ctl_, m.id, &after) == 0 &&
          (after.state != MemberState::kRunning || after.charged_bytes < m.charged_bytes)) {
        std::lock_guard<std::mutex> lock(mu_);
        ++status_.preempted;
      }
      excess = sub_sat(excess, m.charged_bytes);
    }
  }
  if (reached()) return finish(generation, BudgetState::kReached, {});

  // Progress: a new low of usage. Stalled past kBudgetStallNs: force, or fail.
  const uint64_t now = steady_ns();
  const uint64_t cur = root.current();
  bool force, forced_done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cur < best_) {
      best_ = cur;
      best_ns_ = now;
    }
    if (now - best_ns_ < kBudgetStallNs) return;
    force = status_.force;
    forced_done = forced_done_;
  }
  if (force && !forced_done) {
    // 4. The OOM killer, by policy: memory.max written the blocking way.
    const uint64_t kills = oom_log(ctl_).totals().kills;
    {
      std::lock_guard<std::mutex> lock(mu_);
      forced_done_ = true;
      best_ns_ = now;  // another stall period for the victims to unwind
    }
    {
      std::lock_guard<std::mutex> writing(apply_mu_);
      uint64_t root_max;
      {
        std::lock_guard<std::mutex> lock(mu_);
        root_max = limits_locked().root_max;
      }
      write_max(root, root_max, false);
    }
    std::lock_guard<std::mutex> lock(mu_);
    status_.killed += oom_log(ctl_).totals().kills - kills;
    return;
  }
  std::string why = "usage " + std::to_string(cur) + " bytes stayed above the limit of " +
                    std::to_string(limit()) + " bytes";
  why += force ? " after the OOM killer ran" : " (not forced: nothing was killed)";
  finish(generation, BudgetState::kFailed, std::move(why));
}

void ProcessBudget::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait_for(lock, kRoundPeriod, [&] { return stopping_ || work_; });
    if (stopping_) return;
    work_ = false;
    if (status_.state != BudgetState::kReaching) {
      cv_.wait(lock, [&] { return stopping_ || work_; });
      continue;
    }
    const uint64_t generation = status_.generation;
    lock.unlock();
    step(generation);
    lock.lock();
  }
}

}  // namespace memcg
