// The JSON writing pieces that json.cpp (/v1/groups) and oom_json.cpp (/v1/oom) share: numbers
// and escaped strings appended to a document. Private to src/http.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "memcg/base/internal/utf8.hpp"

namespace memcg::http::json_out {

inline void put_u64(std::string& out, uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

inline void put_i64(std::string& out, int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// A JSON string. Group names are restricted to [A-Za-z0-9_.:@+-] (controller.hpp), but the
// escaping does not rely on it: member names and handler errors are the user's text, so bytes
// that are not valid UTF-8 become U+FFFD (RFC 8259 wants UTF-8; strict parsers refuse the whole
// document otherwise).
inline void put_string(std::string& out, std::string_view s) {
  out += '"';
  while (!s.empty()) {
    const char c = s.front();
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned>(c));
      out += esc;
    } else if (static_cast<unsigned char>(c) < 0x80) {
      out += c;
    } else if (const size_t n = internal::utf8_char_length(s); n > 0) {
      out.append(s.data(), n);
      s.remove_prefix(n);
      continue;
    } else {
      out += internal::kUtf8Replacement;
      s.remove_prefix(internal::utf8_invalid_length(s));
      continue;
    }
    s.remove_prefix(1);
  }
  out += '"';
}

}  // namespace memcg::http::json_out
