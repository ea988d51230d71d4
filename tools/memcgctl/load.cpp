#include "load.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "memcg/base/errors.hpp"
#include "memcg/files/parse.hpp"

namespace memcgctl {

const char* outcome_name(ChargeStep::Outcome o) {
  switch (o) {
    case ChargeStep::Outcome::kOk:
      return "ok";
    case ChargeStep::Outcome::kKilled:
      return "killed";
    case ChargeStep::Outcome::kFailed:
      return "failed";
    case ChargeStep::Outcome::kTimedOut:
      return "timed_out";
  }
  return "?";
}

const char* op_name(ExpectStep::Op op) {
  switch (op) {
    case ExpectStep::Op::kEq:
      return "eq";
    case ExpectStep::Op::kLe:
      return "le";
    case ExpectStep::Op::kGe:
      return "ge";
    case ExpectStep::Op::kCloseTo:
      return "close_to";
  }
  return "?";
}

bool is_keyed_file(std::string_view file) {
  return file == "memory.events" || file == "memory.events.local" || file == "memory.stat" ||
         file == "memory.swap.events" || file == "memory.numa_stat" || file == "memory.wait";
}

namespace {

// The largest stock shard count a scenario may ask for: enough for any simulated machine, small
// enough that a typo (cpus: 10000000) is reported instead of allocating per-shard state for it.
constexpr int kMaxCpus = 4096;
// Bounds of memcg::Options (controller.hpp): unit_shift 6..30, batch 1..127.
constexpr unsigned kMinUnitShift = 6;
constexpr unsigned kMaxUnitShift = 30;
constexpr int64_t kMaxBatch = 127;
// Errors listed before giving up: the first few locate the problem; hundreds would bury it.
constexpr size_t kMaxErrors = 20;

Mark mark_of(const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  if (m.line < 0) return {};
  return {m.line + 1, m.column + 1};
}

Mark mark_of(const YAML::Mark& m) {
  if (m.line < 0) return {};
  return {m.line + 1, m.column + 1};
}

bool parse_uint(std::string_view s, uint64_t* v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

bool parse_hundredths(std::string_view s, uint64_t* v) {
  const size_t dot = s.find('.');
  uint64_t whole = 0, frac = 0;
  if (!parse_uint(s.substr(0, dot), &whole) || whole > 100) return false;
  if (dot != std::string_view::npos) {
    const std::string_view f = s.substr(dot + 1);
    if (f.empty() || f.size() > 2 || !parse_uint(f, &frac)) return false;
    if (f.size() == 1) frac *= 10;
  }
  *v = whole * 100 + frac;
  return *v <= 10000;
}

namespace {

// Group paths relative to the root: segments of [A-Za-z0-9_.-], not "." or "..", joined by '/'.
bool valid_group_path(std::string_view path) {
  if (path.empty()) return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view seg = path.substr(start, end - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    for (char c : seg) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '.' || c == '-';
      if (!ok) return false;
    }
    start = end + 1;
  }
  return true;
}

std::string parent_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "/" : path.substr(0, slash);
}

bool valid_file_name(std::string_view f) {
  if (f.empty()) return false;
  for (char c : f) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

class Loader {
 public:
  explicit Loader(std::vector<Diagnostic>* errors) : errors_(errors) {}

  bool load(std::string_view text, Scenario* out) {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      error(mark_of(e.mark), "YAML syntax: " + e.msg);
      return false;
    }
    try {
      load_root(root, out);
    } catch (const YAML::Exception& e) {
      // yaml-cpp throws only for misuse of a node; report it rather than crash on odd input.
      error(mark_of(e.mark), "cannot read this: " + e.msg);
    }
    return errors_->empty();
  }

 private:
  // ---- diagnostics ------------------------------------------------------------------------------
  void error(Mark m, std::string message) {
    if (errors_->size() < kMaxErrors) errors_->push_back({m, std::move(message)});
  }
  void error(const YAML::Node& n, std::string message) { error(mark_of(n), std::move(message)); }
  bool too_many() const { return errors_->size() >= kMaxErrors; }

  // ---- node helpers -----------------------------------------------------------------------------
  // A map's entries in file order; duplicate and unknown keys are reported.
  using Entries = std::vector<std::pair<YAML::Node, YAML::Node>>;
  bool entries(const YAML::Node& map, const std::string& what, const std::set<std::string>& allowed,
               Entries* out) {
    if (map.IsNull()) return true;
    if (!map.IsMap()) {
      error(map, what + ": expected a map");
      return false;
    }
    std::set<std::string> seen;
    bool ok = true;
    for (auto it = map.begin(); it != map.end(); ++it) {
      // Copies: the iterator's pair is a temporary proxy (nodes are handles, cheap to copy).
      const YAML::Node k = it->first;
      const YAML::Node v = it->second;
      if (!k.IsScalar()) {
        error(k, what + ": a key must be a plain name");
        ok = false;
        continue;
      }
      const std::string& key = k.Scalar();
      if (!seen.insert(key).second) {
        error(k, what + ": duplicate key `" + key + "`");
        ok = false;
        continue;
      }
      if (!allowed.empty() && !allowed.count(key)) {
        error(k, what + ": unknown key `" + key + "`" + one_of(allowed));
        ok = false;
        continue;
      }
      out->emplace_back(k, v);
    }
    return ok;
  }

  static std::string one_of(const std::set<std::string>& allowed) {
    std::string s = " (expected one of:";
    for (const auto& a : allowed) s += " " + a;
    return s + ")";
  }

  static const YAML::Node* find(const Entries& e, std::string_view key) {
    for (const auto& [k, v] : e)
      if (k.Scalar() == key) return &v;
    return nullptr;
  }

  bool scalar(const YAML::Node& n, const std::string& what, std::string* out) {
    if (!n.IsScalar()) {
      error(n, what + ": expected a single value");
      return false;
    }
    *out = n.Scalar();
    return true;
  }

  // A required scalar field of a step.
  bool required(const YAML::Node& map, const Entries& e, const std::string& what,
                std::string_view key, std::string* out) {
    const YAML::Node* n = find(e, key);
    if (!n) {
      error(map, what + ": missing `" + std::string(key) + "`");
      return false;
    }
    return scalar(*n, what + " `" + std::string(key) + "`", out);
  }

  bool size(const YAML::Node& n, const std::string& what, uint64_t* bytes) {
    std::string s;
    if (!scalar(n, what, &s)) return false;
    const int err = memcg::parse_bytes(s, bytes);
    if (err == ERANGE) {
      error(n, what + ": `" + s + "` does not fit 64 bits");
      return false;
    }
    if (err) {
      error(n, what + ": `" + s + "` is not a size (a number with an optional K, M, G or T)");
      return false;
    }
    return true;
  }

  // A size that a step charges unit by unit: at most kMaxStepUnits units of the scenario's unit.
  bool step_size(const YAML::Node& n, const std::string& what, uint64_t* bytes) {
    if (!size(n, what, bytes)) return false;
    const uint64_t unit = uint64_t{1} << unit_shift_;
    if (*bytes / unit + (*bytes % unit != 0) > kMaxStepUnits) {
      error(n, what + ": `" + n.Scalar() + "` is more than one step may charge: at most " +
                   std::to_string(kMaxStepUnits) + " units (" +
                   size_text(kMaxStepUnits << unit_shift_) + " at this unit)");
      return false;
    }
    return true;
  }

  // "64G": the shortest exact spelling with a binary suffix, as values.hpp's human_size (not
  // called: this file links alone into the scenario fuzzer).
  static std::string size_text(uint64_t bytes) {
    static constexpr char kSuffix[] = "KMGTPE";
    int i = -1;
    while (bytes != 0 && (bytes & 1023) == 0 && i < 5) {
      bytes >>= 10;
      ++i;
    }
    return std::to_string(bytes) + (i < 0 ? "" : std::string(1, kSuffix[i]));
  }

  bool boolean(const YAML::Node& n, const std::string& what, bool* out) {
    std::string s;
    if (!scalar(n, what, &s)) return false;
    if (s == "true") {
      *out = true;
    } else if (s == "false") {
      *out = false;
    } else {
      error(n, what + ": expected true or false, not `" + s + "`");
      return false;
    }
    return true;
  }

  // ---- groups -----------------------------------------------------------------------------------
  bool known_group(const std::string& g) const { return g == "/" || online_.count(g) != 0; }

  // A group reference of a step: "/" or an existing group at this point of the steps.
  bool group_ref(const YAML::Node& n, const std::string& g, const std::string& what,
                 bool allow_root = true) {
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

  // Knob writes of a `groups` entry or a `set` step, checked with the library's parsers where the
  // file's grammar is known.
  void knob(const YAML::Node& key, const YAML::Node& value, const std::string& group,
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
    } else if (file == "memory.oom.group") {
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

  void load_groups(const YAML::Node& node, Scenario* out) {
    Entries e;
    if (!entries(node, "groups", {}, &e)) return;
    for (const auto& [k, v] : e) {
      const std::string path = k.Scalar();
      if (path == "/") {
        error(k, "groups: the root group `/` always exists; it cannot be declared");
        continue;
      }
      if (!valid_group_path(path)) {
        error(k,
              "groups: `" + path + "` is not a group path (names of [A-Za-z0-9_.-] joined by /)");
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

  // ---- config -----------------------------------------------------------------------------------
  void load_config(const YAML::Node& node, Config* c) {
    Entries e;
    if (!entries(node, "config",
                 {"unit", "cpus", "batch", "recursive_protection", "local_events", "reclaim_cost"},
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
      }
    }
  }

  // ---- steps ------------------------------------------------------------------------------------
  void load_steps(const YAML::Node& node, Scenario* out) {
    if (!node.IsSequence()) {
      error(node, "steps: expected a list of steps");
      return;
    }
    load_step_list(node, "", &out->steps);
  }

  // The steps of a list (the scenario's, or a lane's when `lane` names its member), in order.
  // False when any is malformed.
  bool load_step_list(const YAML::Node& list, const std::string& lane, std::vector<Step>* out) {
    // What a lane may do: nothing that creates or destroys (see load_parallel).
    static const std::set<std::string> kInLane = {"set",     "write",   "cache", "charge", "release",
                                                  "reclaim", "tick",    "expect", "print"};
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
        error(key, "parallel lane " + lane + ": `" + step.kind +
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

  bool load_step(const std::string& kind, const YAML::Node& key, const YAML::Node& v, Step* step) {
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
    error(key, "unknown step `" + kind +
                   "` (expected set, write, cache, member, charge, release, exit, reclaim, "
                   "remove, tick, expect, print, listen, trigger, peak, watch or parallel)");
    return false;
  }

  bool load_set(const YAML::Node& v, Step* step) {
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

  bool load_write(const YAML::Node& v, Step* step) {
    Entries e;
    if (!entries_required_map(v, "write", {"group", "file", "value", "expect"}, &e)) return false;
    WriteStep w;
    bool ok = required(v, e, "write", "group", &w.group) &&
              group_ref(*find(e, "group"), w.group, "write");
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

  bool errno_value(const YAML::Node& n, const std::string& what, int* out) {
    std::string s;
    if (!scalar(n, what, &s)) return false;
    const int code = memcg::errno_from_name(s);
    if (code < 0) {
      error(n, what + ": `" + s +
                   "` is not `ok` or an error name (EINVAL, ERANGE, EBUSY, EAGAIN, "
                   "EINTR, ENOMEM, EACCES, ENOENT)");
      return false;
    }
    *out = code;
    return true;
  }

  bool entries_required_map(const YAML::Node& v, const std::string& what,
                            const std::set<std::string>& allowed, Entries* e) {
    if (!v.IsMap()) {
      error(v, what + ": expected a map of fields");
      return false;
    }
    return entries(v, what, allowed, e);
  }

  bool load_cache(const YAML::Node& v, Step* step) {
    Entries e;
    if (!entries_required_map(v, "cache", {"name", "group", "grow", "shrink", "drop", "referenced"},
                              &e))
      return false;
    CacheStep c;
    if (!required(v, e, "cache", "name", &c.name)) return false;
    const int ops = !!find(e, "grow") + !!find(e, "shrink") + !!find(e, "drop");
    if (ops != 1) {
      error(v, "cache " + c.name + ": give exactly one of `grow`, `shrink` or `drop`");
      return false;
    }
    bool ok = true;
    const auto existing = caches_.find(c.name);
    if (const YAML::Node* g = find(e, "group")) {
      ok = scalar(*g, "cache group", &c.group) && group_ref(*g, c.group, "cache " + c.name);
      if (ok && existing != caches_.end() && existing->second != c.group) {
        error(*g,
              "cache " + c.name + " belongs to `" + existing->second + "`, not `" + c.group + "`");
        ok = false;
      }
    }
    if (const YAML::Node* r = find(e, "referenced")) {
      std::string s;
      uint64_t pct = 0;
      if (scalar(*r, "cache referenced", &s)) {
        std::string_view sv = s;
        if (!sv.empty() && sv.back() == '%') sv.remove_suffix(1);
        if (!parse_uint(sv, &pct) || pct > 100) {
          error(*r, "cache referenced: expected a percentage from 0% to 100%, not `" + s + "`");
          ok = false;
        }
      } else {
        ok = false;
      }
      if (existing != caches_.end()) {
        error(*r, "cache " + c.name + ": `referenced` is set when the cache is created");
        ok = false;
      }
      c.referenced_percent = static_cast<int>(pct);
      c.has_referenced = true;
    }
    if (const YAML::Node* n = find(e, "grow")) {
      c.op = CacheStep::Op::kGrow;
      ok = step_size(*n, "cache grow", &c.bytes) && ok;
      if (existing == caches_.end()) {
        if (in_lane_) {
          error(v, "cache " + c.name + ": a lane cannot create a cache (create it before the "
                                       "`parallel` block)");
          ok = false;
        } else if (c.group.empty() && !find(e, "group")) {
          error(v, "cache " + c.name + ": a new cache needs a `group`");
          ok = false;
        } else if (ok) {
          caches_[c.name] = c.group;
        }
      }
    } else {
      if (existing == caches_.end()) {
        error(v, "cache " + c.name + ": no such cache (create it with `grow` and a `group`)");
        ok = false;
      }
      if (const YAML::Node* n = find(e, "shrink")) {
        c.op = CacheStep::Op::kShrink;
        ok = size(*n, "cache shrink", &c.bytes) && ok;
      } else {
        c.op = CacheStep::Op::kDrop;
        bool drop = false;
        const YAML::Node& d = *find(e, "drop");
        if (boolean(d, "cache drop", &drop) && !drop) {
          error(d, "cache drop: only `drop: true` means something");
          ok = false;
        }
      }
    }
    step->body = std::move(c);
    return ok;
  }

  bool load_member(const YAML::Node& v, Step* step) {
    Entries e;
    if (!entries_required_map(v, "member", {"name", "group", "immune"}, &e)) return false;
    MemberStep m;
    bool ok = required(v, e, "member", "name", &m.name);
    ok = required(v, e, "member", "group", &m.group) && ok &&
         group_ref(*find(e, "group"), m.group, "member " + m.name);
    if (const YAML::Node* i = find(e, "immune")) ok = boolean(*i, "member immune", &m.immune) && ok;
    if (ok && members_.count(m.name)) {
      error(*find(e, "name"), "member `" + m.name + "` exists already");
      ok = false;
    }
    if (ok) members_[m.name] = m.group;
    step->body = std::move(m);
    return ok;
  }

  bool member_ref(const YAML::Node& map, const Entries& e, const std::string& what,
                  std::string* out) {
    if (!required(map, e, what, "member", out)) return false;
    if (!members_.count(*out)) {
      error(*find(e, "member"), what + ": no member `" + *out + "`" +
                                    (exited_.count(*out) ? " (it exited before this step)" : ""));
      return false;
    }
    return true;
  }

  bool load_charge(const YAML::Node& v, Step* step) {
    Entries e;
    if (!entries_required_map(v, "charge", {"member", "size", "expect", "bulk", "wait"}, &e))
      return false;
    ChargeStep c;
    bool ok = member_ref(v, e, "charge", &c.member);
    if (const YAML::Node* b = find(e, "bulk")) ok = boolean(*b, "charge bulk", &c.bulk) && ok;
    if (const YAML::Node* w = find(e, "wait")) {
      if (find(e, "bulk") && ok && !c.bulk) {
        error(*find(e, "bulk"), "charge: a waiting charge asks for the whole size in one call "
                                "(`bulk: false` contradicts `wait`)");
        ok = false;
      }
      c.wait = true;
      c.bulk = true;
      ok = duration(*w, "charge wait", kMaxWaitNs, "60m (one hour)", &c.wait_ns) && ok;
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
          error(*x, "charge expect: timed_out needs `wait` (a charge that does not wait never "
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

  bool load_release(const YAML::Node& v, Step* step) {
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

  bool load_exit(const YAML::Node& v, Step* step) {
    Entries e;
    if (!entries_required_map(v, "exit", {"member"}, &e)) return false;
    ExitStep x;
    if (!member_ref(v, e, "exit", &x.member)) return false;
    members_.erase(x.member);
    exited_.insert(x.member);
    step->body = std::move(x);
    return true;
  }

  bool load_reclaim(const YAML::Node& v, Step* step) {
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

  bool load_remove(const YAML::Node& v, Step* step) {
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
      if (h.second == r.group) {
        error(g, "remove: `" + r.group + "` still has the " + h.first + " `" + name + "`" +
                     (h.first == "peak" ? " (close it first)" : " (it stays open to the end)"));
        return false;
      }
    }
    online_.erase(r.group);
    step->body = std::move(r);
    return true;
  }

  // ---- handles: listen, trigger, peak, watch ----------------------------------------------------
  // A new handle's name: not in use by an open handle of any kind.
  bool new_handle(const YAML::Node& map, const Entries& e, const std::string& kind,
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
      error(*find(e, "name"), kind + ": more than " + std::to_string(kMaxHandles) +
                                  " handles open at once");
      return false;
    }
    return true;
  }

  // A step's group for a new handle: an existing group below the root (the root has none of
  // these files).
  bool handle_group(const YAML::Node& map, const Entries& e, const std::string& what,
                    std::string* group) {
    if (!required(map, e, what, "group", group)) return false;
    const YAML::Node& g = *find(e, "group");
    if (*group == "/") {
      error(g, what + ": the root group has no such file; name a group below it");
      return false;
    }
    return group_ref(g, *group, what, /*allow_root=*/false);
  }

  bool load_listen(const YAML::Node& v, Step* step) {
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
          error(bad, level_ok ? "listen mode: expected default, hierarchy or local, not `" + mode +
                                    "`"
                              : "listen level: expected low, medium or critical, not `" + level +
                                    "`");
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

  bool load_trigger(const YAML::Node& v, Step* step) {
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
                  "): expected `some|full STALL_US WINDOW_US`, a window from 500000 to "
                  "10000000 us and a stall of at most the window");
        ok = false;
      }
    } else {
      ok = false;
    }
    if (ok) handles_[t.name] = {"trigger", t.group};
    step->body = std::move(t);
    return ok;
  }

  bool load_peak(const YAML::Node& v, Step* step) {
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

  bool load_watch(const YAML::Node& v, Step* step) {
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

  // A reference to an open handle of `kind` ("listener", "trigger", "peak", "watch").
  bool handle_ref(const YAML::Node& n, const std::string& name, const std::string& kind,
                  const std::string& what) {
    const auto it = handles_.find(name);
    if (it == handles_.end() || it->second.first != kind) {
      error(n, what + ": no open " + kind + " `" + name + "`" +
                   (it != handles_.end() ? " (`" + name + "` is a " + it->second.first + ")" : ""));
      return false;
    }
    return true;
  }

  // A duration of at most `max_ns` (`max_text` in messages) that counts towards the virtual time
  // a scenario may take (kMaxVirtualNs).
  bool duration(const YAML::Node& v, const std::string& what, uint64_t max_ns,
                const char* max_text, uint64_t* ns) {
    std::string s;
    if (!scalar(v, what, &s)) return false;
    const int err = memcg::parse_duration(s, ns);
    if (err) {
      error(v, what + ": `" + s + "` is not a duration (a number with ns, us, ms, s or m)" +
                   (err == ERANGE ? ": too long" : ""));
      return false;
    }
    if (max_ns < kMaxVirtualNs && *ns > max_ns) {
      error(v, what + ": `" + s + "` is longer than " + max_text + ", the most it may be");
      return false;
    }
    if (*ns > kMaxVirtualNs - virtual_ns_) {
      error(v, what + ": `" + s + "` takes the virtual clock past " +
                   std::to_string(kMaxVirtualNs / 1'000'000'000) +
                   " s (100 years), the most a scenario may run");
      return false;
    }
    virtual_ns_ += *ns;
    return true;
  }

  bool load_tick(const YAML::Node& v, Step* step) {
    TickStep t;
    if (!duration(v, "tick", kMaxVirtualNs, "100 years", &t.ns)) return false;
    step->body = t;
    return true;
  }

  // ---- parallel ---------------------------------------------------------------------------------
  // Lanes may not create or destroy (load_step_list refuses those steps, `parallel` included),
  // so that every reference checked here holds whatever the interleaving.
  bool load_parallel(const YAML::Node& v, Step* step) {
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
      if (!body.IsSequence()) {
        error(body, "parallel lane " + lane.member + ": expected a list of steps");
        ok = false;
        continue;
      }
      ok = load_step_list(body, lane.member, &lane.steps) && ok;
      p.lanes.push_back(std::move(lane));
    }
    in_lane_ = false;
    step->body = std::move(p);
    return ok;
  }

  bool load_expect(const YAML::Node& v, Step* step) {
    Entries e;
    if (!entries_required_map(v, "expect",
                              {"group", "file", "key", "eq", "le", "ge", "close_to", "err",
                               "listener", "level", "trigger", "peak", "watch"},
                              &e))
      return false;
    ExpectStep x;
    bool ok = true;
    int sources = 0;
    for (auto [name, src] : {std::pair{"listener", ExpectStep::Source::kListener},
                             {"trigger", ExpectStep::Source::kTrigger},
                             {"peak", ExpectStep::Source::kPeak},
                             {"watch", ExpectStep::Source::kWatch}}) {
      const YAML::Node* n = find(e, name);
      if (!n) continue;
      ++sources;
      x.source = src;
      if (!scalar(*n, std::string("expect ") + name, &x.handle) ||
          !handle_ref(*n, x.handle, name == std::string("listener") ? "listener" : name,
                      "expect")) {
        ok = false;
      } else {
        x.group = handles_[x.handle].second;
      }
    }
    if (sources > 1 || (sources == 1 && (find(e, "group") || find(e, "file") || find(e, "key")))) {
      error(v, "expect: read either a group's `file` or one handle (`listener`, `trigger`, "
               "`peak` or `watch`)");
      step->body = std::move(x);
      return false;
    }
    if (const YAML::Node* l = find(e, "level")) {
      std::string level;
      memcg::PressureLevel lv{};
      memcg::PressureMode md{};
      if (x.source != ExpectStep::Source::kListener) {
        error(*l, "expect: `level` goes with `listener` only");
        ok = false;
      } else if (!scalar(*l, "expect level", &level) ||
                 memcg::parse_pressure_level(level, &lv, &md) != 0 || level.find(',') != level.npos) {
        error(*l, "expect level: expected low, medium or critical");
        ok = false;
      } else {
        x.level = static_cast<int>(lv);
      }
    }
    if (x.source == ExpectStep::Source::kFile) {
      ok = required(v, e, "expect", "group", &x.group) &&
           group_ref(*find(e, "group"), x.group, "expect");
      ok = required(v, e, "expect", "file", &x.file) && ok;
      if (const YAML::Node* k = find(e, "key")) ok = scalar(*k, "expect key", &x.key) && ok;
      if (ok && x.key.empty() && is_keyed_file(x.file)) {
        error(*find(e, "file"), "expect: " + x.file + " has one value per key: give a `key`");
        ok = false;
      }
      if (ok && x.file == "memory.pressure") {
        static const std::set<std::string> kKeys = {
            "some.avg10", "some.avg60", "some.avg300", "some.total",
            "full.avg10", "full.avg60", "full.avg300", "full.total"};
        if (!kKeys.count(x.key)) {
          error(find(e, "key") ? *find(e, "key") : *find(e, "file"),
                "expect: memory.pressure needs a `key` of some|full.avg10|avg60|avg300|total, not `" +
                    x.key + "`");
          ok = false;
        }
        x.hundredths = x.key.find(".avg") != std::string::npos;
      }
    }
    int ops = 0;
    const YAML::Node* value = nullptr;
    for (auto [name, op] : {std::pair{"eq", ExpectStep::Op::kEq},
                            {"le", ExpectStep::Op::kLe},
                            {"ge", ExpectStep::Op::kGe},
                            {"close_to", ExpectStep::Op::kCloseTo}}) {
      if (const YAML::Node* n = find(e, name)) {
        ++ops;
        x.op = op;
        value = n;
      }
    }
    if (ops != 1) {
      error(v, "expect: give exactly one check of `eq`, `le`, `ge` or `close_to`");
      step->body = std::move(x);
      return false;
    }
    std::string what = std::string("expect ") + op_name(x.op);
    if (x.hundredths) {
      std::string t;
      if (!scalar(*value, what, &t) || !parse_hundredths(t, &x.value)) {
        error(*value, what + ": `" + value->Scalar() +
                          "` is not a percentage from 0 to 100 with at most two decimals");
        ok = false;
      }
    } else if (x.source == ExpectStep::Source::kListener || x.source == ExpectStep::Source::kTrigger ||
               x.source == ExpectStep::Source::kWatch) {
      std::string t;
      if (!scalar(*value, what, &t) || !parse_uint(t, &x.value)) {
        error(*value, what + ": expected a whole number of notifications");
        ok = false;
      }
    } else {
      ok = size(*value, what, &x.value) && ok;
    }
    x.value_text = value->IsScalar() ? value->Scalar() : "";
    const YAML::Node* err = find(e, "err");
    if (x.op == ExpectStep::Op::kCloseTo) {
      std::string s;
      if (!err) {
        error(v, "expect close_to: missing `err` (the allowed error, in percent)");
        ok = false;
      } else if (!scalar(*err, "expect err", &s) || !parse_uint(s, &x.err) || x.err > 100) {
        error(*err, "expect err: expected a whole percentage from 0 to 100");
        ok = false;
      }
    } else if (err) {
      error(*err, "expect: `err` goes with `close_to` only");
      ok = false;
    }
    step->body = std::move(x);
    return ok;
  }

  bool load_print(const YAML::Node& v, Step* step) {
    Entries e;
    if (!entries_required_map(v, "print", {"group", "file", "key"}, &e)) return false;
    PrintStep p;
    if (!required(v, e, "print", "group", &p.group)) return false;
    bool ok = p.group == "all" || group_ref(*find(e, "group"), p.group, "print");
    if (const YAML::Node* f = find(e, "file")) ok = scalar(*f, "print file", &p.file) && ok;
    if (const YAML::Node* k = find(e, "key")) {
      ok = scalar(*k, "print key", &p.key) && ok;
      if (ok && !is_keyed_file(p.file)) {
        error(*k, "print: `key` needs a keyed file (memory.events, memory.stat, ...)");
        ok = false;
      }
    }
    if (ok) {
      const uint64_t files = p.group == "all" ? online_.size() : 1;
      if (files > kMaxPrintedFiles - printed_files_) {
        error(*find(e, "group"), "print: the prints of this scenario add up to more than " +
                                     std::to_string(kMaxPrintedFiles) +
                                     " group files (`all` counts every online group)");
        ok = false;
      } else {
        printed_files_ += files;
      }
    }
    step->body = std::move(p);
    return ok;
  }

  void load_root(const YAML::Node& root, Scenario* out) {
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

  static inline const std::set<std::string> kKnownSteps = {
      "set",  "write",  "cache",  "member", "charge",  "release", "exit",  "reclaim", "remove",
      "tick", "expect", "print",  "listen", "trigger", "peak",    "watch", "parallel"};

  std::vector<Diagnostic>* errors_;
  bool in_lane_ = false;  // reading the steps of a `parallel` lane
  unsigned unit_shift_ = 12;
  uint64_t virtual_ns_ = 0;                     // ticks so far (kMaxVirtualNs)
  uint64_t printed_files_ = 0;                  // group files printed so far (kMaxPrintedFiles)
  std::set<std::string> online_;                // groups that exist at the step being read
  std::set<std::string> declared_;              // every group ever declared
  std::map<std::string, std::string> caches_;   // name → group
  std::map<std::string, std::string> members_;  // live members: name → group
  std::set<std::string> exited_;
  // Open handles: name → (kind, group).
  std::map<std::string, std::pair<std::string, std::string>> handles_;
};

}  // namespace

namespace {

// Where text longer than kMaxScenarioBytes goes on past the limit: the line and column of its
// first byte beyond it.
Mark mark_past_limit(std::string_view text) {
  const std::string_view head = text.substr(0, kMaxScenarioBytes);
  const size_t last_nl = head.rfind('\n');
  const auto lines = std::count(head.begin(), head.end(), '\n');
  const size_t column = last_nl == std::string_view::npos ? head.size() : head.size() - last_nl - 1;
  return {static_cast<int>(lines) + 1, static_cast<int>(column) + 1};
}

Diagnostic too_large(std::string_view text) {
  return {mark_past_limit(text), "the scenario goes on past " + std::to_string(kMaxScenarioBytes) +
                                     " bytes (1 MiB), the most a scenario may be"};
}

}  // namespace

bool load_scenario(std::string_view text, Scenario* out, std::vector<Diagnostic>* errors) {
  if (text.size() > kMaxScenarioBytes) {
    errors->push_back(too_large(text));
    return false;
  }
  Scenario s;
  const size_t before = errors->size();
  std::vector<Diagnostic> found;
  Loader(&found).load(text, &s);
  // File order; errors found at one place keep the order they were found in.
  std::vector<size_t> order(found.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tuple(found[a].mark.line, found[a].mark.column, a) <
           std::tuple(found[b].mark.line, found[b].mark.column, b);
  });
  for (size_t i : order) errors->push_back(found[i]);
  if (errors->size() != before) return false;
  *out = std::move(s);
  return true;
}

bool load_scenario_file(const std::string& path, Scenario* out, std::vector<Diagnostic>* errors) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    errors->push_back({{}, "cannot open the file"});
    return false;
  }
  // At most one byte past the limit is read: enough to know the file is too large, whatever
  // it is (a device or a pipe may never end).
  std::string text;
  char buf[64 * 1024];
  while (text.size() <= kMaxScenarioBytes && in) {
    const size_t want =
        std::min(sizeof buf, static_cast<size_t>(kMaxScenarioBytes + 1 - text.size()));
    in.read(buf, static_cast<std::streamsize>(want));
    text.append(buf, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) {
    errors->push_back({{}, "cannot read the file"});
    return false;
  }
  return load_scenario(text, out, errors);
}

std::string format_diagnostic(const std::string& file, const Diagnostic& d) {
  if (d.mark.line <= 0) return file + ": " + d.message;
  return file + ":" + std::to_string(d.mark.line) + ":" + std::to_string(d.mark.column) + ": " +
         d.message;
}

}  // namespace memcgctl
