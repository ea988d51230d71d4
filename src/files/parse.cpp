#include "memcg/files/parse.hpp"

#include <climits>

#include "memcg/base/errors.hpp"

namespace memcg {
namespace {

// ---- scanning primitives: no locale, no allocation ----

constexpr bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// The text a kernel file write would see: everything before the first NUL byte.
constexpr std::string_view until_nul(std::string_view s) {
  return s.substr(0, s.find('\0'));
}

constexpr std::string_view strip(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

constexpr std::string_view skip_spaces(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}

// Value of c as a digit of `base`, or -1.
constexpr int digit_value(char c, unsigned base) {
  int v = -1;
  if (c >= '0' && c <= '9') {
    v = c - '0';
  } else if (c >= 'a' && c <= 'f') {
    v = c - 'a' + 10;
  } else if (c >= 'A' && c <= 'F') {
    v = c - 'A' + 10;
  }
  return v >= 0 && static_cast<unsigned>(v) < base ? v : -1;
}

// An unsigned number read from the front of a text.
struct Scan {
  size_t length = 0;      // characters consumed; 0 when there were no digits
  uint64_t value = 0;     // valid unless overflow
  bool overflow = false;  // the digits do not fit 64 bits (all of them are still consumed)
};

// Reads the longest run of `base` digits at the front of s.
constexpr Scan scan_digits(std::string_view s, unsigned base) {
  Scan r;
  while (r.length < s.size()) {
    const int d = digit_value(s[r.length], base);
    if (d < 0) break;
    if (r.value > (UINT64_MAX - static_cast<unsigned>(d)) / base) r.overflow = true;
    r.value = r.value * base + static_cast<unsigned>(d);
    ++r.length;
  }
  return r;
}

// Reads a number with automatic base (see parse.hpp). A "0x" prefix counts only when a hex
// digit follows it; otherwise the leading 0 is an octal number of its own.
constexpr Scan scan_auto_base(std::string_view s) {
  if (s.size() >= 3 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && digit_value(s[2], 16) >= 0) {
    Scan r = scan_digits(s.substr(2), 16);
    r.length += 2;
    return r;
  }
  return scan_digits(s, s.starts_with('0') ? 8 : 10);
}

// Reads a size: a number with automatic base and at most one binary suffix.
constexpr Scan scan_size(std::string_view s) {
  Scan r = scan_auto_base(s);
  if (r.length == 0 || r.length == s.size()) return r;
  // Each suffix multiplies by 1024 once more than the previous one: K = 2^10 … E = 2^60.
  constexpr std::string_view kSuffixes = "KMGTPE";
  const char c = s[r.length];
  const size_t index = kSuffixes.find(c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c);
  if (index == std::string_view::npos) return r;
  const unsigned shift = 10 * static_cast<unsigned>(index + 1);
  ++r.length;
  if (r.value > (UINT64_MAX >> shift)) r.overflow = true;
  r.value <<= shift;
  return r;
}

// Reads a signed integer with automatic base and an optional sign; the magnitude is returned
// with `negative` set for a leading '-'. A sign with no digits after it scans as nothing.
constexpr Scan scan_signed(std::string_view s, bool allow_plus, bool* negative) {
  *negative = false;
  size_t sign = 0;
  if (!s.empty() && (s[0] == '-' || (allow_plus && s[0] == '+'))) {
    *negative = s[0] == '-';
    sign = 1;
  }
  Scan r = scan_auto_base(s.substr(sign));
  if (r.length > 0) r.length += sign;
  return r;
}

}  // namespace

// ---- sizes: scenario bytes and the limit files ----

int parse_bytes(std::string_view text, uint64_t* bytes) {
  const std::string_view s = strip(until_nul(text));
  if (s == "max") {
    *bytes = UINT64_MAX;
    return 0;
  }
  const Scan size = scan_size(s);
  if (size.length == 0 || size.length != s.size()) return EINVAL;
  if (size.overflow) return ERANGE;
  *bytes = size.value;
  return 0;
}

int parse_limit(std::string_view text, unsigned unit_shift, uint64_t* units) {
  // The byte grammar, with the units clamped to the sentinel: `max` (UINT64_MAX bytes) and any
  // value above the largest limit land on it. A value too large for 64 bits is ERANGE (as in
  // parse_bytes): where the kernel wraps it, taking it as `max` would turn the limit off.
  uint64_t bytes;
  if (const int err = parse_bytes(text, &bytes)) return err;
  const uint64_t n = bytes >> unit_shift;
  const uint64_t sentinel = max_units(unit_shift);
  *units = n < sentinel ? n : sentinel;
  return 0;
}

std::string format_limit(uint64_t units, unsigned unit_shift) {
  if (units >= max_units(unit_shift)) return "max\n";
  return std::to_string(units << unit_shift) + "\n";
}

int parse_duration(std::string_view text, uint64_t* ns) {
  const std::string_view s = strip(until_nul(text));
  const Scan number = scan_digits(s, 10);
  if (number.length == 0) return EINVAL;
  const std::string_view unit = s.substr(number.length);
  uint64_t scale;
  if (unit == "ns") {
    scale = 1;
  } else if (unit == "us") {
    scale = 1'000;
  } else if (unit == "ms") {
    scale = 1'000'000;
  } else if (unit == "s") {
    scale = 1'000'000'000;
  } else if (unit == "m") {
    scale = 60'000'000'000;
  } else {
    return EINVAL;
  }
  if (number.overflow || number.value > UINT64_MAX / scale) return ERANGE;
  *ns = number.value * scale;
  return 0;
}

// ---- memory.oom.group ----

int parse_oom_group(std::string_view text, int* value) {
  const std::string_view s = strip(until_nul(text));
  bool negative;
  const Scan number = scan_signed(s, /*allow_plus=*/true, &negative);
  if (number.length == 0) return EINVAL;
  if (number.overflow) return ERANGE;
  if (number.length != s.size()) return EINVAL;
  // The magnitude of INT_MIN is INT_MAX + 1.
  const uint64_t limit = static_cast<uint64_t>(INT_MAX) + (negative ? 1 : 0);
  if (number.value > limit) return ERANGE;
  if (number.value > 1 || (negative && number.value != 0)) return EINVAL;
  *value = static_cast<int>(number.value);
  return 0;
}

// ---- memory.reclaim ----

namespace {

// Parses one key of a reclaim request into *swappiness.
int parse_reclaim_key(std::string_view key, int* swappiness) {
  constexpr std::string_view kSwappinessKey = "swappiness=";
  if (!key.starts_with(kSwappinessKey)) return EINVAL;
  const std::string_view arg = key.substr(kSwappinessKey.size());
  if (arg == "max") {
    *swappiness = kSwappinessMax;
    return 0;
  }
  bool negative;
  const Scan number = scan_signed(arg, /*allow_plus=*/false, &negative);
  if (number.length == 0 || number.length != arg.size() || number.overflow) return EINVAL;
  if (number.value > kSwappinessLimit || (negative && number.value != 0)) return EINVAL;
  *swappiness = static_cast<int>(number.value);
  return 0;
}

}  // namespace

int parse_reclaim(std::string_view text, ReclaimRequest* request) {
  const std::string_view s = strip(until_nul(text));
  const Scan size = scan_size(s);
  if (size.length == 0) return EINVAL;
  std::string_view rest = s.substr(size.length);
  if (!rest.empty() && !is_space(rest.front())) return EINVAL;
  int swappiness = kSwappinessNotGiven;
  for (rest = skip_spaces(rest); !rest.empty(); rest = skip_spaces(rest)) {
    size_t end = 0;
    while (end < rest.size() && !is_space(rest[end])) ++end;
    if (int err = parse_reclaim_key(rest.substr(0, end), &swappiness)) return err;
    rest.remove_prefix(end);
  }
  request->bytes = size.overflow ? UINT64_MAX : size.value;
  request->swappiness = swappiness;
  return 0;
}

// ---- PSI triggers ----

int parse_psi_trigger(std::string_view text, bool privileged, PsiTriggerSpec* spec) {
  // Like the kernel's 32-byte buffer, of which the last byte holds the terminating NUL.
  constexpr size_t kMaxTriggerLen = 31;
  std::string_view s = until_nul(text.substr(0, kMaxTriggerLen));
  PsiState state;
  if (s.starts_with("some")) {
    state = PsiState::kSome;
  } else if (s.starts_with("full")) {
    state = PsiState::kFull;
  } else {
    return EINVAL;
  }
  s = skip_spaces(s.substr(4));
  const Scan threshold = scan_digits(s, 10);
  if (threshold.length == 0) return EINVAL;
  s = skip_spaces(s.substr(threshold.length));
  const Scan window = scan_digits(s, 10);
  if (window.length == 0) return EINVAL;
  if (!skip_spaces(s.substr(window.length)).empty()) return EINVAL;

  // An overflowed number is far above the 10 s window limit, so the range checks reject it.
  const uint64_t threshold_us = threshold.overflow ? UINT64_MAX : threshold.value;
  const uint64_t window_us = window.overflow ? UINT64_MAX : window.value;
  if (window_us == 0 || window_us > kPsiWindowMaxUs) return EINVAL;
  if (threshold_us == 0 || threshold_us > window_us) return EINVAL;
  if (!privileged && window_us % kPsiUnprivilegedGrainUs != 0) return EINVAL;
  *spec = PsiTriggerSpec{state, threshold_us, window_us};
  return 0;
}

// ---- vmpressure registration ----

const char* to_string(PressureLevel level) {
  switch (level) {
    case PressureLevel::kLow:
      return "low";
    case PressureLevel::kMedium:
      return "medium";
    case PressureLevel::kCritical:
      return "critical";
  }
  return "?";
}

const char* to_string(PressureMode mode) {
  switch (mode) {
    case PressureMode::kDefault:
      return "default";
    case PressureMode::kHierarchy:
      return "hierarchy";
    case PressureMode::kLocal:
      return "local";
  }
  return "?";
}

int parse_pressure_level(std::string_view args, PressureLevel* level, PressureMode* mode) {
  const std::string_view s = until_nul(args.substr(0, kPressureArgsMaxLen));
  const size_t comma = s.find(',');
  const std::string_view level_word = s.substr(0, comma);
  PressureLevel parsed_level;
  if (level_word == "low") {
    parsed_level = PressureLevel::kLow;
  } else if (level_word == "medium") {
    parsed_level = PressureLevel::kMedium;
  } else if (level_word == "critical") {
    parsed_level = PressureLevel::kCritical;
  } else {
    return EINVAL;
  }
  PressureMode parsed_mode = PressureMode::kDefault;
  if (comma != std::string_view::npos) {
    const std::string_view mode_word = s.substr(comma + 1);
    if (mode_word == "default") {
      parsed_mode = PressureMode::kDefault;
    } else if (mode_word == "hierarchy") {
      parsed_mode = PressureMode::kHierarchy;
    } else if (mode_word == "local") {
      parsed_mode = PressureMode::kLocal;
    } else {
      return EINVAL;  // includes an empty mode and a third field
    }
  }
  *level = parsed_level;
  *mode = parsed_mode;
  return 0;
}

int parse_event_control(std::string_view line, int* event_fd, int* level_fd, PressureLevel* level,
                        PressureMode* mode) {
  std::string_view s = strip(until_nul(line));
  int fds[2];
  for (int& fd : fds) {
    const Scan number = scan_digits(s, 10);
    if (number.length == 0 || number.overflow || number.value > INT_MAX) return EINVAL;
    if (number.length == s.size() || s[number.length] != ' ') return EINVAL;
    fd = static_cast<int>(number.value);
    s.remove_prefix(number.length + 1);
  }
  PressureLevel parsed_level;
  PressureMode parsed_mode;
  if (int err = parse_pressure_level(s, &parsed_level, &parsed_mode)) return err;
  *event_fd = fds[0];
  *level_fd = fds[1];
  *level = parsed_level;
  *mode = parsed_mode;
  return 0;
}

}  // namespace memcg
