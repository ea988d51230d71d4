// The `queue` step: an admission queue served by a shared pool of lanes on the virtual clock
// (docs/scenarios.md, "`queue`"). These tests pin its documented semantics: a lane never sits in
// one group's admission while another group's item is admissible, groups share the memory
// admitted by their admit_weight, items of a group go by priority then file order, a deadline counts over
// all tries, refusals end an item at once, and a release in a running item lets a waiting one in
// at that moment. Also a cache's `capacity` and `oom: never`, which the query service's result
// caches use.
#include <gtest/gtest.h>

#include <deque>
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

// Runs `text`; the scenario stays alive for the test program (results point into its steps).
RunResult run_text(const std::string& text) {
  static std::deque<Scenario> kept;
  kept.push_back(load_or_die(text));
  return run_scenario(kept.back());
}

// The first error: "LINE: message", or "" when the text loads.
std::string load_error(const std::string& text) {
  Scenario s;
  std::vector<Diagnostic> errors;
  if (load_scenario(text, &s, &errors)) return "";
  return errors.empty() ? "?" : std::to_string(errors[0].mark.line) + ": " + errors[0].message;
}

// The queue step's own result (the first `queue` step of the run).
const Json& queue_result(const RunResult& r) {
  for (const StepResult& s : r.steps)
    if (s.lane.empty() && s.step->kind == "queue") return s.detail;
  ADD_FAILURE() << "no queue step";
  return r.steps.front().detail;
}

// The item `member`'s entry of the queue's result.
const Json& item(const Json& q, const std::string& member) {
  for (const Json& i : q["items"])
    if (i["member"] == member) return i;
  ADD_FAILURE() << "no item " << member;
  return q["items"][0];
}

// How many of the queue's first n admissions went to `group`.
int among_first(const Json& q, uint64_t n, const std::string& group) {
  int k = 0;
  for (const Json& i : q["items"])
    if (i.contains("order") && i["order"].get<uint64_t>() <= n && i["group"] == group) ++k;
  return k;
}

// The virtual time at which an item's first step ended.
uint64_t first_step_ns(const RunResult& r, const std::string& member) {
  for (const StepResult& s : r.steps)
    if (s.lane == member && s.lane_step == 1) return s.time_ns;
  ADD_FAILURE() << "item " << member << " ran no step";
  return 0;
}

TEST(Queue, LanesTakeAnotherGroupsItemWhileOneGroupIsFull) {
  // a is full with its first item (30M of 32M) for 100 ms; its second item waits. One worker
  // besides the one running a#1 serves b's items meanwhile, instead of waiting on a.
  const RunResult r = run_text(R"(
groups:
  a: { memory.max: 32M }
  b: {}
steps:
  - member: { name: q, group: b }
  - queue:
      member: q
      workers: 2
      deadline: 1s
      items:
        - { group: a, size: 30M, steps: [ tick: 100ms ] }
        - { group: a, size: 30M, steps: [ tick: 10ms ] }
        - { group: b, size: 8M, steps: [ tick: 10ms ] }
        - { group: b, size: 8M, steps: [ tick: 10ms ] }
        - { group: b, size: 8M, steps: [ tick: 10ms ] }
)");
  ASSERT_FALSE(r.malformed) << r.error.message;
  const Json& q = queue_result(r);
  EXPECT_EQ(first_step_ns(r, "q#3"), 10 * kMs);
  EXPECT_EQ(first_step_ns(r, "q#4"), 20 * kMs);
  EXPECT_EQ(first_step_ns(r, "q#5"), 30 * kMs);
  // a's second item: first tried at 30 ms (a had 30M admitted, b's items cost 8M each, so b
  // went first while it had items: the memory admitted is what is shared), then without
  // waiting when a step ended, admitted when q#1 ended.
  EXPECT_EQ(item(q, "q#2")["status"], "ok");
  EXPECT_GE(item(q, "q#2")["tries"].get<uint64_t>(), 2u);
  EXPECT_EQ(item(q, "q#2")["waited_ns"], 70 * kMs);
  EXPECT_EQ(first_step_ns(r, "q#2"), 110 * kMs);
  EXPECT_EQ(q["tenants"]["a"]["admitted"], 2);
  EXPECT_EQ(q["tenants"]["b"]["admitted"], 3);
  EXPECT_EQ(q["elapsed_ns"], 110 * kMs);
}

TEST(Queue, WeightsShareTheAdmissionsWhileEveryGroupIsBacklogged) {
  // One worker, both groups backlogged with 40 items: b (weight 300) gets three admissions for
  // each of a's (weight 100) until a's share is spent.
  std::string text = R"(
groups:
  a: {}
  b: {}
steps:
  - member: { name: q, group: a }
  - queue:
      member: q
      deadline: 10s
      tenants: { a: { admit_weight: 100 }, b: { admit_weight: 300 } }
      items:
)";
  for (int i = 0; i < 40; ++i) text += "        - { group: a, size: 1M, steps: [ tick: 1ms ] }\n";
  for (int i = 0; i < 40; ++i) text += "        - { group: b, size: 1M, steps: [ tick: 1ms ] }\n";
  const RunResult r = run_text(text);
  ASSERT_FALSE(r.malformed) << r.error.message;
  const Json& q = queue_result(r);
  const int b_first = among_first(q, 40, "b");
  EXPECT_GE(b_first, 29);  // 30 of 40, within 10 %
  EXPECT_LE(b_first, 31);
  EXPECT_EQ(q["tenants"]["a"]["admit_weight"], 100);
  EXPECT_EQ(q["tenants"]["b"]["admit_weight"], 300);
  EXPECT_EQ(q["tenants"]["a"]["admitted"], 40);
}

TEST(Queue, EqualWeightsShareTheMemoryAdmittedNotTheCount) {
  // As the library's queue: an admission costs its group its size over its weight, so with
  // equal weights b (items of 1M) gets two admissions for each of a's (items of 2M).
  std::string text = R"(
groups:
  a: {}
  b: {}
steps:
  - member: { name: q, group: a }
  - queue:
      member: q
      deadline: 10s
      items:
)";
  for (int i = 0; i < 30; ++i) text += "        - { group: a, size: 2M, steps: [ tick: 1ms ] }\n";
  for (int i = 0; i < 30; ++i) text += "        - { group: b, size: 1M, steps: [ tick: 1ms ] }\n";
  const RunResult r = run_text(text);
  ASSERT_FALSE(r.malformed) << r.error.message;
  const Json& q = queue_result(r);
  const int b_first = among_first(q, 30, "b");
  EXPECT_GE(b_first, 19);  // 20 of 30, within 10 %
  EXPECT_LE(b_first, 21);
  EXPECT_EQ(q["tenants"]["a"]["admitted"], 30);
  EXPECT_EQ(q["tenants"]["b"]["admitted"], 30);
}

TEST(Queue, AGroupOfLargeItemsGetsItsShareBesideSmallOnes) {
  // big's 60M items fit in p (100M) only when p has that much free; small's 10M ones fit
  // whenever anything ends. Without the hold-back small would take every byte that frees; with
  // it, small is held back once 4 items ahead of big, and big is admitted its share of the
  // memory (1 item for each 6 of small's: 1/7 of the admissions, 10-20 % here).
  std::string text = R"(
groups:
  p: { memory.max: 100M }
  p/big: {}
  p/small: {}
steps:
  - member: { name: q, group: p/small }
  - queue:
      member: q
      workers: 12
      deadline: 60s
      items:
)";
  for (int i = 0; i < 40; ++i) {
    text += "        - { group: p/big, size: 60M, steps: [ tick: 1ms ] }\n";
    text += "        - { group: p/small, size: 10M, steps: [ tick: 1ms ] }\n";
    text += "        - { group: p/small, size: 10M, steps: [ tick: 1ms ] }\n";
  }
  const RunResult r = run_text(text);
  ASSERT_FALSE(r.malformed) << r.error.message;
  const Json& q = queue_result(r);
  const int bigs = among_first(q, 70, "p/big");  // while both groups are backlogged
  EXPECT_GE(bigs, 7) << "of 70 admissions";
  EXPECT_LE(bigs, 14) << "of 70 admissions";
  EXPECT_EQ(q["tenants"]["p/big"]["admitted"], 40);
  EXPECT_EQ(q["tenants"]["p/small"]["admitted"], 80);
}

TEST(Queue, PrioritiesOrderTheItemsOfAGroup) {
  const RunResult r = run_text(R"(
groups:
  a: {}
steps:
  - member: { name: q, group: a }
  - queue:
      member: q
      deadline: 1s
      items:
        - { group: a, size: 1M, priority: low, steps: [ tick: 1ms ] }
        - { group: a, size: 1M, steps: [ tick: 1ms ] }
        - { group: a, size: 1M, priority: high, steps: [ tick: 1ms ] }
        - { group: a, size: 1M, priority: normal, steps: [ tick: 1ms ] }
)");
  ASSERT_FALSE(r.malformed) << r.error.message;
  const Json& q = queue_result(r);
  EXPECT_EQ(item(q, "q#3")["order"], 1);
  EXPECT_EQ(item(q, "q#2")["order"], 2);
  EXPECT_EQ(item(q, "q#4")["order"], 3);
  EXPECT_EQ(item(q, "q#1")["order"], 4);
}

TEST(Queue, ADeadlineCountsOverEveryTry) {
  // b's item cannot fit while a's holds the shared limit for 200 ms; it is tried again at every
  // step end of the running item, and dropped 50 ms after its first try, never run.
  const RunResult r = run_text(R"(
groups:
  p: { memory.max: 64M }
  p/a: {}
  p/b: {}
steps:
  - member: { name: q, group: p }
  - queue:
      member: q
      workers: 2
      items:
        - { group: p/a, size: 60M, deadline: 1s, steps: [ tick: 20ms, tick: 20ms, tick: 20ms,
                                                          tick: 20ms, tick: 120ms ] }
        - { group: p/b, size: 16M, deadline: 50ms, steps: [ tick: 1ms ] }
  - expect: { group: p, file: memory.current, eq: 0 }
)");
  ASSERT_FALSE(r.malformed) << r.error.message;
  const Json& q = queue_result(r);
  const Json& b = item(q, "q#2");
  EXPECT_EQ(b["status"], "timed-out");
  EXPECT_EQ(b["waited_ns"], 50 * kMs);
  EXPECT_GE(b["tries"].get<uint64_t>(), 3u);  // at 0, 20, 40 ms and at its deadline's round
  EXPECT_FALSE(b.contains("order"));
  EXPECT_EQ(q["tenants"]["p/b"]["timed_out"], 1);
  for (const StepResult& s : r.steps) EXPECT_NE(s.lane, "q#2");
  EXPECT_EQ(r.failed, 0);
}

TEST(Queue, NeverFitsEndsAnItemAndTheNextOneGoes) {
  const RunResult r = run_text(R"(
groups:
  a: { memory.max: 32M }
steps:
  - member: { name: q, group: a }
  - queue:
      member: q
      deadline: 1s
      oom: pieces
      items:
        - { group: a, size: 40M, steps: [ tick: 1ms ] }
        - { group: a, size: 8M, steps: [ tick: 1ms, reserve: { member: q, grow: 4M } ] }
)");
  ASSERT_FALSE(r.malformed) << r.error.message;
  const Json& q = queue_result(r);
  EXPECT_EQ(item(q, "q#1")["status"], "never-fits");
  EXPECT_EQ(item(q, "q#2")["status"], "ok");
  EXPECT_EQ(item(q, "q#2")["order"], 1);
  EXPECT_EQ(q["tenants"]["a"]["refused"], 1);
  // The item's `reserve` step acts on the reservation the queue admitted.
  for (const StepResult& s : r.steps)
    if (s.lane == "q#2" && s.lane_step == 2) {
      EXPECT_EQ(s.detail["status"], "ok");
      EXPECT_EQ(s.detail["held"], 12 * kMiB);
      EXPECT_EQ(s.detail["admitted"], 8 * kMiB);
    }
}

TEST(Queue, AReleaseInARunningItemLetsAWaitingOneInAtOnce) {
  const RunResult r = run_text(R"(
groups:
  a: { memory.max: 32M }
steps:
  - member: { name: q, group: a }
  - queue:
      member: q
      workers: 2
      deadline: 1s
      items:
        - { group: a, size: 24M, steps: [ tick: 30ms, reserve: { member: q, release: true },
                                          tick: 100ms ] }
        - { group: a, size: 24M, steps: [ tick: 1ms ] }
)");
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(first_step_ns(r, "q#2"), 31 * kMs);  // admitted at 30 ms, when q#1 released
  EXPECT_EQ(item(queue_result(r), "q#2")["waited_ns"], 30 * kMs);
}

TEST(Queue, RunsTheSameEveryTime) {
  std::string text = R"(
groups:
  p: { memory.max: 64M }
  p/a: { memory.max: 40M }
  p/b: {}
steps:
  - member: { name: q, group: p }
  - queue:
      member: q
      workers: 5
      deadline: 100ms
      oom: pieces
      items:
)";
  for (int i = 0; i < 60; ++i)
    text += "        - { group: p/" + std::string(i % 3 ? "a" : "b") + ", size: " +
            std::to_string(4 + i % 13) + "M, steps: [ tick: " + std::to_string(1 + i % 7) +
            "ms, reserve: { member: q, grow: " + std::to_string(1 + i % 5) +
            "M, ends_on: refused }, tick: 2ms ] }\n";
  const Scenario s = load_or_die(text);
  const std::string a = json_report(s, run_scenario(s));
  EXPECT_EQ(a, json_report(s, run_scenario(s)));
  EXPECT_NE(a.find("\"admitted\""), std::string::npos);
}

TEST(Queue, MalformedQueuesAreRefusedWithTheirLine) {
  const std::string head = "groups: { a: {} }\nsteps:\n  - member: { name: q, group: a }\n";
  EXPECT_EQ(load_error(head + "  - queue: { member: q, workers: 0, deadline: 1s, "
                              "items: [ { group: a, size: 1M } ] }\n"),
            "4: queue workers: expected a whole number from 1 to 64 (each is a lane: a thread "
            "for the step)");
  EXPECT_EQ(load_error(head + "  - queue: { member: q, deadline: 1s, tenants: { a: "
                              "{ admit_weight: 10001 } }, items: [ { group: a, size: 1M } ] }\n"),
            "4: queue admit_weight: expected a whole number from 1 to 10000 (as cpu.weight), "
            "not `10001`");
  EXPECT_EQ(load_error(head + "  - queue: { member: q, items: [ { group: a, size: 1M } ] }\n"),
            "4: queue item: `deadline` is required (here or on the queue): how long the item "
            "may wait over all its tries");
  EXPECT_EQ(load_error(head + "  - queue: { member: q, deadline: 1s, items: [ { group: b, "
                              "size: 1M } ] }\n"),
            "4: queue item: no group `b`");
  EXPECT_EQ(load_error(head + "  - queue: { member: q, deadline: 1s, items: [] }\n"),
            "4: queue items: expected a non-empty list of { group, size, steps }");
  EXPECT_NE(load_error(head + "  - queue: { member: q, deadline: 1s, items: [ { group: a, "
                              "size: 1M, steps: [ member: { name: x, group: a } ] } ] }\n"),
            "");
  EXPECT_NE(load_error(head + "  - queue: { member: nobody, deadline: 1s, items: [ { group: a, "
                              "size: 1M } ] }\n"),
            "");
  EXPECT_NE(load_error(head + "  - queue: { member: q, deadline: 1s, oom: pieces, items: [ { "
                              "group: a, size: 1M, steps: [ reserve: { member: q, grow: 1M, "
                              "oom: never } ] } ] }\n"),
            "");
  EXPECT_NE(load_error(head + "  - parallel: { q: [ queue: { member: q, deadline: 1s, items: "
                              "[ { group: a, size: 1M } ] } ] }\n"),
            "");
}

TEST(Cache, CapacityDropsTheOldestUnitsFirst) {
  const RunResult r = run_text(R"(
groups:
  a: {}
steps:
  - cache: { name: c, group: a, grow: 6M, capacity: 8M }
  - cache: { name: c, grow: 6M }
  - expect: { group: a, file: memory.current, eq: 8M }
)");
  ASSERT_FALSE(r.malformed) << r.error.message;
  EXPECT_EQ(r.failed, 0);
  EXPECT_EQ(r.steps[1].detail["dropped"], 4 * kMiB);
  EXPECT_EQ(r.steps[1].detail["size"], 8 * kMiB);
  EXPECT_EQ(load_error("groups: { a: {} }\nsteps:\n  - cache: { name: c, group: a, grow: 1M }\n"
                       "  - cache: { name: c, grow: 1M, capacity: 4M }\n"),
            "4: cache c: `capacity` is set when the cache is created");
}

TEST(Cache, NeverOomStopsTheGrowthInsteadOfKilling) {
  // 32M holding a member's pinned 28M, and a cache protected by its group's memory.min (reclaim
  // cannot make room from it): a cache that may not kill stops at what is left; one that may
  // kills the member.
  const std::string text = R"(
groups:
  a: { memory.max: 32M }
  a/m: {}
  a/c: { memory.min: 32M }
steps:
  - member: { name: m, group: a/m }
  - charge: { member: m, size: 28M, bulk: true }
  - cache: { name: c, group: a/c, grow: 8M, OOM }
  - expect: { group: a, file: memory.events, key: oom_kill, eq: KILLS }
)";
  auto with = [&](const std::string& oom, const std::string& kills) {
    std::string t = text;
    t.replace(t.find("OOM"), 3, oom);
    t.replace(t.find("KILLS"), 5, kills);
    return run_text(t);
  };
  const RunResult never = with("oom: never", "0");
  ASSERT_FALSE(never.malformed) << never.error.message;
  EXPECT_EQ(never.failed, 0);
  EXPECT_EQ(never.steps[2].detail["grown"], 4 * kMiB);
  EXPECT_EQ(never.steps[2].detail["stopped"], "a charge failed");
  const RunResult kernel = with("oom: kernel", "1");
  ASSERT_FALSE(kernel.malformed) << kernel.error.message;
  EXPECT_EQ(kernel.failed, 0);
  EXPECT_EQ(kernel.steps[2].detail["grown"], 8 * kMiB);
}

}  // namespace
}  // namespace memcgctl
