// Reservation: byte totals over unit charges, the OOM policy for large requests, cancellation.
#include "memcg/core/admission/reservation.hpp"

#include <algorithm>
#include <utility>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/admission/internal/admission_state.hpp"
#include "memcg/core/wait/internal/charge_wait_hooks.hpp"
#include "memcg/core/oom/oom.hpp"

namespace memcg {

const char* reserve_status_name(ReserveStatus s) noexcept {
  switch (s) {
    case ReserveStatus::kOk: return "ok";
    case ReserveStatus::kForced: return "forced";
    case ReserveStatus::kNoMem: return "nomem";
    case ReserveStatus::kNoMemCostly: return "nomem-costly";
    case ReserveStatus::kTimedOut: return "timed-out";
    case ReserveStatus::kCancelled: return "cancelled";
    case ReserveStatus::kKilled: return "killed";
    case ReserveStatus::kRemoved: return "removed";
    case ReserveStatus::kInvalid: return "invalid";
    case ReserveStatus::kNeverFits: return "never-fits";
  }
  return "unknown";
}

Reservation::Reservation(Group& group, ReserveOptions options, std::stop_token stop)
    : group_(&group), options_(options), stop_(std::move(stop)) {}

Reservation::Reservation(Member& member, ReserveOptions options, std::stop_token stop)
    : group_(&member.group()), member_(&member), options_(options), stop_(std::move(stop)) {}

Reservation::Reservation(Reservation&& o) noexcept
    : group_(std::move(o.group_)),
      member_(std::exchange(o.member_, nullptr)),
      options_(o.options_),
      stop_(std::move(o.stop_)),
      bytes_(std::exchange(o.bytes_, 0)),
      units_(std::exchange(o.units_, 0)),
      limiting_(std::exchange(o.limiting_, nullptr)),
      admitted_(std::exchange(o.admitted_, 0)),
      expected_(std::exchange(o.expected_, 0)),
      promised_(std::exchange(o.promised_, 0)),
      learn_base_(std::exchange(o.learn_base_, 0)),
      peak_(std::exchange(o.peak_, 0)),
      cut_short_(std::exchange(o.cut_short_, false)),
      tolerated_(std::exchange(o.tolerated_, 0)),
      member_tolerated_(std::exchange(o.member_tolerated_, 0)) {}

Reservation& Reservation::operator=(Reservation&& o) noexcept {
  if (this != &o) {
    release();
    group_ = std::move(o.group_);
    member_ = std::exchange(o.member_, nullptr);
    options_ = o.options_;
    stop_ = std::move(o.stop_);
    bytes_ = std::exchange(o.bytes_, 0);
    units_ = std::exchange(o.units_, 0);
    limiting_ = std::exchange(o.limiting_, nullptr);
    admitted_ = std::exchange(o.admitted_, 0);
    expected_ = std::exchange(o.expected_, 0);
    promised_ = std::exchange(o.promised_, 0);
    learn_base_ = std::exchange(o.learn_base_, 0);
    peak_ = std::exchange(o.peak_, 0);
    cut_short_ = std::exchange(o.cut_short_, false);
    tolerated_ = std::exchange(o.tolerated_, 0);
    member_tolerated_ = std::exchange(o.member_tolerated_, 0);
  }
  return *this;
}

ReserveStatus Reservation::prepare(uint64_t total, int64_t* need) const noexcept {
  if (!group_) return ReserveStatus::kInvalid;
  const Controller& ctl = group_->controller();
  const unsigned shift = ctl.unit_shift();
  const uint64_t units = (total >> shift) + ((total & (ctl.unit_size() - 1)) != 0);
  if (units > static_cast<uint64_t>(ctl.max_units())) return ReserveStatus::kInvalid;
  *need = static_cast<int64_t>(units) - units_;
  if (*need <= 0) return ReserveStatus::kOk;  // a shrink or a change within the last unit
  const auto prio = static_cast<unsigned>(options_.priority);
  if (prio >= static_cast<unsigned>(kWaitPriorities) && options_.priority != WaitPriority::kDefault)
    return ReserveStatus::kInvalid;  // refused before anything is charged, waiting or not
  if (stop_.stop_requested()) return ReserveStatus::kCancelled;
  if (member_ != nullptr && member_->killed()) return ReserveStatus::kKilled;
  return ReserveStatus::kOk;
}

ReserveStatus Reservation::charge_units(int64_t units) noexcept {
  const auto charge = [&](int64_t n, uint32_t flags) {
    return member_ != nullptr ? member_->charge(n, flags) : try_charge(*group_, n, flags);
  };
  const auto failed = [&](ReserveStatus nomem) {
    return member_ != nullptr && member_->killed() ? ReserveStatus::kKilled : nomem;
  };
  bool forced = false;
  if (options_.oom != OomPolicy::kPieces) {
    const uint32_t flags =
        options_.oom == OomPolicy::kNever ? kDefaultCharge | kRetryMayFail : kDefaultCharge;
    const ChargeStatus s = charge(units, flags);
    if (!charged(s)) {
      const bool costly = options_.oom == OomPolicy::kKernel &&
                          units > costly_charge_units(group_->controller());
      return failed(costly ? ReserveStatus::kNoMemCostly : ReserveStatus::kNoMem);
    }
    forced = s == ChargeStatus::kForced;
  } else {
    // Each piece is small enough for the OOM killer. All or nothing: a failing piece gives
    // back the ones before it, and so does a stop requested meanwhile (a kill callback that
    // cancels this very query, or a preemption).
    const int64_t piece = costly_charge_units(group_->controller());
    int64_t done = 0;
    ReserveStatus why = ReserveStatus::kOk;
    while (done < units) {
      const int64_t n = units - done < piece ? units - done : piece;
      const ChargeStatus s = charge(n, kDefaultCharge);
      if (!charged(s)) {
        why = failed(ReserveStatus::kNoMem);
        break;
      }
      forced = forced || s == ChargeStatus::kForced;
      done += n;
      if (done < units && stop_.stop_requested()) {
        why = ReserveStatus::kCancelled;
        break;
      }
    }
    if (why != ReserveStatus::kOk) {
      uncharge_units(done);
      return why;
    }
  }
  units_ += units;
  return forced ? ReserveStatus::kForced : ReserveStatus::kOk;
}

// The one call into the waiting charges: the reservation's wait class is passed on here.
ReserveStatus Reservation::wait_units(int64_t units, uint64_t deadline_ns) noexcept {
  const uint64_t now = group_->controller().clock().now_ns();
  const auto timeout = std::chrono::nanoseconds(
      deadline_ns > now ? static_cast<int64_t>(deadline_ns - now) : 0);
  WaitOptions wo;
  wo.priority = options_.priority;
  const WaitStatus s = member_ != nullptr ? member_->charge_wait(units, timeout, stop_, wo)
                                          : try_charge_wait_for(*group_, units, timeout, stop_, wo);
  switch (s) {
    case WaitStatus::kOk:
      units_ += units;
      return ReserveStatus::kOk;
    case WaitStatus::kTimedOut:
    case WaitStatus::kCancelled:
      // A kill ends a member's wait (Member::charge_wait): kKilled, unless the caller's own stop
      // or the deadline came first.
      if (member_ != nullptr && member_->killed() && !stop_.stop_requested())
        return ReserveStatus::kKilled;
      return s == WaitStatus::kCancelled ? ReserveStatus::kCancelled : ReserveStatus::kTimedOut;
    case WaitStatus::kRemoved: return ReserveStatus::kRemoved;
    case WaitStatus::kNeverFits: return ReserveStatus::kNeverFits;  // checked before: a race
    case WaitStatus::kInvalid: break;
  }
  return ReserveStatus::kInvalid;
}

void Reservation::uncharge_units(int64_t units) noexcept {
  if (units <= 0) return;
  if (member_ != nullptr)
    member_->uncharge(units);
  else
    uncharge_direct(*group_, units);
  internal::admit_uncharged();  // a waiting admission sees the room at once, not at its poll
}

void Reservation::set_admitted(int64_t units) noexcept {
  if (units == admitted_) return;
  if (member_ != nullptr)
    member_->admitted_.fetch_add(units - admitted_, std::memory_order_relaxed);
  admitted_ = units;
}

void Reservation::update_promise() noexcept {
  if (!group_) return;
  const int64_t reached = std::max(units_, peak_);
  const int64_t p = expected_ > reached ? expected_ - reached : 0;
  if (p != promised_) internal::admit_promise_add(*group_, p - promised_);
  promised_ = p;
  // The member's tolerated peak (oom.hpp): this one's, while a waiting admission is in force.
  const int64_t t = expected_ > 0 ? std::max(tolerated_, admitted_) : 0;
  if (member_ != nullptr && t != member_tolerated_)
    member_->tolerated_.fetch_add(t - member_tolerated_, std::memory_order_relaxed);
  member_tolerated_ = t;
}

void Reservation::end_admission() noexcept {
  if (learn_base_ > 0 && group_) {
    // Work cut short is censored: a killed runaway's ratio only says it grew at least that far.
    const bool cut = cut_short_ || (member_ != nullptr && (member_->killed() ||
                                                           member_->preempt_requested()));
    internal::admit_learn(*group_, learn_base_, peak_, cut);
  }
  learn_base_ = 0;
  cut_short_ = false;
  peak_ = 0;
  expected_ = 0;
  tolerated_ = 0;
  update_promise();
}

// A waiting admission: first by expected peak (admission.hpp), then the waiting charge.
ReserveStatus Reservation::admit_units(int64_t need, uint64_t deadline_ns) noexcept {
  const int64_t total = units_ + need;
  const int64_t expected = internal::admit_expected(*group_, total);
  const int64_t extra = expected - total;
  // With nothing to promise and no promise on the path, the expected-peak check is the plain
  // fit that the waiting charge makes: go straight to its queue (and its class order).
  bool promises = false;
  for (const Group* a = group_.get(); a != nullptr && !a->is_root(); a = a->parent())
    if (admit_stats(*a).promised_units > 0) promises = true;
  if (extra > 0 || promises) {
    switch (internal::admit_wait(*group_, need + extra, deadline_ns, stop_)) {
      case internal::AdmitWait::kOk: break;
      case internal::AdmitWait::kTimedOut:
        return member_ != nullptr && member_->killed() ? ReserveStatus::kKilled
                                                       : ReserveStatus::kTimedOut;
      case internal::AdmitWait::kCancelled: return ReserveStatus::kCancelled;
    }
    promised_ += need + extra;  // admit_wait promised it on the path
  }
  expected_ = expected;
  tolerated_ = std::max(expected, internal::admit_tolerated(*group_, total));
  const ReserveStatus r = wait_units(need, deadline_ns);
  if (!held(r)) expected_ = tolerated_ = 0;
  update_promise();
  return r;
}

// Growth past the tolerated peak (reservation.hpp): the OOM killer is asked, on the level whose
// promises the growth would take, for room beside them; at most this many times per request
// (each time it kills, or waits for an earlier victim to unwind).
constexpr int kPromiseOomRounds = 4;

ReserveStatus Reservation::respect_promises(int64_t need) noexcept {
  Controller& ctl = group_->controller();
  for (int round = 0;; ++round) {
    int64_t want = 0;
    Group* level = internal::promised_level(*group_, need, promised_, &want);
    if (level == nullptr) return ReserveStatus::kOk;  // room beside every promise
    if (member_ != nullptr && member_->killed()) return ReserveStatus::kKilled;
    if (stop_.stop_requested()) return ReserveStatus::kCancelled;
    if (options_.oom == OomPolicy::kNever) return ReserveStatus::kNoMem;
    if (options_.oom == OomPolicy::kKernel && need > costly_charge_units(ctl))
      return ReserveStatus::kNoMemCostly;  // the costly-order rule: no kill for it
    if (round == kPromiseOomRounds) return ReserveStatus::kNoMem;
    // As a charge of the member would: the killer lets a killed member through at once.
    const std::atomic<bool>* outer = internal::tl_charging_member_killed;
    if (member_ != nullptr) internal::tl_charging_member_killed = &member_->killed_;
    const bool progress = ctl.out_of_memory(*level, want);
    internal::tl_charging_member_killed = outer;
    if (member_ != nullptr && member_->killed()) return ReserveStatus::kKilled;
    if (!progress) return ReserveStatus::kNoMem;  // no victim: refused, nothing charged
  }
}

// Growth past admission without waiting (see grow() in reservation.hpp).
ReserveStatus Reservation::grow_past(int64_t need) noexcept {
  // 1. What is free: the ladder (reclaim, stock drains, retries) without the OOM killer.
  const ChargeStatus s = member_ != nullptr
                             ? member_->charge(need, kDefaultCharge | kRetryMayFail)
                             : try_charge(*group_, need, kDefaultCharge | kRetryMayFail);
  if (charged(s)) {
    units_ += need;
    return s == ChargeStatus::kForced ? ReserveStatus::kForced : ReserveStatus::kOk;
  }
  if (member_ != nullptr && member_->killed()) return ReserveStatus::kKilled;
  // 2. Memory measurably on its way back: wait for it, bounded.
  if (Group* limit = internal::full_level(*group_, need)) {
    const int64_t shortage = limit->memory().usage() + need - limit->memory().max();
    if (shortage > 0 && internal::unwinding_units(*limit) >= shortage) {
      Clock& clock = group_->controller().clock();
      const uint64_t start = clock.now_ns();
      const ReserveStatus r =
          wait_units(need, Clock::after(start, internal::growth_bound_ns(*limit)));
      const uint64_t end = clock.now_ns();
      internal::growth_observe(*limit, held(r), end > start ? end - start : 0);
      if (r != ReserveStatus::kTimedOut) return r;  // held, or cancelled/killed/removed
    }
  }
  // 3. The OOM killer, per the policy.
  return charge_units(need);
}

ReserveStatus Reservation::grow_to(uint64_t total, bool wait, uint64_t deadline_ns,
                                   bool admit) noexcept {
  int64_t need = 0;
  limiting_ = nullptr;
  const ReserveStatus s = prepare(total, &need);
  if (s != ReserveStatus::kOk) return s;
  // A request over a limit of the path: refused before any charge, reclaim or wait. The
  // request is the total for the calls that state one (reserve*) and for a waiting growth
  // (which cannot kill, so a total past the limit could never be served); for grow() it is the
  // growth alone: a total that grows past the limit goes to the OOM killer per the policy, which
  // may choose this very member, as the kernel kills a task that grows past its limit.
  if (need > 0) {
    const bool plain_growth = !wait && !admit;
    if (const Group* limit = never_fits(*group_, plain_growth ? need : units_ + need)) {
      limiting_ = limit;
      internal::count_never_fits(*limit);
      if (!admit) cut_short_ = true;  // its growth was refused: it teaches nothing
      return ReserveStatus::kNeverFits;
    }
  }
  // A waiting admission states a new expected size: the previous one ends (and teaches).
  if (wait && admit) end_admission();
  if (need < 0) {
    uncharge_units(-need);
    units_ += need;
  }
  ReserveStatus r = ReserveStatus::kOk;
  if (need > 0) {
    if (wait && admit)
      r = admit_units(need, deadline_ns);
    else if (wait)
      r = wait_units(need, deadline_ns);
    else {
      // Past its tolerated peak, growth may not take what is promised to others.
      if (!admit && tolerated_ > 0 && units_ + need > tolerated_) r = respect_promises(need);
      if (r != ReserveStatus::kOk) {
        // refused (or this member killed) before any charge
      } else if (!admit && options_.growth_wait && options_.oom != OomPolicy::kNever &&
               admitted_ > 0 && units_ + need > admitted_) {
        r = grow_past(need);
      } else {
        r = charge_units(need);
      }
    }
    if (!admit && (r == ReserveStatus::kNoMem || r == ReserveStatus::kNoMemCostly ||
                   r == ReserveStatus::kKilled))
      cut_short_ = true;  // growth refused: the work did not get the peak it would have reached
  }
  if (held(r)) {
    bytes_ = total;
    set_admitted(admit ? units_ : std::min(admitted_, units_));
    if (wait && admit) {
      learn_base_ = units_;
      peak_ = units_;
    }
  }
  if (learn_base_ > 0) peak_ = std::max(peak_, units_);
  update_promise();
  return r;
}

// After cancellation every request is refused, shrinking ones too (nothing changes); only
// shrink(), release() and the destructor still give back. prepare() cannot tell a request that
// shrinks from shrink(), which shares grow_to(): the entry points check.
ReserveStatus Reservation::reserve(uint64_t total) noexcept {
  if (stop_.stop_requested()) return ReserveStatus::kCancelled;
  return grow_to(total, false, 0, true);
}

ReserveStatus Reservation::reserve_for(uint64_t total, std::chrono::nanoseconds timeout) noexcept {
  if (!group_) return ReserveStatus::kInvalid;
  if (stop_.stop_requested()) return ReserveStatus::kCancelled;
  const uint64_t now = group_->controller().clock().now_ns();
  const uint64_t t = timeout.count() > 0 ? static_cast<uint64_t>(timeout.count()) : 0;
  return grow_to(total, true, Clock::after(now, t), true);
}

ReserveStatus Reservation::reserve_until(uint64_t total, uint64_t deadline_ns) noexcept {
  if (stop_.stop_requested()) return ReserveStatus::kCancelled;
  return grow_to(total, true, deadline_ns, true);
}

ReserveStatus Reservation::grow(uint64_t bytes) noexcept {
  if (bytes > UINT64_MAX - bytes_) return ReserveStatus::kInvalid;
  if (stop_.stop_requested()) return ReserveStatus::kCancelled;
  return grow_to(bytes_ + bytes, false, 0, false);
}

ReserveStatus Reservation::grow_for(uint64_t bytes, std::chrono::nanoseconds timeout) noexcept {
  if (bytes > UINT64_MAX - bytes_) return ReserveStatus::kInvalid;
  if (!group_) return ReserveStatus::kInvalid;
  if (stop_.stop_requested()) return ReserveStatus::kCancelled;
  const uint64_t now = group_->controller().clock().now_ns();
  const uint64_t t = timeout.count() > 0 ? static_cast<uint64_t>(timeout.count()) : 0;
  return grow_to(bytes_ + bytes, true, Clock::after(now, t), false);
}

void Reservation::shrink(uint64_t bytes) noexcept {
  const uint64_t total = bytes < bytes_ ? bytes_ - bytes : 0;
  [[maybe_unused]] const ReserveStatus s = grow_to(total, false, 0, false);  // cannot fail
}

void Reservation::release() noexcept {
  // Read before the uncharge: a member's preemption request ends when it holds nothing.
  if (learn_base_ > 0 && member_ != nullptr && member_->preempt_requested()) cut_short_ = true;
  if (units_ > 0 && group_) uncharge_units(units_);
  units_ = 0;
  bytes_ = 0;
  set_admitted(0);
  end_admission();  // after the uncharge: a waiting admission sees the memory and the promise go
}

}  // namespace memcg
