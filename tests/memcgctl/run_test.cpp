// Scenario runs against the library: the examples' text and JSON reports match the golden files
// under tests/golden/ (regenerate with scripts/update-golden.sh), reports and plots are
// byte-identical across runs, the plot is well-formed XML, files the library lacks are reported
// as failures, and knob writes the library rejects make the scenario malformed.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "load.hpp"
#include "report.hpp"
#include "run.hpp"

namespace memcgctl {
namespace {

namespace fs = std::filesystem;
const fs::path kSource = MEMCGCTL_SOURCE_DIR;
const fs::path kScratch = MEMCGCTL_BINARY_DIR;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// `diff -u` of the golden file and what the run gave, for the failure message.
std::string diff(const fs::path& golden, const std::string& actual) {
  const fs::path got = kScratch / "golden-actual" / golden.filename();
  write(got, actual);
  std::string out;
  const std::string cmd = "diff -u '" + golden.string() + "' '" + got.string() + "' 2>&1";
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  return out;
}

Scenario load_or_die(const std::string& text) {
  Scenario s;
  std::vector<Diagnostic> errors;
  EXPECT_TRUE(load_scenario(text, &s, &errors)) << (errors.empty() ? "" : errors[0].message);
  return s;
}

Scenario load_example(const std::string& name) {
  Scenario s;
  std::vector<Diagnostic> errors;
  const fs::path p = kSource / "examples" / (name + ".yaml");
  EXPECT_TRUE(load_scenario_file(p.string(), &s, &errors)) << p;
  return s;
}

// A minimal XML well-formedness check: one root element, tags nested and closed, attributes
// quoted, only the five predefined entities. Enough for what the plot writes.
bool well_formed_xml(const std::string& x, std::string* why) {
  std::vector<std::string> stack;
  size_t i = 0;
  int roots = 0;
  while (i < x.size()) {
    if (x[i] == '&') {
      const size_t semi = x.find(';', i);
      const std::string ent = semi == std::string::npos ? "" : x.substr(i, semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;") {
        *why = "bad entity at " + std::to_string(i);
        return false;
      }
      i = semi + 1;
      continue;
    }
    if (x[i] != '<') {
      ++i;
      continue;
    }
    const size_t end = x.find('>', i);
    if (end == std::string::npos) {
      *why = "unterminated tag";
      return false;
    }
    std::string tag = x.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1)) {
        *why = "unbalanced </" + tag.substr(1) + ">";
        return false;
      }
      stack.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    if (self_closing) tag.pop_back();
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) {
      *why = "unbalanced quotes in <" + tag + ">";
      return false;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \t\n"));
    if (stack.empty() && ++roots > 1) {
      *why = "more than one root element";
      return false;
    }
    if (!self_closing) stack.push_back(name);
  }
  if (!stack.empty()) *why = "unclosed <" + stack.back() + ">";
  return stack.empty() && roots == 1;
}

class Example : public testing::TestWithParam<std::string> {};

TEST_P(Example, MatchesGoldenText) {
  const Scenario s = load_example(GetParam());
  const RunResult r = run_scenario(s);
  ASSERT_FALSE(r.malformed) << r.error.message;
  const fs::path golden = kSource / "tests/golden" / (GetParam() + ".txt");
  ASSERT_TRUE(fs::exists(golden)) << golden << " is missing: run scripts/update-golden.sh";
  const std::string text = text_report(r);
  EXPECT_EQ(read(golden), text) << diff(golden, text);
}

TEST_P(Example, MatchesGoldenJson) {
  const Scenario s = load_example(GetParam());
  const RunResult r = run_scenario(s);
  ASSERT_FALSE(r.malformed) << r.error.message;
  const fs::path golden = kSource / "tests/golden" / (GetParam() + ".json");
  ASSERT_TRUE(fs::exists(golden)) << golden << " is missing: run scripts/update-golden.sh";
  const std::string json = json_report(s, r);
  EXPECT_EQ(read(golden), json) << diff(golden, json);
}

TEST_P(Example, PassesItsOwnChecks) {
  const RunResult r = run_scenario(load_example(GetParam()));
  EXPECT_EQ(r.failed, 0) << text_report(r);
  EXPECT_GT(r.passed, 0);
}

TEST_P(Example, IsDeterministic) {
  const Scenario s = load_example(GetParam());
  const RunResult a = run_scenario(s);
  const RunResult b = run_scenario(s);
  EXPECT_EQ(text_report(a), text_report(b));
  EXPECT_EQ(json_report(s, a), json_report(s, b));
  EXPECT_EQ(svg_plot(s, a), svg_plot(s, b));
}

TEST_P(Example, PlotIsWellFormedXml) {
  const Scenario s = load_example(GetParam());
  const std::string svg = svg_plot(s, run_scenario(s));
  std::string why;
  EXPECT_TRUE(well_formed_xml(svg, &why)) << why;
  const fs::path file = kScratch / "plots" / (GetParam() + ".svg");
  write(file, svg);
  if (fs::exists(MEMCGCTL_XMLLINT)) {
    const std::string cmd = std::string(MEMCGCTL_XMLLINT) + " --noout '" + file.string() + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  for (const char* part : {"<svg", "<polyline", "memory.current", "memory.max", "event oom_kill"})
    EXPECT_NE(svg.find(part), std::string::npos) << part;
}

INSTANTIATE_TEST_SUITE_P(Examples, Example,
                         testing::Values("protection", "low", "high", "oom_group", "multi_tenant",
                                         "signals", "vmpressure_modes", "psi_throttle",
                                         "cache_policy", "psi_some_full", "admission",
                                         "inotify_delete_file", "inotify_delete_dir",
                                         "wait_priority", "preemption", "admission_queue"));

TEST(Run, FileTheLibraryLacksIsAFailureNotAValue) {
  const Scenario s = load_or_die(R"(
groups:
  A: {}
steps:
  - expect: { group: A, file: memory.nonexistent, eq: 0 }
  - print: { group: A, file: memory.nonexistent }
)");
  const RunResult r = run_scenario(s);
  EXPECT_EQ(r.passed, 0);
  EXPECT_EQ(r.failed, 2);
  const std::string text = text_report(r);
  EXPECT_NE(text.find("line 5: FAIL expect A memory.nonexistent eq 0: cannot read: ENOENT"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("line 6: FAIL print A memory.nonexistent: cannot read: ENOENT"),
            std::string::npos)
      << text;
}

TEST(Run, FailedCheckSaysExpectedAndRead) {
  const Scenario s = load_or_die(R"(
groups:
  A: { memory.max: 10M }
steps:
  - cache: { name: c, group: A, grow: 4M }
  - expect: { group: A, file: memory.current, close_to: 8M, err: 5 }
  - expect: { group: A, file: memory.max, eq: max }
  - write: { group: A, file: memory.max, value: "1 G", expect: EINVAL }
  - write: { group: A, file: memory.max, value: "1G", expect: EINVAL }
)");
  const RunResult r = run_scenario(s);
  EXPECT_EQ(r.passed, 1);
  EXPECT_EQ(r.failed, 3);
  const std::string text = text_report(r);
  EXPECT_NE(text.find("line 6: FAIL expect A memory.current close_to 8M err 5: read 4194304 (4M)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("line 7: FAIL expect A memory.max eq max: read 10485760 (10M)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("line 9: FAIL write A memory.max \"1G\": expected EINVAL, got ok"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("1 passed, 3 failed\n"), std::string::npos) << text;
}

TEST(Run, KnobTheLibraryRejectsIsMalformed) {
  const fs::path f = kSource / "tests/memcgctl/malformed/unknown-file-knob.yaml";
  Scenario s;
  std::vector<Diagnostic> errors;
  ASSERT_TRUE(load_scenario_file(f.string(), &s, &errors));
  const RunResult r = run_scenario(s);
  ASSERT_TRUE(r.malformed);
  EXPECT_EQ(r.error.mark.line, 3);
  EXPECT_NE(r.error.message.find("no such file in this library"), std::string::npos);
  EXPECT_TRUE(r.steps.empty());  // nothing ran
}

// A listener and a trigger see their group's removal, as a watch does: one final notification
// (counted, and alone with `removed`), then nothing; the handles stay open on no group.
TEST(Run, ListenersAndTriggersSeeTheirGroupRemoved) {
  const Scenario s = load_or_die(R"(
groups:
  A: {}
  B: {}
steps:
  - listen: { name: L, group: A, level: medium }
  - trigger: { name: T, group: A, spec: "some 1000 1000000" }
  - listen: { name: K, group: B, level: low }
  - remove: { group: A }
  - expect: { listener: L, removed: true, eq: 1 }
  - expect: { listener: L, level: medium, eq: 1 }
  - expect: { listener: L, eq: 1 }
  - expect: { trigger: T, removed: true, eq: 1 }
  - expect: { trigger: T, eq: 1 }
  - expect: { listener: K, removed: true, eq: 0 }
  - tick: 10s
  - expect: { trigger: T, eq: 1 }
)");
  const RunResult r = run_scenario(s);
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  EXPECT_EQ(r.passed, 7);
  for (const FinalGroup& g : r.final_groups) EXPECT_NE(g.path, "A");
}

// Rotations the file cannot show count in the work budget as they happen: a run whose reclaim
// keeps rotating referenced cache units stops with an error at the step that exhausted the
// budget, having rotated at most one reclaim cluster (32 units) past it, where it would
// otherwise run for about 20 minutes (see the files' headers).
void expect_stopped_by_rotations(const Scenario& s, int line, size_t steps_before) {
  const auto start = std::chrono::steady_clock::now();
  const RunResult r = run_scenario(s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.malformed);
  EXPECT_EQ(r.error.mark.line, line) << r.error.message;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.error.message, m,
                                std::regex("^the run stopped here: reclaim rotated ([0-9]+) ")))
      << r.error.message;
  const uint64_t rotated = std::stoull(m[1]);
  EXPECT_GT(s.work_units + rotated, kMaxWorkUnits);
  EXPECT_LE(s.work_units + rotated, kMaxWorkUnits + 32);
  EXPECT_EQ(r.steps.size(), steps_before);
  EXPECT_LT(seconds, 120) << "sanitizer builds included; about 1 s in a release build";
}

TEST(Run, RotationsThatExhaustTheWorkBudgetStopTheRun) {
  for (const char* name : {"rotation-budget-reclaim.yaml", "rotation-budget-charge.yaml"}) {
    SCOPED_TRACE(name);
    const fs::path f = kSource / "tests/memcgctl/malformed" / name;
    std::ifstream in(f);
    std::string first;
    std::getline(in, first);
    const int line = std::stoi(first.substr(std::string("# error: ").size()));
    Scenario s;
    std::vector<Diagnostic> errors;
    ASSERT_TRUE(load_scenario_file(f.string(), &s, &errors));
    EXPECT_LT(s.work_units, kMaxWorkUnits);
    // Every step before the one that stopped the run ran (the cache, the member).
    const size_t before = static_cast<size_t>(
        std::find_if(s.steps.begin(), s.steps.end(),
                     [&](const Step& st) { return st.mark.line == line; }) -
        s.steps.begin());
    ASSERT_LT(before, s.steps.size());
    expect_stopped_by_rotations(s, line, before);
  }
  // In a lane of a `parallel` block: every lane stops.
  const Scenario s = load_or_die(R"(
groups:
  G: {}
steps:
  - cache: { name: c, group: G, grow: 64G, referenced: 100% }
  - member: { name: m, group: G }
  - member: { name: n, group: G }
  - parallel:
      m:
        - reclaim: { group: G, size: 4K }
        - reclaim: { group: G, size: 4K }
      n:
        - tick: 1s
        - reclaim: { group: G, size: 4K }
)");
  expect_stopped_by_rotations(s, 10, 3);
}

TEST(Run, CacheGrowthStopsAtAFailingCharge) {
  // An immune member's pinned memory fills the group: the cache's first charge finds nothing to
  // reclaim and nobody to kill.
  const Scenario s = load_or_die(R"(
groups:
  A: { memory.max: 8M }
steps:
  - member: { name: m, group: A, immune: true }
  - charge: { member: m, size: 8M, expect: ok }
  - cache: { name: c, group: A, grow: 4M }
  - expect: { group: A, file: memory.current, le: 8M }
)");
  const RunResult r = run_scenario(s);
  EXPECT_EQ(r.failed, 0) << text_report(r);
  const Json& d = r.steps[2].detail;
  EXPECT_EQ(d.value("stopped", ""), "a charge failed") << d.dump();
  EXPECT_LT(d["grown"].get<uint64_t>(), 4u << 20);
  EXPECT_NE(text_report(r).find("line 7: note: cache c grew"), std::string::npos);
}

// Samples for the plot are bounded: groups x steps beyond kMaxPlotValues are thinned (every
// 2^k-th step kept, the first and the last always), and a run without a plot keeps none.
TEST(Run, PlotSamplesStayWithinTheirBudget) {
  constexpr size_t kGroups = 600, kSteps = 500;  // 300 600 group samples if every step were kept
  std::string text = "groups:\n";
  for (size_t i = 0; i < kGroups; ++i) text += "  g" + std::to_string(i) + ": {}\n";
  text += "steps:\n  - member: { name: m, group: g7 }\n";
  for (size_t i = 1; i < kSteps; ++i)
    text += i % 100 == 0 ? "  - charge: { member: m, size: 1M }\n" : "  - tick: 1s\n";
  const Scenario s = load_or_die(text);
  ASSERT_EQ(s.steps.size(), kSteps);

  const RunResult r = run_scenario(s);
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_LE(r.samples.size() * kGroups, kMaxPlotValues + kGroups);
  EXPECT_GT(r.samples.size(), kMaxPlotValues / kGroups / 2);  // thinned by half, not more
  ASSERT_GE(r.samples.size(), 2u);
  EXPECT_EQ(r.samples.front().step, 0u);
  EXPECT_EQ(r.samples.back().step, kSteps);
  for (size_t i = 1; i < r.samples.size(); ++i) EXPECT_LT(r.samples[i - 1].step, r.samples[i].step);
  // What was charged still shows in the last sample; the plot is still a plot.
  EXPECT_EQ(r.samples.back().groups[7].current, 4u << 20);
  std::string why;
  EXPECT_TRUE(well_formed_xml(svg_plot(s, r), &why)) << why;

  RunOptions no_plot;
  no_plot.sample = false;
  const RunResult q = run_scenario(s, no_plot);
  EXPECT_TRUE(q.samples.empty());
  EXPECT_EQ(text_report(q), text_report(r));
  EXPECT_EQ(json_report(s, q), json_report(s, r));
}

// memory.peak handles keep their own reset state, as open files do in the kernel: a reset handle
// reads the peak since its reset, the others the group's peak since its creation.
TEST(Run, PeakHandlesResetIndependently) {
  const Scenario s = load_or_die(R"(
groups:
  A: {}
steps:
  - peak: { name: kept, group: A }
  - peak: { name: reset, group: A }
  - member: { name: m, group: A }
  - charge: { member: m, size: 8M }
  - release: { member: m, size: 6M }
  - peak: { name: reset, reset: true }
  - charge: { member: m, size: 1M }
  - expect: { peak: kept, ge: 8M }
  - expect: { peak: reset, ge: 3M }
  - expect: { peak: reset, le: 4M }
  - peak: { name: reset, close: true }
  - peak: { name: reset, group: A }
  - expect: { peak: reset, ge: 8M }
)");
  const RunResult r = run_scenario(s);
  EXPECT_EQ(r.failed, 0) << text_report(r);
  EXPECT_EQ(r.passed, 4);
}

// A bulk charge is one library call: memory.high is handled for the whole excess at its end
// (throttling shows as stall), while unit-by-unit charges see memory.high on every unit.
TEST(Run, BulkChargeIsOneCallAndHighBeforeMax) {
  const Scenario s = load_or_die(R"(
groups:
  A: { memory.high: 30M, memory.max: 140M }
steps:
  - member: { name: m, group: A }
  - charge: { member: m, size: 100M, bulk: true, expect: ok }
  - expect: { group: A, file: memory.events, key: high, ge: 1 }
  - expect: { group: A, file: memory.events, key: max, eq: 0 }
  - expect: { group: A, file: memory.pressure, key: some.total, ge: 1 }
  - charge: { member: m, size: 100M, bulk: true, expect: failed }
  - expect: { group: A, file: memory.events, key: max, ge: 1 }
)");
  const RunResult r = run_scenario(s);
  EXPECT_EQ(r.failed, 0) << text_report(r);
  EXPECT_EQ(r.passed, 6);
  // The failed bulk charge charged nothing.
  EXPECT_EQ(r.steps[5].detail["charged"], 0);
}

// Handle counts: a failed check on a listener, trigger or watch says what it read.
TEST(Run, HandleCheckSaysExpectedAndRead) {
  const Scenario s = load_or_die(R"(
groups:
  A: {}
steps:
  - listen: { name: L, group: A, level: critical }
  - trigger: { name: T, group: A, spec: "full 500000 1000000" }
  - watch: { name: W, group: A, file: memory.events.local }
  - expect: { listener: L, level: critical, ge: 1 }
  - expect: { trigger: T, eq: 1 }
  - expect: { watch: W, ge: 2 }
  - expect: { group: A, file: memory.pressure, key: full.avg10, ge: 0.5 }
)");
  const RunResult r = run_scenario(s);
  EXPECT_EQ(r.failed, 4);
  const std::string text = text_report(r);
  for (const char* line : {"line 8: FAIL expect listener L level critical ge 1: read 0",
                           "line 9: FAIL expect trigger T eq 1: read 0",
                           "line 10: FAIL expect watch W ge 2: read 0",
                           "line 11: FAIL expect A memory.pressure.full.avg10 ge 0.5: read 0.00"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
}

}  // namespace
}  // namespace memcgctl
