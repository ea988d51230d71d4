// OOM kills per group, split by how the victim stood against its admission (trouble.hpp), and
// the exposition's families for them and for memory.high throttling.
#include "memcg/core/signal/trouble.hpp"

#include <gtest/gtest.h>

#include <string>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/files/prometheus.hpp"

#include "manual_controller.hpp"
#include "oom_policy_support.hpp"

namespace memcg {
namespace {

using testing_oom::kDomainBytes;
using testing_oom::Query;
using testing_oom::Sim;

void expect_kills(const Group& g, uint64_t within, uint64_t over, uint64_t none) {
  const GroupTrouble t = group_trouble(g);
  EXPECT_EQ(t.oom_kills[static_cast<int>(KillAdmission::kWithin)], within) << g.path();
  EXPECT_EQ(t.oom_kills[static_cast<int>(KillAdmission::kOver)], over) << g.path();
  EXPECT_EQ(t.oom_kills[static_cast<int>(KillAdmission::kNone)], none) << g.path();
}

TEST(OomTrouble, KillsCountOnTheVictimsGroupByAdmission) {
  Sim s;
  GroupRef d = s.make("d"), a = s.make("d/a"), b = s.make("d/b");
  d->set_max(kDomainBytes);
  ASSERT_EQ(set_oom_order(*d, OomOrder::kKernel), 0);  // the largest goes first
  Query good(*a, "good");
  good.hold(40, 50);  // within its admission
  {
    Query runaway(*b, "runaway");
    runaway.hold(60, 10);  // 50 past it
    ASSERT_TRUE(OomKiller::kill(*d, 1, nullptr));
    EXPECT_TRUE(runaway.m.killed());
  }
  expect_kills(*b, 0, 1, 0);
  {
    Query plain(*a, "plain");
    plain.hold(60, 0);  // admitted nothing
    ASSERT_TRUE(OomKiller::kill(*d, 1, nullptr));
    EXPECT_TRUE(plain.m.killed());
  }
  {
    Query big(*a, "big");
    big.hold(60, 60);  // large, but exactly what it was admitted with
    ASSERT_TRUE(OomKiller::kill(*d, 1, nullptr));
    EXPECT_TRUE(big.m.killed());
  }
  expect_kills(*a, 1, 0, 1);
  expect_kills(*d, 0, 0, 0);  // the group's own members only
  EXPECT_FALSE(good.m.killed());

  const std::string text = render_prometheus(s.ctl);
  for (const char* line : {"memcg_memory_oom_kills_total{group=\"d/a\",admission=\"within\"} 1\n",
                           "memcg_memory_oom_kills_total{group=\"d/a\",admission=\"over\"} 0\n",
                           "memcg_memory_oom_kills_total{group=\"d/a\",admission=\"none\"} 1\n",
                           "memcg_memory_oom_kills_total{group=\"d/b\",admission=\"over\"} 1\n",
                           "memcg_memory_high_throttled_seconds_total{group=\"d/b\"} 0.000000000\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line;
}

TEST(OomTrouble, ThrottlingSleepsCountOnTheGroup) {
  testing::ManualController m(0);
  GroupRef g = m.make("g"), other = m.make("other");
  g->set_high(uint64_t{100} << 20);
  // 120 MiB at once over a 100 MiB high: nothing to reclaim, a 2 s penalty.
  ASSERT_TRUE(charged(try_charge(*g, 120 * 256)));
  EXPECT_EQ(m.clock.total_slept_ns(), 2'000'000'000u);
  EXPECT_EQ(group_trouble(*g).throttled_ns, 2'000'000'000u);
  EXPECT_EQ(group_trouble(*other).throttled_ns, 0u);
  const std::string text = render_prometheus(m.ctl);
  EXPECT_NE(text.find("memcg_memory_high_throttled_seconds_total{group=\"g\"} 2.000000000\n"),
            std::string::npos);
  uncharge(*g, 120 * 256);
}

}  // namespace
}  // namespace memcg
