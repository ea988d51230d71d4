// What runs before and instead of a plain kill (oom.hpp): the victim order by excess over
// admission (and memory.oom.order, which keeps the kernel's), OOM handlers from the OOMing group
// to the root (accounting, throwing and overrunning handlers, unregistering during a call), spill
// before kill, and the reason each member callback is told. Scenarios that could hang run under
// a watchdog.
#include "watchdog.hpp"
#include "memcg/core/oom/oom.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "memcg/base/clock.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/admission/admission.hpp"
#include "memcg/core/admission/reservation.hpp"
#include "memcg/files/files.hpp"
#include "memcg/percpu/internal/stock.hpp"

namespace memcg {
namespace {

using testing::Watchdog;
using namespace std::chrono_literals;

struct Sim {
  explicit Sim(Clock* clock = nullptr) : ctl(options(clock)) {}
  static Options options(Clock* clock) {
    Options o;
    o.nr_shards = 1;
    if (clock) o.clock = clock;
    return o;
  }
  GroupRef make(const char* path) {
    GroupRef g;
    if (ctl.create(path, &g) != 0) throw std::runtime_error(path);
    return g;
  }
  Controller ctl;
};

// A member whose callback records every reason it is called with and releases everything on a
// kill (and, if `spill_frees` > 0, that many units on a spill request).
struct Query {
  Query(Group& g, const char* name, int64_t spill_frees = 0)
      : spill(spill_frees),
        m(g, name, [this](Member& self) {
          const CancelReason r = Member::cancel_reason();
          reasons.push_back(r);
          if (r == CancelReason::kOomKill) self.uncharge(self.charged());
          if (r == CancelReason::kSpill && spill > 0) self.uncharge(spill);
        }) {}
  // Charges `units` one unit at a time, then states it was admitted with `admitted`.
  void hold(int64_t units, int64_t admitted) {
    for (int64_t i = 0; i < units; ++i) ASSERT_TRUE(charged(m.charge(1)));
    m.add_admitted(admitted);
  }
  int64_t spill;
  std::vector<CancelReason> reasons;
  Member m;
};

// A domain of 100 units (4 KiB each), filled to its limit by the callers.
constexpr uint64_t kDomainBytes = 100 * 4096;

// ---- the order -----------------------------------------------------------------------------

TEST(OomOrder, ExcessFirstThenPriorityThenBadness) {
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(kDomainBytes);
  Query big(*d, "big"), grower(*d, "grower"), small_grower(*d, "small_grower");
  big.hold(50, 60);           // the largest, within its admission
  grower.hold(30, 10);        // 20 past its admission
  small_grower.hold(20, 15);  // 5 past
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 1, &r));
  EXPECT_EQ(r.victim, "grower");
  EXPECT_EQ(r.order, OomOrder::kExcess);
  EXPECT_EQ(r.decider, OomDecider::kExcessOrder);
  EXPECT_EQ(r.reason, CancelReason::kOomKill);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].member, "grower");
  EXPECT_EQ(r.top[0].admitted, 10);
  EXPECT_EQ(r.top[0].excess, 20);
  EXPECT_EQ(r.top[1].member, "small_grower");
  EXPECT_EQ(r.top[2].member, "big");
  EXPECT_EQ(r.top[2].excess, 0);
  EXPECT_TRUE(grower.m.killed());
  EXPECT_FALSE(big.m.killed());
  const std::string text = r.format();
  EXPECT_NE(text.find("admitted=10 excess=20"), std::string::npos) << text;
  EXPECT_NE(text.find("decided by excess"), std::string::npos) << text;
}

TEST(OomOrder, KernelOrderKnobKeepsTheKernelsChoice) {
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(kDomainBytes);
  Query big(*d, "big"), grower(*d, "grower");
  big.hold(60, 60);
  grower.hold(40, 10);
  ASSERT_EQ(set_oom_order(*d, OomOrder::kKernel), 0);
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 1, &r));
  EXPECT_EQ(r.victim, "big");
  EXPECT_EQ(r.order, OomOrder::kKernel);
  EXPECT_EQ(r.decider, OomDecider::kKernelOrder);
}

TEST(OomOrder, AutoIsKernelWhenNothingWasAdmitted) {
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(kDomainBytes);
  Query a(*d, "a"), b(*d, "b");
  a.hold(70, 0);
  b.hold(30, 0);
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 1, &r));
  EXPECT_EQ(r.victim, "a");
  EXPECT_EQ(r.order, OomOrder::kKernel);
}

TEST(OomOrder, WithoutExcessTheLowerPriorityGoesFirst) {
  Sim s;
  GroupRef d = s.make("d"), hi = s.make("d/hi"), lo = s.make("d/lo");
  d->set_max(kDomainBytes);
  ASSERT_EQ(set_wait_priority(*lo, WaitPriority::kLow), 0);
  ASSERT_EQ(set_wait_priority(*hi, WaitPriority::kHigh), 0);
  Query h(*hi, "h"), l(*lo, "l");
  h.hold(70, 70);
  l.hold(30, 30);
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 1, &r));
  EXPECT_EQ(r.victim, "l");
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].priority, WaitPriority::kLow);
  EXPECT_TRUE(l.m.killed());
  EXPECT_FALSE(h.m.killed());
}

TEST(OomOrder, KernelOrderIgnoresPriority) {
  Sim s;
  GroupRef d = s.make("d"), hi = s.make("d/hi"), lo = s.make("d/lo");
  d->set_max(kDomainBytes);
  ASSERT_EQ(set_wait_priority(*lo, WaitPriority::kLow), 0);
  ASSERT_EQ(set_oom_order(*d, OomOrder::kKernel), 0);
  Query h(*hi, "h"), l(*lo, "l");
  h.hold(70, 70);
  l.hold(30, 30);
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 1, &r));
  EXPECT_EQ(r.victim, "h");
}

TEST(OomOrder, WithinAdmissionAndOneClassTheBadnessDecides) {
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(kDomainBytes);
  Query a(*d, "a"), b(*d, "b"), c(*d, "c");
  a.hold(30, 30);
  b.hold(45, 50);
  c.hold(25, 30);
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 1, &r));
  EXPECT_EQ(r.order, OomOrder::kExcess);
  EXPECT_EQ(r.victim, "b");
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[1].member, "a");
  EXPECT_EQ(r.top[2].member, "c");
}

TEST(OomOrder, TheExcessVictimsOomGroupIsKilledAsAWhole) {
  Sim s;
  GroupRef d = s.make("d"), job = s.make("d/job"), other = s.make("d/other");
  d->set_max(kDomainBytes);
  job->set_oom_group(true);
  Query grower(*job, "grower"), sibling(*job, "sibling"), big(*other, "big");
  grower.hold(20, 5);
  sibling.hold(10, 10);
  big.hold(70, 70);
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 1, &r));
  EXPECT_EQ(r.victim, "grower");
  EXPECT_EQ(r.oom_group, "d/job");
  EXPECT_TRUE(grower.m.killed());
  EXPECT_TRUE(sibling.m.killed());
  EXPECT_FALSE(big.m.killed());
  EXPECT_EQ(job->events().get(Event::kOomGroupKill), 1u);
}

TEST(OomOrder, FileAndArguments) {
  Sim s;
  GroupRef d = s.make("d");
  std::string out;
  ASSERT_EQ(read_file(*d, "memory.oom.order", &out), 0);
  EXPECT_EQ(out, "auto\n");
  EXPECT_EQ(write_file(*d, "memory.oom.order", "excess\n"), 0);
  EXPECT_EQ(oom_order(*d), OomOrder::kExcess);
  EXPECT_EQ(write_file(*d, "memory.oom.order", "kernel"), 0);
  ASSERT_EQ(read_file(*d, "memory.oom.order", &out), 0);
  EXPECT_EQ(out, "kernel\n");
  EXPECT_EQ(write_file(*d, "memory.oom.order", "badness"), EINVAL);
  EXPECT_EQ(oom_order(*d), OomOrder::kKernel);
  EXPECT_EQ(read_file(s.ctl.root(), "memory.oom.order", &out), ENOENT);
  EXPECT_EQ(set_oom_order(s.ctl.root(), OomOrder::kExcess), ENOENT);
  EXPECT_EQ(set_oom_order(*d, static_cast<OomOrder>(7)), EINVAL);
  EXPECT_EQ(oom_order(*d), OomOrder::kKernel);
}

// ---- handlers ------------------------------------------------------------------------------

TEST(OomHandlers, CalledFromTheOomingGroupToTheRootUntilOneMakesRoom) {
  Sim s;
  GroupRef d = s.make("d"), q = s.make("d/q");
  q->set_max(kDomainBytes);
  Query victim(*q, "victim");
  victim.hold(100, 0);
  Query cache(*q, "cache");  // what the outer handler drops
  std::vector<std::string> calls;
  OomHandler inner, outer, top, late;
  ASSERT_EQ(OomHandler::add(
                *q, "inner",
                [&](const OomContext& c) {
                  calls.push_back("inner");
                  EXPECT_EQ(&c.domain, q.get());
                  EXPECT_EQ(&c.group, q.get());
                  EXPECT_EQ(c.request_units, 4);
                  EXPECT_EQ(c.shortage_units, 4);
                  return int64_t{0};
                },
                &inner),
            0);
  ASSERT_EQ(OomHandler::add(s.ctl.root(), "top",
                            [&](const OomContext&) {
                              calls.push_back("top");
                              return int64_t{0};
                            },
                            &top),
            0);
  ASSERT_EQ(OomHandler::add(*d, "outer",
                            [&](const OomContext& c) {
                              calls.push_back("outer");
                              EXPECT_EQ(&c.group, d.get());
                              return victim.m.uncharge(10);
                            },
                            &outer),
            0);
  ASSERT_EQ(OomHandler::add(*d, "late",
                            [&](const OomContext&) {
                              calls.push_back("late");
                              return int64_t{0};
                            },
                            &late),
            0);
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*q, 4, &r));
  EXPECT_EQ(calls, (std::vector<std::string>{"inner", "outer"}));
  EXPECT_EQ(r.decider, OomDecider::kHandler);
  EXPECT_EQ(r.handler, "outer");
  ASSERT_EQ(r.handlers.size(), 2u);
  EXPECT_EQ(r.handlers[1].freed, 10);
  EXPECT_EQ(r.handlers[1].outcome, "made_room");
  EXPECT_TRUE(r.victim.empty());
  EXPECT_FALSE(victim.m.killed());
  EXPECT_EQ(q->events().get(Event::kOomHandled), 1u);
  EXPECT_EQ(d->events().get(Event::kOomHandled), 1u);
  EXPECT_EQ(q->events().get(Event::kOomKill), 0u);
  EXPECT_EQ(outer.stats().calls, 1u);
  EXPECT_EQ(outer.stats().made_room, 1u);
  EXPECT_EQ(outer.stats().freed_units, 10);
  EXPECT_EQ(inner.stats().made_room, 0u);
  EXPECT_EQ(top.stats().calls, 0u);
  EXPECT_NE(r.format().find("resolved by handler outer"), std::string::npos) << r.format();
  EXPECT_EQ(OomKiller::last_report(s.ctl).handler, "outer");

  // None makes room: every handler is called, in order, then the killer runs.
  calls.clear();
  victim.hold(10, 0);
  outer.reset();
  EXPECT_FALSE(outer.registered());
  ASSERT_TRUE(OomKiller::kill(*q, 4, &r));
  EXPECT_EQ(calls, (std::vector<std::string>{"inner", "late", "top"}));
  EXPECT_EQ(r.victim, "victim");
  EXPECT_EQ(r.decider, OomDecider::kKernelOrder);
  EXPECT_TRUE(victim.m.killed());
}

TEST(OomHandlers, ThroughTheChargePath) {
  Watchdog dog("a member's charge resolved by a handler");
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(kDomainBytes);
  Query a(*d, "a");
  a.hold(100, 0);
  Member b(*d, "b", nullptr);
  int called = 0;
  OomHandler h;
  ASSERT_EQ(OomHandler::add(*d, "drop",
                            [&](const OomContext&) {
                              ++called;
                              return a.m.uncharge(8);
                            },
                            &h),
            0);
  EXPECT_TRUE(charged(b.charge(1)));
  EXPECT_GE(called, 1);
  EXPECT_FALSE(a.m.killed());
  EXPECT_EQ(d->events().get(Event::kOomKill), 0u);
  EXPECT_GE(d->events().get(Event::kOomHandled), 1u);
}

TEST(OomHandlers, AThrowingHandlerIsReportedAndSkippedNextTime) {
  ManualClock clock(1'000'000'000);
  Sim s(&clock);
  GroupRef d = s.make("d");
  d->set_max(kDomainBytes);
  Query a(*d, "a");
  a.hold(100, 0);
  OomHandler bad, good;
  ASSERT_EQ(OomHandler::add(*d, "bad",
                            [](const OomContext&) -> int64_t { throw std::runtime_error("boom"); },
                            &bad),
            0);
  ASSERT_EQ(OomHandler::add(*d, "good", [&](const OomContext&) { return a.m.uncharge(5); },
                            &good),
            0);
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 2, &r));
  EXPECT_EQ(r.handler, "good");
  ASSERT_EQ(r.handlers.size(), 2u);
  EXPECT_EQ(r.handlers[0].outcome, "threw: boom");
  EXPECT_EQ(bad.stats().threw, 1u);
  a.hold(5, 0);
  ASSERT_TRUE(OomKiller::kill(*d, 2, &r));
  EXPECT_EQ(r.handlers[0].outcome, "skipped");
  EXPECT_EQ(bad.stats().skipped, 1u);
  EXPECT_EQ(bad.stats().calls, 1u);
  // After the penalty it is called again.
  a.hold(5, 0);
  clock.advance(kOomHandlerPenaltyNs + 1);
  ASSERT_TRUE(OomKiller::kill(*d, 2, &r));
  EXPECT_EQ(bad.stats().calls, 2u);
  EXPECT_EQ(bad.stats().threw, 2u);
  EXPECT_FALSE(a.m.killed());
}

TEST(OomHandlers, AnOverrunIsCountedAndSkippedNextTime) {
  ManualClock clock(1'000'000'000);
  Sim s(&clock);
  GroupRef d = s.make("d");
  d->set_max(kDomainBytes);
  Query a(*d, "a");
  a.hold(100, 0);
  OomHandler slow;
  ASSERT_EQ(OomHandler::add(
                *d, "slow",
                [&](const OomContext&) {
                  clock.advance(20'000'000);  // 20 ms of a 5 ms budget
                  return a.m.uncharge(5);
                },
                &slow, 5ms),
            0);
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 2, &r));
  EXPECT_EQ(r.handler, "slow");  // it did make room; the overrun is still counted
  EXPECT_EQ(slow.stats().overran, 1u);
  a.hold(5, 0);
  ASSERT_TRUE(OomKiller::kill(*d, 2, &r));  // skipped: the killer decides
  EXPECT_EQ(r.handlers.at(0).outcome, "skipped");
  EXPECT_EQ(r.victim, "a");
  EXPECT_TRUE(a.m.killed());
}

TEST(OomHandlers, TheChainHasABudget) {
  ManualClock clock(1'000'000'000);
  Sim s(&clock);
  GroupRef d = s.make("d");
  d->set_max(kDomainBytes);
  Query a(*d, "a");
  a.hold(100, 0);
  std::vector<std::unique_ptr<OomHandler>> hs;
  int called = 0;
  for (int i = 0; i < 16; ++i) {
    hs.push_back(std::make_unique<OomHandler>());
    ASSERT_EQ(OomHandler::add(*d, "h" + std::to_string(i),
                              [&](const OomContext&) {
                                ++called;
                                clock.advance(kOomHandlerChainBudgetNs / 4);
                                return int64_t{0};
                              },
                              hs.back().get(), std::chrono::nanoseconds(kOomHandlerChainBudgetNs)),
              0);
  }
  OomHandler extra;
  EXPECT_EQ(OomHandler::add(*d, "extra", [](const OomContext&) { return int64_t{0}; }, &extra),
            ENOSPC);
  EXPECT_FALSE(extra.registered());
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 2, &r));
  EXPECT_EQ(called, 4);  // the fifth would start past the chain's budget
  EXPECT_TRUE(a.m.killed());
}

TEST(OomHandlers, AHandlersChargeIntoItsGroupFailsAndKillsNobody) {
  Watchdog dog("a handler charging into the group it serves");
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(kDomainBytes);
  Query a(*d, "a");
  a.hold(100, 0);
  Member helper(*d, "helper", nullptr, Member::kImmune);
  ChargeStatus inside = ChargeStatus::kOk;
  OomHandler h;
  ASSERT_EQ(OomHandler::add(*d, "greedy",
                            [&](const OomContext&) {
                              inside = helper.charge(1);
                              EXPECT_FALSE(a.m.killed());
                              return int64_t{0};
                            },
                            &h),
            0);
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 1, &r));
  EXPECT_EQ(inside, ChargeStatus::kNoMem);
  EXPECT_EQ(helper.charged(), 0);
  EXPECT_EQ(r.victim, "a");  // then the killer ran, once
  EXPECT_EQ(d->events().get(Event::kOomKill), 1u);
}

TEST(OomHandlers, Arguments) {
  Sim s;
  GroupRef d = s.make("d");
  OomHandler h;
  auto fn = [](const OomContext&) { return int64_t{0}; };
  EXPECT_EQ(OomHandler::add(*d, "", fn, &h), EINVAL);
  EXPECT_EQ(OomHandler::add(*d, "x", nullptr, &h), EINVAL);
  EXPECT_EQ(OomHandler::add(*d, "x", fn, nullptr), EINVAL);
  EXPECT_EQ(OomHandler::add(*d, "x", fn, &h, 0ns), EINVAL);
  EXPECT_EQ(OomHandler::add(*d, "x", fn, &h, 1s), EINVAL);
  EXPECT_FALSE(h.registered());
  EXPECT_EQ(h.name(), "");
  GroupRef gone = s.make("gone");
  ASSERT_EQ(s.ctl.remove("gone"), 0);
  EXPECT_EQ(OomHandler::add(*gone, "x", fn, &h), ENOENT);
  ASSERT_EQ(OomHandler::add(*d, "x", fn, &h), 0);
  EXPECT_EQ(h.name(), "x");
  OomHandler moved = std::move(h);
  EXPECT_FALSE(h.registered());
  EXPECT_EQ(moved.name(), "x");
}

TEST(OomHandlers, UnregisteringWaitsForACallOnAnotherThread) {
  Watchdog dog("unregistering a handler during its call");
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(kDomainBytes);
  Query a(*d, "a");
  a.hold(100, 0);
  std::atomic<bool> entered{false}, release{false}, returned{false};
  auto h = std::make_unique<OomHandler>();
  ASSERT_EQ(OomHandler::add(*d, "slow",
                            [&](const OomContext&) {
                              entered.store(true);
                              while (!release.load()) std::this_thread::sleep_for(1ms);
                              returned.store(true);
                              return a.m.uncharge(4);
                            },
                            h.get(), std::chrono::nanoseconds(kOomHandlerChainBudgetNs)),
            0);
  std::thread oom([&] { OomKiller::kill(*d, 2); });
  while (!entered.load()) std::this_thread::sleep_for(1ms);
  std::atomic<bool> reset_done{false};
  std::thread unreg([&] {
    h->reset();
    reset_done.store(true);
    EXPECT_TRUE(returned.load());
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(reset_done.load());
  release.store(true);
  unreg.join();
  oom.join();
  EXPECT_TRUE(reset_done.load());
  EXPECT_FALSE(a.m.killed());
}

TEST(OomHandlers, AHandlerMayUnregisterItself) {
  Watchdog dog("a handler unregistering itself");
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(kDomainBytes);
  Query a(*d, "a");
  a.hold(100, 0);
  OomHandler h;
  ASSERT_EQ(OomHandler::add(*d, "once",
                            [&](const OomContext&) {
                              h.reset();
                              return int64_t{0};
                            },
                            &h),
            0);
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 1, &r));
  EXPECT_FALSE(h.registered());
  EXPECT_EQ(r.handlers.size(), 1u);
  EXPECT_EQ(r.victim, "a");
}

// ---- spill before kill ---------------------------------------------------------------------

TEST(OomSpill, ASpillThatMakesRoomAvoidsTheKill) {
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(kDomainBytes);
  Query q(*d, "q", /*spill_frees=*/10);
  q.hold(100, 40);
  ASSERT_EQ(q.m.set_spill_grace(100ms), 0);
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 4, &r));
  EXPECT_EQ(q.reasons, (std::vector<CancelReason>{CancelReason::kSpill}));
  EXPECT_FALSE(q.m.killed());
  EXPECT_EQ(q.m.charged(), 90);
  EXPECT_EQ(r.decider, OomDecider::kSpill);
  EXPECT_EQ(r.reason, CancelReason::kSpill);
  EXPECT_EQ(r.victim, "q");
  EXPECT_TRUE(r.killed.empty());
  EXPECT_EQ(r.spilled, (std::vector<std::string>{"q"}));
  EXPECT_EQ(d->events().get(Event::kOomSpill), 1u);
  EXPECT_EQ(d->events().get(Event::kOomKill), 0u);
  EXPECT_NE(r.format().find("resolved by spill of q"), std::string::npos) << r.format();
}

TEST(OomSpill, NoRoomWithinGraceThenTheKill) {
  ManualClock clock(1'000'000'000);
  Sim s(&clock);
  GroupRef d = s.make("d");
  d->set_max(kDomainBytes);
  Query q(*d, "q", /*spill_frees=*/1);  // frees too little
  q.hold(100, 40);
  ASSERT_EQ(q.m.set_spill_grace(50ms), 0);
  const uint64_t before = clock.now_ns();
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 4, &r));
  EXPECT_EQ(q.reasons, (std::vector<CancelReason>{CancelReason::kSpill, CancelReason::kOomKill}));
  EXPECT_TRUE(q.m.killed());
  EXPECT_GE(clock.now_ns() - before, 50'000'000u);  // it waited its grace
  EXPECT_EQ(r.victim, "q");
  EXPECT_EQ(r.decider, OomDecider::kExcessOrder);
  EXPECT_EQ(r.reason, CancelReason::kOomKill);
  EXPECT_EQ(r.spilled, (std::vector<std::string>{"q"}));
  EXPECT_EQ(d->events().get(Event::kOomSpill), 0u);
  EXPECT_EQ(d->events().get(Event::kOomKill), 1u);
}

TEST(OomSpill, OnlyTheChosenMemberIsAsked) {
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(kDomainBytes);
  Query runaway(*d, "runaway"), fine(*d, "fine", 50);
  runaway.hold(60, 10);
  fine.hold(40, 40);
  ASSERT_EQ(fine.m.set_spill_grace(100ms), 0);
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 1, &r));
  EXPECT_TRUE(fine.reasons.empty());
  EXPECT_TRUE(runaway.m.killed());
  EXPECT_TRUE(r.spilled.empty());
}

// A member far past its expected peak (past its tolerated peak, admission.hpp) is killed without
// being asked to spill: a runaway asked to spill gives back part and grows on. Within it, or
// with no tolerated peak (nothing admitted by a waiting admission), it is asked.
TEST(OomSpill, FarPastItsToleratedPeakIsKilledNotAsked) {
  for (const int64_t extra : {int64_t{61}, int64_t{60}}) {
    SCOPED_TRACE(extra);
    Sim s;
    GroupRef d = s.make("d");
    d->set_max(kDomainBytes);
    for (int i = 0; i < 12; ++i) {  // teaches 1.5 twelve times: tolerance 1.5 (no spread)
      Reservation r(*d);
      ASSERT_EQ(r.reserve_for(10 * 4096, 1s), ReserveStatus::kOk);
      ASSERT_EQ(r.grow(5 * 4096), ReserveStatus::kOk);
    }
    ASSERT_EQ(admit_stats(*d).tolerance_permille, 1500u);
    Query q(*d, "q", /*spill_frees=*/10);
    Reservation mem(q.m);
    ASSERT_EQ(mem.reserve_for(40 * 4096, 1s), ReserveStatus::kOk);  // tolerates 60
    EXPECT_EQ(q.m.tolerated_peak(), 60);
    for (int64_t i = 40; i < extra; ++i) ASSERT_TRUE(charged(q.m.charge(1)));
    Query filler(*d, "filler");
    while (d->memory().usage() < 100) ASSERT_TRUE(charged(filler.m.charge(1)));
    ASSERT_EQ(q.m.set_spill_grace(100ms), 0);
    OomReport r;
    ASSERT_TRUE(OomKiller::kill(*d, 4, &r));
    if (extra == 61) {
      EXPECT_EQ(q.reasons, (std::vector<CancelReason>{CancelReason::kOomKill}));
      EXPECT_TRUE(r.spilled.empty());
    } else {
      EXPECT_EQ(q.reasons, (std::vector<CancelReason>{CancelReason::kSpill}));
      EXPECT_EQ(r.spilled, (std::vector<std::string>{"q"}));
      EXPECT_EQ(r.decider, OomDecider::kSpill);
    }
    q.m.uncharge(q.m.charged());
    mem.release();
    filler.m.uncharge(filler.m.charged());
  }
}

TEST(OomSpill, Arguments) {
  Sim s;
  GroupRef d = s.make("d");
  Member m(*d, "m", nullptr);
  EXPECT_EQ(m.set_spill_grace(-1ns), EINVAL);
  EXPECT_EQ(m.set_spill_grace(std::chrono::nanoseconds(kMaxSpillGraceNs + 1)), EINVAL);
  EXPECT_EQ(m.spill_grace(), 0ns);
  EXPECT_EQ(m.set_spill_grace(10ms), 0);
  EXPECT_EQ(m.spill_grace(), 10ms);
  m.add_admitted(5);
  m.add_admitted(-10);
  EXPECT_EQ(m.admitted(), 0);
  m.add_admitted(INT64_MAX);
  m.add_admitted(1);
  EXPECT_EQ(m.admitted(), INT64_MAX);
}

TEST(OomReason, Names) {
  EXPECT_STREQ(cancel_reason_name(CancelReason::kOomKill), "oom_kill");
  EXPECT_STREQ(cancel_reason_name(CancelReason::kPreempt), "preempt");
  EXPECT_STREQ(cancel_reason_name(CancelReason::kSpill), "spill");
  EXPECT_STREQ(cancel_reason_name(CancelReason::kCancel), "cancel");
  EXPECT_STREQ(oom_order_name(OomOrder::kExcess), "excess");
  EXPECT_STREQ(oom_decider_name(OomDecider::kHandler), "handler");
  EXPECT_STREQ(event_name(Event::kOomHandled), "oom_handled");
  EXPECT_STREQ(event_name(Event::kOomSpill), "oom_spill");
}

// Spill requests and kills from several threads at once (for TSan): every charge ends, nobody is
// left half-killed, and every callback is told a reason it can act on.
TEST(OomSpill, ConcurrentChargesWithSpillingMembers) {
  Watchdog dog("concurrent spills and kills", std::chrono::seconds(60));
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(kDomainBytes);
  std::atomic<int> spills{0}, kills{0};
  OomHandler h;
  std::atomic<int> handler_calls{0};
  ASSERT_EQ(OomHandler::add(*d, "pass",
                            [&](const OomContext&) {
                              handler_calls.fetch_add(1);
                              return int64_t{0};
                            },
                            &h),
            0);
  // The members outlive every thread: a callback runs on the thread whose charge chose the
  // member, and it touches `self` (oom.hpp: the owner must not destroy a member another thread
  // is using). Each round empties its member instead.
  std::vector<std::unique_ptr<Member>> members[4];
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        members[t].push_back(std::make_unique<Member>(*d, "w" + std::to_string(t), [&](Member& self) {
          if (Member::cancel_reason() == CancelReason::kSpill) {
            spills.fetch_add(1);
            self.uncharge(self.charged() / 2);
          } else if (Member::cancel_reason() == CancelReason::kOomKill) {
            kills.fetch_add(1);
            self.uncharge(self.charged());
          }
        }));
        Member& m = *members[t].back();
        (void)m.set_spill_grace(1ms);
        m.add_admitted(10);
        for (int i = 0; i < 150 && !m.killed(); ++i) (void)m.charge(1);  // past the limit alone
        m.uncharge(m.charged());
      }
    });
  for (auto& t : ts) t.join();
  for (auto& v : members) v.clear();
  EXPECT_GT(spills.load() + kills.load(), 0);
  EXPECT_GT(handler_calls.load(), 0);
  s.ctl.stock().drain_all(&s.ctl.root());
  EXPECT_EQ(d->memory().usage(), 0);
}

// A charging member that is killed while its OOM waits for an earlier victim to unwind stops
// waiting at once: it must unwind itself, not hold its memory for as long as the other victim
// may take (kOomVictimWaitNs), which every later OOM of the domain would wait for in turn.
TEST(OomVictimWait, AChargerKilledWhileWaitingForAVictimStopsWaiting) {
  Watchdog dog("killed while waiting for a victim", std::chrono::seconds(30));
  Sim s;
  GroupRef x = s.make("x");
  GroupRef z = s.make("x/z");
  x->set_max(kDomainBytes);
  // The first victim: killed, it never unwinds within the test's wait (its callback records).
  std::atomic<bool> v_killed{false};
  Member v(*x, "v", [&](Member&) { v_killed = true; });
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(charged(v.charge(1)));
  ASSERT_TRUE(OomKiller::kill(*x, 50));
  ASSERT_TRUE(v_killed.load());
  // a fills x and charges one more: its OOM (domain x) waits for v.
  std::atomic<bool> a_killed{false};
  Member a(*z, "a", [&](Member&) { a_killed = true; });
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(charged(a.charge(1)));
  std::atomic<int64_t> waited_ms{-1};
  std::thread t([&] {
    const auto t0 = std::chrono::steady_clock::now();
    const ChargeStatus st = a.charge(1);
    waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
    EXPECT_FALSE(charged(st));  // a was killed: its charge fails
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(waited_ms.load(), -1);  // still waiting for v
  // An OOM of z (a's own group, v is not under it) kills a.
  z->set_max(40 * 4096);
  ASSERT_TRUE(OomKiller::kill(*z, 1));
  ASSERT_TRUE(a_killed.load());
  t.join();
  // Well before v's kOomVictimWaitNs (1 s) ran out: the wait looks every millisecond.
  EXPECT_LT(waited_ms.load(), 700);
  a.uncharge(a.charged());
  v.uncharge(v.charged());
}

}  // namespace
}  // namespace memcg
