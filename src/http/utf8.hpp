// UTF-8 validation for what the HTTP documents write: names are the application's bytes, and a
// document (HTML, JSON) must stay valid UTF-8 whatever they hold. Private to src/http.
#pragma once

#include <cstddef>
#include <string_view>

namespace memcg::http::detail {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Calls fn(sequence, valid) for each character of `s` in order: a whole well-formed UTF-8
// sequence with valid = true (no overlong forms, no surrogates, nothing past U+10FFFF), or one
// byte that starts none with valid = false.
template <typename Fn>
void for_each_utf8(std::string_view s, Fn&& fn) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c < 0x80) {
      n = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    bool ok = n != 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    }
    if (ok) {
      fn(s.substr(i, n), true);
      i += n;
    } else {
      fn(s.substr(i, 1), false);
      ++i;
    }
  }
}

}  // namespace memcg::http::detail
