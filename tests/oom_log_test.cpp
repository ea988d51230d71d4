// OomLog (memcg/core/oom/oom_log.hpp): what an OOM kill leaves in the ring, its bounds, and readers
// racing the killer (run under TSan).
#include "memcg/core/oom/oom_log.hpp"

#include <gtest/gtest.h>

#include <chrono>

#include <atomic>
#include <cerrno>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"

namespace memcg {
namespace {

Options one_shard() {
  Options o;
  o.nr_shards = 1;
  return o;
}

void release_all(Member& m) { m.uncharge(m.charged()); }

bool charge_units(Member& m, int64_t units) {
  for (int64_t i = 0; i < units; ++i)
    if (!charged(m.charge(1))) return false;
  return true;
}

// d (max 100 units) holds d/x with "big" (60 units) and d/y with "small" (30): a charge of the
// immune "charger" past the limit kills "big".
struct Scene {
  Controller ctl{one_shard()};
  GroupRef d, x, y;
  Scene() {
    EXPECT_EQ(ctl.create("d", &d), 0);
    EXPECT_EQ(ctl.create("d/x", &x), 0);
    EXPECT_EQ(ctl.create("d/y", &y), 0);
    d->set_max(100 * ctl.unit_size());
  }
};

TEST(OomLog, AKillIsLoggedWithTheLargestConsumersAtTheDecision) {
  Scene s;
  Member big(*s.x, "big", release_all);
  Member small(*s.y, "small", release_all);
  Member charger(*s.y, "charger", release_all, Member::kImmune);
  ASSERT_TRUE(charge_units(big, 60));
  ASSERT_TRUE(charge_units(small, 30));
  ASSERT_TRUE(charge_units(charger, 20));  // past the 10 left: big is killed

  const std::vector<OomLogEntry> log = oom_log(s.ctl).snapshot();
  ASSERT_EQ(log.size(), 1u);
  const OomLogEntry& e = log[0];
  EXPECT_EQ(e.seq, 1u);
  // Wall-clock time beside the controller's clock: within a minute of now.
  const auto now_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::system_clock::now().time_since_epoch()).count());
  EXPECT_LE(e.wall_ns, now_ns);
  EXPECT_GT(e.wall_ns + 60'000'000'000u, now_ns);
  EXPECT_EQ(e.kind, OomLogKind::kOomKill);
  EXPECT_EQ(e.oom.domain, "d");
  EXPECT_EQ(e.oom.victim, "big");
  ASSERT_GE(e.members.size(), 3u);
  EXPECT_EQ(e.members[0].name, "big");
  EXPECT_EQ(e.members[0].group, "d/x");
  EXPECT_EQ(e.members[0].bytes, 60 * s.ctl.unit_size());  // as chosen, not after release
  EXPECT_EQ(e.members[1].name, "small");
  ASSERT_EQ(e.groups.size(), 3u);
  EXPECT_EQ(e.groups[0].name, "d");
  EXPECT_GE(e.groups[0].bytes, 100 * s.ctl.unit_size());
  EXPECT_EQ(e.groups[1].name, "d/x");
  EXPECT_EQ(e.groups[1].bytes, 60 * s.ctl.unit_size());
  const OomLogTotals t = oom_log(s.ctl).totals();
  EXPECT_EQ(t.reports, 1u);
  EXPECT_EQ(t.kills, 1u);
  EXPECT_EQ(t.by_outcome[static_cast<int>(OomOutcome::kKill)], 1u);
  EXPECT_EQ(t.by_outcome[static_cast<int>(OomOutcome::kNone)], 0u);
  EXPECT_EQ(t.by_decider[static_cast<int>(e.oom.decider)], 1u);
  EXPECT_TRUE(e.oom.decider == OomDecider::kKernelOrder ||
              e.oom.decider == OomDecider::kExcessOrder)
      << oom_decider_name(e.oom.decider);
  EXPECT_EQ(t.by_decider[static_cast<int>(OomDecider::kNone)], 0u);

  const std::string line = format_oom_log_line(e);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(line.find("victim=big"), std::string::npos) << line;
  // The request in bytes as every size of the line (one unit of 4 KiB), and the wall-clock time.
  EXPECT_NE(line.find(" request=4.0KiB "), std::string::npos) << line;
  EXPECT_NE(line.find(" at=" + format_utc(e.wall_ns) + " "), std::string::npos) << line;
  EXPECT_EQ(format_utc(1'796'613'901'123'456'789u), "2026-12-07T03:25:01.123Z");
  EXPECT_NE(line.find("top_members=big:240.0KiB/0B"), std::string::npos) << line;
  EXPECT_NE(line.find("top_groups=d:"), std::string::npos) << line;
}

// A group's admitted bytes are those of the members in its subtree, each counted in every
// ancestor up to the domain (and none above it).
TEST(OomLog, GroupsCountTheAdmittedSizesOfTheirSubtree) {
  Scene s;
  GroupRef z;
  ASSERT_EQ(s.ctl.create("d/x/z", &z), 0);
  Member a(*s.x, "a", release_all);
  Member b(*z, "b", release_all);
  Member c(*s.y, "c", release_all);
  Member charger(*s.y, "charger", release_all, Member::kImmune);
  a.add_admitted(10);
  b.add_admitted(5);
  c.add_admitted(7);
  ASSERT_TRUE(charge_units(a, 50));
  ASSERT_TRUE(charge_units(b, 20));
  ASSERT_TRUE(charge_units(c, 20));
  ASSERT_TRUE(charge_units(charger, 20));  // past the 10 left: a is killed

  const std::vector<OomLogEntry> log = oom_log(s.ctl).snapshot();
  ASSERT_EQ(log.size(), 1u);
  const uint64_t unit = s.ctl.unit_size();
  std::map<std::string, uint64_t> admitted, held;
  for (const OomConsumer& g : log[0].groups) {
    admitted[g.name] = g.admitted_bytes;
    held[g.name] = g.bytes;
  }
  ASSERT_EQ(admitted.size(), 4u);
  EXPECT_EQ(admitted["d"], 22 * unit);
  EXPECT_EQ(admitted["d/x"], 15 * unit);
  EXPECT_EQ(admitted["d/x/z"], 5 * unit);
  EXPECT_EQ(admitted["d/y"], 7 * unit);
  // The victim's groups count what it held when chosen.
  EXPECT_EQ(held["d/x"], 70 * unit);
  EXPECT_EQ(held["d/x/z"], 20 * unit);
  EXPECT_GE(held["d"], 100 * unit);
}

TEST(OomLog, NoVictimIsLoggedToo) {
  Scene s;
  Member charger(*s.y, "charger", release_all, Member::kImmune);
  EXPECT_FALSE(charge_units(charger, 101));
  const OomLogTotals t = oom_log(s.ctl).totals();
  EXPECT_GE(t.reports, 1u);
  EXPECT_EQ(t.reports, t.by_outcome[static_cast<int>(OomOutcome::kNone)]);
  EXPECT_EQ(t.by_decider[static_cast<int>(OomDecider::kNone)], t.reports);
  const auto log = oom_log(s.ctl).snapshot();
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.back().oom.victim, "");
  ASSERT_FALSE(log.back().members.empty());
  EXPECT_EQ(log.back().members[0].name, "charger");
}

TEST(OomLog, CapacityBoundsTheRingAndRefusesBadValues) {
  Scene s;
  OomLog& log = oom_log(s.ctl);
  EXPECT_EQ(log.capacity(), OomLog::kDefaultCapacity);
  EXPECT_EQ(log.set_capacity(0), EINVAL);
  EXPECT_EQ(log.set_capacity(OomLog::kMaxCapacity + 1), EINVAL);
  EXPECT_EQ(log.capacity(), OomLog::kDefaultCapacity);  // unchanged
  ASSERT_EQ(log.set_capacity(3), 0);
  OomReport r;
  r.domain = std::string(10'000, 'n');  // capped
  r.killed.assign(100, std::string(1000, 'k'));
  for (int i = 0; i < 10; ++i) log.append(*s.d, r);
  const auto snap = log.snapshot();
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_EQ(snap[0].seq, 8u);
  EXPECT_EQ(snap[2].seq, 10u);
  EXPECT_EQ(snap[0].oom.domain.size(), OomLog::kMaxName);
  EXPECT_EQ(snap[0].oom.killed.size(), OomLog::kMaxListed);
  EXPECT_EQ(snap[0].oom.killed[0].size(), OomLog::kMaxName);
  EXPECT_EQ(log.snapshot(9).size(), 1u);
  EXPECT_EQ(log.totals().reports, 10u);
  EXPECT_EQ(log.totals().kills, 1000u);  // counted in full
  EXPECT_EQ(log.totals().by_decider[static_cast<int>(OomDecider::kNone)], 10u);  // r's decider
  ASSERT_EQ(log.set_capacity(1), 0);
  EXPECT_EQ(log.snapshot().size(), 1u);
  EXPECT_EQ(log.snapshot()[0].seq, 10u);
  r.decider = static_cast<OomDecider>(200);  // no such decider: counted as a report, no slot
  log.append(*s.d, r);
  uint64_t decided = 0;
  for (uint64_t n : log.totals().by_decider) decided += n;
  EXPECT_EQ(log.totals().reports, 11u);
  EXPECT_EQ(decided, 10u);
}

// Killers and readers at once: sequence numbers stay dense and ordered, readers never see more
// than the capacity.
TEST(OomLog, ReadersRaceKillers) {
  Scene s;
  ASSERT_EQ(oom_log(s.ctl).set_capacity(4), 0);
  std::atomic<bool> done{false};
  std::atomic<uint64_t> bad{0};
  std::thread reader([&] {
    while (!done.load(std::memory_order_acquire)) {
      const auto snap = oom_log(s.ctl).snapshot();
      if (snap.size() > 4) bad.fetch_add(1);
      for (size_t i = 1; i < snap.size(); ++i)
        if (snap[i].seq != snap[i - 1].seq + 1) bad.fetch_add(1);
      (void)oom_log(s.ctl).totals();
    }
  });
  std::vector<std::thread> killers;
  for (int k = 0; k < 2; ++k)
    killers.emplace_back([&, k] {
      for (int round = 0; round < 20; ++round) {
        Member victim(k == 0 ? *s.x : *s.y, "v" + std::to_string(k), release_all);
        Member charger(k == 0 ? *s.x : *s.y, "c" + std::to_string(k), release_all,
                       Member::kImmune);
        charge_units(victim, 45);
        charge_units(charger, 60);
        charger.uncharge(charger.charged());
      }
    });
  for (auto& t : killers) t.join();
  done.store(true, std::memory_order_release);
  reader.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GE(oom_log(s.ctl).totals().reports, 1u);
  EXPECT_LE(oom_log(s.ctl).snapshot().size(), 4u);
}

}  // namespace
}  // namespace memcg
