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

}  // namespace memcgctl::detail
