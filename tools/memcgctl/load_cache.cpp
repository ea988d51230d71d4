// The scenario loader: the `cache` step (loader.hpp).
#include "loader.hpp"

namespace memcgctl::detail {

bool Loader::load_cache(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(
          v, "cache", {"name", "group", "grow", "shrink", "drop", "referenced", "capacity", "oom"},
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
  if (const YAML::Node* n = find(e, "capacity")) {
    c.has_capacity = true;
    if (!size(*n, "cache capacity", &c.capacity)) {
      ok = false;
    } else if (c.capacity == 0) {
      error(*n, "cache " + c.name + ": a `capacity` of 0 keeps nothing (without the key: no limit)");
      ok = false;
    }
    if (existing != caches_.end()) {
      error(*n, "cache " + c.name + ": `capacity` is set when the cache is created");
      ok = false;
    } else if (!find(e, "grow")) {
      error(*n, "cache " + c.name + ": `capacity` is set when the cache is created (`grow`)");
      ok = false;
    }
  }
  if (const YAML::Node* n = find(e, "oom")) {
    std::string o;
    if (!scalar(*n, "cache oom", &o)) {
      ok = false;
    } else if (o == "never" || o == "kernel") {
      c.never_oom = o == "never";
    } else {
      error(*n, "cache oom: expected kernel or never, not `" + o + "`");
      ok = false;
    }
    if (existing != caches_.end() || !find(e, "grow")) {
      error(*n, "cache " + c.name + ": `oom` is set when the cache is created (`grow`)");
      ok = false;
    }
  }
  if (const YAML::Node* n = find(e, "grow")) {
    c.op = CacheStep::Op::kGrow;
    ok = step_size(*n, "cache grow", &c.bytes) && ok;
    if (existing == caches_.end()) {
      if (in_lane_) {
        error(v, "cache " + c.name +
                     ": a lane cannot create a cache (create it before the "
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

}  // namespace memcgctl::detail
