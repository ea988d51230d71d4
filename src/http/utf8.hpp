// UTF-8 for what the HTTP documents write: names are the application's bytes, and a document
// (HTML, JSON) must stay valid UTF-8 whatever they hold. The decoding is the library's one
// (memcg/base/internal/utf8.hpp, which also caps the OOM report's strings); this is its walk in
// the form the writers want. Private to src/http.
#pragma once

#include <cstddef>
#include <string_view>

#include "memcg/base/internal/utf8.hpp"

namespace memcg::http::detail {

inline constexpr std::string_view kReplacementChar = internal::kUtf8Replacement;  // U+FFFD

// Calls fn(sequence, valid) for each character of `s` in order: a whole well-formed UTF-8
// sequence with valid = true (no overlong forms, no surrogates, nothing past U+10FFFF), or the
// bytes of one invalid start (the maximal prefix that cannot be completed) with valid = false.
template <typename Fn>
void for_each_utf8(std::string_view s, Fn&& fn) {
  while (!s.empty()) {
    const size_t n = internal::utf8_char_length(s);
    const size_t take = n > 0 ? n : internal::utf8_invalid_length(s);
    fn(s.substr(0, take), n > 0);
    s.remove_prefix(take);
  }
}

}  // namespace memcg::http::detail
