// The scenario loader: the root, `config`, `groups`, knob values and step lists (loader.hpp).
#include "loader.hpp"

#include "memcg/base/errors.hpp"
#include "memcg/files/parse.hpp"

namespace memcgctl::detail {

bool Loader::load(std::string_view text, Scenario* out) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    error(mark_of(e.mark), "YAML syntax: " + e.msg);
    return false;
  }
  try {
    load_root(root, out);
    out->work_units = work_units_;
  } catch (const YAML::Exception& e) {
    // yaml-cpp throws only for misuse of a node; report it rather than crash on odd input.
    error(mark_of(e.mark), "cannot read this: " + e.msg);
  }
  return errors_->empty();
}

bool Loader::group_ref(const YAML::Node& n, const std::string& g, const std::string& what,
                       bool allow_root) {
  if (g == "/" && allow_root) return true;
  if (g == "/" || !valid_group_path(g)) {
    error(n, what + ": `" + g + "` is not a group path");
    return false;
  }
  if (!online_.count(g)) {
    error(n, what + ": no group `" + g + "`" +
                 (declared_.count(g) ? " (it was removed before this step)" : ""));
    return false;
  }
  return true;
}

void Loader::knob(const YAML::Node& key, const YAML::Node& value, const std::string& group,
                  std::vector<Knob>* out) {
  const std::string file = key.Scalar();
  if (!valid_file_name(file)) {
    error(key, "`" + file + "` is not an interface file name");
    return;
  }
  if (file == "memory.reclaim") {
    error(key, "memory.reclaim is not a knob: use a `reclaim` step");
    return;
  }
  std::string v;
  if (!scalar(value, group + " " + file, &v)) return;
  int err = 0;
  if (file == "memory.min" || file == "memory.low" || file == "memory.high" ||
      file == "memory.max" || file == "memory.swap.high" || file == "memory.swap.max") {
    uint64_t units = 0;
    err = memcg::parse_limit(v, unit_shift_, &units);
  } else if (file == "memory.oom.group" || file == "memory.wait.preempt") {
    int on = 0;
    err = memcg::parse_oom_group(v, &on);
  }
  if (err) {
    error(value, group + " " + file + ": `" + v + "` is rejected by the file (" +
                     memcg::errno_name(err) + ")");
    return;
  }
  out->push_back({group, file, v, mark_of(value)});
}

void Loader::load_groups(const YAML::Node& node, Scenario* out) {
  Entries e;
  if (!entries(node, "groups", {}, &e)) return;
  for (const auto& [k, v] : e) {
    const std::string path = k.Scalar();
    if (path == "/") {
      error(k, "groups: the root group `/` always exists; it cannot be declared");
      continue;
    }
    if (!valid_group_path(path)) {
      error(k, "groups: `" + path + "` is not a group path (names of [A-Za-z0-9_.-] joined by /)");
      continue;
    }
    if (out->groups.size() >= kMaxGroups) {
      error(k, "groups: more than " + std::to_string(kMaxGroups) +
                   " groups (with the root, the kernel's limit of 65535 memory cgroups)");
      return;
    }
    const std::string parent = parent_of(path);
    if (!known_group(parent)) {
      error(k, "groups: `" + path + "` comes before its parent `" + parent + "`");
      continue;
    }
    GroupSpec g;
    g.path = path;
    g.mark = mark_of(k);
    Entries knobs;
    if (entries(v, "groups: " + path, {}, &knobs))
      for (const auto& [kk, kv] : knobs) knob(kk, kv, path, &g.knobs);
    online_.insert(path);
    declared_.insert(path);
    out->groups.push_back(std::move(g));
  }
}

void Loader::load_config(const YAML::Node& node, Config* c) {
  Entries e;
  if (!entries(node, "config",
               {"unit", "cpus", "batch", "recursive_protection", "local_events", "reclaim_cost",
                "unwind"},
               &e))
    return;
  for (const auto& [k, v] : e) {
    const std::string key = k.Scalar();
    std::string s;
    uint64_t n = 0;
    if (key == "unit") {
      if (!size(v, "config unit", &n)) continue;
      if (n == 0 || (n & (n - 1)) != 0 || n < (uint64_t{1} << kMinUnitShift) ||
          n > (uint64_t{1} << kMaxUnitShift)) {
        error(v, "config unit: must be a power of two from 64 to 1G, not " + v.Scalar());
        continue;
      }
      c->unit = n;
      unit_shift_ = static_cast<unsigned>(__builtin_ctzll(n));
    } else if (key == "cpus") {
      if (!scalar(v, "config cpus", &s)) continue;
      if (!parse_uint(s, &n) || n < 1 || n > kMaxCpus) {
        error(v, "config cpus: expected a whole number from 1 to " + std::to_string(kMaxCpus));
        continue;
      }
      c->cpus = static_cast<int>(n);
    } else if (key == "batch") {
      if (!scalar(v, "config batch", &s)) continue;
      if (!parse_uint(s, &n) || n < 1 || n > kMaxBatch) {
        error(v, "config batch: expected a whole number of units from 1 to " +
                     std::to_string(kMaxBatch));
        continue;
      }
      c->batch = static_cast<int64_t>(n);
    } else if (key == "recursive_protection") {
      boolean(v, "config recursive_protection", &c->recursive_protection);
    } else if (key == "local_events") {
      boolean(v, "config local_events", &c->local_events);
    } else if (key == "reclaim_cost") {
      if (!scalar(v, "config reclaim_cost", &s)) continue;
      const int err = memcg::parse_duration(s, &n);
      if (err || n > kMaxReclaimCostNs) {
        error(v, "config reclaim_cost: expected a duration per unit up to 1ms, not `" + s + "`");
        continue;
      }
      c->reclaim_cost_ns = n;
    } else if (key == "unwind") {
      if (!scalar(v, "config unwind", &s)) continue;
      const int err = memcg::parse_duration(s, &n);
      if (err || n > kMaxUnwindNs) {
        error(v, "config unwind: expected a duration up to 1h, not `" + s + "`");
        continue;
      }
      c->unwind_ns = n;
    }
  }
}

void Loader::load_steps(const YAML::Node& node, Scenario* out) {
  if (!node.IsSequence()) {
    error(node, "steps: expected a list of steps");
    return;
  }
  load_step_list(node, "", &out->steps);
}

bool Loader::load_step_list(const YAML::Node& list, const std::string& lane,
                            std::vector<Step>* out) {
  // What a lane may do: nothing that creates or destroys (see load_parallel).
  static const std::set<std::string> kInLane = {"set",     "write", "cache",  "charge", "release",
                                                "reclaim", "tick",  "expect", "print",  "reserve"};
  bool ok = true;
  for (auto step_it = list.begin(); step_it != list.end(); ++step_it) {
    const YAML::Node s = *step_it;  // a handle; the iterator yields temporaries
    if (too_many()) return false;
    if (!s.IsMap() || s.size() != 1) {
      error(s, "a step is a map with exactly one key (the step's name), e.g. `- tick: 1s`");
      ok = false;
      continue;
    }
    auto it = s.begin();
    const YAML::Node key = it->first;
    const YAML::Node body = it->second;
    if (!key.IsScalar()) {
      error(key, "a step's key must be its name");
      ok = false;
      continue;
    }
    Step step;
    step.kind = key.Scalar();
    step.mark = mark_of(key);
    if (!lane.empty() && !kInLane.count(step.kind) && kKnownSteps.count(step.kind)) {
      // `lane` is a lane's member, or "queue MEMBER item" for the steps of a queue's item.
      const bool queue = lane.rfind("queue ", 0) == 0;
      error(key, (queue ? lane : "parallel lane " + lane) + ": `" + step.kind +
                     "` cannot run in a lane (a lane creates and destroys nothing: do it "
                     "before or after the block)");
      ok = false;
      continue;
    }
    if (load_step(step.kind, key, body, &step)) {
      out->push_back(std::move(step));
    } else {
      ok = false;
    }
  }
  return ok;
}

bool Loader::load_step(const std::string& kind, const YAML::Node& key, const YAML::Node& v,
                       Step* step) {
  if (kind == "set") return load_set(v, step);
  if (kind == "write") return load_write(v, step);
  if (kind == "cache") return load_cache(v, step);
  if (kind == "member") return load_member(v, step);
  if (kind == "charge") return load_charge(v, step);
  if (kind == "release") return load_release(v, step);
  if (kind == "exit") return load_exit(v, step);
  if (kind == "reclaim") return load_reclaim(v, step);
  if (kind == "remove") return load_remove(v, step);
  if (kind == "tick") return load_tick(v, step);
  if (kind == "expect") return load_expect(v, step);
  if (kind == "print") return load_print(v, step);
  if (kind == "listen") return load_listen(v, step);
  if (kind == "trigger") return load_trigger(v, step);
  if (kind == "peak") return load_peak(v, step);
  if (kind == "watch") return load_watch(v, step);
  if (kind == "parallel") return load_parallel(v, step);
  if (kind == "reserve") return load_reserve(v, step);
  if (kind == "queue") return load_queue(v, step);
  error(key, "unknown step `" + kind +
                 "` (expected set, write, cache, member, charge, reserve, release, exit, "
                 "reclaim, remove, tick, expect, print, listen, trigger, peak, watch, "
                 "parallel or queue)");
  return false;
}

void Loader::load_root(const YAML::Node& root, Scenario* out) {
  if (!root.IsMap()) {
    error(root.IsDefined() && !root.IsNull() ? mark_of(root) : Mark{1, 1},
          "a scenario is a map with `steps` (and optional `name`, `config`, `groups`)");
    return;
  }
  Entries e;
  entries(root, "scenario", {"name", "config", "groups", "steps"}, &e);
  // config first: the unit decides how knob values are checked.
  if (const YAML::Node* c = find(e, "config")) load_config(*c, &out->config);
  if (const YAML::Node* n = find(e, "name")) scalar(*n, "name", &out->name);
  if (const YAML::Node* g = find(e, "groups")) load_groups(*g, out);
  if (const YAML::Node* s = find(e, "steps")) {
    load_steps(*s, out);
  } else {
    error(root, "scenario: missing `steps`");
  }
}

}  // namespace memcgctl::detail
