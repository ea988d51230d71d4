// Text grammars of memcg's interface files and scenario values.
//
// Each parser turns what a writer put into a cgroup v2 style file (memory.max, memory.reclaim,
// memory.pressure, cgroup.event_control, memory.oom.group) or into a scenario (sizes, durations)
// into typed values, with the kernel's acceptance rules and error codes (memcg/errors.hpp):
// 0 on success, else a positive errno value. On any error every output is left untouched, so a
// caller may parse straight into the live value.
//
// All functions are pure and thread-safe; none allocates except format_limit. They look at
// bytes only (no locale). Shared conventions:
//   - Text ends at its first NUL byte, as a buffer written to a kernel file is read as a C
//     string ("1G\0junk" is "1G").
//   - "Whitespace" is ASCII space, \t, \n, \v, \f, \r.
//   - "Automatic base": 0x/0X followed by a hex digit → hexadecimal, else a leading 0 → octal,
//     else decimal. Digits are taken greedily for that base, so "08" is the octal "0" followed
//     by a stray "8" (rejected) and "0x" is "0" followed by a stray "x" (rejected).
//   - "Size": a number with automatic base and no sign, then at most one suffix K, M, G, T, P
//     or E (either case, each a factor of 1024). A hexadecimal number takes an e/E as a digit,
//     so "0x1E" is 30 bytes while "0x1G" is 1 GiB, as in the kernel.
//
// Deliberate deviations from the kernel are listed at each function under "Kernel:".

#ifndef MEMCG_PARSE_HPP_
#define MEMCG_PARSE_HPP_

#include <cstdint>
#include <string>
#include <string_view>

#include "memcg/core/signal/pressure.hpp"  // the PSI trigger and vmpressure grammars
#include "memcg/core/reclaim/reclaim.hpp"   // ReclaimRequest

namespace memcg {

// The `max` sentinel of a counter kept in units of 2^unit_shift bytes: the largest count whose
// byte value still fits a signed 64-bit integer (the kernel's PAGE_COUNTER_MAX for that unit;
// 2^51 - 1 for 4 KiB units).
// REQUIRES: unit_shift <= 62.
constexpr uint64_t max_units(unsigned unit_shift) {
  return static_cast<uint64_t>(INT64_MAX) >> unit_shift;
}

// Parses the value grammar of memory.min/low/high/max and memory.swap.high/max into units of
// 2^unit_shift bytes. After stripping leading and trailing whitespace the text is either
// exactly `max` (→ max_units(unit_shift)) or a size followed by end of text. Bytes become units
// by floor division ("4097" → 1 unit of 4 KiB, "4095" → 0) and are clamped to the sentinel, so
// a value above the largest limit ("8E", 2^63 bytes) reads back as `max`, as the kernel clamps
// to its largest page count. A number too large for 64 bits, before or after its suffix ("16E",
// "99999999999999999999999"), is ERANGE and changes nothing: the kernel lets it wrap (a huge
// limit becomes a small one) and saturating it would turn the limit off, so it is refused.
// Returns 0, ERANGE as above, or EINVAL for anything else ("1 G", "1KB", "-1", "+1", "1.5G",
// "MAX", "K").
// REQUIRES: unit_shift <= 62.
// Kernel: an empty or whitespace-only write parses as 0 there (a bare newline written to
// memory.max sets it to 0), and so does a suffix without digits ("K"); both are EINVAL here.
// The kernel lets the number wrap silently on overflow ("16E" becomes 0); here it is ERANGE.
// Only ASCII whitespace is stripped (the kernel's isspace() also takes byte 0xA0).
[[nodiscard]] int parse_limit(std::string_view text, unsigned unit_shift, uint64_t* units);

// What reading such a file shows: "max\n" for the sentinel (or anything above it), else the
// decimal byte count (units << unit_shift) and "\n". parse_limit(format_limit(u, s), s) == u for
// every u <= max_units(s).
// REQUIRES: unit_shift <= 62.
std::string format_limit(uint64_t units, unsigned unit_shift);

// Parses a scenario size in bytes: the grammar of parse_limit without the unit conversion;
// `max` → UINT64_MAX. Returns 0, EINVAL for a grammar violation, or ERANGE when the value does
// not fit 64 bits (a scenario asking for more than 16 EiB is a mistake worth reporting, as it is
// in a limit file).
[[nodiscard]] int parse_bytes(std::string_view text, uint64_t* bytes);

// Parses a scenario duration into nanoseconds: after stripping whitespace, a decimal number
// (leading zeros allowed, no sign, no fraction) immediately followed by one unit: `ns`, `us`,
// `ms`, `s` or `m` (minutes), case-sensitive. A unit is required ("5" is EINVAL). Returns 0,
// EINVAL for a grammar violation ("1h", "-1s", "5 s", "1.5s"), or ERANGE when the nanosecond
// count does not fit 64 bits.
[[nodiscard]] int parse_duration(std::string_view text, uint64_t* ns);

// Parses a write to memory.oom.group: after stripping whitespace, an integer with automatic base
// and an optional leading `+` or `-` ("1", "0x1", "+0", "-0"). Returns 0; ERANGE when the number
// does not fit an int; EINVAL for any other text or a value other than 0 or 1. As in the kernel,
// a digit string too long for 64 bits is ERANGE even if junk follows it; a shorter one with junk
// after it is EINVAL.
[[nodiscard]] int parse_oom_group(std::string_view text, int* value);

// Parses a write to memory.reclaim: after stripping whitespace, a size, then nothing or
// whitespace and whitespace-separated keys: `swappiness=max` or `swappiness=N`, N an integer
// with automatic base (an optional `-`, so "-0" is 0) within 0..200. A repeated key: the last
// one counts. A size too large for 64 bits saturates to UINT64_MAX (reclaim as much as
// possible). Returns 0, or EINVAL: empty text, no size digits, a size not followed by end or
// whitespace ("1Mswappiness=1", "1KB"), an unknown key ("1M foo"), a bad or out-of-range
// swappiness ("swappiness=201", "swappiness=-1", "swappiness=", "swappiness=1x").
// Kernel: the kernel reads keys straight after the size's last character, so it accepts
// "1Mswappiness=1"; it also takes a suffix without digits ("K") as 0. Both are EINVAL here.
[[nodiscard]] int parse_reclaim(std::string_view text, ReclaimRequest* request);

}  // namespace memcg

#endif  // MEMCG_PARSE_HPP_
