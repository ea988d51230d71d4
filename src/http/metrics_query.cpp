#include "metrics_query.hpp"

#include <charconv>
#include <cstdint>
#include <string>

namespace memcg::http::detail {
namespace {

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes `raw` into `*out`: false on a malformed escape or a byte outside printable
// ASCII (the space included).
bool decode(std::string_view raw, std::string* out) {
  out->clear();
  for (size_t i = 0; i < raw.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(raw[i]);
    if (c == '%') {
      if (i + 2 >= raw.size()) return false;
      const int hi = hex(raw[i + 1]), lo = hex(raw[i + 2]);
      if (hi < 0 || lo < 0) return false;
      c = static_cast<unsigned char>(hi * 16 + lo);
      i += 2;
    }
    if (c <= 0x20 || c >= 0x7f) return false;
    out->push_back(static_cast<char>(c));
  }
  return true;
}

// "all" as `all`, else a decimal number up to `max`.
bool parse_count(std::string_view v, uint64_t all, uint64_t max, uint64_t* out) {
  if (v == "all") {
    *out = all;
    return true;
  }
  uint64_t n = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size() || n > max) return false;
  *out = n;
  return true;
}

// A parameter's name for an error sentence: printable ASCII, at most 40 bytes.
std::string shown(std::string_view key) {
  std::string out;
  for (char c : key.substr(0, 40)) out += c > 0x20 && c < 0x7f ? c : '?';
  return out;
}

}  // namespace

int parse_metrics_query(std::string_view raw_target, PrometheusOptions* out, std::string* why) {
  auto fail = [why](std::string text) {
    if (why != nullptr) *why = std::move(text);
    return 400;
  };
  const size_t q = raw_target.find('?');
  if (q == std::string_view::npos) return 0;
  std::string_view rest = raw_target.substr(q + 1);
  PrometheusOptions o = *out;
  bool seen_group = false, seen_depth = false, seen_top = false;
  std::string value;
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view kv = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (kv.empty()) continue;  // "?&top=5", "?top=5&"
    const size_t eq = kv.find('=');
    const std::string_view key = kv.substr(0, eq);
    if (eq == std::string_view::npos)
      return fail("query parameter '" + shown(key) +
                  "' has no value (group=, depth=, top=, exclude=)");
    if (!decode(kv.substr(eq + 1), &value))
      return fail("the value of query parameter '" + shown(key) +
                  "' holds a malformed %XX escape or a byte that is not printable ASCII");
    bool* seen = key == "group" ? &seen_group
                 : key == "depth" ? &seen_depth
                 : key == "top"   ? &seen_top
                                  : nullptr;
    if (seen != nullptr) {
      if (*seen) return fail("query parameter '" + shown(key) + "' given twice");
      *seen = true;
    }
    if (key == "group") {
      o.group = value;
    } else if (key == "depth") {
      uint64_t d = 0;
      if (!parse_count(value, UINT64_MAX, PrometheusOptions::kMaxDepth, &d))
        return fail("depth must be a number from 0 to " +
                    std::to_string(PrometheusOptions::kMaxDepth) + ", or all");
      o.max_depth = d == UINT64_MAX ? -1 : static_cast<int>(d);
    } else if (key == "top") {
      uint64_t k = 0;
      if (!parse_count(value, 0, UINT32_MAX, &k))
        return fail("top must be a number from 0 to " + std::to_string(UINT32_MAX) +
                    " (0: every group), or all");
      o.top_k = static_cast<size_t>(k);
    } else if (key == "exclude") {
      std::string_view names = value;
      while (!names.empty()) {
        const size_t comma = names.find(',');
        const std::string_view name = names.substr(0, comma);
        if (!name.empty()) o.disabled_families.emplace_back(name);
        if (comma == std::string_view::npos) break;
        names.remove_prefix(comma + 1);
      }
    } else {
      return fail("unknown query parameter '" + shown(key) +
                  "' (the parameters are group, depth, top and exclude)");
    }
  }
  *out = std::move(o);
  return 0;
}

}  // namespace memcg::http::detail
