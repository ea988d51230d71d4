// The scenario loader: `reserve`, a member's reservation, and the statuses it may expect
// (loader.hpp).
#include "loader.hpp"

namespace memcgctl::detail {

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

}  // namespace memcgctl::detail
