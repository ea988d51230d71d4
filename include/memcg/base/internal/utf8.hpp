// UTF-8 for text the library copies from its users (member, handler and group names, exception
// messages) into what it reports: every such string is cut to a byte budget on a character
// boundary and made valid UTF-8, so that a report stays bounded whatever the names are and a
// strict reader (a JSON parser, a browser) accepts every byte of it.
//
// Valid means RFC 3629: at most 4 bytes a character, no overlong forms, no surrogates
// (U+D800..U+DFFF), nothing above U+10FFFF. An invalid byte is replaced by U+FFFD (3 bytes), one
// replacement per maximal invalid prefix, as WHATWG's decoder does.
//
// Internal header: users of memcg must not include it or rely on it.
#ifndef MEMCG_INTERNAL_UTF8_HPP_
#define MEMCG_INTERNAL_UTF8_HPP_

#include <cstddef>
#include <string>
#include <string_view>

namespace memcg::internal {

// The replacement character U+FFFD, as UTF-8.
inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";

// The length of the valid UTF-8 character at the front of `s` (1..4), or 0 when `s` is empty or
// does not start with one.
size_t utf8_char_length(std::string_view s) noexcept;

// How many bytes of `s` an invalid start is: the maximal prefix of a character that cannot be
// completed (at least 1). REQUIRES: !s.empty() and utf8_char_length(s) == 0.
size_t utf8_invalid_length(std::string_view s) noexcept;

// `s` made valid UTF-8 (invalid sequences become U+FFFD) and cut to at most `max_bytes` bytes,
// never inside a character. Allocates at most min(max_bytes, 3 * s.size()) bytes; reads `s` only
// as far as the budget reaches. May throw std::bad_alloc.
std::string utf8_capped(std::string_view s, size_t max_bytes);

// In place: the same on `s` (no allocation when `s` is already valid, only shortened).
void utf8_cap(std::string& s, size_t max_bytes);

}  // namespace memcg::internal

#endif  // MEMCG_INTERNAL_UTF8_HPP_
