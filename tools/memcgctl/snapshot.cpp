// `memcgctl snapshot DIR`: a scenario from a real cgroup v2 subtree (host_cmd.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <ostream>
#include <vector>

#include "host_cmd.hpp"
#include "load.hpp"
#include "memcg/host/discovery.hpp"
#include "memcg/host/procfs.hpp"

namespace memcgctl {
namespace {

namespace fs = std::filesystem;

struct SnapGroup {
  std::string path;  // scenario path ("top/a/b")
  std::string dir;
  std::string knobs[4];  // memory.min, memory.low, memory.high, memory.max as the files say
  std::string oom_group;
  uint64_t current = 0;
  uint64_t children = 0;  // the sum of the children's memory.current
  uint64_t skipped = 0;   // the sum of the skipped children's memory.current (see collect)
  bool root = false;      // a cgroup v2 root: no memory.current and no limits (see below)
};

// Children skipped for their names: how many, and the first few, to be listed in the scenario.
struct Skipped {
  static constexpr size_t kListed = 20;
  size_t count = 0;
  std::vector<std::string> first;  // at most kListed, printable
};

// `s` with every byte that is not printable ASCII written as \xNN: a cgroup name may hold any
// byte but '/', and the scenario lists it in a comment line.
std::string printable(const std::string& s) {
  std::string r;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f)
      r += static_cast<char>(c);
    else
      r += fmt::format("\\x{:02x}", c);
  }
  return r;
}

constexpr const char* kKnobs[4] = {"memory.min", "memory.low", "memory.high", "memory.max"};

// A cgroup name the scenario's group paths accept (Controller::create's rule).
bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 255 || n == "." || n == "..") return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c == '.' || c == ':' || c == '@' || c == '+';
  });
}

// One value file; the limit files are checked with the kernel's grammar, "max" kept as is.
bool read_value(const std::string& file, bool limit, std::string* v, uint64_t* n,
                std::ostream& err) {
  std::string text;
  if (int e = memcg::host::read_small_file(file, &text)) {
    err << "memcgctl snapshot: " << file << ": cannot read (errno " << e << ")\n";
    return false;
  }
  uint64_t value = 0;
  const int rc = limit ? memcg::host::parse_limit_file(text, &value)
                       : memcg::host::parse_u64_file(text, &value);
  if (rc) {
    err << "memcgctl snapshot: " << file << ": malformed value\n";
    return false;
  }
  if (v) *v = value == memcg::host::kNoLimit ? "max" : std::to_string(value);
  if (n) *n = value;
  return true;
}

// Reads `dir` and, in name order, every descendant with the memory controller (a directory
// with memory.current); pre-order. `limit` bounds the groups. A child whose name a scenario
// cannot hold (systemd escapes characters: "app-x\x2dy.scope") is skipped with its subtree:
// its usage stays in its parent's own usage, and it is counted in `skipped`.
bool collect(const std::string& dir, const std::string& path, bool root,
             std::vector<SnapGroup>* out, Skipped* skipped, std::ostream& err) {
  if (out->size() >= kMaxGroups) {
    err << "memcgctl snapshot: more than " << kMaxGroups << " groups: a scenario cannot hold them\n";
    return false;
  }
  SnapGroup g;
  g.path = path;
  g.dir = dir;
  g.root = root;
  if (root) {
    // The kernel's root cgroup has no memory.current, min, low, high, max or oom.group: it is
    // never limited. Its usage is filled in by run_snapshot.
    g.knobs[0] = g.knobs[1] = "0";
    g.knobs[2] = g.knobs[3] = "max";
    g.oom_group = "0";
  } else {
    for (int i = 0; i < 4; ++i)
      if (!read_value(dir + "/" + kKnobs[i], true, &g.knobs[i], nullptr, err)) return false;
    uint64_t oom = 0;
    if (!read_value(dir + "/memory.oom.group", false, nullptr, &oom, err)) return false;
    g.oom_group = oom ? "1" : "0";
    if (!read_value(dir + "/memory.current", false, nullptr, &g.current, err)) return false;
  }
  const size_t self = out->size();
  out->push_back(std::move(g));
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (!e.is_symlink() && e.is_directory() && fs::exists(e.path() / "memory.current"))
      names.push_back(e.path().filename().string());
  if (ec) {
    err << "memcgctl snapshot: " << dir << ": " << ec.message() << "\n";
    return false;
  }
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    if (!valid_name(n)) {
      uint64_t usage = 0;
      if (!read_value(dir + "/" + n + "/memory.current", false, nullptr, &usage, err))
        return false;
      (*out)[self].skipped += usage;
      if (skipped->first.size() < Skipped::kListed)
        skipped->first.push_back(printable(path + "/" + n));
      ++skipped->count;
      continue;
    }
    const size_t child = out->size();
    if (!collect(dir + "/" + n, path + "/" + n, false, out, skipped, err)) return false;
    (*out)[self].children += (*out)[child].current;
  }
  return true;
}

// A cgroup v2 root with the memory controller: cgroup.controllers lists "memory" and the
// directory has no memory.current (the kernel keeps no counter for the root). Its memory.stat
// is not required: kernels before 5.x's root memory.stat have none, and the usage can come from
// the children's sum.
bool is_memory_root(const std::string& dir) {
  if (fs::exists(dir + "/memory.current")) return false;
  std::string controllers;
  if (memcg::host::read_small_file(dir + "/cgroup.controllers", &controllers) != 0) return false;
  size_t pos = 0;
  while (pos < controllers.size()) {
    const size_t end = controllers.find_first_of(" \n", pos);
    const size_t n = (end == std::string::npos ? controllers.size() : end) - pos;
    if (controllers.compare(pos, n, "memory") == 0) return true;
    pos += n + 1;
  }
  return false;
}

// The root's usage as its memory.stat counts it: anon + file + kernel + sock (the parts that
// memory.current is made of; "kernel" exists since Linux 5.18). False when one is missing.
bool usage_from_stat(const std::string& dir, uint64_t* usage) {
  std::string text;
  if (memcg::host::read_small_file(dir + "/memory.stat", &text) != 0) return false;
  uint64_t sum = 0;
  for (const char* key : {"anon", "file", "kernel", "sock"}) {
    uint64_t v = 0;
    if (memcg::host::find_stat_value(text, key, &v) != 0) return false;
    sum += v;
  }
  *usage = sum;
  return true;
}

}  // namespace

int run_snapshot(const std::string& dir_arg, std::ostream& out, std::ostream& err) {
  std::string dir = dir_arg;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const bool root = is_memory_root(dir);
  if (!root && (!fs::exists(dir + "/memory.current") || !fs::exists(dir + "/memory.max"))) {
    err << "memcgctl snapshot: " << dir
        << ": not a cgroup v2 group with the memory controller (no memory.current or memory.max,"
           " and not a cgroup v2 root with \"memory\" in cgroup.controllers)\n";
    return 1;
  }
  std::string top = fs::path(dir).filename().string();
  if (!valid_name(top)) top = root ? "root" : "snapshot";
  std::vector<SnapGroup> groups;
  Skipped skipped;
  if (!collect(dir, top, root, &groups, &skipped, err)) return 1;
  // The root's usage: what its memory.stat counts, or at least its children's.
  std::string root_source;
  if (root) {
    SnapGroup& r = groups.front();
    uint64_t stat = 0;
    if (usage_from_stat(dir, &stat) && stat >= r.children + r.skipped) {
      r.current = stat;
      root_source = "memory.stat (anon + file + kernel + sock)";
    } else {
      r.current = r.children + r.skipped;
      root_source = fs::exists(dir + "/memory.stat")
                        ? "the sum of its children's memory.current (its memory.stat has no "
                          "usable total)"
                        : "the sum of its children's memory.current (it has no memory.stat)";
    }
  }

  std::string y;
  y += fmt::format("# A snapshot of the cgroup v2 subtree {} (memcgctl snapshot): each cgroup's\n", dir);
  y += "# memory.min/low, its own usage (memory.current less its children's) as a bulk charge,\n";
  y += "# then its memory.high/max and memory.oom.group.\n";
  if (root)
    y += fmt::format("# {} is a cgroup v2 root: no limits, and its usage ({} bytes) is from {}.\n",
                     dir, groups.front().current, root_source);
  if (skipped.count > 0) {
    y += fmt::format("# {} cgroup(s) skipped, their names not valid in a scenario: each one's usage\n"
                     "# is in its parent's own usage, its limits and its children are not:\n",
                     skipped.count);
    for (const std::string& p : skipped.first) y += fmt::format("#   {}\n", p);
    if (skipped.count > skipped.first.size())
      y += fmt::format("#   ... and {} more\n", skipped.count - skipped.first.size());
  }
  y += fmt::format("name: \"snapshot of {}\"\n", top);
  y += "groups:\n";
  for (const SnapGroup& g : groups)
    y += fmt::format("  \"{}\": {{ memory.min: {}, memory.low: {} }}\n", g.path, g.knobs[0],
                     g.knobs[1]);
  y += "steps:\n";
  size_t members = 0;
  for (const SnapGroup& g : groups) {
    const uint64_t own = g.current > g.children ? g.current - g.children : 0;
    if (own < 4096) continue;  // less than a unit: nothing a charge could hold
    const std::string m = fmt::format("m{}", ++members);
    y += fmt::format("  - member: {{ name: {}, group: \"{}\" }}\n", m, g.path);
    // A charge step holds at most kMaxStepUnits units of 4 KiB.
    constexpr uint64_t kStepBytes = kMaxStepUnits * 4096;
    for (uint64_t left = own / 4096 * 4096; left > 0;) {
      const uint64_t n = std::min(left, kStepBytes);
      y += fmt::format("  - charge: {{ member: {}, size: {}, bulk: true }}\n", m, n);
      left -= n;
    }
  }
  for (const SnapGroup& g : groups)
    y += fmt::format("  - set: {{ \"{}\": {{ memory.high: {}, memory.max: {}, memory.oom.group: {} }} }}\n",
                     g.path, g.knobs[2], g.knobs[3], g.oom_group);
  y += fmt::format("  - print: {{ group: all, file: memory.current }}\n");
  if (y.size() > kMaxScenarioBytes) {
    err << "memcgctl snapshot: the scenario would be " << y.size() << " bytes, more than "
        << kMaxScenarioBytes << "\n";
    return 2;
  }
  out << y;
  return 0;
}

}  // namespace memcgctl
