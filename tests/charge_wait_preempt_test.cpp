// Cooperative preemption of waiting charges (charge_wait.hpp, set_wait_preempt): who is asked,
// in which order, how often, and what the waiter gets. On a virtual clock that counts the waits
// it blocks in (ParkingClock), so the test knows when a waiter has finished its look (and its
// requests).
#include "memcg/core/wait/charge_wait.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "charge_wait_support.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/files/files.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;
using namespace testing_wait;

// A pool P (max 10 units) with children of given classes, members that hold its memory, and a
// log of what happened in order: "ask:M" when member M's callback ran for a preemption (M
// releases what it holds there unless told not to), "kill:M" for an OOM kill, "grant:G" when a
// waiting charge of G returned kOk.
struct Preempt {
  ParkingClock clock;
  Controller ctl{on_clock(&clock)};
  GroupRef p;
  std::mutex mu;
  std::vector<std::string> log;
  std::vector<std::unique_ptr<Member>> members;
  std::vector<std::unique_ptr<AsyncCall>> calls;
  bool release_when_asked = true;
  std::set<std::string> ignoring;  // members that keep their memory when asked

  explicit Preempt(bool preempt_on) {
    set_wait_aging(ctl, 100s);  // no aging within a test
    EXPECT_EQ(ctl.create("p", &p), 0);
    p->set_max(10 * kUnit);
    EXPECT_EQ(set_wait_preempt(*p, preempt_on), 0);
  }
  ~Preempt() {
    for (auto& c : calls) c->th.request_stop();
    calls.clear();
    members.clear();
  }
  void note(std::string s) {
    std::lock_guard<std::mutex> l(mu);
    log.push_back(std::move(s));
  }
  std::string history() {
    std::lock_guard<std::mutex> l(mu);
    std::string s;
    for (const auto& e : log) s += (s.empty() ? "" : " ") + e;
    return s;
  }
  GroupRef group(const char* name, WaitPriority prio) {
    GroupRef g;
    EXPECT_EQ(ctl.create(std::string("p/") + name, &g), 0);
    EXPECT_EQ(set_wait_priority(*g, prio), 0);
    return g;
  }
  Member& hold(Group& g, const char* name, int64_t units) {
    members.push_back(std::make_unique<Member>(g, name, [this](Member& m) {
      if (m.cancel_reason() == CancelReason::kOomKill) {
        note("kill:" + m.name());
        return;
      }
      note("ask:" + m.name());
      if (release_when_asked && !ignoring.count(m.name())) m.uncharge(m.charged());
    }));
    EXPECT_EQ(members.back()->charge(units), ChargeStatus::kOk);
    return *members.back();
  }
  // A waiting charge of `units` for `g` in its group's class; returns once it has looked (and
  // asked) and blocked.
  AsyncCall& wait(Group& g, int64_t units, std::chrono::milliseconds timeout) {
    const uint64_t before = clock.parks.load();
    calls.push_back(std::make_unique<AsyncCall>([this, &g, units, timeout](std::stop_token st) {
      const WaitStatus s = try_charge_wait_for(g, units, timeout, st);
      if (s == WaitStatus::kOk) note("grant:" + g.path());
      return s;
    }));
    AsyncCall& c = *calls.back();
    EXPECT_TRUE(eventually([&] { return c.done() || clock.parks.load() > before; }));
    return c;
  }
};

// Lowest class first, largest first, only as many as cover the shortage: a high waiter of 4
// units in a full pool asks the low members b1 (3 units, the largest) and a1 (2), not a2 (1, low)
// nor n1 (4, normal); it is granted once they have released (in their callbacks).
TEST(ChargeWaitPreempt, LowestClassFirstLargestFirstThenGranted) {
  testing::Watchdog dog("LowestClassFirstLargestFirstThenGranted");
  Preempt t(true);
  GroupRef la = t.group("la", WaitPriority::kLow), lb = t.group("lb", WaitPriority::kLow);
  GroupRef nn = t.group("n", WaitPriority::kNormal), hi = t.group("hi", WaitPriority::kHigh);
  t.hold(*la, "a1", 2);
  t.hold(*la, "a2", 1);
  t.hold(*lb, "b1", 3);
  t.hold(*nn, "n1", 4);
  AsyncCall& w = t.wait(*hi, 4, 10000ms);
  EXPECT_EQ(w.status(), WaitStatus::kOk);
  EXPECT_EQ(t.history(), "ask:b1 ask:a1 grant:p/hi");
  EXPECT_EQ(used(*hi), 4);
  EXPECT_EQ(used(*la), 1);  // a2 kept its unit
  EXPECT_EQ(used(*nn), 4);
  EXPECT_FALSE(t.members[0]->killed());
  // memory.events `preempt`, on the members' groups and up the tree; nothing else moved.
  EXPECT_EQ(la->events_local().get(Event::kPreempt), 1u);
  EXPECT_EQ(lb->events_local().get(Event::kPreempt), 1u);
  EXPECT_EQ(t.p->events().get(Event::kPreempt), 2u);
  EXPECT_EQ(t.p->events().get(Event::kOomKill), 0u);
  EXPECT_NE(file(*t.p, "memory.events").find("\npreempt 2\n"), std::string::npos);
  // The report: who was asked, in order, and why.
  const PreemptReport r = OomKiller::last_preempt_report(t.ctl);
  EXPECT_EQ(r.domain, "p");
  EXPECT_EQ(r.waiter_group, "p/hi");
  EXPECT_EQ(r.priority, WaitPriority::kHigh);
  EXPECT_EQ(r.request_units, 4);
  EXPECT_EQ(r.shortage_units, 4);
  ASSERT_EQ(r.asked.size(), 2u);
  EXPECT_EQ(r.asked[0].member, "b1");
  EXPECT_EQ(r.asked[0].charged, 3);
  EXPECT_EQ(r.asked[0].priority, WaitPriority::kLow);
  EXPECT_EQ(r.asked[1].member, "a1");
  EXPECT_NE(r.format().find("asked b1 in p/lb (low): charged=3"), std::string::npos);
}

// When the low class does not cover the shortage, the normal one is asked next (a high waiter),
// at most kMaxPreemptAsks members per look.
TEST(ChargeWaitPreempt, NextClassWhenTheLowestDoesNotCover) {
  testing::Watchdog dog("NextClassWhenTheLowestDoesNotCover");
  Preempt t(true);
  GroupRef la = t.group("la", WaitPriority::kLow), nn = t.group("n", WaitPriority::kNormal);
  GroupRef hi = t.group("hi", WaitPriority::kHigh);
  t.hold(*la, "a1", 2);
  t.hold(*nn, "n1", 3);
  t.hold(*nn, "n2", 5);
  AsyncCall& w = t.wait(*hi, 6, 10000ms);
  EXPECT_EQ(w.status(), WaitStatus::kOk);
  EXPECT_EQ(t.history(), "ask:a1 ask:n2 grant:p/hi");
  EXPECT_EQ(used(*nn), 3);
}

// A group without preemption (the default) asks nobody: its waiter waits and times out.
TEST(ChargeWaitPreempt, NothingWhenTheGroupHasItOff) {
  testing::Watchdog dog("NothingWhenTheGroupHasItOff");
  Preempt t(false);
  EXPECT_EQ(file(*t.p, "memory.wait.preempt"), "0\n");
  GroupRef la = t.group("la", WaitPriority::kLow), hi = t.group("hi", WaitPriority::kHigh);
  t.hold(*la, "a1", 10);
  AsyncCall& w = t.wait(*hi, 1, 50ms);
  t.clock.advance(60'000'000);
  EXPECT_EQ(w.status(), WaitStatus::kTimedOut);
  EXPECT_EQ(t.history(), "");
  EXPECT_EQ(t.p->events().get(Event::kPreempt), 0u);
  EXPECT_EQ(used(*la), 10);
}

// Equal and higher classes are never asked, and a low waiter asks nobody.
TEST(ChargeWaitPreempt, NeverEqualOrHigherClasses) {
  testing::Watchdog dog("NeverEqualOrHigherClasses");
  Preempt t(true);
  GroupRef nn = t.group("n", WaitPriority::kNormal), hi = t.group("hi", WaitPriority::kHigh);
  GroupRef n2 = t.group("n2", WaitPriority::kNormal), lo = t.group("lo", WaitPriority::kLow);
  t.hold(*nn, "n1", 5);
  t.hold(*hi, "h1", 5);
  AsyncCall& normal = t.wait(*n2, 1, 50ms);
  AsyncCall& low = t.wait(*lo, 1, 50ms);
  t.clock.advance(60'000'000);
  EXPECT_EQ(normal.status(), WaitStatus::kTimedOut);
  EXPECT_EQ(low.status(), WaitStatus::kTimedOut);
  EXPECT_EQ(t.history(), "");
  EXPECT_EQ(used(*nn) + used(*hi), 10);
}

// A holder asked that has not released when the waiter's deadline passes: the waiter times out
// (holding nothing); the holder is asked once, not again at the waiter's polls nor by a second
// waiter while it still holds what it held; its later release is free memory.
TEST(ChargeWaitPreempt, DeadlinePassesBeforeTheHolderReleases) {
  testing::Watchdog dog("DeadlinePassesBeforeTheHolderReleases");
  Preempt t(true);
  t.release_when_asked = false;
  GroupRef la = t.group("la", WaitPriority::kLow), hi = t.group("hi", WaitPriority::kHigh);
  GroupRef h2 = t.group("h2", WaitPriority::kHigh);
  Member& a1 = t.hold(*la, "a1", 10);
  AsyncCall& w = t.wait(*hi, 3, 50ms);
  EXPECT_EQ(t.history(), "ask:a1");
  EXPECT_TRUE(a1.preempt_requested());
  EXPECT_FALSE(a1.killed());
  // Polls (every 10 ms) look again: a1 still holds, and nobody else is asked.
  for (int i = 0; i < 3; ++i) {
    const uint64_t before = t.clock.parks.load();
    t.clock.advance(11'000'000);
    ASSERT_TRUE(eventually([&] { return t.clock.parks.load() > before; }));
  }
  AsyncCall& second = t.wait(*h2, 2, 100ms);
  EXPECT_EQ(t.history(), "ask:a1");
  t.clock.advance(20'000'000);  // t = 53 ms: past the first waiter's deadline
  EXPECT_EQ(w.status(), WaitStatus::kTimedOut);
  EXPECT_EQ(used(*hi), 0);
  EXPECT_EQ(wait_stats(*t.p).timed_out, 1u);
  // The late release serves the waiter still there.
  EXPECT_EQ(a1.uncharge(10), 10);
  EXPECT_EQ(second.status(), WaitStatus::kOk);
  EXPECT_FALSE(a1.preempt_requested());
  EXPECT_EQ(t.history(), "ask:a1 grant:p/h2");
  EXPECT_EQ(la->events_local().get(Event::kPreempt), 1u);
  EXPECT_EQ(used(*t.p), 2);
}

// A holder that does not release is counted as coming for kOomVictimWaitNs after it was asked;
// then it is given up on (not asked again) and the waiter's next look asks the next one.
TEST(ChargeWaitPreempt, AHolderThatKeepsItsMemoryIsGivenUpOnAfterASecond) {
  testing::Watchdog dog("AHolderThatKeepsItsMemoryIsGivenUpOnAfterASecond");
  Preempt t(true);
  t.ignoring.insert("a1");
  GroupRef la = t.group("la", WaitPriority::kLow), hi = t.group("hi", WaitPriority::kHigh);
  Member& a1 = t.hold(*la, "a1", 5);
  t.hold(*la, "a2", 5);
  AsyncCall& w = t.wait(*hi, 3, 10000ms);
  EXPECT_EQ(t.history(), "ask:a1");  // equal sizes: walk order
  ASSERT_TRUE(t.clock.advance_and_settle(500'000'000, 1));  // a poll at 0.5 s: still coming
  EXPECT_EQ(t.history(), "ask:a1");
  t.clock.advance(600'000'000);  // a poll at 1.1 s: a1 given up on, a2 asked, w granted
  EXPECT_EQ(w.status(), WaitStatus::kOk);
  EXPECT_EQ(t.history(), "ask:a1 ask:a2 grant:p/hi");
  EXPECT_TRUE(a1.preempt_requested());
  EXPECT_EQ(used(*la), 5);
  EXPECT_EQ(OomKiller::last_preempt_report(t.ctl).asked.size(), 1u);
}

// The file: "0" or "1", anything else EINVAL and nothing changes; not on the root.
TEST(ChargeWaitPreempt, TheFile) {
  Preempt t(false);
  EXPECT_FALSE(wait_preempt(*t.p));
  EXPECT_EQ(write_file(*t.p, "memory.wait.preempt", "1\n"), 0);
  EXPECT_TRUE(wait_preempt(*t.p));
  EXPECT_EQ(file(*t.p, "memory.wait.preempt"), "1\n");
  EXPECT_EQ(write_file(*t.p, "memory.wait.preempt", "yes"), EINVAL);
  EXPECT_EQ(write_file(*t.p, "memory.wait.preempt", "2"), EINVAL);
  EXPECT_TRUE(wait_preempt(*t.p));
  EXPECT_EQ(set_wait_preempt(t.ctl.root(), true), ENOENT);
  std::string out;
  EXPECT_EQ(read_file(t.ctl.root(), "memory.wait.preempt", &out), ENOENT);
  EXPECT_EQ(set_wait_preempt(*t.p, false), 0);
  EXPECT_FALSE(wait_preempt(*t.p));
}

// A member's callback that destroys the member, and one that throws: the request to the first
// counts, the second is listed as failed in the report and not counted.
TEST(ChargeWaitPreempt, CallbackDestroysItsMemberOrThrows) {
  testing::Watchdog dog("CallbackDestroysItsMemberOrThrows");
  Preempt t(true);
  GroupRef la = t.group("la", WaitPriority::kLow), lb = t.group("lb", WaitPriority::kLow);
  GroupRef hi = t.group("hi", WaitPriority::kHigh);
  std::unique_ptr<Member> gone;
  gone = std::make_unique<Member>(*la, "gone", [&](Member&) { gone.reset(); });
  ASSERT_EQ(gone->charge(6), ChargeStatus::kOk);
  Member thrower(*lb, "thrower", [](Member&) { throw std::runtime_error("busy"); });
  ASSERT_EQ(thrower.charge(4), ChargeStatus::kOk);
  AsyncCall& w = t.wait(*hi, 8, 50ms);
  EXPECT_EQ(gone, nullptr);
  EXPECT_EQ(used(*la), 0);
  EXPECT_TRUE(thrower.preempt_requested());  // asked once; not asked again while it holds
  t.clock.advance(60'000'000);
  EXPECT_EQ(w.status(), WaitStatus::kTimedOut);
  const PreemptReport r = OomKiller::last_preempt_report(t.ctl);
  ASSERT_EQ(r.asked.size(), 2u);
  EXPECT_EQ(r.asked[0].member, "gone");
  ASSERT_EQ(r.failed.size(), 1u);
  EXPECT_EQ(r.failed[0].error, "busy");
  EXPECT_EQ(la->events_local().get(Event::kPreempt), 1u);
  EXPECT_EQ(lb->events_local().get(Event::kPreempt), 0u);
  thrower.uncharge(4);
}

}  // namespace
}  // namespace memcg
