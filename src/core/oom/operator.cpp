// An operator's actions on members: list with victim keys, kill, ask for memory back
// (operator.hpp). The choice of what to do is the operator's; the way it is done is the OOM
// killer's and the preemption's (oom_batch.hpp): the callback is moved into a KillBatch under the
// OOM lock and run without it, so that it may destroy its member.
#include "memcg/core/oom/operator.hpp"

#include <algorithm>
#include <cerrno>
#include <utility>

#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "core/wait/charge_wait_internal.hpp"
#include "oom_batch.hpp"

namespace memcg {

const char* member_state_name(MemberState s) noexcept {
  switch (s) {
    case MemberState::kRunning:
      return "running";
    case MemberState::kKilling:
      return "killing";
    case MemberState::kPreempting:
      return "preempting";
    case MemberState::kGone:
      return "gone";
  }
  return "?";
}

namespace internal {

struct OperatorAction {
  // REQUIRES: the OOM lock (the member's OOM fields).
  static MemberState state_of(const Member& m) {
    const int64_t c = m.charged();
    if (m.killed()) return c > 0 ? MemberState::kKilling : MemberState::kGone;
    if (m.preempt_asked_.load(std::memory_order_acquire) && c > 0) return MemberState::kPreempting;
    return MemberState::kRunning;
  }

  // What the root's killer would order `m` by (oom.cpp's Candidate).
  static VictimKey key_of(const Member& m, OomOrder order, int64_t total) {
    VictimKey k;
    k.order = order;
    const int64_t charged = m.charged();
    const int64_t admitted = m.admitted();
    k.excess = admitted > 0 ? std::max<int64_t>(0, charged - admitted) : 0;
    const int64_t tolerated = m.tolerated_peak();
    k.beyond = tolerated > 0 ? std::max<int64_t>(0, charged - std::max(tolerated, admitted)) : 0;
    k.cls = wait_class_of(m.group(), WaitPriority::kDefault);
    k.badness = charged + static_cast<int64_t>(m.score_adj()) * (total / 1000);
    k.immune = m.score_adj() == Member::kImmune;
    return k;
  }

  static void fill(const Member& m, MemberInfo* out) {
    Controller& ctl = m.group().controller();
    out->id = m.id();
    out->name = m.name();
    out->group = m.group().path();
    out->charged_bytes = m.charged() > 0 ? ctl.to_bytes(m.charged()) : 0;
    out->admitted_bytes = m.admitted() > 0 ? ctl.to_bytes(m.admitted()) : 0;
    out->priority = static_cast<WaitPriority>(wait_class_of(m.group(), WaitPriority::kDefault));
    out->score_adj = m.score_adj();
    out->state = state_of(m);
  }

  // The member `id`, or null. REQUIRES: the OOM lock (members leave under it).
  static Member* find(Controller& ctl, uint64_t id) {
    for (Member* m : members_below(ctl.root()))
      if (m->id_ == id) return m;
    return nullptr;
  }

  static bool known(Controller& ctl, uint64_t id) {
    return id != 0 && id <= ctl.oom_state().member_ids.load(std::memory_order_relaxed);
  }

  static int info(Controller& ctl, uint64_t id, MemberInfo* out) {
    if (!known(ctl, id)) return ENOENT;
    HookBypass bypass;
    OomState& state = ctl.oom_state();
    std::lock_guard<std::mutex> lock(state.mu);
    MemberInfo info;
    info.id = id;
    info.state = MemberState::kGone;
    if (Member* m = find(ctl, id)) fill(*m, &info);
    if (out) *out = std::move(info);
    return 0;
  }

  static int kill(Controller& ctl, uint64_t id, MemberInfo* out) {
    if (!known(ctl, id)) return ENOENT;
    HookBypass bypass;  // nothing under the OOM lock is charged (oom.cpp)
    OomState& state = ctl.oom_state();
    KillBatch batch;  // destroyed after the lock: it owns the callback and a group reference
    OomReport report;
    int result = 0;
    bool killed = false;
    std::unique_lock<std::mutex> lock(state.mu);
    {
      BatchLink link(state, batch, lock);
      Member* m = find(ctl, id);
      if (m == nullptr || m->killed()) {
        lock.unlock();  // gone or already killed: nothing to do
        return info(ctl, id, out);
      }
      const uint64_t serial = ++state.serial;
      Group& root = ctl.root();
      const int64_t max = root.memory().max();
      const int64_t total =
          std::max<int64_t>(1, max >= ctl.max_units() ? root.memory().usage() : max);
      OomOrder order = oom_order(root);
      if (order == OomOrder::kAuto) order = m->admitted() > 0 ? OomOrder::kExcess : OomOrder::kKernel;
      const VictimKey k = key_of(*m, order, total);
      report.domain = m->group().path();
      report.order = order;
      report.top.push_back({m->name(), m->group().path(), m->charged(), m->score_adj(), k.badness,
                            m->admitted(), k.excess, static_cast<WaitPriority>(k.cls)});
      report.victim = m->name();
      report.reason = CancelReason::kOperator;
      m->killed_.store(true, std::memory_order_release);
      m->killed_at_ns_ = ctl.clock().now_ns();
      m->given_up_ = false;
      if (m->preempting_) {
        // Its callback is out for a request (a preemption or a spill): that thread tells it of
        // the kill once the request returns (preempt.cpp), as for an OOM kill.
        m->kill_pending_ = true;
        m->kill_pending_in_ = serial;
        report.killed.push_back(m->name());
        report.decider = OomDecider::kOperator;
        state.last = report;
        oom_log(ctl).append(m->group(), report);
      } else {
        batch.entries.push_back(
            {m, std::move(m->on_kill_), GroupRef(&m->group()), m->name(), false});
        KillEntry& e = batch.entries.back();
        std::string error;
        if (run_member_callback(e, *m, CancelReason::kOperator, lock, &error)) {
          killed = true;
          report.killed.push_back(e.name);
          report.decider = OomDecider::kOperator;
        } else {
          result = EIO;
          report.failed.push_back({e.name, std::move(error)});
          report.decider = OomDecider::kNone;
          if (e.member != nullptr) {  // it lives on, unkilled, with its callback
            e.member->killed_.store(false, std::memory_order_release);
            e.member->failed_in_ = serial;
            e.member->on_kill_ = std::move(e.fn);
          }
        }
        state.last = report;
        oom_log(ctl).append(*e.group, report);  // its group: alive through the entry's reference
      }
    }
    GroupRef group = batch.entries.empty() ? GroupRef() : batch.entries.front().group;
    std::vector<KillEntry> spent = std::move(batch.entries);
    lock.unlock();
    spent.clear();
    state.cv.notify_all();  // killers waiting for memory look again
    if (killed && group) wake_killed_waiters(*group);  // its own waits end at once
    group = GroupRef();
    const int err = info(ctl, id, out);
    return result != 0 ? result : err;
  }

  static int preempt(Controller& ctl, uint64_t id, MemberInfo* out) {
    if (!known(ctl, id)) return ENOENT;
    HookBypass bypass;
    OomState& state = ctl.oom_state();
    KillBatch batch;
    PreemptReport report;
    int result = 0;
    bool asked = false;
    std::unique_lock<std::mutex> lock(state.mu);
    {
      BatchLink link(state, batch, lock);
      Member* m = find(ctl, id);
      // Gone, killed, asked before and still holding memory, its callback out for another
      // request, or nothing to give: nothing to ask.
      if (m == nullptr || m->killed() || m->preempting_ || m->charged() <= 0 ||
          m->preempt_asked_.load(std::memory_order_acquire)) {
        lock.unlock();
        return info(ctl, id, out);
      }
      const int cls = wait_class_of(m->group(), WaitPriority::kDefault);
      report.domain = m->group().path();
      report.priority = static_cast<WaitPriority>(cls);
      report.by_operator = true;
      report.asked.push_back({m->name(), m->group().path(), static_cast<WaitPriority>(cls),
                              m->charged()});
      m->preempt_asked_.store(true, std::memory_order_release);
      m->preempt_asked_at_ns_ = ctl.clock().now_ns();
      m->preempting_ = true;  // an OOM kill chosen meanwhile is told after the request
      batch.entries.push_back({m, std::move(m->on_kill_), GroupRef(&m->group()), m->name(), false});
      KillEntry& e = batch.entries.back();
      std::string error;
      asked = run_member_callback(e, *m, CancelReason::kOperator, lock, &error);
      if (!asked) {
        result = EIO;
        report.failed.push_back({e.name, std::move(error)});
      }
      const bool kill = finish_request(e, lock);
      if (!kill && e.member != nullptr && !e.member->on_kill_) e.member->on_kill_ = std::move(e.fn);
      state.last_preempt = report;
      oom_log(ctl).append(*e.group, report);
    }
    GroupRef group = batch.entries.front().group;
    std::vector<KillEntry> spent = std::move(batch.entries);
    lock.unlock();
    spent.clear();
    state.cv.notify_all();
    if (asked) group->raise(Event::kPreempt);
    group = GroupRef();
    const int err = info(ctl, id, out);
    return result != 0 ? result : err;
  }

  static int list(Group& group, size_t max, std::vector<MemberInfo>* out, size_t* total_out) {
    if (out == nullptr || max > kMaxMemberInfos) return EINVAL;
    Controller& ctl = group.controller();
    HookBypass bypass;
    OomState& state = ctl.oom_state();
    struct Row {
      MemberInfo info;
      size_t order;
    };
    std::vector<Row> rows;
    {
      std::lock_guard<std::mutex> lock(state.mu);
      Group& root = ctl.root();
      const int64_t rmax = root.memory().max();
      const int64_t total =
          std::max<int64_t>(1, rmax >= ctl.max_units() ? root.memory().usage() : rmax);
      const std::vector<Member*> members = members_below(group);
      OomOrder order = oom_order(root);
      if (order == OomOrder::kAuto) {
        order = OomOrder::kKernel;
        for (const Member* m : members)
          if (m->admitted() > 0) order = OomOrder::kExcess;
      }
      rows.reserve(members.size());
      for (size_t i = 0; i < members.size(); ++i) {
        Row r{{}, i};
        fill(*members[i], &r.info);
        r.info.key = key_of(*members[i], order, total);
        rows.push_back(std::move(r));
      }
    }
    // The killer's order: immune members last, then the order's comparison (oom.cpp).
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      const VictimKey& x = a.info.key;
      const VictimKey& y = b.info.key;
      if (x.immune != y.immune) return y.immune;
      if (x.order == OomOrder::kExcess) {
        if (x.beyond != y.beyond) return x.beyond > y.beyond;
        if (x.excess != y.excess) return x.excess > y.excess;
        if (x.cls != y.cls) return x.cls < y.cls;
      }
      if (x.badness != y.badness) return x.badness > y.badness;
      return a.order > b.order;
    });
    if (total_out) *total_out = rows.size();
    std::vector<MemberInfo> result;
    result.reserve(std::min(max, rows.size()));
    for (size_t i = 0; i < rows.size() && i < max; ++i) {
      rows[i].info.rank = rows[i].info.key.immune ? 0 : i + 1;
      result.push_back(std::move(rows[i].info));
    }
    *out = std::move(result);
    return 0;
  }
};

}  // namespace internal

int list_members(Group& group, size_t max, std::vector<MemberInfo>* out, size_t* total) {
  return internal::OperatorAction::list(group, max, out, total);
}

int member_info(Controller& controller, uint64_t id, MemberInfo* out) {
  return internal::OperatorAction::info(controller, id, out);
}

int kill_member(Controller& controller, uint64_t id, MemberInfo* out) {
  return internal::OperatorAction::kill(controller, id, out);
}

int preempt_member(Controller& controller, uint64_t id, MemberInfo* out) {
  return internal::OperatorAction::preempt(controller, id, out);
}

}  // namespace memcg
