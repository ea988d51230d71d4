// Cutting and repairing UTF-8 (memcg/base/internal/utf8.hpp).
#include "memcg/base/internal/utf8.hpp"

namespace memcg::internal {
namespace {

unsigned char at(std::string_view s, size_t i) noexcept { return static_cast<unsigned char>(s[i]); }

// The valid range of the second byte after lead byte `b` (Unicode's table 3-7), and the
// character's length; length 0 for a byte that never starts a character.
struct Lead {
  size_t length;
  unsigned char lo, hi;  // of the second byte; later ones are 0x80..0xBF
};

Lead lead_of(unsigned char b) noexcept {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};  // no overlong forms
  if (b == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};  // no overlong forms
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // nothing above U+10FFFF
  return {0, 0, 0};
}

// The number of bytes at the front of `s` that are a valid prefix of the character its first
// byte starts (the whole character when complete).
size_t valid_prefix(std::string_view s, const Lead& l) noexcept {
  size_t n = 1;
  for (; n < l.length && n < s.size(); ++n) {
    const unsigned char c = at(s, n);
    const unsigned char lo = n == 1 ? l.lo : 0x80, hi = n == 1 ? l.hi : 0xBF;
    if (c < lo || c > hi) break;
  }
  return n;
}

}  // namespace

size_t utf8_char_length(std::string_view s) noexcept {
  if (s.empty()) return 0;
  const Lead l = lead_of(at(s, 0));
  if (l.length == 0) return 0;
  return valid_prefix(s, l) == l.length ? l.length : 0;
}

size_t utf8_invalid_length(std::string_view s) noexcept {
  const Lead l = lead_of(at(s, 0));
  return l.length == 0 ? 1 : valid_prefix(s, l);
}

std::string utf8_capped(std::string_view s, size_t max_bytes) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const std::string_view rest = s.substr(i);
    const size_t n = utf8_char_length(rest);
    if (n > 0) {
      if (out.size() + n > max_bytes) break;
      out.append(rest.data(), n);
      i += n;
    } else {
      if (out.size() + kUtf8Replacement.size() > max_bytes) break;
      out += kUtf8Replacement;
      i += utf8_invalid_length(rest);
    }
  }
  return out;
}

void utf8_cap(std::string& s, size_t max_bytes) {
  // The common case: valid up to the budget; then only a cut, on a character boundary.
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = utf8_char_length(std::string_view(s).substr(i));
    if (n == 0) {
      s = utf8_capped(s, max_bytes);
      return;
    }
    if (i + n > max_bytes) break;
    i += n;
  }
  s.resize(i);
}

}  // namespace memcg::internal
