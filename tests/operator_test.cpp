// An operator's actions on members (operator.hpp): ids, states, kill and preempt with the
// "operator" reason and decider, idempotence, a throwing callback, the victim order of the list.
#include "memcg/core/oom/operator.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "memcg/core/oom/oom_log.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "oom_policy_support.hpp"

namespace memcg {
namespace {

using testing_oom::Sim;

// A member that records what it was called with and, on a kill, releases when told to.
struct Tenant {
  Tenant(Group& g, const char* name, bool release_on_kill = true, int adj = 0)
      : release(release_on_kill),
        m(g, name,
          [this](Member& self) {
            reasons.push_back(Member::cancel_reason());
            killed_seen.push_back(self.killed());
            if (self.killed() && release) self.uncharge(self.charged());
          },
          adj) {}
  void hold(int64_t units) {
    for (int64_t i = 0; i < units; ++i) ASSERT_TRUE(charged(m.charge(1)));
  }
  bool release;
  std::vector<CancelReason> reasons;
  std::vector<bool> killed_seen;
  Member m;
};

TEST(Operator, IdsAreUniqueAndUnknownIdsAreNotFound) {
  Sim sim;
  GroupRef a = sim.make("a");
  Tenant x(*a, "x"), y(*a, "y");
  EXPECT_NE(x.m.id(), 0u);
  EXPECT_EQ(y.m.id(), x.m.id() + 1);
  MemberInfo info;
  EXPECT_EQ(member_info(sim.ctl, 0, &info), ENOENT);
  EXPECT_EQ(member_info(sim.ctl, y.m.id() + 1, &info), ENOENT);
  EXPECT_EQ(kill_member(sim.ctl, y.m.id() + 1), ENOENT);
  EXPECT_EQ(preempt_member(sim.ctl, 12345), ENOENT);
  ASSERT_EQ(member_info(sim.ctl, x.m.id(), &info), 0);
  EXPECT_EQ(info.name, "x");
  EXPECT_EQ(info.group, "a");
  EXPECT_EQ(info.state, MemberState::kRunning);
  // A destroyed member's id is gone, not unknown.
  uint64_t gone_id;
  {
    Tenant z(*a, "z");
    gone_id = z.m.id();
  }
  ASSERT_EQ(member_info(sim.ctl, gone_id, &info), 0);
  EXPECT_EQ(info.state, MemberState::kGone);
  EXPECT_EQ(kill_member(sim.ctl, gone_id, &info), 0);
  EXPECT_EQ(info.state, MemberState::kGone);
}

TEST(Operator, KillRunsTheCallbackWithOperatorOnceAndLogsTheDecider) {
  Sim sim;
  GroupRef a = sim.make("a");
  Tenant x(*a, "x", /*release_on_kill=*/false);
  x.hold(10);
  MemberInfo info;
  ASSERT_EQ(kill_member(sim.ctl, x.m.id(), &info), 0);
  ASSERT_EQ(x.reasons.size(), 1u);
  EXPECT_EQ(x.reasons[0], CancelReason::kOperator);
  EXPECT_TRUE(x.killed_seen[0]);
  EXPECT_TRUE(x.m.killed());
  // Killing until its bytes are uncharged.
  EXPECT_EQ(info.state, MemberState::kKilling);
  EXPECT_EQ(info.charged_bytes, 10u * 4096);
  // Idempotent: no second callback.
  ASSERT_EQ(kill_member(sim.ctl, x.m.id(), &info), 0);
  EXPECT_EQ(x.reasons.size(), 1u);
  EXPECT_EQ(info.state, MemberState::kKilling);
  x.m.uncharge(10);
  ASSERT_EQ(member_info(sim.ctl, x.m.id(), &info), 0);
  EXPECT_EQ(info.state, MemberState::kGone);
  sim.ctl.drain_stocks();
  EXPECT_EQ(a->current(), 0u);
  // The OOM log: one report, decider "operator", reason "operator".
  const std::vector<OomLogEntry> log = oom_log(sim.ctl).snapshot();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].kind, OomLogKind::kOomKill);
  EXPECT_EQ(log[0].oom.decider, OomDecider::kOperator);
  EXPECT_STREQ(oom_decider_name(log[0].oom.decider), "operator");
  EXPECT_EQ(log[0].oom.reason, CancelReason::kOperator);
  EXPECT_EQ(log[0].oom.victim, "x");
  ASSERT_EQ(log[0].oom.killed.size(), 1u);
  EXPECT_NE(format_oom_log_line(log[0]).find("decider=operator"), std::string::npos);
  EXPECT_EQ(oom_log(sim.ctl).totals().by_decider[static_cast<int>(OomDecider::kOperator)], 1u);
  EXPECT_STREQ(cancel_reason_name(CancelReason::kOperator), "operator");
}

TEST(Operator, ACallbackThatReleasesMakesTheMemberGoneAtOnce) {
  Sim sim;
  GroupRef a = sim.make("a");
  Tenant x(*a, "x");
  x.hold(5);
  MemberInfo info;
  ASSERT_EQ(kill_member(sim.ctl, x.m.id(), &info), 0);
  EXPECT_EQ(info.state, MemberState::kGone);
  sim.ctl.drain_stocks();
  EXPECT_EQ(a->current(), 0u);
}

TEST(Operator, ACallbackMayDestroyItsMember) {
  Sim sim;
  GroupRef a = sim.make("a");
  std::unique_ptr<Member> m;
  m = std::make_unique<Member>(*a, "self", [&](Member&) { m.reset(); });
  ASSERT_TRUE(charged(m->charge(3)));
  const uint64_t id = m->id();
  MemberInfo info;
  ASSERT_EQ(kill_member(sim.ctl, id, &info), 0);
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(info.state, MemberState::kGone);
  sim.ctl.drain_stocks();
  EXPECT_EQ(a->current(), 0u);
}

TEST(Operator, AThrowingKillLeavesTheMemberRunning) {
  Sim sim;
  GroupRef a = sim.make("a");
  int calls = 0;
  Member m(*a, "thrower", [&](Member&) {
    ++calls;
    throw std::runtime_error("no");
  });
  ASSERT_TRUE(charged(m.charge(2)));
  MemberInfo info;
  EXPECT_EQ(kill_member(sim.ctl, m.id(), &info), EIO);
  EXPECT_FALSE(m.killed());
  EXPECT_EQ(info.state, MemberState::kRunning);
  const std::vector<OomLogEntry> log = oom_log(sim.ctl).snapshot();
  ASSERT_EQ(log.size(), 1u);
  ASSERT_EQ(log[0].oom.failed.size(), 1u);
  EXPECT_EQ(log[0].oom.failed[0].error, "no");
  // The callback is kept: a second kill runs it again.
  EXPECT_EQ(kill_member(sim.ctl, m.id(), &info), EIO);
  EXPECT_EQ(calls, 2);
  m.uncharge(2);
}

TEST(Operator, PreemptAsksOnceUntilTheMemberHoldsNothing) {
  Sim sim;
  GroupRef a = sim.make("a");
  Tenant x(*a, "x");
  x.hold(8);
  MemberInfo info;
  ASSERT_EQ(preempt_member(sim.ctl, x.m.id(), &info), 0);
  ASSERT_EQ(x.reasons.size(), 1u);
  EXPECT_EQ(x.reasons[0], CancelReason::kOperator);
  EXPECT_FALSE(x.killed_seen[0]);  // a request, not a kill
  EXPECT_FALSE(x.m.killed());
  EXPECT_EQ(info.state, MemberState::kPreempting);
  ASSERT_EQ(preempt_member(sim.ctl, x.m.id(), &info), 0);
  EXPECT_EQ(x.reasons.size(), 1u);  // idempotent
  x.m.uncharge(8);
  ASSERT_EQ(member_info(sim.ctl, x.m.id(), &info), 0);
  EXPECT_EQ(info.state, MemberState::kRunning);
  EXPECT_EQ(info.charged_bytes, 0u);
  // Nothing held: nothing to ask.
  ASSERT_EQ(preempt_member(sim.ctl, x.m.id(), &info), 0);
  EXPECT_EQ(x.reasons.size(), 1u);
  const std::vector<OomLogEntry> log = oom_log(sim.ctl).snapshot();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].kind, OomLogKind::kPreempt);
  EXPECT_TRUE(log[0].preempt.by_operator);
  EXPECT_NE(format_oom_log_line(log[0]).find("decider=operator"), std::string::npos);
  // A kill after the request: the kill's callback runs (reason operator, killed).
  x.hold(2);
  ASSERT_EQ(kill_member(sim.ctl, x.m.id(), &info), 0);
  ASSERT_EQ(x.reasons.size(), 2u);
  EXPECT_TRUE(x.killed_seen[1]);
  EXPECT_EQ(info.state, MemberState::kGone);
}

TEST(Operator, TheListIsInTheKillersOrder) {
  Sim sim;
  GroupRef a = sim.make("a");
  GroupRef b = sim.make("b");
  Tenant small(*a, "small"), big(*b, "big"), immune(*a, "immune", true, Member::kImmune);
  small.hold(3);
  big.hold(9);
  immune.hold(20);
  std::vector<MemberInfo> list;
  size_t total = 0;
  ASSERT_EQ(list_members(sim.ctl.root(), kMaxMemberInfos, &list, &total), 0);
  ASSERT_EQ(total, 3u);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].name, "big");
  EXPECT_EQ(list[0].rank, 1u);
  EXPECT_EQ(list[0].key.order, OomOrder::kKernel);
  EXPECT_EQ(list[0].key.badness, 9);
  EXPECT_EQ(list[1].name, "small");
  EXPECT_EQ(list[1].rank, 2u);
  EXPECT_EQ(list[2].name, "immune");
  EXPECT_TRUE(list[2].key.immune);
  EXPECT_EQ(list[2].rank, 0u);
  // The killer agrees: an OOM of the root's subtree kills the first of the list.
  a->set_max(a->current());
  ASSERT_EQ(list_members(*a, kMaxMemberInfos, &list, &total), 0);
  ASSERT_EQ(total, 2u);
  EXPECT_EQ(list[0].name, "small");
  OomReport report;
  ASSERT_TRUE(OomKiller::kill(*a, 1, &report));
  EXPECT_EQ(report.victim, list[0].name);
  // A bounded list still counts every member.
  ASSERT_EQ(list_members(sim.ctl.root(), 1, &list, &total), 0);
  EXPECT_EQ(list.size(), 1u);
  EXPECT_EQ(total, 3u);
  EXPECT_EQ(list_members(sim.ctl.root(), kMaxMemberInfos + 1, &list, &total), EINVAL);
  big.m.uncharge(9);
  immune.m.uncharge(20);
}

TEST(Operator, ExcessOrderKeysOnceAdmitted) {
  Sim sim;
  GroupRef a = sim.make("a");
  Tenant p(*a, "past"), w(*a, "within");
  p.hold(10);
  p.m.add_admitted(2);
  w.hold(20);
  w.m.add_admitted(20);
  std::vector<MemberInfo> list;
  ASSERT_EQ(list_members(sim.ctl.root(), 10, &list), 0);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].key.order, OomOrder::kExcess);
  EXPECT_EQ(list[0].name, "past");
  EXPECT_EQ(list[0].key.excess, 8);
  EXPECT_EQ(list[1].key.excess, 0);
  p.m.uncharge(10);
  w.m.uncharge(20);
}

// Kills from several threads at once: one callback, every caller sees it killed.
TEST(Operator, ConcurrentKillsRunOneCallback) {
  Sim sim;
  GroupRef a = sim.make("a");
  std::atomic<int> calls{0};
  Member m(*a, "q", [&](Member& self) {
    calls.fetch_add(1);
    self.uncharge(self.charged());
  });
  ASSERT_TRUE(charged(m.charge(4)));
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      MemberInfo info;
      if (kill_member(sim.ctl, m.id(), &info) == 0 && info.state != MemberState::kRunning) ++ok;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(ok.load(), 4);
  MemberInfo info;
  ASSERT_EQ(member_info(sim.ctl, m.id(), &info), 0);
  EXPECT_EQ(info.state, MemberState::kGone);
}

}  // namespace
}  // namespace memcg
