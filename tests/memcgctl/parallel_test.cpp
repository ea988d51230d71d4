// `parallel` blocks: lanes run one at a time on the virtual clock (tools/memcgctl/sim_clock.hpp).
// These tests pin the documented semantics: lanes due at the same time take turns step by step,
// a `tick` is running time of its own lane, a throttling sleep or a wait delays only the lane
// that stalls, a release in one lane wakes a waiting charge of another at that virtual time, and
// plotting (which samples pressure) changes nothing a scenario checks.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "../watchdog.hpp"
#include "load.hpp"
#include "report.hpp"
#include "run.hpp"

namespace memcgctl {
namespace {

constexpr uint64_t kMs = 1'000'000;

Scenario load_or_die(const std::string& text) {
  Scenario s;
  std::vector<Diagnostic> errors;
  EXPECT_TRUE(load_scenario(text, &s, &errors))
      << (errors.empty() ? "" : std::to_string(errors[0].mark.line) + ": " + errors[0].message);
  return s;
}

// The results of the lane steps, in the order they ran: "lane:step@ms".
std::vector<std::string> lane_order(const RunResult& r) {
  std::vector<std::string> out;
  for (const StepResult& s : r.steps)
    if (!s.lane.empty())
      out.push_back(s.lane + ":" + std::to_string(s.lane_step) + "@" +
                    std::to_string(s.time_ns / kMs));
  return out;
}

const StepResult& lane_step(const RunResult& r, const std::string& lane, size_t k) {
  for (const StepResult& s : r.steps)
    if (s.lane == lane && s.lane_step == k) return s;
  ADD_FAILURE() << "no step " << k << " of lane " << lane;
  return r.steps.front();
}

// A file of a group as the run left it ("" when absent).
std::string final_file(const RunResult& r, const std::string& group, const std::string& file) {
  for (const FinalGroup& g : r.final_groups)
    if (g.path == group)
      for (const FinalFile& f : g.files)
        if (f.name == file) return f.content;
  return "";
}

TEST(Parallel, LanesDueTogetherTakeTurnsStepByStep) {
  const Scenario s = load_or_die(R"(
groups:
  A: {}
steps:
  - member: { name: a, group: A }
  - member: { name: b, group: A }
  - parallel:
      a: [ charge: { member: a, size: 1M }, charge: { member: a, size: 1M }, release: { member: a } ]
      b: [ charge: { member: b, size: 1M }, release: { member: b } ]
)");
  const RunResult r = run_scenario(s);
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(lane_order(r), (std::vector<std::string>{"a:1@0", "b:1@0", "a:2@0", "b:2@0", "a:3@0"}));
  EXPECT_EQ(r.failed, 0) << text_report(r);
}

TEST(Parallel, TickIsRunningTimeOfItsOwnLane) {
  const Scenario s = load_or_die(R"(
groups:
  A: {}
steps:
  - member: { name: a, group: A }
  - member: { name: b, group: A }
  - parallel:
      a: [ tick: 1s, charge: { member: a, size: 1M } ]
      b: [ tick: 300ms, charge: { member: b, size: 2M }, tick: 200ms, expect: { group: A, file: memory.current, eq: 2M } ]
  - expect: { group: A, file: memory.current, eq: 3M }
  # Running lanes do not stall: no pressure at all.
  - expect: { group: A, file: memory.pressure, key: some.total, eq: 0 }
)");
  const RunResult r = run_scenario(s);
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(lane_order(r), (std::vector<std::string>{"b:1@300", "b:2@300", "b:3@500", "b:4@500",
                                                     "a:1@1000", "a:2@1000"}));
  EXPECT_EQ(r.failed, 0) << text_report(r);
  EXPECT_EQ(r.passed, 3);
  // The block ends with its last lane; the top-level step after it sees that time.
  EXPECT_EQ(r.steps.back().time_ns, 1000 * kMs);
}

// a1 is throttled above memory.high at the end of its charge (a sleep of the library on the
// virtual clock): only its own lane waits; a2 and b go on, and the stall is `some` of A (a2 still
// runs there) and of the parent, `full` of neither. (A lane that has finished is no task any
// more: had a2 ended before a1's sleep did, A would be `full` from then on.)
TEST(Parallel, ThrottlingDelaysOnlyTheLaneThatStalls) {
  const Scenario s = load_or_die(R"(
groups:
  T: {}
  T/A: { memory.high: 10M }
  T/B: {}
steps:
  - member: { name: a1, group: T/A }
  - member: { name: a2, group: T/A }
  - member: { name: b, group: T/B }
  - parallel:
      a1: [ charge: { member: a1, size: 40M, bulk: true } ]
      a2: [ tick: 500ms, expect: { group: T/A, file: memory.pressure, key: some.total, eq: 500000 }, tick: 3s ]
      b: [ tick: 100ms, charge: { member: b, size: 1M }, tick: 3s ]
  - expect: { group: T/A, file: memory.pressure, key: full.total, eq: 0 }
  - expect: { group: T, file: memory.pressure, key: full.total, eq: 0 }
  - expect: { group: T/B, file: memory.pressure, key: some.total, eq: 0 }
)");
  const RunResult r = run_scenario(s);
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  const uint64_t throttled = lane_step(r, "a1", 1).time_ns;
  EXPECT_GT(throttled, 500 * kMs);  // the penalty of 30M over high is long (the cap is 2 s)
  EXPECT_EQ(lane_step(r, "b", 2).time_ns, 100 * kMs);
  EXPECT_EQ(lane_step(r, "a2", 2).time_ns, 500 * kMs);
  // A's stall is exactly a1's sleep.
  const std::string content = final_file(r, "T/A", "memory.pressure");
  EXPECT_NE(content.find("total=" + std::to_string(throttled / 1000) + "\n"), std::string::npos)
      << content;
}

// A waiting charge in one lane is granted by a release in another, at the virtual time of the
// release; one that nobody serves times out at its deadline. Neither delays the other lanes.
TEST(Parallel, WaitingChargeIsWokenByAReleaseInAnotherLane) {
  const Scenario s = load_or_die(R"(
groups:
  P: { memory.max: 10M }
steps:
  - member: { name: holder, group: P }
  - member: { name: waiter, group: P }
  - member: { name: late, group: P }
  - parallel:
      holder: [ charge: { member: holder, size: 8M, bulk: true }, tick: 1s, release: { member: holder } ]
      waiter: [ tick: 100ms, charge: { member: waiter, size: 4M, wait: 5s, expect: ok } ]
      late: [ tick: 200ms, charge: { member: late, size: 4M, wait: 300ms, expect: timed_out } ]
  - expect: { group: P, file: memory.events, key: wait, eq: 2 }
  - expect: { group: P, file: memory.events, key: oom_kill, eq: 0 }
  - expect: { group: P, file: memory.current, eq: 4M }
)");
  const RunResult r = run_scenario(s);
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  const StepResult& granted = lane_step(r, "waiter", 2);
  EXPECT_EQ(granted.time_ns, 1000 * kMs);
  EXPECT_EQ(granted.detail.value("waited_ns", uint64_t{0}), 900 * kMs);
  EXPECT_EQ(granted.detail.value("wait_status", ""), "ok");
  const StepResult& timed_out = lane_step(r, "late", 2);
  EXPECT_EQ(timed_out.time_ns, 500 * kMs);
  EXPECT_EQ(timed_out.detail.value("outcome", ""), "timed_out");
  EXPECT_EQ(lane_step(r, "holder", 3).time_ns, 1000 * kMs);
}

// With `reclaim_cost`, reclaim inside a charge takes virtual time on the charging lane: a stall
// of that lane (PSI `some`, not `full`, while another lane of the group runs).
TEST(Parallel, ReclaimCostStallsTheReclaimingLane) {
  const Scenario s = load_or_die(R"(
config: { reclaim_cost: 100us }
groups:
  P: { memory.max: 20M }
steps:
  - cache: { name: c, group: P, grow: 16M }
  - member: { name: a, group: P }
  - member: { name: b, group: P }
  - parallel:
      a: [ charge: { member: a, size: 10M, bulk: true, expect: ok } ]
      b: [ tick: 1s ]
  - expect: { group: P, file: memory.pressure, key: full.total, eq: 0 }
)");
  const RunResult r = run_scenario(s);
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  // At least 6M (1536 units) had to go: 153.6 ms at 100 us per unit.
  const uint64_t charged_at = lane_step(r, "a", 1).time_ns;
  EXPECT_GE(charged_at, 1536 * 100'000u);
  EXPECT_EQ(lane_step(r, "b", 1).time_ns, 1000 * kMs);
  const std::string content = final_file(r, "P", "memory.pressure");
  EXPECT_NE(content.find("some avg10="), std::string::npos);
  EXPECT_NE(content.find("total=" + std::to_string(charged_at / 1000) + "\nfull"),
            std::string::npos)
      << content;
}

// Two lanes reclaiming at once while a listener's shrink policy costs time: the policy runs
// inside the library's notification (under that listener's call lock), so its time is paid at
// the end of the step instead of parking the lane there, where the other lane, notified by the
// same listener, would wait for the lock for ever. Bounded by a watchdog.
TEST(Parallel, PolicyCostInsideANotificationDoesNotParkTheLane) {
  memcg::testing::Watchdog watchdog("two lanes notifying one listener", std::chrono::seconds(60));
  const Scenario s = load_or_die(R"(
config: { reclaim_cost: 10us }
groups:
  P: { memory.max: 40M, memory.high: 30M }
  P/a: {}
  P/b: {}
steps:
  - cache: { name: ca, group: P/a, grow: 16M }
  - cache: { name: cb, group: P/b, grow: 16M }
  - member: { name: a, group: P/a }
  - member: { name: b, group: P/b }
  - listen: { name: L, group: P, level: low, mode: hierarchy, shrink: { cache: ca, size: 1M } }
  - parallel:
      a: [ reclaim: { group: P, size: 4M }, charge: { member: a, size: 8M, bulk: true }, release: { member: a } ]
      b: [ reclaim: { group: P/b, size: 4M }, charge: { member: b, size: 8M }, charge: { member: b, size: 8M, wait: 1s } ]
  - expect: { listener: L, ge: 1 }
)");
  const RunResult r = run_scenario(s);
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  // The same scenario gives the same run again.
  EXPECT_EQ(json_report(s, run_scenario(s)), json_report(s, r));
}

// Outside a block nobody can free memory while a charge waits: it times out after `wait`, and
// the virtual clock has moved by that much.
TEST(Parallel, TopLevelWaitTimesOutOnTheVirtualClock) {
  const Scenario s = load_or_die(R"(
groups:
  P: { memory.max: 4M }
steps:
  - member: { name: m, group: P }
  - charge: { member: m, size: 4M, bulk: true }
  - charge: { member: m, size: 1M, wait: 2s, expect: timed_out }
  - charge: { member: m, size: 0, wait: 2s, expect: ok }
)");
  const RunResult r = run_scenario(s);
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  EXPECT_EQ(r.steps[2].time_ns, 2000 * kMs);
  EXPECT_EQ(r.steps[3].time_ns, 2000 * kMs);
}

// The same scenario gives the same report whether or not it is plotted (the plot samples PSI
// without evaluating triggers), and the plot shows the trigger's fires.
TEST(Parallel, PlottingChangesNothingAndMarksTriggers) {
  const Scenario s = load_or_die(R"(
name: plotted
groups:
  A: { memory.high: 10M }
steps:
  - member: { name: a1, group: A }
  - member: { name: a2, group: A }
  - trigger: { name: A-some, group: A, spec: "some 50000 500000" }
  - parallel:
      a1: [ charge: { member: a1, size: 20M, bulk: true }, tick: 100ms, charge: { member: a1, size: 1M, bulk: true } ]
      a2: [ tick: 10ms, tick: 10ms, tick: 10ms, tick: 10ms, tick: 10ms, tick: 3s ]
  - expect: { trigger: A-some, ge: 1 }
)");
  RunOptions plain;
  plain.sample = false;
  const RunResult without = run_scenario(s, plain);
  const RunResult with = run_scenario(s);
  EXPECT_EQ(json_report(s, without), json_report(s, with));
  EXPECT_EQ(without.failed, 0) << text_report(without);
  ASSERT_EQ(with.signals.size(), 1u);
  EXPECT_GT(with.samples.size(), 8u);  // lane steps are sampled too
  const std::string svg = svg_plot(s, with);
  EXPECT_NE(svg.find("<title>A-some</title>"), std::string::npos);
  EXPECT_NE(svg.find("stalled (some solid, full dashed)"), std::string::npos);
}

// Random `parallel` scenarios over one pool with limits, caches, members, waits, a listener
// policy, a trigger and a reclaim cost: every run ends (a watchdog bounds it), the same scenario
// runs the same way twice, no step fails to run, and once everything is released each group
// holds no more than the per-CPU stock may keep for it. Seeds are fixed, so a failure reproduces.
TEST(Parallel, RandomScenariosEndAndRepeat) {
  memcg::testing::Watchdog watchdog("random parallel scenarios", std::chrono::seconds(240));
  constexpr int kScenarios = 60;
  for (int seed = 1; seed <= kScenarios; ++seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
    auto mib = [&](int lo, int hi) { return std::to_string(lo + pick(hi - lo + 1)) + "M"; };
    std::string t = "config: { reclaim_cost: " + std::to_string(pick(3) * 20) + "us }\n";
    t += "groups:\n  P: { memory.max: " + mib(24, 64) + (pick(2) ? ", memory.high: " + mib(16, 40) : "") +
         " }\n  P/a: {}\n  P/b: {}\nsteps:\n";
    t += "  - cache: { name: ca, group: P/a, grow: " + mib(1, 12) + " }\n";
    t += "  - cache: { name: cb, group: P/b, grow: " + mib(1, 12) + " }\n";
    const int members = 2 + pick(3);
    for (int m = 0; m < members; ++m)
      t += "  - member: { name: m" + std::to_string(m) + ", group: P/" + (m % 2 ? "b" : "a") + " }\n";
    if (pick(2))
      t += "  - listen: { name: L, group: P, level: low, mode: hierarchy, shrink: { cache: ca, size: " +
           mib(1, 4) + " } }\n";
    t += "  - trigger: { name: T, group: P, spec: \"some 50000 1000000\" }\n";
    t += "  - parallel:\n";
    for (int m = 0; m < members; ++m) {
      const std::string me = "m" + std::to_string(m);
      t += "      " + me + ":\n";
      const int steps = 1 + pick(6);
      for (int k = 0; k < steps; ++k) {
        switch (pick(8)) {
          case 0:
          case 1:
            t += "        - charge: { member: " + me + ", size: " + mib(1, 16) +
                 (pick(2) ? ", bulk: true" : "") + " }\n";
            break;
          case 2:
            t += "        - charge: { member: " + me + ", size: " + mib(1, 16) + ", wait: " +
                 std::to_string(pick(500)) + "ms }\n";
            break;
          case 3:
            t += "        - release: { member: " + me + (pick(2) ? ", size: " + mib(1, 8) : "") + " }\n";
            break;
          case 4:
            t += std::string("        - cache: { name: ") + (pick(2) ? "ca" : "cb") +
                 (pick(2) ? ", grow: " : ", shrink: ") + mib(1, 6) + " }\n";
            break;
          case 5:
            t += std::string("        - reclaim: { group: ") + (pick(2) ? "P" : "P/a") +
                 ", size: " + mib(1, 6) + " }\n";
            break;
          case 6:
            t += "        - tick: " + std::to_string(pick(300)) + "ms\n";
            break;
          default:
            t += std::string("        - set: { P/") + (pick(2) ? "a" : "b") + ": { memory.high: " +
                 (pick(3) ? mib(4, 32) : std::string("max")) + " } }\n";
            break;
        }
      }
    }
    for (int m = 0; m < members; ++m) t += "  - release: { member: m" + std::to_string(m) + " }\n";
    t += "  - cache: { name: ca, drop: true }\n  - cache: { name: cb, drop: true }\n";
    // What a per-CPU stock may still hold for each group: one batch (64 units of 4K).
    t += "  - expect: { group: P/a, file: memory.current, le: 256K }\n";
    t += "  - expect: { group: P/b, file: memory.current, le: 256K }\n";

    SCOPED_TRACE("seed " + std::to_string(seed) + ":\n" + t);
    const Scenario sc = load_or_die(t);
    const RunResult a = run_scenario(sc);
    ASSERT_FALSE(a.malformed) << a.error.message;
    for (const StepResult& st : a.steps) EXPECT_FALSE(st.failed) << st.message;
    EXPECT_EQ(a.failed, 0) << text_report(a);
    EXPECT_EQ(json_report(sc, run_scenario(sc)), json_report(sc, a));
  }
}

}  // namespace
}  // namespace memcgctl
