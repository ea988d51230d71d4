// Pressure signals: the types PSI (psi.hpp) and vmpressure (vmpressure.hpp) are configured with,
// and the grammars of their registration texts (a memory.pressure trigger, a vmpressure level).
// The grammars are defined in src/files/parse.cpp with the other file grammars, whose lexing
// rules they share (see parse.hpp for the shared conventions).

#ifndef MEMCG_CORE_PRESSURE_HPP_
#define MEMCG_CORE_PRESSURE_HPP_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace memcg {

enum class PsiState { kSome, kFull };

struct PsiTriggerSpec {
  PsiState state;
  uint64_t threshold_us;  // stall time within a window that fires the trigger
  uint64_t window_us;     // tracking window
};

inline constexpr uint64_t kPsiWindowMaxUs = 10'000'000;         // 10 s
inline constexpr uint64_t kPsiUnprivilegedGrainUs = 2'000'000;  // the 2 s averaging period

// Parses a trigger written to memory.pressure: `some <threshold_us> <window_us>` or
// `full <threshold_us> <window_us>`. Only the first 31 bytes are read. The keyword must start
// the text; then two unsigned decimal numbers, each after optional whitespace (a scanf-style
// match: "some1 2000000" is accepted like in the kernel), then only whitespace.
// Checks: 0 < threshold <= window and 0 < window <= 10 s; an unprivileged writer's window must
// be a multiple of 2 s (such triggers are evaluated on the 2 s averaging tick).
// Returns 0 or EINVAL (empty text, bad syntax, a failed check).
// Kernel: like kernels since 2023, any window > 0 is accepted, and so any threshold > 0 (older
// kernels, and the admin documentation still, require a window of at least 500 ms). The kernel
// ignores text after the second number and lets numbers wrap at 32 bits ("some 4294967297 2000000"
// has threshold 1 there); here trailing text is EINVAL and a number that large fails the range
// checks.
[[nodiscard]] int parse_psi_trigger(std::string_view text, bool privileged, PsiTriggerSpec* spec);

// vmpressure (legacy) notification level: a listener fires for its level or a higher one.
enum class PressureLevel { kLow, kMedium, kCritical };
// Which events reach a listener: kDefault — only if no listener closer to the reclaimed group
// fired; kHierarchy — every event from its subtree; kLocal — only events of its own group.
enum class PressureMode { kDefault, kHierarchy, kLocal };

// "low", "medium", "critical"; "default", "hierarchy", "local" — the words the parsers accept.
const char* to_string(PressureLevel level);
const char* to_string(PressureMode mode);

// The longest argument of a vmpressure registration: "critical" + "," + "hierarchy", plus one.
inline constexpr size_t kPressureArgsMaxLen = 19;

// Parses the argument of a vmpressure registration: `<level>` or `<level>,<mode>`, each word an
// exact, case-sensitive match of to_string's words; the mode defaults to kDefault. Only the first
// 19 bytes are read. No whitespace is stripped. Returns 0 or EINVAL ("Low", "low,", "low,tree",
// "critical,hierarchyX").
// Kernel: the kernel ignores a third comma-separated field ("low,local,x" is accepted there);
// here it is EINVAL.
[[nodiscard]] int parse_pressure_level(std::string_view args, PressureLevel* level,
                                       PressureMode* mode);

// Parses a whole registration line written to cgroup.event_control:
// `<event_fd> <pressure_level_fd> <level>[,<mode>]`. The line is stripped of leading and
// trailing whitespace; the fds are decimal (no sign, leading zeros allowed, at most INT_MAX), each
// followed by exactly one space; the rest is parse_pressure_level's argument.
// Returns 0 or EINVAL.
// Kernel: an fd field without digits reads as fd 0 there, and an fd beyond 32 bits wraps; both
// are EINVAL here.
[[nodiscard]] int parse_event_control(std::string_view line, int* event_fd, int* level_fd,
                                      PressureLevel* level, PressureMode* mode);

}  // namespace memcg

#endif  // MEMCG_CORE_PRESSURE_HPP_
