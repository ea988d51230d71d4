// The scenario loader: diagnostics and the readers of one field (loader.hpp).
#include "loader.hpp"

#include <algorithm>
#include <charconv>

#include "memcg/base/errors.hpp"
#include "memcg/files/parse.hpp"

namespace memcgctl::detail {

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

bool Loader::entries(const YAML::Node& map, const std::string& what,
                     const std::set<std::string>& allowed, Entries* out) {
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

std::string Loader::one_of(const std::set<std::string>& allowed) {
  std::string s = " (expected one of:";
  for (const auto& a : allowed) s += " " + a;
  return s + ")";
}

const YAML::Node* Loader::find(const Entries& e, std::string_view key) {
  for (const auto& [k, v] : e)
    if (k.Scalar() == key) return &v;
  return nullptr;
}

bool Loader::scalar(const YAML::Node& n, const std::string& what, std::string* out) {
  if (!n.IsScalar()) {
    error(n, what + ": expected a single value");
    return false;
  }
  *out = n.Scalar();
  return true;
}

bool Loader::required(const YAML::Node& map, const Entries& e, const std::string& what,
                      std::string_view key, std::string* out) {
  const YAML::Node* n = find(e, key);
  if (!n) {
    error(map, what + ": missing `" + std::string(key) + "`");
    return false;
  }
  return scalar(*n, what + " `" + std::string(key) + "`", out);
}

bool Loader::size(const YAML::Node& n, const std::string& what, uint64_t* bytes) {
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

bool Loader::step_size(const YAML::Node& n, const std::string& what, uint64_t* bytes) {
  if (!size(n, what, bytes)) return false;
  const uint64_t unit = uint64_t{1} << unit_shift_;
  if (*bytes / unit + (*bytes % unit != 0) > kMaxStepUnits) {
    error(n, what + ": `" + n.Scalar() + "` is more than one step may charge: at most " +
                 std::to_string(kMaxStepUnits) + " units (" +
                 size_text(kMaxStepUnits << unit_shift_) + " at this unit)");
    return false;
  }
  const uint64_t units = *bytes / unit + (*bytes % unit != 0);
  if (!add_work(n, what, units)) return false;
  charged_units_ += units;
  return true;
}

bool Loader::add_work(const YAML::Node& n, const std::string& what, uint64_t units) {
  if (work_units_ > kMaxWorkUnits) return false;  // reported once, at the step that passed it
  work_units_ += std::min(units, kMaxWorkUnits + 1);
  if (work_units_ <= kMaxWorkUnits) return true;
  error(n, what + ": the steps charge, grow and reclaim more than " +
               std::to_string(kMaxWorkUnits) + " units in all (" +
               size_text(kMaxWorkUnits << unit_shift_) +
               " at this unit), the most a scenario may ask for");
  return false;
}

std::string Loader::size_text(uint64_t bytes) {
  static constexpr char kSuffix[] = "KMGTPE";
  int i = -1;
  while (bytes != 0 && (bytes & 1023) == 0 && i < 5) {
    bytes >>= 10;
    ++i;
  }
  return std::to_string(bytes) + (i < 0 ? "" : std::string(1, kSuffix[i]));
}

bool Loader::boolean(const YAML::Node& n, const std::string& what, bool* out) {
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

bool Loader::errno_value(const YAML::Node& n, const std::string& what, int* out) {
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

bool Loader::entries_required_map(const YAML::Node& v, const std::string& what,
                                  const std::set<std::string>& allowed, Entries* e) {
  if (!v.IsMap()) {
    error(v, what + ": expected a map of fields");
    return false;
  }
  return entries(v, what, allowed, e);
}

bool Loader::duration(const YAML::Node& v, const std::string& what, uint64_t max_ns,
                      const char* max_text, uint64_t* ns) {
  std::string s;
  if (!scalar(v, what, &s)) return false;
  const int err = memcg::parse_duration(s, ns);
  if (err) {
    error(v, what + ": `" + s + "` is not a duration (a number with ns, us, ms, s or m)" +
                 (err == ERANGE ? ": too long" : ""));
    return false;
  }
  if (max_ns<kMaxVirtualNs&& * ns> max_ns) {
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

}  // namespace memcgctl::detail
