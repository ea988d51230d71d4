// The scenario loader: the steps that open and use handles (loader.hpp).
#include "loader.hpp"

#include "memcg/base/errors.hpp"
#include "memcg/files/parse.hpp"

namespace memcgctl::detail {

bool Loader::new_handle(const YAML::Node& map, const Entries& e, const std::string& kind,
                        std::string* name) {
  if (!required(map, e, kind, "name", name)) return false;
  if (name->empty()) {
    error(*find(e, "name"), kind + ": the name is empty");
    return false;
  }
  const auto it = handles_.find(*name);
  if (it != handles_.end()) {
    error(*find(e, "name"), kind + ": `" + *name + "` is already the name of the " +
                                it->second.first + " on `" + it->second.second + "`");
    return false;
  }
  if (handles_.size() >= kMaxHandles) {
    error(*find(e, "name"),
          kind + ": more than " + std::to_string(kMaxHandles) + " handles open at once");
    return false;
  }
  return true;
}

bool Loader::handle_group(const YAML::Node& map, const Entries& e, const std::string& what,
                          std::string* group) {
  if (!required(map, e, what, "group", group)) return false;
  const YAML::Node& g = *find(e, "group");
  if (*group == "/") {
    error(g, what + ": the root group has no such file; name a group below it");
    return false;
  }
  return group_ref(g, *group, what, /*allow_root=*/false);
}

bool Loader::load_listen(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(v, "listen", {"name", "group", "level", "mode", "shrink"}, &e))
    return false;
  ListenStep l;
  bool ok = new_handle(v, e, "listen", &l.name);
  if (const YAML::Node* sh = find(e, "shrink")) {
    Entries se;
    if (!entries_required_map(*sh, "listen shrink", {"cache", "size"}, &se)) {
      ok = false;
    } else {
      if (required(*sh, se, "listen shrink", "cache", &l.shrink_cache)) {
        if (!caches_.count(l.shrink_cache)) {
          error(*find(se, "cache"), "listen shrink: no cache `" + l.shrink_cache +
                                        "` (a `cache` step must create it first)");
          ok = false;
        }
      } else {
        ok = false;
      }
      if (const YAML::Node* n = find(se, "size")) {
        ok = size(*n, "listen shrink size", &l.shrink_bytes) && ok;
      } else {
        error(*sh, "listen shrink: missing `size`");
        ok = false;
      }
    }
  }
  ok = handle_group(v, e, "listen " + l.name, &l.group) && ok;
  std::string level, mode = "default";
  if (required(v, e, "listen", "level", &level)) {
    if (!find(e, "mode") || scalar(*find(e, "mode"), "listen mode", &mode)) {
      memcg::PressureLevel lv{};
      memcg::PressureMode md{};
      if (memcg::parse_pressure_level(level + "," + mode, &lv, &md) != 0) {
        const bool level_ok = memcg::parse_pressure_level(level, &lv, &md) == 0;
        const YAML::Node& bad = level_ok ? *find(e, "mode") : *find(e, "level");
        error(bad, level_ok
                       ? "listen mode: expected default, hierarchy or local, not `" + mode + "`"
                       : "listen level: expected low, medium or critical, not `" + level + "`");
        ok = false;
      }
      l.level = static_cast<int>(lv);
      l.mode = static_cast<int>(md);
    } else {
      ok = false;
    }
  } else {
    ok = false;
  }
  if (ok) handles_[l.name] = {"listener", l.group};
  step->body = std::move(l);
  return ok;
}

bool Loader::load_trigger(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(v, "trigger", {"name", "group", "spec"}, &e)) return false;
  TriggerStep t;
  bool ok = new_handle(v, e, "trigger", &t.name);
  ok = handle_group(v, e, "trigger " + t.name, &t.group) && ok;
  if (required(v, e, "trigger", "spec", &t.spec)) {
    memcg::PsiTriggerSpec spec{};
    if (const int err = memcg::parse_psi_trigger(t.spec, /*privileged=*/true, &spec)) {
      error(*find(e, "spec"),
            "trigger spec: `" + t.spec + "` is rejected by memory.pressure (" +
                memcg::errno_name(err) +
                "): expected `some|full STALL_US WINDOW_US`, a window from 1 to "
                "10000000 us and a stall from 1 us to the window");
      ok = false;
    }
  } else {
    ok = false;
  }
  if (ok) handles_[t.name] = {"trigger", t.group};
  step->body = std::move(t);
  return ok;
}

bool Loader::load_peak(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(v, "peak", {"name", "group", "reset", "close"}, &e)) return false;
  PeakStep p;
  const YAML::Node* reset = find(e, "reset");
  const YAML::Node* close = find(e, "close");
  if (reset && close) {
    error(*close, "peak: give at most one of `reset` and `close`");
    return false;
  }
  if (!reset && !close) {  // open
    p.op = PeakStep::Op::kOpen;
    bool ok = new_handle(v, e, "peak", &p.name);
    ok = handle_group(v, e, "peak " + p.name, &p.group) && ok;
    if (ok) handles_[p.name] = {"peak", p.group};
    step->body = std::move(p);
    return ok;
  }
  const YAML::Node& flag = reset ? *reset : *close;
  const std::string what = reset ? "peak reset" : "peak close";
  p.op = reset ? PeakStep::Op::kReset : PeakStep::Op::kClose;
  bool on = false;
  bool ok = boolean(flag, what, &on);
  if (ok && !on) {
    error(flag, what + ": only `true` means something");
    ok = false;
  }
  if (!required(v, e, "peak", "name", &p.name)) return false;
  if (find(e, "group")) {
    error(*find(e, "group"), what + ": the handle knows its group; `group` opens a new one");
    ok = false;
  }
  ok = handle_ref(*find(e, "name"), p.name, "peak", what) && ok;
  if (ok) p.group = handles_[p.name].second;
  if (ok && p.op == PeakStep::Op::kClose) handles_.erase(p.name);
  step->body = std::move(p);
  return ok;
}

bool Loader::load_watch(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(v, "watch", {"name", "group", "file"}, &e)) return false;
  WatchStep w;
  bool ok = new_handle(v, e, "watch", &w.name);
  ok = handle_group(v, e, "watch " + w.name, &w.group) && ok;
  if (const YAML::Node* f = find(e, "file")) {
    std::string file;
    if (!scalar(*f, "watch file", &file)) {
      ok = false;
    } else if (file == "memory.events.local") {
      w.local = true;
    } else if (file != "memory.events") {
      error(*f, "watch file: expected memory.events or memory.events.local, not `" + file + "`");
      ok = false;
    }
  }
  if (ok) handles_[w.name] = {"watch", w.group};
  step->body = std::move(w);
  return ok;
}

bool Loader::handle_ref(const YAML::Node& n, const std::string& name, const std::string& kind,
                        const std::string& what) {
  const auto it = handles_.find(name);
  if (it == handles_.end() || it->second.first != kind) {
    error(n, what + ": no open " + kind + " `" + name + "`" +
                 (it != handles_.end() ? " (`" + name + "` is a " + it->second.first + ")" : ""));
    return false;
  }
  return true;
}

}  // namespace memcgctl::detail
