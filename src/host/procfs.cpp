// Parsers of the kernel's cgroup discovery formats (include/memcg/host/procfs.hpp).
#include "memcg/host/procfs.hpp"

#include <cerrno>

namespace memcg::host {
namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    const size_t at = s.find(sep, start);
    if (at == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, at - start));
    start = at + 1;
  }
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  for (std::string_view line : split(text, '\n'))
    if (!line.empty()) out.push_back(line);
  return out;
}

bool parse_decimal(std::string_view s, uint64_t* v) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t r = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (r > (UINT64_MAX - d) / 10) return false;
    r = r * 10 + d;
  }
  *v = r;
  return true;
}

// The kernel's mangle() of mountinfo paths: \ooo octal escapes.
bool unescape(std::string_view s, std::string* out) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      r += s[i];
      continue;
    }
    if (i + 3 >= s.size()) return false;  // a backslash needs three octal digits after it
    int v = 0;
    for (size_t k = 1; k <= 3; ++k) {
      const char c = s[i + k];
      if (c < '0' || c > '7') return false;
      v = v * 8 + (c - '0');
    }
    if (v > 255) return false;
    r += static_cast<char>(v);
    i += 3;
  }
  *out = std::move(r);
  return true;
}

// Trailing newline(s) of a one-value file.
std::string_view chomp(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  return s;
}

}  // namespace

int parse_proc_cgroup(std::string_view text, std::vector<CgroupLine>* out) {
  std::vector<CgroupLine> result;
  for (std::string_view line : lines_of(text)) {
    const size_t a = line.find(':');
    if (a == std::string_view::npos) return EINVAL;
    const size_t b = line.find(':', a + 1);  // the path may hold ':', the controllers may not
    if (b == std::string_view::npos) return EINVAL;
    CgroupLine l;
    uint64_t id = 0;
    if (!parse_decimal(line.substr(0, a), &id) || id > UINT32_MAX) return EINVAL;
    l.hierarchy = static_cast<unsigned>(id);
    const std::string_view ctl = line.substr(a + 1, b - a - 1);
    if (!ctl.empty())
      for (std::string_view c : split(ctl, ','))
        if (!c.empty()) l.controllers.emplace_back(c);
    l.path = std::string(line.substr(b + 1));
    if (l.path.empty() || l.path[0] != '/') return EINVAL;
    result.push_back(std::move(l));
  }
  *out = std::move(result);
  return 0;
}

int parse_mountinfo(std::string_view text, std::vector<CgroupMount>* out) {
  std::vector<CgroupMount> result;
  for (std::string_view line : lines_of(text)) {
    std::vector<std::string_view> f;
    for (std::string_view w : split(line, ' '))
      if (!w.empty()) f.push_back(w);
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS, optional fields, "-", FSTYPE SOURCE SUPEROPTS.
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 6 || dash + 2 >= f.size()) return EINVAL;  // no "-", FSTYPE and SOURCE
    const std::string_view fstype = f[dash + 1];
    if (fstype != "cgroup" && fstype != "cgroup2") continue;
    CgroupMount m;
    m.v2 = fstype == "cgroup2";
    if (!unescape(f[3], &m.root) || !unescape(f[4], &m.mount_point)) return EINVAL;
    if (dash + 3 < f.size())
      for (std::string_view o : split(f[dash + 3], ','))
        if (!o.empty()) m.options.emplace_back(o);
    result.push_back(std::move(m));
  }
  *out = std::move(result);
  return 0;
}

int parse_limit_file(std::string_view text, uint64_t* bytes) {
  const std::string_view s = chomp(text);
  if (s == "max") {
    *bytes = kNoLimit;
    return 0;
  }
  uint64_t v = 0;
  if (!parse_decimal(s, &v)) return EINVAL;
  *bytes = v >= kV1Unlimited ? kNoLimit : v;
  return 0;
}

int parse_u64_file(std::string_view text, uint64_t* value) {
  uint64_t v = 0;
  if (!parse_decimal(chomp(text), &v)) return EINVAL;
  *value = v;
  return 0;
}

int find_stat_value(std::string_view text, std::string_view key, uint64_t* value) {
  for (std::string_view line : lines_of(text)) {
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.substr(0, sp) != key) continue;
    uint64_t v = 0;
    if (!parse_decimal(line.substr(sp + 1), &v)) return EINVAL;
    *value = v;
    return 0;
  }
  return ENOENT;
}

int find_status_kb(std::string_view text, std::string_view key, uint64_t* bytes) {
  for (std::string_view line : lines_of(text)) {
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || line.substr(0, colon) != key) continue;
    std::string_view rest = line.substr(colon + 1);
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    if (rest.size() < 3 || rest.substr(rest.size() - 3) != " kB") return EINVAL;
    uint64_t kb = 0;
    if (!parse_decimal(rest.substr(0, rest.size() - 3), &kb) || kb > UINT64_MAX / 1024)
      return EINVAL;
    *bytes = kb * 1024;
    return 0;
  }
  return ENOENT;
}

bool map_cgroup_path(std::string_view path, std::string_view root, std::string_view mount_point,
                     std::string* dir) {
  if (path.empty() || path[0] != '/' || root.empty() || root[0] != '/') return false;
  // A root that lies outside the reader's namespace shows as "/.." (a mount made outside it).
  for (std::string_view c : split(root, '/'))
    if (c == "..") return false;
  for (std::string_view c : split(path, '/'))
    if (c == "..") return false;
  std::string_view rest;
  if (root == "/") {
    rest = path;
  } else {
    if (path.substr(0, root.size()) != root) return false;
    rest = path.substr(root.size());
    if (!rest.empty() && rest[0] != '/') return false;  // "/a/bc" is not below "/a/b"
  }
  std::string d(mount_point);
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  if (rest != "/" && !rest.empty()) d += std::string(rest);
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  *dir = std::move(d);
  return true;
}

}  // namespace memcg::host
