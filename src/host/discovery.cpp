// Discovery of the process's memory cgroup and its binding limit
// (include/memcg/host/discovery.hpp).
#include "memcg/host/discovery.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace memcg::host {
namespace {

constexpr size_t kMaxFileBytes = size_t{1} << 20;  // procfs and cgroup files here are tiny

bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Errors name the file: "memory.max of /sys/fs/cgroup/a: EINVAL".
int fail(std::string* error, int err, const std::string& what) {
  if (error) *error = what;
  return err;
}

int read_value(const std::string& path, bool limit, uint64_t* v, std::string* error) {
  std::string text;
  if (int err = read_small_file(path, &text))
    return fail(error, err,
                path + (err == ENOENT ? ": no such file (cgroup removed?)" : ": cannot read"));
  const int err = limit ? parse_limit_file(text, v) : parse_u64_file(text, v);
  if (err) return fail(error, err, path + ": malformed value '" + text.substr(0, 40) + "'");
  return 0;
}

// The parent of a cgroup path ("/a/b" -> "/a", "/a" -> "/").
std::string parent_path(const std::string& p) {
  const size_t at = p.rfind('/');
  return at == 0 || at == std::string::npos ? "/" : p.substr(0, at);
}

bool has_word(const std::string& text, std::string_view word) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find_first_of(" \n", start);
    if (end == std::string::npos) end = text.size();
    if (std::string_view(text).substr(start, end - start) == word) return true;
    start = end + 1;
  }
  return false;
}

// inactive_file of the cgroup at `dir` (v1: total_inactive_file, the subtree's). 0 when there is
// no memory.stat or no such key; a malformed value is EINVAL.
int read_inactive_file(const std::string& dir, int version, uint64_t* v, std::string* error) {
  const std::string f = dir + "/memory.stat";
  std::string stat;
  *v = 0;
  if (int err = read_small_file(f, &stat))
    return err == ENOENT ? 0 : fail(error, err, f + ": cannot read");
  const int err =
      find_stat_value(stat, version == 2 ? "inactive_file" : "total_inactive_file", v);
  if (err == ENOENT) {
    *v = 0;
    return 0;
  }
  return err ? fail(error, EINVAL, f + ": malformed inactive_file") : 0;
}

struct Located {
  std::string path;  // the process's cgroup path
  std::string root;  // the mount's root
  std::string mount_point;
};

// The mount that shows `path` with the most ancestors (the shortest root), if any.
bool locate(const std::vector<CgroupMount>& mounts, bool v2, const std::string& path,
            Located* out) {
  bool found = false;
  for (const CgroupMount& m : mounts) {
    if (m.v2 != v2) continue;
    if (!v2 && std::find(m.options.begin(), m.options.end(), "memory") == m.options.end()) continue;
    std::string dir;
    if (!map_cgroup_path(path, m.root, m.mount_point, &dir)) continue;
    if (found && m.root.size() >= out->root.size()) continue;
    *out = Located{path, m.root, m.mount_point};
    found = true;
  }
  return found;
}

int walk_chain(const DiscoverOptions& o, int version, const Located& loc, HostCgroup* hc,
               std::string* error) {
  const std::string max_file = version == 2 ? "memory.max" : "memory.limit_in_bytes";
  const std::string cur_file = version == 2 ? "memory.current" : "memory.usage_in_bytes";
  std::string path = loc.path;
  for (;;) {
    HostLevel l;
    l.path = path;
    std::string dir;
    map_cgroup_path(path, loc.root, loc.mount_point, &dir);
    l.dir = o.root_prefix + dir;
    const bool top = path == loc.root || path == "/";
    if (!file_exists(l.dir))
      return fail(error, ENOENT, l.dir + ": no such cgroup (removed under us?)");
    if (!top || file_exists(l.dir + "/" + max_file)) {
      if (int err = read_value(l.dir + "/" + max_file, true, &l.max, error)) return err;
      if (version == 2)
        if (int err = read_value(l.dir + "/memory.high", true, &l.high, error)) return err;
      if (int err = read_value(l.dir + "/" + cur_file, false, &l.current, error)) return err;
      if (int err = read_inactive_file(l.dir, version, &l.inactive_file, error)) return err;
      l.has_limits = true;
    }
    hc->chain.push_back(std::move(l));
    if (top) break;
    path = parent_path(path);
  }
  // The smallest limit binds; among equal ones the deepest, whose usage is closest to ours.
  for (size_t i = 0; i < hc->chain.size(); ++i) {
    const HostLevel& l = hc->chain[i];
    if (!l.has_limits) continue;
    if (l.max < hc->limit) {
      hc->limit = l.max;
      hc->binding = i;
    }
    hc->high = std::min(hc->high, l.high);
  }
  if (version == 1 && hc->chain[0].has_limits) {
    // Ancestors above the mount are not visible, but the kernel folds their limits in here.
    std::string stat;
    const std::string f = hc->chain[0].dir + "/memory.stat";
    if (int err = read_small_file(f, &stat)) return fail(error, err, f + ": cannot read");
    uint64_t hier = 0;
    if (find_stat_value(stat, "hierarchical_memory_limit", &hier) != 0)
      return fail(error, EINVAL, f + ": no valid hierarchical_memory_limit");
    if (hier >= kV1Unlimited) hier = kNoLimit;
    if (hier < hc->limit) {
      hc->limit = hier;
      hc->limit_above_mount = true;
      hc->binding = hc->chain.size() - 1;  // the nearest visible level to the one that binds
      while (hc->binding > 0 && !hc->chain[hc->binding].has_limits) --hc->binding;
    }
  }
  if (!hc->chain[hc->binding].has_limits)  // no limit anywhere and the leaf is a root
    hc->binding = 0;
  return 0;
}

}  // namespace

int read_small_file(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == EPERM ? EACCES : errno;
  std::string text;
  char buf[4096];
  int err = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno == EPERM ? EACCES : errno;
      break;
    }
    if (n == 0) break;
    if (text.size() + static_cast<size_t>(n) > kMaxFileBytes) {
      err = EFBIG;
      break;
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (err == 0) *out = std::move(text);
  return err;
}

int discover(const DiscoverOptions& o, HostCgroup* out, std::string* error) {
  if (o.version != 0 && o.version != 1 && o.version != 2)
    return fail(error, EINVAL, "version must be 0, 1 or 2");
  const std::string proc = o.root_prefix + "/proc/self";
  std::string text;
  std::vector<CgroupLine> lines;
  std::vector<CgroupMount> mounts;
  if (int err = read_small_file(proc + "/cgroup", &text))
    return fail(error, err, proc + "/cgroup: cannot read");
  if (parse_proc_cgroup(text, &lines)) return fail(error, EINVAL, proc + "/cgroup: malformed");
  if (int err = read_small_file(proc + "/mountinfo", &text))
    return fail(error, err, proc + "/mountinfo: cannot read");
  if (parse_mountinfo(text, &mounts)) return fail(error, EINVAL, proc + "/mountinfo: malformed");

  std::string why = "no memory cgroup: ";
  for (int version : {2, 1}) {
    if (o.version != 0 && o.version != version) continue;
    const CgroupLine* line = nullptr;
    for (const CgroupLine& l : lines) {
      const bool mem = std::find(l.controllers.begin(), l.controllers.end(), "memory") !=
                       l.controllers.end();
      if (version == 2 ? (l.hierarchy == 0 && l.controllers.empty()) : mem) line = &l;
    }
    if (!line) {
      why += version == 2 ? "no v2 line; " : "no v1 memory line; ";
      continue;
    }
    Located loc;
    if (!locate(mounts, version == 2, line->path, &loc)) {
      why += "v" + std::to_string(version) + " path " + line->path + " under no visible mount; ";
      continue;
    }
    if (version == 2) {
      std::string dir;
      map_cgroup_path(loc.path, loc.root, loc.mount_point, &dir);
      std::string ctl;
      if (!file_exists(o.root_prefix + dir))
        return fail(error, ENOENT, o.root_prefix + dir + ": no such cgroup (removed under us?)");
      const std::string f = o.root_prefix + dir + "/cgroup.controllers";
      if (int err = read_small_file(f, &ctl)) {
        if (err != ENOENT || o.version == 2) return fail(error, err, f + ": cannot read");
        why += f + " missing; ";
        continue;
      }
      if (!has_word(ctl, "memory")) {
        why += "the v2 cgroup " + line->path + " has no memory controller; ";
        if (o.version == 2) return fail(error, ENOENT, why);
        continue;
      }
    }
    HostCgroup hc;
    hc.version = version;
    if (int err = walk_chain(o, version, loc, &hc, error)) return err;
    const HostLevel& b = hc.chain[hc.binding];
    if (version == 2) {
      hc.events_file = b.has_limits ? b.dir + "/memory.events" : "";
      hc.pressure_file = b.dir + "/memory.pressure";
    } else if (file_exists(b.dir + "/memory.pressure_level")) {
      hc.pressure_level_file = b.dir + "/memory.pressure_level";
    }
    if (hc.pressure_file.empty() || !file_exists(hc.pressure_file))
      hc.pressure_file = file_exists(o.root_prefix + "/proc/pressure/memory")
                             ? o.root_prefix + "/proc/pressure/memory"
                             : "";
    const std::string status = proc + "/status";
    if (int err = read_small_file(status, &text)) return fail(error, err, status + ": cannot read");
    if (find_status_kb(text, "VmRSS", &hc.rss))
      return fail(error, EINVAL, status + ": no valid VmRSS line");
    *out = std::move(hc);
    return 0;
  }
  return fail(error, ENOENT, why.substr(0, why.size() - 2));
}

}  // namespace memcg::host
