// Cooperative preemption (charge_wait.hpp, set_wait_preempt): a waiting charge of a higher class
// that freed memory cannot serve asks members of lower classes to give memory back, through the
// same callback path as an OOM kill (oom_batch.hpp), but as a request: nothing is marked killed
// and nothing waits for the release, which reaches the waiter through the normal wake-up.
//
// Locking: the choice is made under the controller's OOM lock (members' fields, the batches in
// progress, the report); the callbacks and the events run after it is released, on the waiting
// thread, which holds no other library lock (charge_wait.cpp lets go of its queue's mutex first).
#include <algorithm>
#include <exception>
#include <sstream>
#include <utility>

#include "memcg/base/clock.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/oom/oom.hpp"
#include "core/wait/charge_wait_internal.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "oom_batch.hpp"

namespace memcg {

const char* cancel_reason_name(CancelReason r) noexcept {
  switch (r) {
    case CancelReason::kOomKill:
      return "oom_kill";
    case CancelReason::kPreempt:
      return "preempt";
    case CancelReason::kSpill:
      return "spill";
    case CancelReason::kCancel:
      return "cancel";
    case CancelReason::kOperator:
      return "operator";
  }
  return "?";
}

std::string PreemptReport::format() const {
  std::ostringstream o;
  o << "memory cgroup preemption in " << domain << " for a " << wait_priority_name(priority)
    << " waiting charge of " << waiter_group << " (needs " << request_units << " units, short "
    << shortage_units << ")\n";
  for (const PreemptVictim& v : asked)
    o << "  asked " << v.member << " in " << v.group << " (" << wait_priority_name(v.priority)
      << "): charged=" << v.charged << "\n";
  for (const OomFailure& f : failed)
    o << "  request to " << f.member << " failed: its callback threw: " << f.error << "\n";
  if (asked.empty()) o << "  no member to ask\n";
  return o.str();
}

namespace internal {

struct Preemption {
  struct Candidate {
    Member* member;
    int cls;
    int64_t charged;
    size_t order;  // walk order: ties go to the earlier member
  };

  // After a request's callback returned (OOM lock held): an OOM kill that chose the member
  // meanwhile (oom.cpp, take) found its callback out and left the kill to this thread. The member
  // is told now, through the same callback, as the killer would have; a throw fails the kill as
  // it does there (not killed, not chosen again by that OOM). True if a kill was told.
  static bool tell_pending_kill(KillEntry& e, std::unique_lock<std::mutex>& lock) {
    Member* m = e.member;
    if (m == nullptr) return false;  // destroyed meanwhile: its memory went with it
    m->preempting_ = false;
    if (!std::exchange(m->kill_pending_, false)) return false;
    std::string error;  // a kill that throws is not reported (see below)
    e.done = false;  // held by this thread again while the kill callback runs
    const bool ok = run_member_callback(e, *m, CancelReason::kOomKill, lock, &error);
    if (ok) return true;
    // The OOM's report was published when it chose the member; the failure is not added there.
    if (e.member != nullptr) {
      e.member->killed_.store(false, std::memory_order_release);
      e.member->failed_in_ = e.member->kill_pending_in_;
    }
    return false;
  }

  static void run(Group& domain, Group& group, int cls, int64_t need, int64_t shortage) {
    Controller& ctl = domain.controller();
    OomState& state = ctl.oom_state();
    // Destroyed after the lock is released: they own user callbacks and group references.
    KillBatch batch;
    PreemptReport report;
    std::unique_lock<std::mutex> lock(state.mu);
    BatchLink link(state, batch, lock);
    const uint64_t now = ctl.clock().now_ns();
    {
      const std::vector<Member*> members = members_below(domain);
      std::vector<Candidate> candidates;
      int64_t coming = 0;  // held by members asked before (for this waiter or another)
      for (size_t i = 0; i < members.size(); ++i) {
        Member* m = members[i];
        const int64_t c = m->charged();
        if (c <= 0 || &m->group() == &group) continue;
        if (m->killed()) {
          coming += c;  // a victim: its memory is on its way back
          continue;
        }
        if (m->preempt_asked_.load(std::memory_order_relaxed)) {
          // Asked before: its memory is counted as coming for as long as the OOM killer waits
          // for a victim; after that it is given up on (not counted, still not asked again).
          if (now - m->preempt_asked_at_ns_ < kOomVictimWaitNs) coming += c;
          continue;
        }
        if (m->score_adj() == Member::kImmune || held_by_this_thread(state, m)) continue;
        const int mc = wait_class_of(m->group(), WaitPriority::kDefault);
        if (mc < 0 || mc >= cls) continue;  // equal and higher classes are never asked
        candidates.push_back({m, mc, c, i});
      }
      int64_t left = shortage - coming;
      if (left <= 0 || candidates.empty()) return;
      // Lowest class first, largest first (TiDB's arbitrator order); then walk order.
      std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
        if (a.cls != b.cls) return a.cls < b.cls;
        if (a.charged != b.charged) return a.charged > b.charged;
        return a.order < b.order;
      });
      report.domain = domain.path();
      report.waiter_group = group.path();
      report.priority = static_cast<WaitPriority>(cls);
      report.request_units = need;
      report.shortage_units = left;
      for (const Candidate& c : candidates) {
        if (left <= 0 || batch.entries.size() >= static_cast<size_t>(kMaxPreemptAsks)) break;
        Member* m = c.member;
        m->preempt_asked_.store(true, std::memory_order_release);
        m->preempt_asked_at_ns_ = now;
        m->preempting_ = true;
        batch.entries.push_back(
            {m, std::move(m->on_kill_), GroupRef(&m->group()), m->name(), false});
        report.asked.push_back({m->name(), m->group().path(), static_cast<WaitPriority>(c.cls),
                                c.charged});
        left -= c.charged;
      }
    }
    for (KillEntry& e : batch.entries) {
      Member* m = e.member;  // read under the lock: ~Member clears it there
      if (m == nullptr) continue;  // destroyed before its turn: its memory went with it
      std::string error;
      const bool ok = run_member_callback(e, *m, CancelReason::kPreempt, lock, &error);
      if (!ok) report.failed.push_back({e.name, std::move(error)});
      // How it stood when asked, if a kill pending for it is told now (trouble.hpp).
      const KillAdmission admission =
          e.member != nullptr ? internal::kill_admission_of(*e.member) : KillAdmission::kNone;
      const bool kill = tell_pending_kill(e, lock);
      // A request, not a kill: the member keeps its callback for a later OOM kill or request
      // (unless one taken meanwhile put another there). A kill told here used it up, as the
      // killer's does.
      if (!kill && e.member != nullptr && !e.member->on_kill_) e.member->on_kill_ = std::move(e.fn);
      lock.unlock();
      state.cv.notify_all();  // an OOM killer waiting for memory looks again
      if (ok) e.group->raise(Event::kPreempt);
      if (kill) e.group->raise(Event::kOomKill);
      if (kill) internal::count_oom_kill(*e.group, admission);
      lock.lock();
    }
    oom_log(ctl).append(domain, report);
    state.last_preempt = std::move(report);
    // What the batch holds (callbacks, group references) is let go after the lock.
    std::vector<KillEntry> spent = std::move(batch.entries);
    batch.entries.clear();
    lock.unlock();
  }
};

bool finish_request(KillEntry& e, std::unique_lock<std::mutex>& lock) {
  return Preemption::tell_pending_kill(e, lock);
}

void preempt_for(Group& domain, Group& group, int cls, int64_t need) noexcept {
  if (cls <= static_cast<int>(WaitPriority::kLow) || need <= 0) return;
  int64_t room, limit;
  room_and_limit(group, room, limit);
  if (need > limit) return;  // can never be whole: asking would free memory for nothing
  const int64_t shortage = need - std::max<int64_t>(room, 0);
  if (shortage <= 0) return;
  // Nothing the preemption allocates is charged (it holds the OOM lock, which a nested charge
  // could need); the callbacks run inside this too, as an OOM kill's do.
  HookBypass bypass;
  try {
    Preemption::run(domain, group, cls, need, shortage);
  } catch (...) {
    // Out of memory for the candidate list: no request this time; the next poll tries again.
  }
}

}  // namespace internal
}  // namespace memcg
