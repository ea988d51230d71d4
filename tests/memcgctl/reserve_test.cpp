// The `reserve` step (a member's memcg::Reservation: admission with a deadline, growth past it,
// release) and lanes whose `iterations` each have their own steps and group. The step runs on
// the library's Reservation, so what it admits feeds the OOM killer's excess order and the
// learned-peak admission exactly as a program's reservations do.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "load.hpp"
#include "report.hpp"
#include "run.hpp"

namespace memcgctl {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kMiB = uint64_t{1} << 20;

Scenario load_or_die(const std::string& text) {
  Scenario s;
  std::vector<Diagnostic> errors;
  EXPECT_TRUE(load_scenario(text, &s, &errors))
      << (errors.empty() ? "" : std::to_string(errors[0].mark.line) + ": " + errors[0].message);
  return s;
}

// The first error: "LINE: message", or "" when the text loads.
std::string load_error(const std::string& text) {
  Scenario s;
  std::vector<Diagnostic> errors;
  if (load_scenario(text, &s, &errors)) return "";
  return errors.empty() ? "?" : std::to_string(errors[0].mark.line) + ": " + errors[0].message;
}

const StepResult& lane_step(const RunResult& r, const std::string& lane, size_t k) {
  for (const StepResult& s : r.steps)
    if (s.lane == lane && s.lane_step == k) return s;
  ADD_FAILURE() << "no step " << k << " of lane " << lane;
  return r.steps.front();
}

const StepResult& top_step(const RunResult& r, size_t index) {
  for (const StepResult& s : r.steps)
    if (s.lane.empty() && s.index == index) return s;
  ADD_FAILURE() << "no step " << index;
  return r.steps.front();
}

const Json& lanes_of(const RunResult& r) {
  for (const StepResult& s : r.steps)
    if (s.lane.empty() && s.step != nullptr && s.step->kind == "parallel")
      return s.detail["lanes"];
  ADD_FAILURE() << "no parallel block";
  return r.steps.front().detail;
}

std::string status_of(const StepResult& s) { return s.detail.value("status", std::string()); }

TEST(Reserve, AdmitsGrowsAndReleases) {
  const Scenario sc = load_or_die(R"(
groups:
  P: { memory.max: 64M }
steps:
  - member: { name: q, group: P }
  - reserve: { member: q, size: 16M, wait: 1s, expect: ok }
  - reserve: { member: q, grow: 8M, expect: ok }
  - expect: { group: P, file: memory.current, eq: 24M }
  - reserve: { member: q, size: 80M, expect: never-fits }
  - reserve: { member: q, release: true }
  - expect: { group: P, file: memory.current, eq: 0 }
)");
  const RunResult r = run_scenario(sc);  // it points into sc's steps
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  EXPECT_EQ(r.passed, 5);
  const StepResult& grown = top_step(r, 3);
  EXPECT_EQ(grown.detail.value("held", uint64_t{0}), 24 * kMiB);
  EXPECT_EQ(grown.detail.value("admitted", uint64_t{0}), 16 * kMiB);  // growth is past it
  const StepResult& refused = top_step(r, 5);
  EXPECT_EQ(refused.detail.value("limiting", std::string()), "P");
  EXPECT_EQ(refused.detail.value("held", uint64_t{0}), 24 * kMiB);  // nothing changed
}

TEST(Reserve, AFailedExpectationIsReported) {
  const Scenario sc = load_or_die(R"(
groups:
  P: { memory.max: 8M }
steps:
  - member: { name: q, group: P }
  - reserve: { member: q, size: 16M, expect: ok }
)");
  const RunResult r = run_scenario(sc);  // it points into sc's steps
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 1);
  EXPECT_NE(text_report(r).find("reserve q: expected ok, got never-fits"), std::string::npos)
      << text_report(r);
}

// Admitted sizes feed the OOM killer's excess order: `small` was admitted at 4M and grew to
// 20M (16M past it), `big` was admitted at its 30M. When `third` needs room, the kernel's order
// kills the largest (big); the excess order kills the one past its admission (small).
std::string excess_scenario(const std::string& order) {
  return R"(
config: { batch: 1 }
groups:
  P: { memory.max: 60M, memory.oom.order: )" +
         order + R"( }
steps:
  - member: { name: small, group: P }
  - member: { name: big, group: P }
  - member: { name: third, group: P }
  - reserve: { member: small, size: 4M, wait: 1s, oom: pieces }
  - reserve: { member: small, grow: 16M }
  - reserve: { member: big, size: 30M, wait: 1s, oom: pieces }
  - reserve: { member: third, size: 12M, oom: pieces, expect: ok }
  - expect: { group: P, file: memory.events, key: oom_kill, eq: 1 }
)";
}

TEST(Reserve, AdmittedSizesChooseTheExcessVictim) {
  for (const char* order : {"kernel", "excess"}) {
    SCOPED_TRACE(order);
    const Scenario sc = load_or_die(excess_scenario(order));
    const RunResult r = run_scenario(sc);  // it points into sc's steps
    ASSERT_FALSE(r.malformed) << r.error.message;
    EXPECT_EQ(r.failed, 0) << text_report(r);
    const Json& killed = top_step(r, 7).detail["killed"];
    ASSERT_EQ(killed.size(), 1u) << top_step(r, 7).detail.dump();
    EXPECT_EQ(killed[0], std::string(order) == "kernel" ? "big" : "small");
  }
}

// Learned-peak admission: three queries admitted at 10M that grew to 20M teach P a growth
// factor of 2; then a query of 30M is running and another of 30M is held back (30 + 30 x 2 >
// 100M... expected peaks 60M + 60M), so it times out; with memory.admit.growth 1 it goes in.
std::string learning_scenario(const std::string& growth) {
  std::string s = R"(
groups:
  P: { memory.max: 100M, memory.admit.growth: )" +
                  growth + R"( }
steps:
  - member: { name: a, group: P }
  - member: { name: b, group: P }
)";
  for (int i = 0; i < 4; ++i)
    s += "  - reserve: { member: a, size: 10M, wait: 1s }\n"
         "  - reserve: { member: a, grow: 10M }\n"
         "  - reserve: { member: a, release: true }\n";
  s += "  - reserve: { member: a, size: 30M, wait: 1s, expect: ok }\n"
       "  - reserve: { member: b, size: 30M, wait: 100ms }\n";
  return s;
}

TEST(Reserve, AdmissionLearnsThePeak) {
  for (const char* growth : {"1", "auto"}) {
    SCOPED_TRACE(growth);
    const Scenario sc = load_or_die(learning_scenario(growth));
    const RunResult r = run_scenario(sc);  // it points into sc's steps
    ASSERT_FALSE(r.malformed) << r.error.message;
    EXPECT_EQ(r.failed, 0) << text_report(r);
    const StepResult& last = r.steps.back();
    EXPECT_EQ(status_of(last), std::string(growth) == "1" ? "ok" : "timed-out")
        << last.detail.dump();
    EXPECT_EQ(last.detail.value("waited", std::string()), status_of(last));
  }
}

TEST(Reserve, AdmissionWaitsForAReleaseInAnotherLane) {
  const Scenario sc = load_or_die(R"(
groups:
  P: { memory.max: 32M }
steps:
  - member: { name: a, group: P }
  - member: { name: b, group: P }
  - parallel:
      a: [ reserve: { member: a, size: 24M, wait: 1s }, tick: 50ms, reserve: { member: a, release: true } ]
      b: [ tick: 10ms, reserve: { member: b, size: 24M, wait: 1s, expect: ok } ]
  - expect: { group: P, file: memory.current, eq: 24M }
)");
  const RunResult r = run_scenario(sc);  // it points into sc's steps
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  const StepResult& admitted = lane_step(r, "b", 2);
  EXPECT_EQ(admitted.time_ns, 50 * kMs);
  EXPECT_EQ(admitted.detail.value("waited_ns", uint64_t{0}), 40 * kMs);
}

// A waiting growth that times out, then grow() at once (`on_timeout: grow`): the OOM killer
// (the kernel's order: the largest, hog).
TEST(Reserve, WaitingGrowthThenTheKiller) {
  const std::string text = R"(
config: { batch: 1 }
groups:
  P: { memory.max: 32M, memory.oom.order: kernel }
steps:
  - member: { name: hog, group: P }
  - member: { name: q, group: P }
  - reserve: { member: hog, size: 24M, oom: pieces }
  - reserve: { member: q, size: 4M, oom: pieces }
  - reserve: { member: q, grow: 8M, wait: 200ms, ON_TIMEOUT }
)";
  {
    std::string t = text;
    t.replace(t.find("ON_TIMEOUT"), 10, "on_timeout: fail, expect: timed-out");
    const Scenario sc = load_or_die(t);
    const RunResult r = run_scenario(sc);  // it points into sc's steps
    ASSERT_FALSE(r.malformed) << r.error.message;
    EXPECT_EQ(r.failed, 0) << text_report(r);
    EXPECT_EQ(r.steps.back().detail.value("waited_ns", uint64_t{0}), 200 * kMs);
  }
  {
    std::string t = text;
    t.replace(t.find("ON_TIMEOUT"), 10, "on_timeout: grow, expect: ok");
    const Scenario sc = load_or_die(t);
    const RunResult r = run_scenario(sc);  // it points into sc's steps
    ASSERT_FALSE(r.malformed) << r.error.message;
    EXPECT_EQ(r.failed, 0) << text_report(r);
    const StepResult& last = r.steps.back();
    EXPECT_EQ(last.detail.value("waited", std::string()), "timed-out");
    ASSERT_TRUE(last.detail.contains("killed")) << last.detail.dump();
    EXPECT_EQ(last.detail["killed"][0], "hog");
  }
}

// Killed while it holds a reservation, with an unwind delay: the victim's lane gives the
// reservation back when it notices, and its next growth is refused as `killed`, which ends the
// iteration (`ends_on`); the lane's next iteration is a new member, admitted cleanly.
TEST(Reserve, AKilledQueryEndsItsIteration) {
  const Scenario sc = load_or_die(R"(
config: { batch: 1, unwind: 4ms }
groups:
  P: { memory.max: 40M, memory.oom.order: excess }
steps:
  - member: { name: w, group: P }
  - member: { name: k, group: P }
  - parallel:
      w:
        new_member: true
        iterations:
          - [ reserve: { member: w, size: 4M, wait: 1s, oom: pieces, ends_on: refused },
              reserve: { member: w, grow: 20M, ends_on: refused }, tick: 10ms,
              reserve: { member: w, grow: 1M, ends_on: refused }, tick: 10ms, tick: 10ms ]
          - [ reserve: { member: w, size: 4M, wait: 1s, ends_on: refused, expect: ok },
              tick: 10ms ]
      k: [ tick: 5ms, reserve: { member: k, size: 20M, oom: pieces, expect: ok } ]
  - expect: { group: P, file: memory.current, eq: 20M }
)");
  const RunResult r = run_scenario(sc);  // it points into sc's steps
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  const StepResult& refused = lane_step(r, "w#1", 4);
  EXPECT_EQ(status_of(refused), "killed");
  EXPECT_TRUE(refused.detail.value("ended", false));
  for (const StepResult& s : r.steps) EXPECT_FALSE(s.lane == "w#1" && s.lane_step > 4);
  const Json& lane = lanes_of(r)["w"];
  EXPECT_EQ(lane.value("iterations", uint64_t{0}), 2u);
  EXPECT_EQ(lane.value("killed", uint64_t{0}), 1u);
  EXPECT_EQ(lane.value("unwound", uint64_t{0}), 1u);
  // k waited for the victim to unwind: killed at 5 ms, busy in a tick until 10 ms, when it
  // notices (its 4 ms delay is over by then) and gives the reservation back.
  EXPECT_EQ(lane_step(r, "k", 2).time_ns, 10 * kMs);
}

// Without an unwind delay the kill releases the reservation at once; the killed member's
// later requests are refused and its reservation holds nothing.
TEST(Reserve, KillReleasesTheReservationAtOnce) {
  const Scenario sc = load_or_die(R"(
config: { batch: 1 }
groups:
  P: { memory.max: 32M }
steps:
  - member: { name: v, group: P }
  - member: { name: k, group: P }
  - reserve: { member: v, size: 24M, oom: pieces }
  - reserve: { member: k, size: 16M, oom: pieces, expect: ok }
  - reserve: { member: v, grow: 1M, expect: killed }
  - expect: { group: P, file: memory.current, eq: 16M }
)");
  const RunResult r = run_scenario(sc);  // it points into sc's steps
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  EXPECT_EQ(top_step(r, 5).detail.value("held", uint64_t{1}), 0u);
}

// `release` of the member gives its reservation back too; `release` with a size takes only
// what the member holds outside it.
TEST(Reserve, MemberReleaseAndTheReservation) {
  const Scenario sc = load_or_die(R"(
groups:
  P: {}
steps:
  - member: { name: q, group: P }
  - reserve: { member: q, size: 8M }
  - charge: { member: q, size: 2M, bulk: true }
  - release: { member: q, size: 5M }
  - expect: { group: P, file: memory.current, eq: 8M }
  - release: { member: q }
  - expect: { group: P, file: memory.current, eq: 0 }
  - reserve: { member: q, grow: 1M, expect: ok }
  - expect: { group: P, file: memory.current, eq: 1M }
)");
  const RunResult r = run_scenario(sc);  // it points into sc's steps
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  EXPECT_EQ(top_step(r, 4).detail.value("released", uint64_t{0}), 2 * kMiB);
}

TEST(Reserve, IterationsRunTheirOwnStepsInTheirOwnGroups) {
  const Scenario sc = load_or_die(R"(
groups:
  T: { memory.max: 64M }
  T/a: {}
  T/b: {}
steps:
  - member: { name: w, group: T }
  - parallel:
      w:
        new_member: true
        iterations:
          - { group: T/a, steps: [ reserve: { member: w, size: 3M }, expect: { group: T/a, file: memory.current, eq: 3M } ] }
          - [ reserve: { member: w, size: 5M }, expect: { group: T, file: memory.current, eq: 5M } ]
          - { group: T/b, steps: [ reserve: { member: w, size: 7M }, tick: 1ms,
                                   expect: { group: T/b, file: memory.current, eq: 7M } ] }
  - expect: { group: T, file: memory.current, eq: 0 }
)");
  const RunResult r = run_scenario(sc);  // it points into sc's steps
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  EXPECT_EQ(r.passed, 4);
  const Json& lane = lanes_of(r)["w"];
  EXPECT_EQ(lane.value("iterations", uint64_t{0}), 3u);
  EXPECT_EQ(lane.value("steps", uint64_t{0}), 7u);
  EXPECT_EQ(lane_step(r, "w#3", 3).time_ns, 1 * kMs);
}

TEST(Reserve, StatusNamesAreTheLibrarys) {
  for (int i = 0; i < kReserveStatusCount; ++i) {
    const auto s = static_cast<memcg::ReserveStatus>(i);
    EXPECT_STREQ(reserve_status_text(s), memcg::reserve_status_name(s));
  }
}

TEST(Reserve, Validation) {
  const std::string head = R"(groups:
  P: {}
steps:
  - member: { name: q, group: P }
)";
  // Each names the line of the field that is wrong.
  EXPECT_EQ(load_error(head + "  - reserve: { member: q }\n"),
            "5: reserve: give exactly one of `size` (the admitted total), `grow` or "
            "`release: true`");
  EXPECT_EQ(load_error(head + "  - reserve: { member: q, release: false }\n"),
            "5: reserve release: only `release: true` means something");
  EXPECT_EQ(load_error(head + "  - reserve: { member: q, size: lots }\n").substr(0, 22),
            "5: reserve size: `lots");
  EXPECT_EQ(load_error(head + "  - reserve: { member: q, grow: 1M, wait: 1s, on_timeout: kill }\n"),
            "5: reserve on_timeout: expected grow or fail, not `kill`");
  EXPECT_EQ(load_error(head + "  - reserve: { member: q, size: 1M, priority: urgent }\n"),
            "5: reserve priority: expected low, normal or high, not `urgent`");
  EXPECT_EQ(load_error(head + "  - reserve: { member: q, size: 1M, spill: true }\n").substr(0, 36),
            "5: reserve: unknown key `spill` (exp");
  EXPECT_EQ(load_error(head + "  - parallel: { q: [ reserve: { member: q, size: 1M, ends_on: "
                              "[] } ] }\n"),
            "5: reserve ends_on: expected a status or a list of statuses");
  // The options of a member's reservation are fixed once; a step may repeat them.
  EXPECT_EQ(load_error(head + "  - reserve: { member: q, size: 1M, priority: high }\n"
                              "  - reserve: { member: q, grow: 1M, priority: high }\n"),
            "");
  EXPECT_EQ(load_error(head + "  - reserve: { member: q, size: 1M }\n"
                              "  - reserve: { member: q, grow: 1M, priority: low }\n"),
            "6: reserve: member `q` has one reservation, whose `oom` and `priority` were fixed "
            "by its first reserve step (line 5)");
  // Reservation sizes count towards the work budget like charges.
  EXPECT_NE(load_error(head + "  - parallel: { q: { repeat: 100000, steps: [ reserve: { member: "
                              "q, size: 16G } ] } }\n"),
            "");
  // Iterations: a non-empty list, and their steps follow a lane's rules.
  EXPECT_EQ(load_error(head + "  - parallel: { q: { iterations: [] } }\n"),
            "5: parallel lane q iterations: expected a non-empty list of step lists");
  EXPECT_EQ(load_error(head + "  - parallel: { q: { iterations: [ 5 ] } }\n"),
            "5: parallel lane q iterations: each iteration is a list of steps, or "
            "{ group, steps }");
  EXPECT_NE(load_error(head + "  - parallel: { q: { iterations: [ [ member: { name: x, group: P "
                              "} ] ] } }\n"),
            "");
}

}  // namespace
}  // namespace memcgctl
