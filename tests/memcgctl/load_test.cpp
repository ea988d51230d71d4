// The scenario loader and validator: every malformed file under malformed/ is rejected with the
// line its first comment names (`# error: LINE: what the message says`), the examples load, and
// the value functions the reports use follow their rules.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>

#include "load.hpp"
#include "values.hpp"

namespace memcgctl {
namespace {

namespace fs = std::filesystem;
const fs::path kSource = MEMCGCTL_SOURCE_DIR;

struct ExpectedError {
  int line = 0;
  std::string text;
};

// The `# error: LINE: text` header of a malformed case.
ExpectedError expected_error(const fs::path& file) {
  std::ifstream in(file);
  std::string first;
  std::getline(in, first);
  std::smatch m;
  EXPECT_TRUE(std::regex_match(first, m, std::regex(R"(# error: (\d+): (.*))"))) << file;
  return {std::stoi(m[1]), m[2]};
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".yaml") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Load, MalformedCasesNameTheirLine) {
  const auto files = files_in(kSource / "tests/memcgctl/malformed");
  ASSERT_GE(files.size(), 25u);
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.filename().string());
    const ExpectedError want = expected_error(f);
    Scenario s;
    std::vector<Diagnostic> errors;
    if (load_scenario_file(f.string(), &s, &errors)) {
      // Only knob files unknown to the library pass the loader (the runner's preflight rejects
      // them), and work the file cannot show: rotations that exhaust the work budget stop the
      // run (run_test checks both).
      EXPECT_TRUE(want.text.find("no such file in this library") != std::string::npos ||
                  want.text.find("the run stopped") != std::string::npos)
          << want.text;
      continue;
    }
    ASSERT_FALSE(errors.empty());
    EXPECT_EQ(errors[0].mark.line, want.line) << errors[0].message;
    EXPECT_NE(errors[0].message.find(want.text), std::string::npos) << errors[0].message;
    const std::string formatted = format_diagnostic(f.string(), errors[0]);
    EXPECT_EQ(formatted.rfind(f.string() + ":" + std::to_string(want.line) + ":", 0), 0u)
        << formatted;
  }
}

TEST(Load, ExamplesAreValid) {
  const auto files = files_in(kSource / "examples");
  ASSERT_GE(files.size(), 5u);
  for (const fs::path& f : files) {
    Scenario s;
    std::vector<Diagnostic> errors;
    EXPECT_TRUE(load_scenario_file(f.string(), &s, &errors))
        << f << ": " << (errors.empty() ? "" : format_diagnostic(f.string(), errors[0]));
    EXPECT_FALSE(s.steps.empty()) << f;
  }
}

TEST(Load, ParsesValuesAndKeepsOrder) {
  Scenario s;
  std::vector<Diagnostic> errors;
  ASSERT_TRUE(load_scenario(R"(
name: n
config: { unit: 16K, cpus: 4, batch: 32, recursive_protection: true, local_events: true }
groups:
  A: { memory.max: 200M, memory.oom.group: 1 }
  A/B: {}
steps:
  - cache: { name: c, group: A/B, grow: 50M, referenced: 30% }
  - tick: 250ms
  - expect: { group: A, file: memory.events, key: max, close_to: 1G, err: 3 }
  - write: { group: A, file: memory.max, value: "1 G", expect: EINVAL }
  - print: { group: all }
)",
                            &s, &errors))
      << (errors.empty() ? "" : errors[0].message);
  EXPECT_EQ(s.name, "n");
  EXPECT_EQ(s.config.unit, 16384u);
  EXPECT_EQ(s.config.cpus, 4);
  EXPECT_EQ(s.config.batch, 32);
  EXPECT_TRUE(s.config.recursive_protection);
  ASSERT_EQ(s.groups.size(), 2u);
  EXPECT_EQ(s.groups[0].knobs[0].file, "memory.max");
  EXPECT_EQ(s.groups[0].knobs[1].value, "1");
  ASSERT_EQ(s.steps.size(), 5u);
  const auto& c = std::get<CacheStep>(s.steps[0].body);
  EXPECT_EQ(c.bytes, 50u << 20);
  EXPECT_EQ(c.referenced_percent, 30);
  EXPECT_EQ(std::get<TickStep>(s.steps[1].body).ns, 250'000'000u);
  const auto& x = std::get<ExpectStep>(s.steps[2].body);
  EXPECT_EQ(x.op, ExpectStep::Op::kCloseTo);
  EXPECT_EQ(x.value, 1u << 30);
  EXPECT_EQ(x.err, 3u);
  EXPECT_EQ(std::get<WriteStep>(s.steps[3].body).expect, EINVAL);
  EXPECT_EQ(s.steps[4].mark.line, 12);
}

TEST(Load, ReportsEveryError) {
  Scenario s;
  std::vector<Diagnostic> errors;
  EXPECT_FALSE(load_scenario("steps:\n  - tick: 5\n  - nope: 1\n", &s, &errors));
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].mark.line, 2);
  EXPECT_EQ(errors[1].mark.line, 3);
}

// ---- limits: what would run for ever or without bounded memory is refused up front ------------

TEST(Limits, TextPastTheSizeLimitIsRefusedWhereItGoesPast) {
  std::string text = "steps:\n";
  while (text.size() <= kMaxScenarioBytes) text += "  - tick: 1s\n";
  Scenario s;
  std::vector<Diagnostic> errors;
  EXPECT_FALSE(load_scenario(text, &s, &errors));
  ASSERT_EQ(errors.size(), 1u);
  // The first byte past 1 MiB: line 1 is "steps:", then 13-byte tick lines.
  const size_t past = kMaxScenarioBytes - 7;
  EXPECT_EQ(errors[0].mark.line, static_cast<int>(past / 13 + 2)) << errors[0].message;
  EXPECT_EQ(errors[0].mark.column, static_cast<int>(past % 13 + 1));
  EXPECT_NE(errors[0].message.find("goes on past 1048576 bytes"), std::string::npos);
  // Just below the limit the same text loads.
  text.resize(text.rfind("  - tick", kMaxScenarioBytes - 1));
  errors.clear();
  EXPECT_TRUE(load_scenario(text, &s, &errors)) << errors[0].message;
}

TEST(Limits, EndlessFileIsReadOnlyUpToTheLimit) {
  // /dev/zero never ends: the loader must stop after the limit (a watchdog turns a hang into a
  // failure instead of a stuck test).
  auto loaded = std::async(std::launch::async, [] {
    Scenario s;
    std::vector<Diagnostic> errors;
    const bool ok = load_scenario_file("/dev/zero", &s, &errors);
    return std::pair(ok, errors);
  });
  if (loaded.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    // The reader cannot be stopped, and the future would wait for it: end the test binary.
    std::fprintf(stderr, "FAIL: reading /dev/zero did not stop within 30 s\n");
    std::_Exit(1);
  }
  const auto [ok, errors] = loaded.get();
  EXPECT_FALSE(ok);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].mark.line, 1);
  EXPECT_EQ(errors[0].mark.column, static_cast<int>(kMaxScenarioBytes + 1));
  EXPECT_EQ(format_diagnostic("/dev/zero", errors[0]).rfind("/dev/zero:1:1048577: ", 0), 0u);
}

TEST(Limits, GroupsPastTheKernelsIdSpaceAreRefused) {
  std::string text = "groups:\n";
  for (size_t i = 0; i <= kMaxGroups; ++i) text += "  g" + std::to_string(i) + ":\n";
  text += "steps:\n  - tick: 1s\n";
  Scenario s;
  std::vector<Diagnostic> errors;
  EXPECT_FALSE(load_scenario(text, &s, &errors));
  ASSERT_FALSE(errors.empty());
  EXPECT_EQ(errors[0].mark.line, static_cast<int>(kMaxGroups + 2));  // the 65535th group
  EXPECT_NE(errors[0].message.find("more than 65534 groups"), std::string::npos)
      << errors[0].message;
}

TEST(Limits, StepSizesAndTicksAtTheLimitLoad) {
  Scenario s;
  std::vector<Diagnostic> errors;
  // 2^24 units of 4K is 64G: allowed; so are ticks adding up to exactly 100 years.
  EXPECT_TRUE(load_scenario(R"(
groups:
  A: {}
steps:
  - member: { name: m, group: A }
  - charge: { member: m, size: 64G }
  - release: { member: m, size: max }
  - cache: { name: c, group: A, grow: 64G }
  - cache: { name: c, shrink: max }
  - tick: 1576800000s
  - tick: 1576800000s
)",
                            &s, &errors))
      << errors[0].message;
  errors.clear();
  EXPECT_FALSE(load_scenario(R"(
groups:
  A: {}
steps:
  - member: { name: m, group: A }
  - charge: { member: m, size: 68719476737 }
  - tick: 1576800000s
  - tick: 1576800001s
)",
                             &s, &errors));
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].mark.line, 6);
  EXPECT_EQ(errors[1].mark.line, 8);
}

TEST(Values, CloseToIsTheSelftestRule) {
  EXPECT_TRUE(close_to(0, 0, 0));
  EXPECT_FALSE(close_to(1, 0, 100));  // floor(1 / 100) = 0
  EXPECT_TRUE(close_to(29 << 20, 29 << 20, 0));
  // 50M vs 48.5M at 3%: |d| = 1.5M, floor(98.5M / 100) * 3 ~ 2.95M.
  EXPECT_TRUE(close_to(50u << 20, 48u << 20, 3));
  EXPECT_FALSE(close_to(50u << 20, 40u << 20, 3));
  EXPECT_TRUE(close_to(UINT64_MAX, UINT64_MAX, 1));  // no overflow
}

TEST(Values, HumanSizeAndKeyedLines) {
  EXPECT_EQ(human_size(0), "0");
  EXPECT_EQ(human_size(50u << 20), "50M");
  EXPECT_EQ(human_size(4097), "4097");
  EXPECT_EQ(human_size(UINT64_MAX), "max");
  const auto kv = keyed_lines("low 0\nhigh 12\n\nmax 3\n");
  ASSERT_EQ(kv.size(), 3u);
  EXPECT_EQ(kv[1], (std::pair<std::string, std::string>("high", "12")));
  uint64_t v = 0;
  EXPECT_TRUE(read_number("max", &v));
  EXPECT_EQ(v, UINT64_MAX);
  EXPECT_TRUE(read_number("010", &v));  // files print decimal: not octal
  EXPECT_EQ(v, 10u);
  EXPECT_FALSE(read_number("12 34", &v));
  EXPECT_EQ(file_json("memory.events", "low 1\nmax 2\n").dump(), R"({"low":1,"max":2})");
  EXPECT_EQ(file_json("memory.max", "max\n").dump(), R"("max")");
}

}  // namespace
}  // namespace memcgctl
