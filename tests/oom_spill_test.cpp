// Spill before kill (oom.hpp): a member asked to give memory back before the killer runs, the
// reason each member callback is told, and a charger killed while it waits for an earlier victim
// (the victim order and the handlers are in oom_policy_test.cpp). Scenarios that could hang run
// under a watchdog.
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
