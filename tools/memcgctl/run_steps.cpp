// The scenario runner: the steps that change state (runner.hpp).
#include "runner.hpp"

namespace memcgctl::detail {

memcg::GroupRef Runner::group(const std::string& path, StepResult* res) {
  memcg::GroupRef g = ctl_.lookup(path);
  if (!g) {
    res->failed = true;
    res->message = "no group " + path;
  }
  return g;
}

bool Runner::perform(const Step& st, StepResult* res) {
  if (!std::visit([&](const auto& body) { return perform_body(st, body, res); }, st.body))
    return false;
  if (within_work_budget()) return true;
  malformed(st.mark,
            "the run stopped here: reclaim rotated " +
                std::to_string(rotated_.load(std::memory_order_relaxed)) +
                " referenced cache units so far, which with the " + std::to_string(s_.work_units) +
                " units the steps charge, grow and reclaim is more than " +
                std::to_string(kMaxWorkUnits) +
                " units of work in all, the most a scenario may ask for");
  return false;
}

bool Runner::perform_body(const Step&, const SetStep& set, StepResult* res) {
  for (const Knob& k : set.knobs)
    if (!write_knob(k)) return false;
  Json written = Json::object();
  for (const Knob& k : set.knobs) written[k.group][k.file] = k.value;
  res->detail["written"] = std::move(written);
  return true;
}

bool Runner::perform_body(const Step&, const WriteStep& w, StepResult* res) {
  memcg::GroupRef g = group(w.group, res);
  if (!g) return true;
  const int err = memcg::write_file(*g, w.file, w.value);
  res->detail["result"] = memcg::errno_name(err);
  if (w.has_expect) {
    res->checked = true;
    res->passed = err == w.expect;
    res->detail["expect"] = memcg::errno_name(w.expect);
    if (!res->passed)
      res->message = "write " + w.group + " " + w.file + " \"" + w.value + "\": expected " +
                     memcg::errno_name(w.expect) + ", got " + error_text(err);
  }
  return true;
}

bool Runner::perform_body(const Step&, const CacheStep& c, StepResult* res) {
  auto it = caches_.find(c.name);
  if (it == caches_.end()) {
    memcg::GroupRef g = group(c.group, res);
    if (!g) return true;
    it =
        caches_.emplace(c.name, std::make_unique<memcg::LruCache>(*g, c.name, c.referenced_percent))
            .first;
    // Rotations count towards the work budget (within_work_budget), summed over the caches;
    // once it is spent, the cache rotates no more and the run stops after the step.
    if (c.referenced_percent > 0)
      it->second->set_rotate_callback([this](int64_t n) {
        rotated_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
        return within_work_budget();
      });
    if (c.has_capacity) cache_capacity_[c.name] = units_of(c.capacity);
    if (c.never_oom) cache_never_oom_.insert(c.name);
    if (const uint64_t cost = s_.config.reclaim_cost_ns) {
      // Freeing takes time on the freeing thread: inside a charge's reclaim that is a stall.
      it->second->set_evict_callback([this, cost](uint64_t, int64_t count) {
        const uint64_t n = static_cast<uint64_t>(count);
        const uint64_t ns = n > memcg::Clock::kMaxNs / cost ? memcg::Clock::kMaxNs : n * cost;
        if (tl_in_handler > 0) {
          tl_owed_ns = memcg::Clock::after(tl_owed_ns, ns);
        } else {
          clock_.sleep_ns(ns);
        }
      });
    }
  }
  memcg::LruCache& cache = *it->second;
  const int64_t units = units_of(c.bytes);
  switch (c.op) {
    case CacheStep::Op::kGrow: {
      int64_t grown = 0, dropped = 0;
      const auto cap = cache_capacity_.find(c.name);
      const uint32_t flags = cache_never_oom_.count(c.name) != 0
                                 ? memcg::kDefaultCharge | memcg::kRetryMayFail
                                 : memcg::kDefaultCharge;
      // One unit per call: the first charge that fails stops the growth. A cache at its
      // capacity gives its oldest unit back before it takes a new one, as an LRU cache does.
      while (grown < units && within_work_budget()) {
        if (cap != cache_capacity_.end() && cache.size() >= cap->second)
          dropped += cache.shrink(cache.size() - cap->second + 1);
        if (cache.grow(1, flags) != 1) break;
        ++grown;
      }
      res->detail["grown"] = grown * unit_;
      if (cap != cache_capacity_.end()) res->detail["dropped"] = dropped * unit_;
      res->detail["requested"] = units * unit_;
      if (grown < units) {
        res->detail["stopped"] = "a charge failed";
        res->notes.push_back("cache " + c.name + " grew " + human_size(grown * unit_) + " of " +
                             human_size(units * unit_) + ": a charge failed");
      }
      break;
    }
    case CacheStep::Op::kShrink:
      res->detail["freed"] = cache.shrink(units) * unit_;
      break;
    case CacheStep::Op::kDrop:
      res->detail["freed"] = cache.size() * unit_;
      cache.drop();
      break;
  }
  res->detail["size"] = cache.size() * unit_;
  res->detail["evicted"] = cache.evicted() * unit_;
  return true;
}

std::unique_ptr<MemberState> Runner::make_member(memcg::Group& g, const std::string& name,
                                                 bool immune, bool release_on_preempt,
                                                 uint64_t unwind_ns) {
  auto state = std::make_unique<MemberState>();
  MemberState* sp = state.get();
  sp->immune = immune;
  sp->release_on_preempt = release_on_preempt;
  sp->unwind_ns = unwind_ns;
  // Killing a member releases its pinned memory, like the exit of a killed process. A
  // preemption request is not a kill: the member releases what it holds (a cancelled query) or,
  // with `on_preempt: ignore`, keeps it. With an unwind delay, a member a lane runs as releases
  // later, on that lane (unwind()); the callback only notes when.
  auto on_kill = [this, sp](memcg::Member& victim) {
    if (victim.cancel_reason() == memcg::CancelReason::kPreempt) {
      ++sp->preempted;
      if (!sp->release_on_preempt) return;
    } else {
      sp->killed = true;
    }
    if (sp->unwind_ns == 0 || !sp->lane_running) {
      release_all(*sp);
      return;
    }
    if (!sp->release_pending) {
      sp->release_pending = true;
      sp->release_due_ns = memcg::Clock::after(clock_.now_ns(), sp->unwind_ns);
    }
  };
  state->member =
      std::make_unique<memcg::Member>(g, name, on_kill, immune ? memcg::Member::kImmune : 0);
  return state;
}

MemberState& Runner::member_state(const std::string& name) {
  if (tl_lane_state != nullptr && *tl_lane_name == name) return *tl_lane_state;
  return *members_.at(name);
}

bool Runner::unwind(MemberState& st) {
  if (!st.release_pending) return false;
  const uint64_t now = clock_.now_ns();
  // The lane is busy unwinding (running, not stalled) until the delay is over.
  if (st.release_due_ns > now) clock_.yield_for(st.release_due_ns - now);
  st.release_pending = false;
  release_all(st);
  return true;
}

void Runner::release_all(MemberState& st) {
  if (st.reservation) {
    if (st.in_reserve_call)
      st.reservation_stale = true;
    else
      st.reservation->release();  // its admission ends: the group learns its peak
  }
  st.member->uncharge(st.member->charged());
}

bool Runner::perform_body(const Step&, const MemberStep& m, StepResult* res) {
  memcg::GroupRef g = group(m.group, res);
  if (!g) return true;
  members_[m.name] = make_member(*g, m.name, m.immune, m.release_on_preempt,
                                 m.has_unwind ? m.unwind_ns : s_.config.unwind_ns);
  return true;
}

void Runner::report_kills(StepResult* res) {
  Json killed = Json::array();
  for (auto& [name, st] : members_) {
    if (st->killed && !reported_kills_.count(name)) {
      reported_kills_.insert(name);
      killed.push_back(name);
    }
  }
  if (!killed.empty()) {
    std::string note = "killed by the OOM killer:";
    for (const auto& name : killed) note += " " + name.get<std::string>();
    res->notes.push_back(std::move(note));
    res->detail["killed"] = std::move(killed);
  }
  Json preempted = Json::array();
  for (auto& [name, st] : members_)
    if (st->preempted != st->reported_preempts) {
      st->reported_preempts = st->preempted;
      preempted.push_back(name);
    }
  if (preempted.empty()) return;
  std::string note = "asked to give memory back (preemption):";
  for (const auto& name : preempted) note += " " + name.get<std::string>();
  res->notes.push_back(std::move(note));
  res->detail["preempted"] = std::move(preempted);
}

bool Runner::perform_body(const Step&, const ChargeStep& c, StepResult* res) {
  MemberState& st = member_state(c.member);
  const int64_t units = units_of(c.bytes);
  int64_t done = 0;
  ChargeStep::Outcome outcome = ChargeStep::Outcome::kOk;
  if (c.wait && units > 0 && !st.killed) {
    // One call that may wait on the virtual clock; in a lane, the others run meanwhile.
    const uint64_t start = clock_.now_ns();
    const memcg::WaitStatus ws =
        st.member->charge_wait(units, std::chrono::nanoseconds(c.wait_ns), {},
                               memcg::WaitOptions{c.priority, memcg::kDefaultKind});
    res->detail["waited_ns"] = clock_.now_ns() - start;
    res->detail["wait_status"] = memcg::wait_status_name(ws);
    if (ws == memcg::WaitStatus::kOk) {
      done = units;
    } else {
      outcome = ws == memcg::WaitStatus::kTimedOut ? ChargeStep::Outcome::kTimedOut
                                                   : ChargeStep::Outcome::kFailed;
    }
  } else if (c.bulk && units > 0 && !st.killed) {
    // One call for the whole size: the library's memory.high and memory.max handling sees
    // one large charge.
    if (memcg::charged(st.member->charge(units))) {
      done = units;
    } else {
      outcome = st.killed ? ChargeStep::Outcome::kKilled : ChargeStep::Outcome::kFailed;
    }
  }
  while (!c.bulk && done < units && within_work_budget()) {
    if (st.killed) {
      outcome = ChargeStep::Outcome::kKilled;
      break;
    }
    if (!memcg::charged(st.member->charge(1))) {
      outcome = st.killed ? ChargeStep::Outcome::kKilled : ChargeStep::Outcome::kFailed;
      break;
    }
    ++done;
  }
  if (st.killed) {
    outcome = ChargeStep::Outcome::kKilled;
    // A charge retried after the kill may have landed: a killed member holds nothing (once it
    // has unwound, when its release is pending).
    if (!st.release_pending) release_all(st);
  }
  res->detail["charged"] = done * unit_;
  res->detail["outcome"] = outcome_name(outcome);
  if (c.has_expect) {
    res->checked = true;
    res->passed = outcome == c.expect;
    res->detail["expect"] = outcome_name(c.expect);
    if (!res->passed)
      res->message = "charge " + c.member + " " + human_size(c.bytes) + ": expected " +
                     outcome_name(c.expect) + ", got " + outcome_name(outcome) + " after " +
                     human_size(done * unit_);
  }
  return true;
}

bool Runner::perform_body(const Step&, const ReleaseStep& r, StepResult* res) {
  MemberState& st = member_state(r.member);
  memcg::Member& m = *st.member;
  if (r.all) {
    const int64_t before = m.charged();
    release_all(st);
    res->detail["released"] = (before - m.charged()) * unit_;
    return true;
  }
  // A size comes out of what the member holds outside its reservation.
  const int64_t reserved =
      st.reservation && !st.reservation_stale ? st.reservation->units() : 0;
  const int64_t plain = std::max<int64_t>(m.charged() - reserved, 0);
  res->detail["released"] = m.uncharge(std::min(units_of(r.bytes), plain)) * unit_;
  return true;
}

bool Runner::perform_body(const Step&, const ReserveStep& r, StepResult* res) {
  MemberState& st = member_state(r.member);
  if (st.reservation_stale && !st.in_reserve_call) {
    st.reservation_stale = false;
    st.reservation->release();
  }
  if (!st.reservation)
    st.reservation = std::make_unique<memcg::Reservation>(
        *st.member, memcg::ReserveOptions{r.oom, r.priority});
  memcg::Reservation& rv = *st.reservation;
  const uint64_t start = clock_.now_ns();
  memcg::ReserveStatus status = memcg::ReserveStatus::kOk;
  st.in_reserve_call = true;
  switch (r.op) {
    case ReserveStep::Op::kReserve:
      status = r.wait ? rv.reserve_for(r.bytes, std::chrono::nanoseconds(r.wait_ns))
                      : rv.reserve(r.bytes);
      if (r.wait) res->detail["waited"] = reserve_status_text(status);
      break;
    case ReserveStep::Op::kGrow:
      if (r.wait) {
        status = rv.grow_for(r.bytes, std::chrono::nanoseconds(r.wait_ns));
        res->detail["waited"] = reserve_status_text(status);
        if (status == memcg::ReserveStatus::kTimedOut && r.grow_on_timeout)
          status = rv.grow(r.bytes);  // then the OOM killer, per the policy
      } else {
        status = rv.grow(r.bytes);
      }
      break;
    case ReserveStep::Op::kRelease:
      rv.release();
      break;
  }
  st.in_reserve_call = false;
  if (st.reservation_stale) {
    // Released (killed, preempted, or a `release` from another lane) while in the call.
    st.reservation_stale = false;
    rv.release();
  }
  if (st.killed && !st.release_pending) release_all(st);  // a killed member holds nothing
  if (r.wait) res->detail["waited_ns"] = clock_.now_ns() - start;
  res->detail["status"] = reserve_status_text(status);
  res->detail["held"] = rv.bytes();
  res->detail["admitted"] = static_cast<uint64_t>(rv.admitted_units()) * unit_;
  if (status == memcg::ReserveStatus::kNeverFits && rv.limiting_group() != nullptr)
    res->detail["limiting"] = rv.limiting_group()->path();
  if (r.ends_on & (uint32_t{1} << static_cast<int>(status))) {
    st.end_iteration = true;
    res->detail["ended"] = true;
  }
  if (r.has_expect) {
    res->checked = true;
    res->passed = status == r.expect;
    res->detail["expect"] = reserve_status_text(r.expect);
    if (!res->passed)
      res->message = "reserve " + r.member + ": expected " + reserve_status_text(r.expect) +
                     ", got " + reserve_status_text(status);
  }
  return true;
}

bool Runner::perform_body(const Step&, const ExitStep& x, StepResult* res) {
  auto it = members_.find(x.member);
  res->detail["released"] = it->second->member->charged() * unit_;
  members_.erase(it);
  return true;
}

bool Runner::perform_body(const Step&, const ReclaimStep& r, StepResult* res) {
  memcg::GroupRef g = group(r.group, res);
  if (!g) return true;
  const uint64_t before = g->current();
  const int err = memcg::write_file(*g, "memory.reclaim", r.size);
  res->detail["result"] = memcg::errno_name(err);
  res->detail["reclaimed"] = before > g->current() ? before - g->current() : 0;
  if (r.has_expect) {
    res->checked = true;
    res->passed = err == r.expect;
    res->detail["expect"] = memcg::errno_name(r.expect);
    if (!res->passed)
      res->message = "reclaim " + r.group + " " + r.size + ": expected " +
                     memcg::errno_name(r.expect) + ", got " + error_text(err);
  } else if (err == ENOENT) {
    res->failed = true;
    res->message = "reclaim " + r.group + " " + r.size + ": " + error_text(err);
  }
  return true;
}

bool Runner::perform_body(const Step&, const RemoveStep& r, StepResult* res) {
  const int err = ctl_.remove(r.group);
  res->detail["result"] = memcg::errno_name(err);
  if (err) {
    res->failed = true;
    res->message = "remove " + r.group + ": " + memcg::errno_name(err);
  }
  return true;
}

bool Runner::perform_body(const Step&, const TickStep& t, StepResult*) {
  if (SimClock::in_lane()) {
    clock_.yield_for(t.ns);  // the lane runs for t.ns while the others go on
    return true;
  }
  clock_.advance(t.ns);
  on_tick();
  return true;
}

}  // namespace memcgctl::detail
