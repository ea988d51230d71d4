// What the OOM killer (oom.cpp) and cooperative preemption (preempt.cpp) share: the members of a
// subtree, and a batch of member callbacks in progress, so that a callback may destroy its member
// and ~Member never waits for it. Private to src/core.
#pragma once

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memcg/base/internal/lock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/signal/trouble.hpp"

namespace memcg {

struct OomKillerAccess {
  static std::mutex& policy_mutex(Group& g) { return g.policy_mutex_; }
  static std::atomic<uint8_t>& oom_order(Group& g) { return g.oom_order_; }
  static const std::vector<Member*>& members(Group& g) { return g.members_; }
};

namespace internal {

// How `m` stands against its admission now (trouble.hpp): within max(admitted, tolerated peak),
// past it, or with neither.
inline KillAdmission kill_admission_of(const Member& m) noexcept {
  const int64_t bound = std::max(m.admitted(), m.tolerated_peak());
  if (bound <= 0) return KillAdmission::kNone;
  return m.charged() <= bound ? KillAdmission::kWithin : KillAdmission::kOver;
}

// A member chosen by one OOM kill (or asked to give memory back) whose callback has not
// returned yet.
struct KillEntry {
  Member* member;     // null once the member is destroyed (then nothing touches it)
  Member::KillFn fn;  // moved out of the member: a callback may destroy its member
  GroupRef group;     // the member's group, for the event after the callback
  std::string name;
  bool running = false;  // its callback is executing (on the batch's thread)
  bool done = false;     // its callback has returned
  // How the member stood against its admission when it was chosen (trouble.hpp).
  KillAdmission admission = KillAdmission::kNone;
};

// One OOM kill (or preemption) in progress, on the stack of the thread that runs it, linked into
// the controller's OomState while it lives. Guarded by the OOM lock.
struct KillBatch {
  std::thread::id owner = std::this_thread::get_id();
  std::vector<KillEntry> entries;
  Member* waiting_for = nullptr;  // a dying victim this kill waits for; cleared by ~Member
  KillBatch* next = nullptr;
};

// Every member in the subtree of `root`, in walk order (pre-order, then joining order).
inline std::vector<Member*> members_below(Group& root) {
  std::vector<Member*> out;
  root.controller().walk(root, [&](Group& g) {
    LockGuard lock(OomKillerAccess::policy_mutex(g));
    const auto& v = OomKillerAccess::members(g);
    out.insert(out.end(), v.begin(), v.end());
  });
  return out;
}

// Links a batch into the controller's kills in progress; unlinks it, under the lock, at the end.
class BatchLink {
 public:
  BatchLink(OomState& state, KillBatch& batch, std::unique_lock<std::mutex>& lock)
      : state_(state), batch_(batch), lock_(lock) {
    batch.next = state.batches;
    state.batches = &batch;
  }
  ~BatchLink() {
    if (!lock_.owns_lock()) lock_.lock();
    for (KillBatch** p = &state_.batches; *p; p = &(*p)->next)
      if (*p == &batch_) {
        *p = batch_.next;
        break;
      }
  }
  BatchLink(const BatchLink&) = delete;
  BatchLink& operator=(const BatchLink&) = delete;

 private:
  OomState& state_;
  KillBatch& batch_;
  std::unique_lock<std::mutex>& lock_;
};

// True if a batch in progress on this thread has yet to finish calling `m`'s callback: it runs
// further up this stack or is still to run there, so waiting for `m` would wait for ourselves.
inline bool held_by_this_thread(const OomState& state, const Member* m) {
  const std::thread::id me = std::this_thread::get_id();
  for (const KillBatch* b = state.batches; b; b = b->next)
    if (b->owner == me)
      for (const KillEntry& e : b->entries)
        if (e.member == m && !e.done) return true;
  return false;
}

// Runs `e`'s callback with the OOM lock released (`lock` held on entry and on return), with
// Member::cancel_reason() `reason` on this thread meanwhile. False, with the exception's text in
// `error`, if it threw.
bool run_member_callback(KillEntry& e, Member& m, CancelReason reason,
                         std::unique_lock<std::mutex>& lock, std::string* error);

// After a request's callback (a preemption or a spill) returned, OOM lock held: ends the request
// and tells a kill that an OOM chose the member for meanwhile (preempt.cpp). True if it told one
// (the callback was used up by the kill).
bool finish_request(KillEntry& e, std::unique_lock<std::mutex>& lock);

// OOM handlers (oom_handler.cpp). Runs the chain of `domain` (no lock held); true, with the
// report's decider and handler set, if one made room for `units`. Every call is in the report.
bool run_oom_handlers(Group& domain, int64_t units, OomReport& report);
// True if an OOM handler runs on this thread for `domain`'s subtree or an ancestor's: that OOM
// runs no handler and chooses no victim.
bool in_oom_handler_for(const Group& domain) noexcept;

}  // namespace internal
}  // namespace memcg
