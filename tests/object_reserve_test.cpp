// The object layer's reserves and pools seen from outside: a memory.max or memory.high write
// gives back what the subtree's reserves hold before it reclaims or kills, flush_stats() folds
// the reserves' deferred byte statistics, and a free that parks bytes in a removed group's pool
// never touches the group after another thread may have released it.
#include "memcg/core/charge/obj_stock.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/files/files.hpp"
#include "memcg/core/charge/limits.hpp"
#include "memcg/percpu/internal/stock.hpp"

#include "alloc_test_support.hpp"

namespace memcg {
namespace {

using testing::kUnit;
using testing::settle;

// The CPUs this thread may run on.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

bool pin(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
}

// Two CPUs' reserves each hold most of a unit charged for 96 live bytes: usage is two units for
// 192 live bytes. memory.max = one unit fits once the reserves are given back; before, only the
// unit stock was drained, reclaim found nothing and the write ran the OOM killer.
void write_limit_with_reserves_outstanding(const char* file) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  Options o;
  o.batch = 1;  // no unit-stock surplus: the reserves are all that usage holds beyond live bytes
  Controller ctl(o);
  int oom_calls = 0;
  ctl.set_oom_hook([&](Group&, int64_t) {
    ++oom_calls;
    return false;
  });
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  std::thread t([&] {
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(pin(cpus[i]));
      ASSERT_EQ(try_charge_object(*g, 96), ChargeStatus::kOk);
    }
  });
  t.join();
  ctl.stock().drain_all(nullptr);
  ASSERT_EQ(g->current(), 2u * kUnit);
  ASSERT_EQ(ctl.obj_stock().stocked(g.get()), 2 * (kUnit - 96));

  ASSERT_EQ(write_file(*g, file, std::to_string(kUnit)), 0);
  EXPECT_EQ(g->current(), uint64_t(kUnit));
  EXPECT_EQ(oom_calls, 0);
  EXPECT_EQ(g->events().get(Event::kOom), 0u);
  EXPECT_EQ(g->events().get(Event::kOomKill), 0u);

  uncharge_object(*g, 96);
  uncharge_object(*g, 96);
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
}

TEST(ObjectReserves, MaxWriteJustAboveLiveBytesGivesReservesBack) {
  write_limit_with_reserves_outstanding("memory.max");
}

TEST(ObjectReserves, HighWriteJustAboveLiveBytesGivesReservesBack) {
  write_limit_with_reserves_outstanding("memory.high");
}

// flush_stats() folds everything: the reserve's deferred byte delta included.
TEST(ObjectReserves, FlushStatsFoldsDeferredObjectBytes) {
  Options o;
  o.stat_kinds = {"objects"};
  Controller ctl(o);
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  const int objects = ctl.stat_index("objects");
  ASSERT_EQ(try_charge_object(*g, 100, kDefaultCharge, StatRegistry::kAnon), ChargeStatus::kOk);
  ASSERT_EQ(try_charge_object(*g, 24, kDefaultCharge, objects), ChargeStatus::kOk);
  ASSERT_EQ(try_charge_object(*g, 40, kDefaultCharge, objects), ChargeStatus::kOk);
  ctl.flush_stats();
  EXPECT_EQ(g->stat(StatRegistry::kAnon), 100);
  EXPECT_EQ(g->stat(objects), 64);
  EXPECT_EQ(ctl.root().stat(objects), 64);
  uncharge_object(*g, 40, objects);
  ctl.flush_stats();
  EXPECT_EQ(g->stat(objects), 24);
  uncharge_object(*g, 24, objects);
  uncharge_object(*g, 100, StatRegistry::kAnon);
  ctl.flush_stats();
  EXPECT_EQ(g->stat(objects), 0);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), 0);
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
}

// Frees that go to the pool (kNoStatKind never uses a reserve) race to complete whole units of
// a removed group that only the object layer keeps alive: the free whose bytes complete the last
// units releases the group, and no other free may touch the pool after publishing its bytes.
// ASan reports a use after free otherwise (the window is a few instructions: a stress, bounded
// in time).
TEST(ObjectReserves, ConcurrentPoolFreesOfARemovedGroup) {
  Options o;
  o.batch = 1;  // returns of 3 units bypass the unit stock: no slot keeps the group alive
  Controller ctl(o);
  constexpr int kThreads = 4;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int rounds = 0;
  while (std::chrono::steady_clock::now() < deadline && rounds < 20000) {
    ++rounds;
    GroupRef g;
    ASSERT_EQ(ctl.create("g", &g), 0);
    for (int t = 0; t < kThreads; ++t)
      ASSERT_EQ(try_charge_object(*g, 3 * kUnit, kDefaultCharge, kNoStatKind), ChargeStatus::kOk);
    Group* raw = g.get();
    ASSERT_EQ(ctl.remove(*g), 0);
    g = GroupRef();  // the object layer's reference is the last
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) {
        }
        uncharge_object(*raw, 3 * kUnit, kNoStatKind);
      });
    }
    for (auto& th : threads) th.join();
    ASSERT_EQ(ctl.nr_dying(), 0u) << "round " << rounds;
  }
  settle(ctl);
  EXPECT_EQ(ctl.root().current(), 0u);
}

}  // namespace
}  // namespace memcg
