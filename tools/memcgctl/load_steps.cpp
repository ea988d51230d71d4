// The scenario loader: the steps that change state (loader.hpp).
#include "loader.hpp"

#include <algorithm>

#include "memcg/base/errors.hpp"
#include "memcg/files/parse.hpp"

namespace memcgctl::detail {

bool Loader::load_set(const YAML::Node& v, Step* step) {
  Entries groups;
  if (!v.IsMap()) {
    error(v, "set: expected { GROUP: { FILE: VALUE, ... }, ... }");
    return false;
  }
  if (!entries(v, "set", {}, &groups)) return false;
  SetStep set;
  const size_t before = errors_->size();
  for (const auto& [gk, gv] : groups) {
    const std::string g = gk.Scalar();
    if (!group_ref(gk, g, "set")) continue;
    Entries knobs;
    if (!gv.IsMap()) {
      error(gv, "set " + g + ": expected { FILE: VALUE, ... }");
      continue;
    }
    if (entries(gv, "set " + g, {}, &knobs))
      for (const auto& [kk, kv] : knobs) knob(kk, kv, g, &set.knobs);
  }
  step->body = std::move(set);
  return errors_->size() == before;
}

bool Loader::load_write(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(v, "write", {"group", "file", "value", "expect"}, &e)) return false;
  WriteStep w;
  bool ok =
      required(v, e, "write", "group", &w.group) && group_ref(*find(e, "group"), w.group, "write");
  ok = required(v, e, "write", "file", &w.file) && ok;
  if (ok && !valid_file_name(w.file)) {
    error(*find(e, "file"), "write: `" + w.file + "` is not an interface file name");
    ok = false;
  }
  ok = required(v, e, "write", "value", &w.value) && ok;
  if (const YAML::Node* x = find(e, "expect")) {
    w.has_expect = true;
    ok = errno_value(*x, "write expect", &w.expect) && ok;
  }
  step->body = std::move(w);
  return ok;
}

bool Loader::load_member(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(v, "member", {"name", "group", "immune", "on_preempt", "unwind"},
                            &e))
    return false;
  MemberStep m;
  bool ok = required(v, e, "member", "name", &m.name);
  ok = required(v, e, "member", "group", &m.group) && ok &&
       group_ref(*find(e, "group"), m.group, "member " + m.name);
  if (const YAML::Node* i = find(e, "immune")) ok = boolean(*i, "member immune", &m.immune) && ok;
  if (const YAML::Node* p = find(e, "on_preempt")) {
    std::string s;
    if (!scalar(*p, "member on_preempt", &s)) {
      ok = false;
    } else if (s == "release" || s == "ignore") {
      m.release_on_preempt = s == "release";
    } else {
      error(*p, "member on_preempt: expected release or ignore, not `" + s + "`");
      ok = false;
    }
  }
  if (const YAML::Node* u = find(e, "unwind")) {
    std::string s;
    uint64_t n = 0;
    if (!scalar(*u, "member unwind", &s)) {
      ok = false;
    } else if (memcg::parse_duration(s, &n) != 0 || n > kMaxUnwindNs) {
      error(*u, "member unwind: expected a duration up to 1h, not `" + s + "`");
      ok = false;
    } else {
      m.has_unwind = true;
      m.unwind_ns = n;
    }
  }
  if (ok && m.name.find('#') != std::string::npos) {
    error(*find(e, "name"), "member `" + m.name + "`: `#` is kept for the members of a lane's "
                            "iterations (MEMBER#N)");
    ok = false;
  }
  if (ok && members_.count(m.name)) {
    error(*find(e, "name"), "member `" + m.name + "` exists already");
    ok = false;
  }
  if (ok) members_[m.name] = m.group;
  step->body = std::move(m);
  return ok;
}

bool Loader::member_ref(const YAML::Node& map, const Entries& e, const std::string& what,
                        std::string* out) {
  if (!required(map, e, what, "member", out)) return false;
  if (!members_.count(*out)) {
    error(*find(e, "member"), what + ": no member `" + *out + "`" +
                                  (exited_.count(*out) ? " (it exited before this step)" : ""));
    return false;
  }
  return true;
}

bool Loader::load_charge(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(v, "charge", {"member", "size", "expect", "bulk", "wait", "priority"},
                            &e))
    return false;
  ChargeStep c;
  bool ok = member_ref(v, e, "charge", &c.member);
  if (const YAML::Node* b = find(e, "bulk")) ok = boolean(*b, "charge bulk", &c.bulk) && ok;
  if (const YAML::Node* w = find(e, "wait")) {
    if (find(e, "bulk") && ok && !c.bulk) {
      error(*find(e, "bulk"),
            "charge: a waiting charge asks for the whole size in one call "
            "(`bulk: false` contradicts `wait`)");
      ok = false;
    }
    c.wait = true;
    c.bulk = true;
    ok = duration(*w, "charge wait", kMaxWaitNs, "60m (one hour)", &c.wait_ns) && ok;
  }
  if (const YAML::Node* p = find(e, "priority")) {
    std::string s;
    if (!scalar(*p, "charge priority", &s)) {
      ok = false;
    } else if (!c.wait) {
      error(*p, "charge: `priority` is the class of a waiting charge (it needs `wait`)");
      ok = false;
    } else if (s == "low") {
      c.priority = memcg::WaitPriority::kLow;
    } else if (s == "normal") {
      c.priority = memcg::WaitPriority::kNormal;
    } else if (s == "high") {
      c.priority = memcg::WaitPriority::kHigh;
    } else {
      error(*p, "charge priority: expected low, normal or high, got '" + s + "'");
      ok = false;
    }
  }
  if (const YAML::Node* n = find(e, "size")) {
    ok = step_size(*n, "charge size", &c.bytes) && ok;
  } else {
    error(v, "charge: missing `size`");
    ok = false;
  }
  if (const YAML::Node* x = find(e, "expect")) {
    std::string s;
    c.has_expect = true;
    if (!scalar(*x, "charge expect", &s)) {
      ok = false;
    } else if (s == "ok") {
      c.expect = ChargeStep::Outcome::kOk;
    } else if (s == "killed") {
      c.expect = ChargeStep::Outcome::kKilled;
    } else if (s == "failed") {
      c.expect = ChargeStep::Outcome::kFailed;
    } else if (s == "timed_out" && c.wait) {
      c.expect = ChargeStep::Outcome::kTimedOut;
    } else {
      if (s == "timed_out")
        error(*x,
              "charge expect: timed_out needs `wait` (a charge that does not wait never "
              "times out)");
      else
        error(*x, std::string("charge expect: expected ok, killed") +
                      (c.wait ? ", failed or timed_out" : " or failed") + ", not `" + s + "`");
      ok = false;
    }
  }
  step->body = std::move(c);
  return ok;
}

bool Loader::reserve_status(const YAML::Node& n, const std::string& what,
                            memcg::ReserveStatus* out) {
  std::string s;
  if (!scalar(n, what, &s)) return false;
  for (int i = 0; i < kReserveStatusCount; ++i) {
    const auto st = static_cast<memcg::ReserveStatus>(i);
    if (s == reserve_status_text(st)) {
      *out = st;
      return true;
    }
  }
  error(n, what + ": expected ok, forced, nomem, nomem-costly, timed-out, cancelled, killed, "
                  "removed, invalid or never-fits, not `" + s + "`");
  return false;
}

bool Loader::load_reserve(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(v, "reserve",
                            {"member", "size", "grow", "release", "wait", "on_timeout", "oom",
                             "priority", "ends_on", "expect"},
                            &e))
    return false;
  ReserveStep r;
  bool ok = member_ref(v, e, "reserve", &r.member);
  const YAML::Node* size_n = find(e, "size");
  const YAML::Node* grow_n = find(e, "grow");
  const YAML::Node* release_n = find(e, "release");
  if (!!size_n + !!grow_n + !!release_n != 1) {
    error(v, "reserve: give exactly one of `size` (the admitted total), `grow` or "
             "`release: true`");
    return false;
  }
  if (size_n) {
    r.op = ReserveStep::Op::kReserve;
    ok = step_size(*size_n, "reserve size", &r.bytes) && ok;
  } else if (grow_n) {
    r.op = ReserveStep::Op::kGrow;
    ok = step_size(*grow_n, "reserve grow", &r.bytes) && ok;
  } else {
    r.op = ReserveStep::Op::kRelease;
    bool rel = false;
    if (boolean(*release_n, "reserve release", &rel) && !rel) {
      error(*release_n, "reserve release: only `release: true` means something");
      ok = false;
    } else if (!rel) {
      ok = false;
    }
    for (const char* k : {"wait", "on_timeout", "oom", "priority", "ends_on"})
      if (const YAML::Node* x = find(e, k)) {
        error(*x, std::string("reserve release: `") + k +
                      "` is for a request (`size` or `grow`)");
        ok = false;
      }
  }
  if (const YAML::Node* w = find(e, "wait")) {
    r.wait = true;
    ok = duration(*w, "reserve wait", kMaxWaitNs, "60m (one hour)", &r.wait_ns) && ok;
  }
  if (const YAML::Node* t = find(e, "on_timeout")) {
    std::string s;
    if (!scalar(*t, "reserve on_timeout", &s)) {
      ok = false;
    } else if (!grow_n || !r.wait) {
      error(*t, "reserve on_timeout: only a waiting growth (`grow` with `wait`) times out "
                "into something else");
      ok = false;
    } else if (s == "grow" || s == "fail") {
      r.grow_on_timeout = s == "grow";
    } else {
      error(*t, "reserve on_timeout: expected grow or fail, not `" + s + "`");
      ok = false;
    }
  }
  // The member's options: fixed by the first step that names it.
  bool has_oom = false, has_priority = false;
  if (const YAML::Node* o = find(e, "oom")) {
    std::string s;
    has_oom = true;
    if (!scalar(*o, "reserve oom", &s)) {
      ok = false;
    } else if (s == "kernel") {
      r.oom = memcg::OomPolicy::kKernel;
    } else if (s == "pieces") {
      r.oom = memcg::OomPolicy::kPieces;
    } else if (s == "never") {
      r.oom = memcg::OomPolicy::kNever;
    } else {
      error(*o, "reserve oom: expected kernel, pieces or never, not `" + s + "`");
      ok = false;
    }
  }
  if (const YAML::Node* p = find(e, "priority")) {
    std::string s;
    has_priority = true;
    if (!scalar(*p, "reserve priority", &s)) {
      ok = false;
    } else if (s == "low") {
      r.priority = memcg::WaitPriority::kLow;
    } else if (s == "normal") {
      r.priority = memcg::WaitPriority::kNormal;
    } else if (s == "high") {
      r.priority = memcg::WaitPriority::kHigh;
    } else {
      error(*p, "reserve priority: expected low, normal or high, not `" + s + "`");
      ok = false;
    }
  }
  if (ok) {
    auto [it, fresh] = reserve_options_.try_emplace(r.member);
    if (fresh) {
      it->second = {mark_of(v).line, r.oom, r.priority};
    } else {
      const auto& seen = it->second;
      if ((has_oom && r.oom != seen.oom) || (has_priority && r.priority != seen.priority)) {
        error(has_oom && r.oom != seen.oom ? *find(e, "oom") : *find(e, "priority"),
              "reserve: member `" + r.member + "` has one reservation, whose `oom` and "
              "`priority` were fixed by its first reserve step (line " +
                  std::to_string(seen.line) + ")");
        ok = false;
      }
      r.oom = seen.oom;
      r.priority = seen.priority;
    }
  }
  if (const YAML::Node* n = find(e, "ends_on")) {
    if (!in_lane_) {
      error(*n, "reserve ends_on: ends a lane's iteration; outside a `parallel` lane there is "
                "none");
      ok = false;
    } else {
      std::vector<YAML::Node> items;
      if (n->IsSequence()) {
        for (auto it = n->begin(); it != n->end(); ++it) items.push_back(*it);
      } else {
        items.push_back(*n);
      }
      if (items.empty()) {
        error(*n, "reserve ends_on: expected a status or a list of statuses");
        ok = false;
      }
      for (const YAML::Node& item : items) {
        memcg::ReserveStatus st = memcg::ReserveStatus::kOk;
        if (item.IsScalar() && item.Scalar() == "refused") {
          // Every status but the two that hold (ok, forced).
          for (int i = 0; i < kReserveStatusCount; ++i)
            if (!memcg::held(static_cast<memcg::ReserveStatus>(i))) r.ends_on |= uint32_t{1} << i;
        } else if (!reserve_status(item, "reserve ends_on (or `refused`: every refusal)",
                                   &st)) {
          ok = false;
        } else if (memcg::held(st)) {
          error(item, std::string("reserve ends_on: `") + reserve_status_text(st) +
                          "` holds what was asked; an iteration ends on a refusal");
          ok = false;
        } else {
          r.ends_on |= uint32_t{1} << static_cast<int>(st);
        }
      }
    }
  }
  if (const YAML::Node* x = find(e, "expect")) {
    r.has_expect = true;
    ok = reserve_status(*x, "reserve expect", &r.expect) && ok;
  }
  step->body = std::move(r);
  return ok;
}

bool Loader::load_release(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(v, "release", {"member", "size"}, &e)) return false;
  ReleaseStep r;
  bool ok = member_ref(v, e, "release", &r.member);
  if (const YAML::Node* n = find(e, "size")) {
    r.all = false;
    ok = size(*n, "release size", &r.bytes) && ok;
  }
  step->body = std::move(r);
  return ok;
}

bool Loader::load_exit(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(v, "exit", {"member"}, &e)) return false;
  ExitStep x;
  if (!member_ref(v, e, "exit", &x.member)) return false;
  members_.erase(x.member);
  exited_.insert(x.member);
  step->body = std::move(x);
  return true;
}

bool Loader::load_reclaim(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(v, "reclaim", {"group", "size", "expect"}, &e)) return false;
  ReclaimStep r;
  bool ok = required(v, e, "reclaim", "group", &r.group) &&
            group_ref(*find(e, "group"), r.group, "reclaim");
  if (required(v, e, "reclaim", "size", &r.size)) {
    memcg::ReclaimRequest req;
    if (memcg::parse_reclaim(r.size, &req) != 0) {
      error(*find(e, "size"), "reclaim size: `" + r.size +
                                  "` is rejected by memory.reclaim (a size, then optional "
                                  "`swappiness=N`)");
      ok = false;
    } else {
      // It cannot reclaim more than was charged: count at most that.
      const uint64_t unit = uint64_t{1} << unit_shift_;
      const uint64_t units = req.bytes / unit + (req.bytes % unit != 0);
      ok = add_work(*find(e, "size"), "reclaim size", std::min(units, charged_units_)) && ok;
    }
  } else {
    ok = false;
  }
  if (const YAML::Node* x = find(e, "expect")) {
    r.has_expect = true;
    ok = errno_value(*x, "reclaim expect", &r.expect) && ok;
  }
  step->body = std::move(r);
  return ok;
}

bool Loader::load_remove(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(v, "remove", {"group"}, &e)) return false;
  RemoveStep r;
  if (!required(v, e, "remove", "group", &r.group)) return false;
  const YAML::Node& g = *find(e, "group");
  if (!group_ref(g, r.group, "remove", /*allow_root=*/false)) return false;
  const std::string prefix = r.group + "/";
  for (const auto& other : online_) {
    if (other.compare(0, prefix.size(), prefix) == 0) {
      error(g, "remove: `" + r.group + "` still has the child `" + other + "`");
      return false;
    }
  }
  for (const auto& [name, group] : members_) {
    if (group == r.group) {
      error(g, "remove: `" + r.group + "` still has the member `" + name + "` (exit it first)");
      return false;
    }
  }
  for (const auto& [name, h] : handles_) {
    // A watch, listener or trigger sees the removal (its final notification) and stays open, on
    // no group; a memory.peak handle is a file of the group.
    if (h.second == r.group && h.first == "peak") {
      error(g, "remove: `" + r.group + "` still has the " + h.first + " `" + name + "`" +
                   (h.first == "peak" ? " (close it first)" : " (it stays open to the end)"));
      return false;
    }
  }
  online_.erase(r.group);
  step->body = std::move(r);
  return true;
}

bool Loader::load_tick(const YAML::Node& v, Step* step) {
  TickStep t;
  if (!duration(v, "tick", kMaxVirtualNs, "100 years", &t.ns)) return false;
  step->body = t;
  return true;
}

bool Loader::load_parallel(const YAML::Node& v, Step* step) {
  if (!v.IsMap() || v.size() == 0) {
    error(v, "parallel: expected a map of lanes, member name → list of steps");
    return false;
  }
  if (v.size() > kMaxLanes) {
    error(v, "parallel: more than " + std::to_string(kMaxLanes) + " lanes");
    return false;
  }
  Entries lanes;
  if (!entries(v, "parallel", {}, &lanes)) return false;
  ParallelStep p;
  bool ok = true;
  in_lane_ = true;
  for (const auto& [k, body] : lanes) {
    ParallelStep::Lane lane;
    lane.member = k.Scalar();
    lane.mark = mark_of(k);
    if (!members_.count(lane.member)) {
      error(k, "parallel: no member `" + lane.member + "`" +
                   (exited_.count(lane.member) ? " (it exited before this step)" : "") +
                   ": each lane is named after the member it runs as");
      ok = false;
    }
    YAML::Node steps = body;
    if (body.IsMap() && !body["steps"] && !body["iterations"]) {
      error(body, "parallel lane " + lane.member +
                      ": expected a list of steps, or { repeat, new_member, steps }, or "
                      "{ new_member, iterations }");
      ok = false;
      continue;
    }
    if (body.IsMap()) {
      // The long form: { repeat: N, new_member: BOOL, steps: [ ... ] }, or
      // { new_member: BOOL, iterations: [ [ ... ], [ ... ] ] }.
      Entries e;
      if (!entries(body, "parallel lane " + lane.member,
                   {"steps", "repeat", "new_member", "iterations"}, &e)) {
        ok = false;
        continue;
      }
      if (const YAML::Node* its = find(e, "iterations")) {
        if (find(e, "steps") || find(e, "repeat")) {
          error(*its, "parallel lane " + lane.member +
                          ": `iterations` lists every iteration's steps (not with `steps` or "
                          "`repeat`)");
          ok = false;
          continue;
        }
        if (const YAML::Node* nm = find(e, "new_member"))
          ok = boolean(*nm, "parallel lane new_member", &lane.new_member) && ok;
        if (!its->IsSequence() || its->size() == 0) {
          error(*its, "parallel lane " + lane.member +
                          " iterations: expected a non-empty list of step lists");
          ok = false;
          continue;
        }
        if (its->size() > kMaxLaneRepeat) {
          error(*its, "parallel lane " + lane.member + " iterations: more than " +
                          std::to_string(kMaxLaneRepeat) + " iterations");
          ok = false;
          continue;
        }
        uint64_t runs = 0;
        for (auto it = its->begin(); it != its->end(); ++it) {
          YAML::Node list = *it;
          std::string group;
          if (list.IsMap()) {
            // { group: G, steps: [ ... ] }: the iteration's member joins G.
            Entries ie;
            const std::string what = "parallel lane " + lane.member + " iteration";
            if (!entries(list, what, {"group", "steps"}, &ie)) {
              ok = false;
              continue;
            }
            const YAML::Node* st = find(ie, "steps");
            if (!st) {
              error(list, what + ": `steps` is required");
              ok = false;
              continue;
            }
            if (const YAML::Node* g = find(ie, "group")) {
              if (!scalar(*g, what + " group", &group) || !group_ref(*g, group, what)) {
                ok = false;
              } else if (!lane.new_member) {
                error(*g, what + ": `group` is the group of the iteration's new member "
                                 "(it needs `new_member: true`)");
                ok = false;
              }
            }
            list = *st;
          }
          if (!list.IsSequence()) {
            error(list, "parallel lane " + lane.member +
                            " iterations: each iteration is a list of steps, or "
                            "{ group, steps }");
            ok = false;
            continue;
          }
          std::vector<Step> one;
          ok = load_step_list(list, lane.member, &one) && ok;
          runs += std::max<size_t>(one.size(), 1);
          lane.iterations.push_back(std::move(one));
          lane.iteration_groups.push_back(std::move(group));
          if (too_many()) break;
        }
        if (runs > kMaxLaneStepRuns) {
          error(*its, "parallel lane " + lane.member + ": its iterations have " +
                          std::to_string(runs) + " steps in all, more than " +
                          std::to_string(kMaxLaneStepRuns) + ", the most a lane may run");
          ok = false;
        }
        lane.repeat = lane.iterations.size();
        p.lanes.push_back(std::move(lane));
        continue;
      }
      const YAML::Node* st = find(e, "steps");
      if (!st) {
        error(body, "parallel lane " + lane.member + ": `steps` is required");
        ok = false;
        continue;
      }
      steps = *st;
      if (const YAML::Node* r = find(e, "repeat")) {
        std::string s;
        uint64_t n = 0;
        if (!scalar(*r, "parallel lane repeat", &s) || !parse_uint(s, &n) || n < 1 ||
            n > kMaxLaneRepeat) {
          error(*r, "parallel lane " + lane.member + " repeat: expected a whole number from 1 to " +
                        std::to_string(kMaxLaneRepeat));
          ok = false;
        } else {
          lane.repeat = n;
        }
      }
      if (const YAML::Node* nm = find(e, "new_member"))
        ok = boolean(*nm, "parallel lane new_member", &lane.new_member) && ok;
    }
    if (!steps.IsSequence()) {
      error(steps, "parallel lane " + lane.member +
                       ": expected a list of steps, or { repeat, new_member, steps }, or "
                       "{ new_member, iterations }");
      ok = false;
      continue;
    }
    const uint64_t work_before = work_units_;
    const uint64_t ns_before = virtual_ns_;
    ok = load_step_list(steps, lane.member, &lane.steps) && ok;
    if (lane.repeat * std::max<uint64_t>(lane.steps.size(), 1) > kMaxLaneStepRuns) {
      error(steps, "parallel lane " + lane.member + ": " + std::to_string(lane.repeat) +
                       " iterations of " + std::to_string(lane.steps.size()) +
                       " steps are more than " + std::to_string(kMaxLaneStepRuns) +
                       " step runs, the most a lane may make");
      ok = false;
    } else if (ok && lane.repeat > 1) {
      // Every iteration charges and ticks again: the budgets count them all.
      const uint64_t work = work_units_ - work_before;
      const uint64_t ns = virtual_ns_ - ns_before;
      ok = add_work(steps, "parallel lane " + lane.member + " repeat",
                    work > (kMaxWorkUnits + 1) / (lane.repeat - 1)
                        ? kMaxWorkUnits + 1
                        : work * (lane.repeat - 1));
      if (ok && ns != 0 &&
          (ns > kMaxVirtualNs / (lane.repeat - 1) ||
           ns * (lane.repeat - 1) > kMaxVirtualNs - virtual_ns_)) {
        error(steps, "parallel lane " + lane.member + " repeat: the ticks and waits of every "
                     "iteration add up to more than " +
                         std::to_string(kMaxVirtualNs / 1'000'000'000) +
                         " s of virtual time, the most a scenario may take");
        ok = false;
      } else if (ok) {
        virtual_ns_ += ns * (lane.repeat - 1);
      }
    }
    p.lanes.push_back(std::move(lane));
  }
  in_lane_ = false;
  step->body = std::move(p);
  return ok;
}

}  // namespace memcgctl::detail
