// libFuzzer target: the scenario loader and validator of memcgctl on arbitrary input (nothing is
// run).
//
// Checked for any input:
//   - loading never crashes, hangs or leaks, whatever the YAML (deep nesting, aliases, odd
//     scalars, binary bytes);
//   - it either accepts the input with no diagnostics, or rejects it with at least one, each
//     with a message and a position inside the input (or none);
//   - loading is deterministic: a second load gives the same verdict, diagnostics and steps.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "../tools/memcgctl/load.hpp"

namespace {

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "invariant violated: %s\n", what);
  std::abort();
}

#define CHECK(cond) check((cond), #cond)

// Scenarios are small files; larger inputs only slow the search down.
constexpr size_t kMaxInput = 16 * 1024;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxInput) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  size_t lines = 1;
  for (char c : text) lines += c == '\n';

  memcgctl::Scenario a, b;
  std::vector<memcgctl::Diagnostic> ea, eb;
  const bool ok = memcgctl::load_scenario(text, &a, &ea);
  CHECK(ok == ea.empty());
  for (const auto& d : ea) {
    CHECK(!d.message.empty());
    CHECK(d.mark.line >= 0 && static_cast<size_t>(d.mark.line) <= lines + 1);
    CHECK(d.mark.line == 0 || d.mark.column >= 1);
  }

  CHECK(memcgctl::load_scenario(text, &b, &eb) == ok);
  CHECK(ea.size() == eb.size());
  for (size_t i = 0; i < ea.size(); ++i) {
    CHECK(ea[i].message == eb[i].message);
    CHECK(ea[i].mark.line == eb[i].mark.line);
  }
  if (ok) {
    CHECK(a.steps.size() == b.steps.size());
    CHECK(a.groups.size() == b.groups.size());
    CHECK(a.config.unit != 0 && (a.config.unit & (a.config.unit - 1)) == 0);
  }
  return 0;
}
