// libFuzzer target: every parser of memcg/parse.hpp on the same input, with their invariants.
//
// Checked for any input:
//   - a parser returns 0 or one of its documented errors, and leaves its outputs untouched on
//     error;
//   - parse_limit's units are at most the sentinel, format_limit shows `max` exactly for the
//     sentinel, and format_limit → parse_limit gives the units back; parse_limit agrees with
//     parse_bytes (same grammar and errors, floor and clamp to the sentinel);
//   - accepted values lie within their documented ranges, and re-parse from their canonical
//     spelling to the same value.

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "memcg/base/errors.hpp"
#include "memcg/files/parse.hpp"

namespace {

using namespace memcg;

constexpr uint64_t kPoison = 0xa5a5a5a5a5a5a5a5;

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "invariant violated: %s\n", what);
  std::abort();
}

#define CHECK(cond) check((cond), #cond)

void fuzz_limit(std::string_view text) {
  uint64_t bytes = kPoison;
  const int bytes_err = parse_bytes(text, &bytes);
  CHECK(bytes_err == 0 || bytes_err == EINVAL || bytes_err == ERANGE);
  if (bytes_err != 0) CHECK(bytes == kPoison);

  for (unsigned shift : {0u, 12u, 16u, 21u, 62u}) {
    const uint64_t sentinel = max_units(shift);
    uint64_t units = kPoison;
    const int err = parse_limit(text, shift, &units);
    // Same grammar as parse_bytes, and the same error: a value past 64 bits is ERANGE in both.
    CHECK(err == bytes_err);
    if (err != 0) {
      CHECK(units == kPoison);
      continue;
    }
    CHECK(units <= sentinel);
    const uint64_t expected = bytes >> shift;
    CHECK(units == (expected < sentinel ? expected : sentinel));

    const std::string shown = format_limit(units, shift);
    CHECK(!shown.empty() && shown.back() == '\n');
    CHECK((units == sentinel) == (shown == "max\n"));
    uint64_t again = kPoison;
    CHECK(parse_limit(shown, shift, &again) == 0);
    CHECK(again == units);
  }
}

void fuzz_duration(std::string_view text) {
  uint64_t ns = kPoison;
  const int err = parse_duration(text, &ns);
  CHECK(err == 0 || err == EINVAL || err == ERANGE);
  if (err != 0) CHECK(ns == kPoison);
}

void fuzz_oom_group(std::string_view text) {
  int value = INT_MIN;
  const int err = parse_oom_group(text, &value);
  CHECK(err == 0 || err == EINVAL || err == ERANGE);
  if (err != 0) {
    CHECK(value == INT_MIN);
  } else {
    CHECK(value == 0 || value == 1);
  }
}

void fuzz_reclaim(std::string_view text) {
  ReclaimRequest request{kPoison, INT_MIN};
  const int err = parse_reclaim(text, &request);
  CHECK(err == 0 || err == EINVAL);
  if (err != 0) {
    CHECK(request.bytes == kPoison && request.swappiness == INT_MIN);
    return;
  }
  CHECK(request.swappiness == kSwappinessNotGiven || request.swappiness == kSwappinessMax ||
        (request.swappiness >= 0 && request.swappiness <= kSwappinessLimit));
  // The canonical spelling parses back to the same request.
  std::string canonical = std::to_string(request.bytes);
  if (request.swappiness == kSwappinessMax) {
    canonical += " swappiness=max";
  } else if (request.swappiness != kSwappinessNotGiven) {
    canonical += " swappiness=" + std::to_string(request.swappiness);
  }
  ReclaimRequest again{kPoison, INT_MIN};
  CHECK(parse_reclaim(canonical, &again) == 0);
  CHECK(again.bytes == request.bytes && again.swappiness == request.swappiness);
}

void fuzz_psi_trigger(std::string_view text) {
  PsiTriggerSpec privileged{PsiState::kFull, kPoison, kPoison};
  const int err = parse_psi_trigger(text, /*privileged=*/true, &privileged);
  CHECK(err == 0 || err == EINVAL);
  if (err != 0) {
    CHECK(privileged.state == PsiState::kFull && privileged.threshold_us == kPoison &&
          privileged.window_us == kPoison);
  } else {
    CHECK(privileged.threshold_us > 0 && privileged.threshold_us <= privileged.window_us &&
          privileged.window_us <= kPsiWindowMaxUs);
  }

  PsiTriggerSpec unprivileged{PsiState::kFull, kPoison, kPoison};
  const int unprivileged_err = parse_psi_trigger(text, /*privileged=*/false, &unprivileged);
  CHECK(unprivileged_err == 0 || unprivileged_err == EINVAL);
  if (unprivileged_err != 0) {
    CHECK(unprivileged.threshold_us == kPoison && unprivileged.window_us == kPoison);
    return;
  }
  // Whatever an unprivileged writer may set, a privileged one may set too.
  CHECK(err == 0);
  CHECK(unprivileged.state == privileged.state &&
        unprivileged.threshold_us == privileged.threshold_us &&
        unprivileged.window_us == privileged.window_us);
  CHECK(unprivileged.window_us % kPsiUnprivilegedGrainUs == 0);
}

void fuzz_pressure(std::string_view text) {
  auto poison_level = static_cast<PressureLevel>(99);
  auto poison_mode = static_cast<PressureMode>(99);

  PressureLevel level = poison_level;
  PressureMode mode = poison_mode;
  int err = parse_pressure_level(text, &level, &mode);
  CHECK(err == 0 || err == EINVAL);
  if (err != 0) {
    CHECK(level == poison_level && mode == poison_mode);
  } else {
    const std::string canonical = std::string(to_string(level)) + "," + to_string(mode);
    PressureLevel level2;
    PressureMode mode2;
    CHECK(parse_pressure_level(canonical, &level2, &mode2) == 0);
    CHECK(level2 == level && mode2 == mode);
  }

  int efd = INT_MIN, lfd = INT_MIN;
  level = poison_level;
  mode = poison_mode;
  err = parse_event_control(text, &efd, &lfd, &level, &mode);
  CHECK(err == 0 || err == EINVAL);
  if (err != 0) {
    CHECK(efd == INT_MIN && lfd == INT_MIN && level == poison_level && mode == poison_mode);
  } else {
    CHECK(efd >= 0 && lfd >= 0);
    CHECK(std::strcmp(to_string(level), "?") != 0 && std::strcmp(to_string(mode), "?") != 0);
  }
}

void fuzz_errno_names(std::string_view text) {
  const int code = errno_from_name(text);
  if (code >= 0) CHECK(text == errno_name(code));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz_limit(text);
  fuzz_duration(text);
  fuzz_oom_group(text);
  fuzz_reclaim(text);
  fuzz_psi_trigger(text);
  fuzz_pressure(text);
  fuzz_errno_names(text);
  return 0;
}
