// The scenario loader: the `queue` step, an admission queue served by a pool of lanes
// (docs/scenarios.md, "`queue`: an admission queue"; scenario.hpp, QueueStep).
#include <algorithm>
#include <map>

#include "loader.hpp"

namespace memcgctl::detail {

bool Loader::admit_weight(const YAML::Node& n, uint32_t* out) {
  std::string s;
  uint64_t w = 0;
  if (!scalar(n, "queue admit_weight", &s)) return false;
  if (!parse_uint(s, &w) || w < kMinAdmitWeight || w > kMaxAdmitWeight) {
    error(n, "queue admit_weight: expected a whole number from " +
                 std::to_string(kMinAdmitWeight) + " to " + std::to_string(kMaxAdmitWeight) +
                 " (as cpu.weight), not `" + s + "`");
    return false;
  }
  *out = static_cast<uint32_t>(w);
  return true;
}

bool Loader::load_queue(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(v, "queue",
                            {"member", "workers", "oom", "deadline", "tenants", "items"}, &e))
    return false;
  QueueStep q;
  bool ok = member_ref(v, e, "queue", &q.member);
  if (const YAML::Node* w = find(e, "workers")) {
    std::string s;
    uint64_t n = 0;
    if (!scalar(*w, "queue workers", &s) || !parse_uint(s, &n) || n < 1 || n > kMaxLanes) {
      error(*w, "queue workers: expected a whole number from 1 to " + std::to_string(kMaxLanes) +
                    " (each is a lane: a thread for the step)");
      ok = false;
    } else {
      q.workers = n;
    }
  }
  if (const YAML::Node* o = find(e, "oom")) {
    std::string s;
    if (!scalar(*o, "queue oom", &s)) {
      ok = false;
    } else if (s == "kernel") {
      q.oom = memcg::OomPolicy::kKernel;
    } else if (s == "pieces") {
      q.oom = memcg::OomPolicy::kPieces;
    } else if (s == "never") {
      q.oom = memcg::OomPolicy::kNever;
    } else {
      error(*o, "queue oom: expected kernel, pieces or never, not `" + s + "`");
      ok = false;
    }
  }
  // The items' reservations are the member's (its iterations'): their options are the queue's,
  // and a `reserve` step of an item may repeat them, not change them.
  if (ok) {
    auto [it, fresh] = reserve_options_.try_emplace(q.member);
    if (fresh) {
      it->second = {mark_of(v).line, q.oom, memcg::WaitPriority::kDefault};
    } else if (it->second.oom != q.oom) {
      error(find(e, "oom") ? *find(e, "oom") : v,
            "queue: member `" + q.member + "` has one reservation, whose `oom` was fixed by "
            "line " + std::to_string(it->second.line));
      ok = false;
    }
  }
  uint64_t deadline = 0;
  const bool has_deadline = find(e, "deadline") != nullptr;
  if (has_deadline) {
    // Counted once per item below, as each item may wait that long.
    const uint64_t before = virtual_ns_;
    ok = duration(*find(e, "deadline"), "queue deadline", kMaxWaitNs, "60m (one hour)",
                  &deadline) && ok;
    virtual_ns_ = before;
  }
  std::map<std::string, size_t> tenant_index;
  if (const YAML::Node* t = find(e, "tenants")) {
    Entries te;
    if (!t->IsMap()) {
      error(*t, "queue tenants: expected a map of groups, GROUP → { admit_weight: N }");
      ok = false;
    } else if (entries(*t, "queue tenants", {}, &te)) {
      for (const auto& [k, body] : te) {
        QueueStep::Tenant tenant;
        tenant.group = k.Scalar();
        tenant.weight = kDefaultAdmitWeight;
        ok = group_ref(k, tenant.group, "queue tenants") && ok;
        Entries be;
        if (!entries_required_map(body, "queue tenant " + tenant.group, {"admit_weight"}, &be)) {
          ok = false;
        } else if (const YAML::Node* w = find(be, "admit_weight")) {
          ok = admit_weight(*w, &tenant.weight) && ok;
        }
        if (q.tenants.size() == kMaxQueueTenants) {
          error(k, "queue tenants: more than " + std::to_string(kMaxQueueTenants) + " groups");
          ok = false;
          break;
        }
        tenant_index[tenant.group] = q.tenants.size();
        q.tenants.push_back(std::move(tenant));
      }
    } else {
      ok = false;
    }
  }
  const YAML::Node* items = find(e, "items");
  if (!items) {
    error(v, "queue: `items` is required (a list of { group, size, steps })");
    step->body = std::move(q);
    return false;
  }
  if (!items->IsSequence() || items->size() == 0) {
    error(*items, "queue items: expected a non-empty list of { group, size, steps }");
    step->body = std::move(q);
    return false;
  }
  if (items->size() > kMaxQueueItems) {
    error(*items, "queue items: more than " + std::to_string(kMaxQueueItems) + " items");
    step->body = std::move(q);
    return false;
  }
  in_lane_ = true;
  uint64_t steps = 0;
  for (auto it = items->begin(); it != items->end() && !too_many(); ++it) {
    const YAML::Node item = *it;
    if (!load_queue_item(item, q.member, deadline, has_deadline, &q)) {
      ok = false;
      continue;
    }
    const QueueStep::Item& last = q.items.back();
    steps += last.steps.size();
    if (!tenant_index.count(last.group)) {
      if (q.tenants.size() == kMaxQueueTenants) {
        error(item, "queue items: the items belong to more than " +
                        std::to_string(kMaxQueueTenants) + " groups");
        ok = false;
        break;
      }
      tenant_index[last.group] = q.tenants.size();
      q.tenants.push_back({last.group, kDefaultAdmitWeight});
    }
  }
  in_lane_ = false;
  if (steps > kMaxQueueSteps) {
    error(*items, "queue items: " + std::to_string(steps) + " steps in all, more than " +
                      std::to_string(kMaxQueueSteps) + ", the most a queue may run");
    ok = false;
  }
  step->body = std::move(q);
  return ok;
}

bool Loader::load_queue_item(const YAML::Node& n, const std::string& member,
                             uint64_t default_deadline, bool has_default_deadline,
                             QueueStep* q) {
  const std::string what = "queue item";
  Entries e;
  if (!entries_required_map(n, what, {"group", "size", "priority", "deadline", "steps"}, &e))
    return false;
  QueueStep::Item item;
  item.mark = mark_of(n);
  bool ok = required(n, e, what, "group", &item.group);
  if (ok) ok = group_ref(*find(e, "group"), item.group, what, /*allow_root=*/false);
  if (const YAML::Node* s = find(e, "size")) {
    ok = step_size(*s, what + " size", &item.bytes) && ok;
  } else {
    error(n, what + ": `size` is required (the admission's total)");
    ok = false;
  }
  if (const YAML::Node* p = find(e, "priority")) {
    std::string s;
    if (!scalar(*p, what + " priority", &s)) {
      ok = false;
    } else if (s == "low") {
      item.priority = memcg::WaitPriority::kLow;
    } else if (s == "normal") {
      item.priority = memcg::WaitPriority::kNormal;
    } else if (s == "high") {
      item.priority = memcg::WaitPriority::kHigh;
    } else {
      error(*p, what + " priority: expected low, normal or high, not `" + s + "`");
      ok = false;
    }
  }
  if (const YAML::Node* d = find(e, "deadline")) {
    ok = duration(*d, what + " deadline", kMaxWaitNs, "60m (one hour)", &item.deadline_ns) && ok;
  } else if (!has_default_deadline) {
    error(n, what + ": `deadline` is required (here or on the queue): how long the item may "
                    "wait over all its tries");
    ok = false;
  } else if (default_deadline > kMaxVirtualNs - virtual_ns_) {
    error(n, what + ": the queue's deadline takes the virtual clock past " +
                 std::to_string(kMaxVirtualNs / 1'000'000'000) +
                 " s (100 years), the most a scenario may run");
    ok = false;
  } else {
    item.deadline_ns = default_deadline;
    virtual_ns_ += default_deadline;
  }
  if (const YAML::Node* st = find(e, "steps")) {
    if (!st->IsSequence()) {
      error(*st, what + " steps: expected a list of steps");
      ok = false;
    } else {
      ok = load_step_list(*st, "queue " + member + " item", &item.steps) && ok;
    }
  }
  q->items.push_back(std::move(item));
  return ok;
}

}  // namespace memcgctl::detail
