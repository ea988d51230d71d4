// What runs before and instead of a plain kill (oom.hpp): the victim order by excess over
// admission (and memory.oom.order, which keeps the kernel's), OOM handlers from the OOMing group
// to the root (accounting, throwing and overrunning handlers, unregistering during a call).
// Spill before kill and the reason each member callback is told are in oom_spill_test.cpp.
// Scenarios that could hang run under a watchdog.
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
#include "oom_policy_support.hpp"

namespace memcg {
namespace {

using testing::Watchdog;
using testing_oom::kDomainBytes;
using testing_oom::Query;
using testing_oom::Sim;
using namespace std::chrono_literals;

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

}  // namespace
}  // namespace memcg
