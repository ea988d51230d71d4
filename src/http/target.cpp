#include "target.hpp"

namespace memcg::http::detail {
namespace {

constexpr std::string_view kGroupsPrefix = "/v1/groups/";

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Printable ASCII without the space: the only bytes a served path may hold.
bool allowed(unsigned char c) { return c > 0x20 && c < 0x7f; }

}  // namespace

int decode_target(std::string_view raw, std::string* path) {
  const size_t q = raw.find('?');
  if (q != std::string_view::npos) raw = raw.substr(0, q);
  path->clear();
  path->reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(raw[i]);
    if (c == '%') {
      if (i + 2 >= raw.size()) return 400;
      const int hi = hex(raw[i + 1]), lo = hex(raw[i + 2]);
      if (hi < 0 || lo < 0) return 400;
      c = static_cast<unsigned char>(hi * 16 + lo);
      i += 2;
    }
    if (!allowed(c)) return 400;
    path->push_back(static_cast<char>(c));
  }
  return 0;
}

bool is_file_target(std::string_view path) {
  return path.size() > kGroupsPrefix.size() && path.substr(0, kGroupsPrefix.size()) == kGroupsPrefix;
}

bool split_file_path(std::string_view path, std::string* group, std::string* file) {
  if (!is_file_target(path)) return false;
  const std::string_view rest = path.substr(kGroupsPrefix.size());
  size_t start = 0;
  for (;;) {
    const size_t slash = rest.find('/', start);
    const std::string_view seg =
        rest.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  // Both parts are views of `path` (or the root's "/"), copied out once each.
  const size_t last = rest.rfind('/');
  const bool in_root = last == std::string_view::npos;
  const std::string_view group_path = in_root ? std::string_view("/") : rest.substr(0, last);
  const std::string_view file_name = in_root ? rest : rest.substr(last + 1);
  group->assign(group_path);
  file->assign(file_name);
  return true;
}

}  // namespace memcg::http::detail
