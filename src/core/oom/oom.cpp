// The OOM killer: members, victim selection, memory.oom.group.
//
// Locking: the controller's OOM lock (OomState::mu) covers the decision (scan, choice, marking
// victims killed) and the bookkeeping of kills in progress; kill callbacks and event listeners
// run after it is released. A member chosen for a kill is recorded in the caller's KillBatch
// (its callback moved there), which ~Member clears under the lock, so the killer never touches
// a destroyed member. Lock order: OOM lock, then the tree lock (shared), then a group's policy
// lock.
#include "memcg/core/oom/oom.hpp"
#include "memcg/base/internal/lock.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/base/internal/utf8.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "core/wait/charge_wait_internal.hpp"
#include "oom_batch.hpp"

namespace memcg {

namespace {

using internal::KillBatch;
using internal::KillEntry;
using internal::BatchLink;
using internal::held_by_this_thread;
using internal::members_below;

// How often a killer waiting for a victim looks again without a wake-up: the victim's release
// wakes it, but room made by others (or a clock other than the system clock, which advances only
// when slept on) does not.
constexpr uint64_t kOomWaitStepNs = 1'000'000;

// ---- charges in progress of members, per thread ------------------------------------------------
// A kill callback may destroy its member while that member's charge is still inside the failure
// ladder on the same thread. The ladder then reads the "killed" flag through
// internal::tl_charging_member_killed and keeps using the group, so ~Member points the flag at a
// flag that lives for ever and leaves a group reference with the charge.
struct MemberCharge {
  Member* member;  // null once destroyed during the charge
  const std::atomic<bool>* outer_killed;
  MemberCharge* outer;
  GroupRef keep;  // set when the member is destroyed: the charge still uses its group
};
thread_local MemberCharge* tl_member_charge = nullptr;
// What a destroyed member's charge reads as its "killed" flag: dying, so the charge fails.
constinit const std::atomic<bool> kDestroyedMember{true};
// Member::cancel_reason(): why the callback running on this thread was called.
thread_local CancelReason tl_cancel_reason = CancelReason::kOomKill;

struct Candidate {
  Member* member;
  int64_t badness;
  size_t order;  // position in walk order (ties go to the later member)
  int64_t admitted;
  int64_t excess;  // charged past admitted; 0 when nothing was admitted
  int cls;         // wait priority class of its group
  int64_t beyond;  // charged past its tolerated peak; 0 within it or with none
};

// The kernel's order: highest badness first; on a tie the later member in walk order.
bool kernel_first(const Candidate& a, const Candidate& b) {
  return a.badness != b.badness ? a.badness > b.badness : a.order > b.order;
}
// The excess order: furthest past the tolerated peak first, then the largest excess, then the
// lower class, then the kernel's order.
bool excess_first(const Candidate& a, const Candidate& b) {
  if (a.beyond != b.beyond) return a.beyond > b.beyond;
  if (a.excess != b.excess) return a.excess > b.excess;
  if (a.cls != b.cls) return a.cls < b.cls;
  return kernel_first(a, b);
}

// Publishes a finished OOM's report. REQUIRES: the OOM lock.
void publish(internal::OomState& state, Group& domain, const OomReport& report,
             OomReport* out) {
  state.last = report;
  oom_log(domain.controller()).append(domain, report);  // the ring served as /v1/oom
  if (out) *out = report;
}

// Waits (OOM lock held, released meanwhile) until the domain has room for `units` or the
// controller's clock reaches `deadline`. True if it has room.
bool wait_for_room(internal::OomState& state, std::unique_lock<std::mutex>& lock, Clock& clock,
                   Group& domain, int64_t units, uint64_t deadline) {
  const bool real_time = dynamic_cast<SystemClock*>(&clock) != nullptr;
  while (domain.memory().margin() < units) {
    const uint64_t t = clock.now_ns();
    if (t >= deadline) return false;
    const uint64_t step = std::min(kOomWaitStepNs, deadline - t);
    if (real_time) {
      state.cv.wait_for(lock, std::chrono::nanoseconds(step));
    } else {
      lock.unlock();
      clock.sleep_ns(step);
      lock.lock();
    }
  }
  return true;
}

}  // namespace

int set_oom_order(Group& group, OomOrder order) noexcept {
  if (static_cast<uint8_t>(order) > static_cast<uint8_t>(OomOrder::kExcess)) return EINVAL;
  if (group.is_root()) return ENOENT;
  OomKillerAccess::oom_order(group).store(static_cast<uint8_t>(order), std::memory_order_relaxed);
  return 0;
}

OomOrder oom_order(const Group& group) noexcept {
  return static_cast<OomOrder>(
      OomKillerAccess::oom_order(const_cast<Group&>(group)).load(std::memory_order_relaxed));
}

// ---- Member ------------------------------------------------------------------------------------

CancelReason Member::cancel_reason() noexcept { return tl_cancel_reason; }

Member::Member(Group& group, std::string name, KillFn on_kill, int score_adj)
    : group_(&group),
      name_(std::move(name)),
      id_(group.controller().oom_state().member_ids.fetch_add(1, std::memory_order_relaxed) + 1),
      on_kill_(std::move(on_kill)),
      adj_(0) {
  set_score_adj(score_adj);
  // A member counts as an attached task: its group cannot be removed while it lives.
  if (group.attach() != 0) throw std::invalid_argument("memcg: member of a removed group");
  internal::LockGuard lock(group.policy_mutex_);
  group.members_.push_back(this);
}

Member::~Member() {
  // A charge of this member in progress on this thread (its callback destroys it): see
  // MemberCharge.
  for (MemberCharge* c = tl_member_charge; c; c = c->outer) {
    if (c->member == this) {
      c->member = nullptr;
      c->keep = group_;
    }
    if (c->outer_killed == &killed_) c->outer_killed = &kDestroyedMember;
  }
  if (internal::tl_charging_member_killed == &killed_)
    internal::tl_charging_member_killed = &kDestroyedMember;

  Group& g = *group_;
  internal::OomState& state = g.controller().oom_state();
  {
    internal::HookBypass bypass;  // nothing under the OOM lock is charged
    std::unique_lock oom(state.mu);
    {
      internal::LockGuard lock(g.policy_mutex_);
      auto& v = g.members_;
      v.erase(std::remove(v.begin(), v.end(), this), v.end());
    }
    // Kills in progress forget this member, also one whose callback for it is running: the
    // callback was moved out of the member, and the killer touches nothing of the member after
    // the callback returns. No wait here: a callback that cancels the member's query and joins
    // the worker that destroys the member is the usual way to kill one (and would deadlock
    // against a wait). The callback must not use its Member& once it let the member go.
    for (KillBatch* b = state.batches; b; b = b->next) {
      if (b->waiting_for == this) b->waiting_for = nullptr;
      for (KillEntry& e : b->entries)
        if (e.member == this) e.member = nullptr;
    }
    // Under the OOM lock, so that a killer sees the member and its memory go together.
    uncharge_direct(g, charged_.exchange(0, std::memory_order_relaxed));
  }
  state.cv.notify_all();  // a killer may wait for this member's memory
  g.detach();
}

ChargeStatus Member::charge(int64_t units, uint32_t flags) noexcept {
  // The charge path's range rule (charge.hpp): 0 succeeds with nothing charged, negative fails.
  if (units <= 0) [[unlikely]]
    return units == 0 ? ChargeStatus::kOk : ChargeStatus::kNoMem;
  MemberCharge in_progress{this, internal::tl_charging_member_killed, tl_member_charge, {}};
  tl_member_charge = &in_progress;
  internal::tl_charging_member_killed = &killed_;
  const ChargeStatus s = try_charge(*group_, units, flags);
  tl_member_charge = in_progress.outer;
  internal::tl_charging_member_killed = in_progress.outer_killed;
  if (in_progress.member == nullptr) [[unlikely]] {
    // Destroyed by its own kill callback during this charge: nothing may stay charged to it.
    if (memcg::charged(s)) uncharge_direct(*in_progress.keep, units);
    return ChargeStatus::kNoMem;
  }
  if (memcg::charged(s)) charged_.fetch_add(units, std::memory_order_relaxed);
  return s;
}

WaitStatus Member::charge_wait(int64_t units, std::chrono::nanoseconds timeout,
                               std::stop_token stop) noexcept {
  return charge_wait(units, timeout, std::move(stop), WaitOptions{});
}

WaitStatus Member::charge_wait(int64_t units, std::chrono::nanoseconds timeout,
                               std::stop_token stop, const WaitOptions& options) noexcept {
  if (units < 0) [[unlikely]]
    return WaitStatus::kInvalid;
  // A kill ends the wait (kCancelled, killed() true): a killed member is unwinding and waits
  // for nothing.
  const WaitStatus s =
      internal::member_charge_wait_for(*group_, units, timeout, stop, options, &killed_);
  if (s == WaitStatus::kOk) charged_.fetch_add(units, std::memory_order_relaxed);
  return s;
}

int64_t Member::uncharge(int64_t units) noexcept {
  // ---- slow path: a victim releasing ----
  // A killer may wait for this member: under the OOM lock it sees the member's count and the
  // counters drop together (else, seeing the member empty but the group still full, it would
  // choose another victim), and it is woken afterwards.
  if (killed()) [[unlikely]] {
    internal::OomState& state = group_->controller().oom_state();
    int64_t take;
    {
      internal::HookBypass bypass;
      internal::LockGuard lock(state.mu);
      take = take_charged(units);
      uncharge_direct(*group_, take);
    }
    state.cv.notify_all();
    return take;
  }
  // ---- fast path ----
  const int64_t take = take_charged(units);
  // Given everything back: a later shortage may ask again (preempt.cpp).
  if (preempt_asked_.load(std::memory_order_relaxed) && charged() == 0) [[unlikely]]
    preempt_asked_.store(false, std::memory_order_release);
  // Straight from the counters: a killed member's memory must be seen as free at once.
  uncharge_direct(*group_, take);
  return take;
}

int64_t Member::take_charged(int64_t units) noexcept {
  int64_t have = charged_.load(std::memory_order_relaxed);
  int64_t take;
  do {
    take = std::clamp<int64_t>(units, 0, have);
  } while (!charged_.compare_exchange_weak(have, have - take, std::memory_order_relaxed));
  return take;
}

void Member::add_admitted(int64_t delta) noexcept {
  int64_t have = admitted_.load(std::memory_order_relaxed);
  int64_t next;
  do {
    // Saturating: a sum no counter could hold stays at the largest one.
    if (delta > 0 && have > INT64_MAX - delta)
      next = INT64_MAX;
    else
      next = std::max<int64_t>(0, have + delta);
  } while (!admitted_.compare_exchange_weak(have, next, std::memory_order_relaxed));
}

int Member::set_spill_grace(std::chrono::nanoseconds grace) noexcept {
  if (grace.count() < 0 || static_cast<uint64_t>(grace.count()) > kMaxSpillGraceNs) return EINVAL;
  spill_grace_ns_.store(static_cast<uint64_t>(grace.count()), std::memory_order_relaxed);
  return 0;
}

void Member::set_score_adj(int adj) noexcept {
  adj_.store(std::clamp(adj, kImmune, 1000), std::memory_order_relaxed);
}

// ---- the killer --------------------------------------------------------------------------------

bool internal::run_member_callback(KillEntry& e, Member& m, CancelReason reason,
                                   std::unique_lock<std::mutex>& lock, std::string* error) {
  e.running = true;
  lock.unlock();
  // Nested: a callback may charge and so run another OOM kill or request on this thread.
  const CancelReason outer = std::exchange(tl_cancel_reason, reason);
  // A throwing callback fails the kill (or the request); the exception ends here, outside the
  // lock.
  bool ok = true;
  try {
    if (e.fn) e.fn(m);
  } catch (const std::exception& ex) {
    ok = false;
    try {
      // A message of any size is kept at a report's cap (the OOM lock copies it later).
      *error = internal::utf8_capped(ex.what(), OomLog::kMaxName);
    } catch (...) {
    }
  } catch (...) {
    ok = false;
    try {
      *error = "unknown exception";
    } catch (...) {
    }
  }
  tl_cancel_reason = outer;
  lock.lock();
  e.running = false;
  e.done = true;
  return ok;
}

// Spill before kill asks only a member within or near its expected peak (oom.hpp).
static bool near_expected_peak(const Member& m) noexcept {
  const int64_t tolerated = m.tolerated_peak();
  if (tolerated <= 0) return true;  // no expectation to be past
  return m.charged() <= std::max(tolerated, m.admitted());
}

bool OomKiller::kill(Group& domain, int64_t units, OomReport* report_out) {
  // The charging member was killed: its charge fails rather than waiting for itself or choosing
  // another victim (the kernel lets a dying task through at once).
  if (const std::atomic<bool>* dying = internal::tl_charging_member_killed;
      dying != nullptr && dying->load(std::memory_order_acquire))
    return true;

  // A handler's own OOM (its thread, its group's subtree): no handler, no victim (oom.hpp).
  if (internal::in_oom_handler_for(domain)) return false;

  // Nothing the killer allocates is charged by the global operator new hook: it holds the OOM
  // lock, which a nested charge could need. Kill callbacks (and OOM handlers) run inside this
  // too, as they do when the OOM comes from the hook's own charge (the object layer's slow path
  // sets it).
  internal::HookBypass bypass;
  Controller& ctl = domain.controller();
  internal::OomState& state = ctl.oom_state();
  Clock& clock = ctl.clock();
  OomReport report;
  report.domain = domain.path();
  report.request_units = units;

  // ---- OOM handlers, before the killer and outside every lock ----
  if (internal::run_oom_handlers(domain, units, report)) {
    {
      internal::LockGuard oom(state.mu);
      ++state.serial;
      publish(state, domain, report, report_out);
    }
    domain.raise(Event::kOomHandled);
    return true;
  }

  // Destroyed after the lock is released: they own user callbacks and group references.
  KillBatch batch;
  GroupRef group_killed;
  std::unique_lock lock(state.mu);
  BatchLink link(state, batch, lock);
  const uint64_t serial = ++state.serial;
  int spills = 0;

  for (;;) {
    // Someone freed memory while this charge waited for the lock or a victim.
    if (domain.memory().margin() >= units) return true;
    size_t deferred = 0;  // kills left to a preemption request in progress (see take below)

    // ---- decide, under the OOM lock ----
    {
      Group* kill_group = nullptr;
      const std::vector<Member*> members = members_below(domain);
      const int64_t max = domain.memory().max();
      const int64_t total =
          std::max<int64_t>(1, max >= ctl.max_units() ? domain.memory().usage() : max);
      const uint64_t now = clock.now_ns();
      Member* dying = nullptr;
      std::vector<Candidate> candidates;
      bool any_admitted = false;
      for (size_t i = 0; i < members.size(); ++i) {
        Member* m = members[i];
        if (m->killed()) {
          // A victim still giving its memory back holds back the next choice, for a while.
          if (m->charged() > 0 && !m->given_up_ && !held_by_this_thread(state, m)) {
            if (now - m->killed_at_ns_ >= kOomVictimWaitNs)
              m->given_up_ = true;
            else if (dying == nullptr || m->killed_at_ns_ < dying->killed_at_ns_)
              dying = m;
          }
          continue;
        }
        const int adj = m->score_adj();
        if (adj == Member::kImmune || m->failed_in_ == serial) continue;
        // The kernel's oom_badness: the bias is in thousandths of the total, not clamped.
        const int64_t charged = m->charged();
        const int64_t admitted = m->admitted();
        const int64_t excess = admitted > 0 ? std::max<int64_t>(0, charged - admitted) : 0;
        any_admitted |= admitted > 0;
        const int cls = internal::wait_class_of(m->group(), WaitPriority::kDefault);
        const int64_t tolerated = m->tolerated_peak();
        const int64_t beyond =
            tolerated > 0 ? std::max<int64_t>(0, charged - std::max(tolerated, admitted)) : 0;
        candidates.push_back({m, charged + static_cast<int64_t>(adj) * (total / 1000), i,
                              admitted, excess, cls, beyond});
      }

      if (dying != nullptr) {
        // ---- wait for the victim, then report progress: the caller retries ----
        batch.waiting_for = dying;
        const uint64_t deadline = dying->killed_at_ns_ + kOomVictimWaitNs;
        const bool real_time = dynamic_cast<SystemClock*>(&clock) != nullptr;
        // A charging member killed meanwhile stops waiting: it must unwind (its charge then
        // fails, above), not hold its memory while it waits for another victim's.
        const std::atomic<bool>* self_killed = internal::tl_charging_member_killed;
        while (batch.waiting_for != nullptr && batch.waiting_for->charged() > 0 &&
               domain.memory().margin() < units &&
               !(self_killed != nullptr && self_killed->load(std::memory_order_acquire))) {
          const uint64_t t = clock.now_ns();
          if (t >= deadline) break;
          const uint64_t step = std::min(kOomWaitStepNs, deadline - t);
          if (real_time) {
            state.cv.wait_for(lock, std::chrono::nanoseconds(step));
          } else {
            // Another clock advances only when slept on (a ManualClock): sleep without the lock.
            lock.unlock();
            clock.sleep_ns(step);
            lock.lock();
          }
        }
        batch.waiting_for = nullptr;
        return true;
      }

      OomOrder order = oom_order(domain);
      if (order == OomOrder::kAuto) order = any_admitted ? OomOrder::kExcess : OomOrder::kKernel;
      std::sort(candidates.begin(), candidates.end(),
                order == OomOrder::kExcess ? excess_first : kernel_first);
      report.order = order;
      report.top.clear();
      for (size_t i = 0; i < candidates.size() && i < 5; ++i) {
        const Candidate& c = candidates[i];
        const Member& m = *c.member;
        report.top.push_back({m.name(), m.group().path(), m.charged(), m.score_adj(), c.badness,
                              c.admitted, c.excess, static_cast<WaitPriority>(c.cls)});
      }
      report.victim.clear();
      report.oom_group.clear();
      if (candidates.empty()) {
        report.decider = OomDecider::kNone;
        publish(state, domain, report, report_out);
        return false;
      }

      Member* victim = candidates.front().member;
      // ---- spill before kill: the chosen member asked to be asked first ----
      const uint64_t grace = victim->spill_grace_ns_.load(std::memory_order_relaxed);
      if (grace > 0 && near_expected_peak(*victim) && victim->spilled_in_ != serial &&
          spills < kMaxSpillsPerOom &&
          !victim->preempting_ && !held_by_this_thread(state, victim)) {
        ++spills;
        victim->spilled_in_ = serial;
        victim->preempting_ = true;  // a kill chosen meanwhile is told after the request
        batch.entries.push_back({victim, std::move(victim->on_kill_), GroupRef(&victim->group()),
                                 victim->name(), false});
        report.spilled.push_back(victim->name());
        KillEntry& e = batch.entries.back();
        std::string error;
        if (!internal::run_member_callback(e, *victim, CancelReason::kSpill, lock, &error))
          report.failed.push_back({e.name, "spill: " + error});
        const bool killed_meanwhile = internal::finish_request(e, lock);
        if (!killed_meanwhile && e.member != nullptr && !e.member->on_kill_)
          e.member->on_kill_ = std::move(e.fn);
        // Another OOM chose it meanwhile and its kill was told above: that OOM reported it.
        const bool room =
            killed_meanwhile || wait_for_room(state, lock, clock, domain, units, now + grace);
        const std::string name = e.name;
        GroupRef spilled_group = e.group;
        std::vector<KillEntry> spent = std::move(batch.entries);
        batch.entries.clear();
        if (room && !killed_meanwhile) {
          report.victim = name;
          report.decider = OomDecider::kSpill;
          report.reason = CancelReason::kSpill;
          publish(state, domain, report, report_out);
        }
        // What the request held (callback, group references) is let go without the lock.
        lock.unlock();
        spent.clear();
        if (room && !killed_meanwhile) spilled_group->raise(Event::kOomSpill);
        if (killed_meanwhile) spilled_group->raise(Event::kOomKill);
        spilled_group = GroupRef();
        lock.lock();
        if (room) return true;
        continue;  // no room within grace: choose again (it may be chosen, now to be killed)
      }

      // memory.oom.group: the highest group from the victim's up to the domain that asks for it.
      if (!victim->group().is_root())
        for (Group* g = &victim->group(); g; g = g->parent()) {
          if (g->oom_group()) kill_group = g;
          if (g == &domain) break;
        }
      report.victim = victim->name();
      if (kill_group) report.oom_group = kill_group->path();

      // Mark every victim killed now, so that a concurrent OOM waits for them instead of
      // choosing them again, and take their callbacks.
      auto take = [&](Member* m) {
        m->killed_.store(true, std::memory_order_release);
        m->killed_at_ns_ = now;
        m->given_up_ = false;
        if (m->preempting_) {
          // Its callback is out for a preemption request (preempt.cpp), on another thread or
          // further up this one: that thread tells it of the kill once the request returns.
          m->kill_pending_ = true;
          m->kill_pending_in_ = serial;
          report.killed.push_back(m->name());
          ++deferred;
          return;
        }
        batch.entries.push_back(
            {m, std::move(m->on_kill_), GroupRef(&m->group()), m->name(), false});
        batch.entries.back().admission = internal::kill_admission_of(*m);
      };
      take(victim);
      if (kill_group)
        for (Member* m : members_below(*kill_group))
          if (!m->killed() && m->score_adj() != Member::kImmune && m->failed_in_ != serial)
            take(m);
      group_killed = GroupRef(kill_group);
    }

    // ---- kill, without the lock: callbacks and event listeners ----
    size_t killed = 0;
    for (size_t i = 0; i < batch.entries.size(); ++i) {
      KillEntry& e = batch.entries[i];
      Member* m = e.member;  // read under the lock: ~Member clears it there
      if (m == nullptr) {
        // Destroyed before its turn: its memory went with it.
        if (i == 0 && group_killed) {
          lock.unlock();
          group_killed->raise(Event::kOomGroupKill);
          lock.lock();
        }
        continue;
      }
      std::string error;
      const bool ok = internal::run_member_callback(e, *m, CancelReason::kOomKill, lock, &error);
      if (ok) {
        ++killed;
        report.killed.push_back(e.name);
      } else {
        // The member lives on, unkilled, with its callback; this OOM does not choose it again.
        report.failed.push_back({e.name, std::move(error)});
        if (e.member != nullptr) {
          e.member->killed_.store(false, std::memory_order_release);
          e.member->failed_in_ = serial;
          e.member->on_kill_ = std::move(e.fn);
        }
      }
      lock.unlock();
      state.cv.notify_all();  // killers waiting for this victim look again
      if (ok) internal::wake_killed_waiters(*e.group);  // its own waits end at once
      if (ok) e.group->raise(Event::kOomKill);
      if (ok) internal::count_oom_kill(*e.group, e.admission);
      if (i == 0 && group_killed) group_killed->raise(Event::kOomGroupKill);
      lock.lock();
    }
    if (killed > 0 || deferred > 0) {
      report.decider = killed == 0                       ? OomDecider::kPreempt
                       : report.order == OomOrder::kExcess ? OomDecider::kExcessOrder
                                                          : OomDecider::kKernelOrder;
      report.reason = CancelReason::kOomKill;
      publish(state, domain, report, report_out);
      return true;
    }
    // Every kill failed: choose again among the others. What this round held is let go without
    // the lock (callbacks' captures and group references may be the last ones).
    std::vector<KillEntry> spent = std::move(batch.entries);
    batch.entries.clear();
    lock.unlock();
    spent.clear();
    group_killed = GroupRef();
    lock.lock();
  }
}

PreemptReport OomKiller::last_preempt_report(Controller& controller) {
  internal::OomState& state = controller.oom_state();
  internal::HookBypass bypass;
  internal::LockGuard oom(state.mu);
  return state.last_preempt;
}

OomReport OomKiller::last_report(Controller& controller) {
  internal::OomState& state = controller.oom_state();
  internal::HookBypass bypass;  // the copy is made under the OOM lock
  internal::LockGuard oom(state.mu);
  return state.last;
}

}  // namespace memcg
