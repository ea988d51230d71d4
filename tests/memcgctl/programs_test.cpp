// Scenarios that model programs (docs/scenarios.md, "Unwinding" and "Lanes that repeat"): a
// killed or preempted member gives its memory back after its unwind delay, at its lane's next
// step boundary, not at the instant of the kill; a lane can run its steps again and again, each
// iteration as a new member of its group.
#include <gtest/gtest.h>

#include <string>
#include <vector>

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

std::string load_error(const std::string& text) {
  Scenario s;
  std::vector<Diagnostic> errors;
  if (load_scenario(text, &s, &errors)) return "";
  return errors.empty() ? "?" : errors[0].message;
}

const StepResult& lane_step(const RunResult& r, const std::string& lane, size_t k) {
  for (const StepResult& s : r.steps)
    if (s.lane == lane && s.lane_step == k) return s;
  ADD_FAILURE() << "no step " << k << " of lane " << lane;
  return r.steps.front();
}

// The result of the (first) `parallel` block: per lane, what it ran.
const Json& lanes_of(const RunResult& r) {
  for (const StepResult& s : r.steps)
    if (s.lane.empty() && s.step != nullptr && s.step->kind == "parallel")
      return s.detail["lanes"];
  ADD_FAILURE() << "no parallel block";
  return r.steps.front().detail;
}

// A victim holding 8M of a 10M limit, busy in ten steps of `step`; at 100 ms another lane
// charges 4M unit by unit (each unit may OOM-kill), which kills the victim.
std::string kill_scenario(const std::string& unwind, const std::string& step) {
  std::string ticks;
  for (int i = 0; i < 10; ++i) ticks += std::string(i ? ", " : "") + "tick: " + step;
  return R"(
config: { batch: 1, unwind: )" +
         unwind + R"( }
groups:
  P: { memory.max: 10M }
steps:
  - member: { name: victim, group: P }
  - member: { name: killer, group: P }
  - parallel:
      victim: [ charge: { member: victim, size: 8M, bulk: true }, )" +
         ticks + R"( ]
      killer: [ tick: 100ms, charge: { member: killer, size: 4M, expect: ok } ]
  - expect: { group: P, file: memory.events, key: oom_kill, eq: 1 }
  - expect: { group: P, file: memory.current, eq: 4M }
)";
}

TEST(Programs, WithoutUnwindTheVictimReleasesAtTheKill) {
  const Scenario sc = load_or_die(kill_scenario("0ms", "30ms"));
  const RunResult r = run_scenario(sc);  // it points into sc's steps
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  EXPECT_EQ(lane_step(r, "killer", 2).time_ns, 100 * kMs);
}

TEST(Programs, UnwindDelaysTheReleaseFromTheKill) {
  // Killed at 100 ms; the victim notices at its next step boundary (120 ms) and unwinds until
  // 100 + 50 ms: the killer's charge completes then.
  const Scenario sc = load_or_die(kill_scenario("50ms", "30ms"));
  const RunResult r = run_scenario(sc);  // it points into sc's steps
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  EXPECT_EQ(lane_step(r, "killer", 2).time_ns, 150 * kMs);
  // The victim spent the unwinding running: its ten steps end 30 ms later than without it.
  EXPECT_EQ(lanes_of(r)["victim"].value("end_ns", uint64_t{0}), 330 * kMs);
}

TEST(Programs, UnwindWaitsForTheVictimsNextStep) {
  // The victim is busy in a 400 ms step when it is killed at 100 ms: it gives its memory back
  // at the end of that step (400 ms), although its 50 ms unwind delay ended long before.
  const Scenario sc = load_or_die(kill_scenario("50ms", "400ms"));
  const RunResult r = run_scenario(sc);  // it points into sc's steps
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  EXPECT_EQ(lane_step(r, "killer", 2).time_ns, 400 * kMs);
}

TEST(Programs, MemberUnwindOverridesTheConfig) {
  std::string text = kill_scenario("50ms", "30ms");
  const std::string from = "{ name: victim, group: P }";
  text.replace(text.find(from), from.size(), "{ name: victim, group: P, unwind: 70ms }");
  const Scenario sc = load_or_die(text);
  const RunResult r = run_scenario(sc);  // it points into sc's steps
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  EXPECT_EQ(lane_step(r, "killer", 2).time_ns, 170 * kMs);
}

TEST(Programs, PreemptedMemberUnwindsToo) {
  // A high-class waiting charge asks a low-class holder to give memory back: the holder's
  // release comes after its unwind delay, and the waiter is served then.
  const Scenario sc = load_or_die(R"(
config: { unwind: 40ms }
groups:
  P: { memory.max: 10M, memory.wait.preempt: 1 }
  P/lo: { memory.wait.priority: low }
  P/hi: { memory.wait.priority: high }
steps:
  - member: { name: lo, group: P/lo }
  - member: { name: hi, group: P/hi }
  - parallel:
      lo: [ charge: { member: lo, size: 8M, bulk: true }, tick: 10ms, tick: 10ms, tick: 10ms, tick: 10ms, tick: 10ms, tick: 10ms, tick: 10ms ]
      hi: [ tick: 5ms, charge: { member: hi, size: 4M, wait: 1s, expect: ok } ]
  - expect: { group: P, file: memory.current, eq: 4M }
)");
  const RunResult r = run_scenario(sc);  // it points into sc's steps
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  const StepResult& granted = lane_step(r, "hi", 2);
  EXPECT_EQ(granted.time_ns, 45 * kMs);
  EXPECT_EQ(granted.detail.value("waited_ns", uint64_t{0}), 40 * kMs);
}

TEST(Programs, LaneRepeatsAsNewMembers) {
  const Scenario sc = load_or_die(R"(
groups:
  P: { memory.max: 10M }
steps:
  - member: { name: worker, group: P }
  - parallel:
      worker:
        repeat: 3
        new_member: true
        steps: [ charge: { member: worker, size: 2M, bulk: true }, tick: 10ms ]
  - expect: { group: P, file: memory.current, eq: 0 }
)");
  const RunResult r = run_scenario(sc);  // it points into sc's steps
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  const Json& lane = lanes_of(r)["worker"];
  EXPECT_EQ(lane.value("iterations", uint64_t{0}), 3u);
  EXPECT_EQ(lane.value("steps", uint64_t{0}), 6u);
  EXPECT_EQ(lane.value("end_ns", uint64_t{0}), 30 * kMs);
  // Each iteration's steps are reported under its own member.
  EXPECT_EQ(lane_step(r, "worker#3", 1).detail.value("charged", uint64_t{0}), 2u << 20);
  EXPECT_EQ(lane_step(r, "worker#2", 2).time_ns, 20 * kMs);
}

TEST(Programs, RepeatWithoutNewMemberKeepsTheMember) {
  const Scenario sc = load_or_die(R"(
groups:
  P: {}
steps:
  - member: { name: w, group: P }
  - parallel:
      w: { repeat: 4, steps: [ charge: { member: w, size: 1M } ] }
  - expect: { group: P, file: memory.current, eq: 4M }
)");
  const RunResult r = run_scenario(sc);  // it points into sc's steps
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
}

TEST(Programs, RunawayIterationIsKilledAndTheNextStartsClean) {
  // Each iteration grows 1M at a time for 6 steps (6M); two lanes share 10M: the OOM killer
  // kills a member of one iteration, it unwinds, and the lane's next iteration starts as a new
  // member that is not killed.
  const Scenario sc = load_or_die(R"(
config: { unwind: 20ms }
groups:
  P: { memory.max: 10M }
steps:
  - member: { name: a, group: P }
  - member: { name: b, group: P }
  - parallel:
      a:
        repeat: 2
        new_member: true
        steps: [ charge: { member: a, size: 1M }, tick: 10ms, charge: { member: a, size: 1M },
                 tick: 10ms, charge: { member: a, size: 1M }, tick: 10ms,
                 charge: { member: a, size: 1M }, tick: 10ms, charge: { member: a, size: 1M },
                 tick: 10ms, charge: { member: a, size: 1M }, tick: 10ms ]
      b:
        repeat: 2
        new_member: true
        steps: [ tick: 5ms, charge: { member: b, size: 6M, bulk: true }, tick: 100ms ]
  - expect: { group: P, file: memory.current, eq: 0 }
)");
  const RunResult r = run_scenario(sc);  // it points into sc's steps
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0) << text_report(r);
  const Json& lanes = lanes_of(r);
  const uint64_t kills = lanes["a"].value("killed", uint64_t{0}) +
                         lanes["b"].value("killed", uint64_t{0});
  EXPECT_GE(kills, 1u);
  EXPECT_EQ(lanes["a"].value("iterations", uint64_t{0}), 2u);
  EXPECT_EQ(lanes["b"].value("iterations", uint64_t{0}), 2u);
  EXPECT_EQ(lanes["a"].value("unwound", uint64_t{0}) + lanes["b"].value("unwound", uint64_t{0}),
            kills);
}

TEST(Programs, Validation) {
  const std::string head = R"(
groups:
  P: {}
steps:
  - member: { name: w, group: P }
)";
  EXPECT_NE(load_error(head + "  - parallel: { w: { repeat: 0, steps: [ tick: 1ms ] } }\n"), "");
  EXPECT_NE(load_error(head + "  - parallel: { w: { repeat: 100001, steps: [ tick: 1ms ] } }\n"),
            "");
  EXPECT_NE(load_error(head + "  - parallel: { w: { repeat: 2 } }\n"), "");
  EXPECT_NE(load_error(head + "  - parallel: { w: { steps: [ tick: 1ms ], times: 2 } }\n"), "");
  EXPECT_NE(load_error(head + "  - parallel: { w: { new_member: maybe, steps: [ tick: 1ms ] } }\n"),
            "");
  EXPECT_NE(load_error(head + "  - member: { name: x, group: P, unwind: soon }\n"), "");
  EXPECT_NE(load_error(head + "  - member: { name: x, group: P, unwind: 2h }\n"), "");
  EXPECT_NE(load_error(head + "  - member: { name: 'x#1', group: P }\n"), "");
  EXPECT_NE(load_error("config: { unwind: -1ms }\n" + head), "");
  // The repeat counts every iteration's charges and ticks towards the scenario's budgets.
  EXPECT_NE(load_error(head + "  - parallel: { w: { repeat: 100000, steps: [ charge: { member: "
                              "w, size: 16G } ] } }\n"),
            "");
  EXPECT_EQ(load_error(head + "  - parallel: { w: { repeat: 5, new_member: true, steps: [ "
                              "charge: { member: w, size: 1M } ] } }\n"),
            "");
}

}  // namespace
}  // namespace memcgctl
