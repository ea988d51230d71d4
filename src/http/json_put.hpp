// The JSON writing pieces that json.cpp (/v1/groups) and oom_json.cpp (/v1/oom) share: numbers
// and escaped strings appended to a document. Private to src/http.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "utf8.hpp"

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
// escaping does not rely on it: member names and handler errors are the user's text. Bytes that
// are not UTF-8 become U+FFFD, so the document is valid JSON whatever the names hold.
inline void put_string(std::string& out, std::string_view s) {
  out += '"';
  detail::for_each_utf8(s, [&](std::string_view ch, bool valid) {
    const char c = ch[0];
    if (!valid) {
      out += "\\ufffd";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned>(c));
      out += esc;
    } else {
      out += ch;
    }
  });
  out += '"';
}

}  // namespace memcg::http::json_out
