// The object layer: byte-exact charges over unit charges, reserves, pools, drains, statistics,
// limits, removal, NoFailScope, and exactness under random multi-threaded use (both the rseq and
// the try-lock paths).
#include "memcg/core/charge/obj_stock.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/charge/attach.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/alloc/lru_cache.hpp"
#include "memcg/base/nofail.hpp"
#include "memcg/percpu/internal/stock.hpp"

#include "alloc_test_support.hpp"

namespace memcg {
namespace {

using testing::kUnit;
using testing::round_up;
using testing::settle;

Options shards(int n) {
  Options o;
  o.nr_shards = n;
  o.stat_kinds = {"objects"};
  return o;
}

// Multi-threaded checks run twice: on the controller's own object stock (restartable sequences
// when available), and on a fallback-mode stock with fewer shards than CPUs, so that every call
// takes the try-lock and shards are shared.
void on_own_stock(void (*body)(Controller&, ObjStock&)) {
  Controller ctl(shards(0));
  body(ctl, ctl.obj_stock());
}
void on_try_lock_path(void (*body)(Controller&, ObjStock&)) {
  Controller ctl(shards(2));
  ObjStock os(2, ctl.unit_shift(), ObjStock::Mode::kFallback);
  EXPECT_FALSE(os.uses_rseq());
  body(ctl, os);
}

TEST(ObjStock, FirstChargeTakesOneUnitAndKeepsTheTail) {
  Controller ctl(shards(1));
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  ASSERT_EQ(try_charge_object(*g, 100), ChargeStatus::kOk);
  EXPECT_EQ(ctl.obj_stock().stocked(g.get()), kUnit - 100);
  ASSERT_EQ(try_charge_object(*g, 200), ChargeStatus::kOk);
  EXPECT_EQ(ctl.obj_stock().stocked(g.get()), kUnit - 300);
  ctl.stock().drain_all(nullptr);
  EXPECT_EQ(g->current(), uint64_t(kUnit));  // one unit, although the unit stock took a batch
  EXPECT_EQ(g->stat(StatRegistry::kAnon), 0);  // deferred while the reserve is hit
  ctl.flush_stats();
  EXPECT_EQ(g->stat(StatRegistry::kAnon), 300);  // flush_stats() folds the deferred bytes
  settle(ctl);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), 300);  // exact bytes once drained
  EXPECT_EQ(g->current(), uint64_t(kUnit));
  uncharge_object(*g, 100);
  uncharge_object(*g, 200);
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), 0);
  EXPECT_EQ(ObjStock::pooled(*g), 0);
}

TEST(ObjStock, ReservePastOneUnitReturnsWholeUnits) {
  Controller ctl(shards(1));
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  ASSERT_EQ(try_charge_object(*g, 3 * kUnit + 10), ChargeStatus::kOk);  // 4 units, tail kept
  EXPECT_EQ(ctl.obj_stock().stocked(g.get()), kUnit - 10);
  uncharge_object(*g, 3 * kUnit + 10);  // the reserve would hold 4 units: all go back
  EXPECT_EQ(ctl.obj_stock().stocked(g.get()), 0);
  ctl.stock().drain_all(nullptr);
  EXPECT_EQ(g->current(), 0u);
  EXPECT_GE(ctl.obj_stock().stats().returns, 1u);
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
}

TEST(ObjStock, SwitchingGroupsParksLeftoversInThePool) {
  Controller ctl(shards(1));
  GroupRef a, b;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_EQ(ctl.create("b", &b), 0);
  ASSERT_EQ(try_charge_object(*a, 1000), ChargeStatus::kOk);
  ASSERT_EQ(try_charge_object(*b, 1000), ChargeStatus::kOk);  // a's reserve leaves the shard
  EXPECT_EQ(ObjStock::pooled(*a), kUnit - 1000);
  EXPECT_EQ(ctl.obj_stock().stocked(a.get()), 0);
  // The next reserve of a picks the pool up: no new unit for a.
  ASSERT_EQ(try_charge_object(*a, 500), ChargeStatus::kOk);
  EXPECT_EQ(ObjStock::pooled(*a), 0);
  EXPECT_EQ(ctl.obj_stock().stocked(a.get()), kUnit - 1500);
  settle(ctl);
  EXPECT_EQ(a->current(), uint64_t(kUnit));
  EXPECT_EQ(a->stat(StatRegistry::kAnon), 1500);
  EXPECT_EQ(b->stat(StatRegistry::kAnon), 1000);
  uncharge_object(*a, 1000);
  uncharge_object(*b, 1000);
  uncharge_object(*a, 500);
  settle(ctl);
  EXPECT_EQ(a->current(), 0u);
  EXPECT_EQ(b->current(), 0u);
  EXPECT_EQ(a->stat(StatRegistry::kAnon), 0);
  EXPECT_EQ(b->stat(StatRegistry::kAnon), 0);
}

TEST(ObjStock, KindsAreCountedApartAndNotDoubleCounted) {
  Controller ctl(shards(1));
  const int objects = ctl.stat_index("objects");
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  ASSERT_EQ(try_charge_object(*g, 700, kDefaultCharge, objects), ChargeStatus::kOk);
  ASSERT_EQ(try_charge_object(*g, 300, kDefaultCharge, StatRegistry::kKernel), ChargeStatus::kOk);
  ASSERT_EQ(try_charge(*g, 2), ChargeStatus::kOk);  // unit charges count as before
  settle(ctl);
  EXPECT_EQ(g->stat(objects), 700);
  EXPECT_EQ(g->stat(StatRegistry::kKernel), 300);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), 2 * kUnit);
  EXPECT_EQ(g->current(), uint64_t(3 * kUnit));  // 1000 bytes round up to one unit
  uncharge_object(*g, 700, objects);
  uncharge_object(*g, 300, StatRegistry::kKernel);
  uncharge(*g, 2);
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
  EXPECT_EQ(g->stat(objects), 0);
}

TEST(ObjStock, RootRecordsNothing) {
  Controller ctl(shards(1));
  ASSERT_EQ(try_charge_object(ctl.root(), 100), ChargeStatus::kOk);
  uncharge_object(ctl.root(), 100);
  EXPECT_EQ(ctl.obj_stock().stocked(&ctl.root()), 0);
}

TEST(ObjStock, FailsAtTheLimitAndReservesOfOtherShardsAreDrained) {
  Controller ctl(shards(4));
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  g->set_max(4 * kUnit);
  ctl.set_reclaim_hook([](Group&, int64_t) { return int64_t{0}; });
  ctl.set_oom_hook([](Group&, int64_t) { return false; });
  int64_t live = 0;
  while (charged(try_charge_object(*g, 1000))) live += 1000;
  // Never over the limit, and nothing usable was hidden in a reserve.
  EXPECT_EQ(live, 4 * kUnit / 1000 * 1000);
  EXPECT_LE(g->current(), 4u * kUnit);
  EXPECT_GE(charge_stats(ctl).failed, 1u);
  settle(ctl);
  EXPECT_EQ(int64_t(g->current()), round_up(live));
  EXPECT_EQ(g->stat(StatRegistry::kAnon), live);
  for (int64_t b = 0; b < live; b += 1000) uncharge_object(*g, 1000);
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
}

TEST(ObjStock, NoFailScopeForcesAndIsCounted) {
  Controller ctl(shards(1));
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  g->set_max(kUnit);
  ctl.set_reclaim_hook([](Group&, int64_t) { return int64_t{0}; });
  ctl.set_oom_hook([](Group&, int64_t) { return false; });
  ASSERT_EQ(try_charge_object(*g, kUnit), ChargeStatus::kOk);
  EXPECT_EQ(try_charge_object(*g, 10), ChargeStatus::kNoMem);
  {
    NoFailScope scope;
    EXPECT_TRUE(NoFailScope::active());
    EXPECT_EQ(try_charge_object(*g, 10), ChargeStatus::kForced);
  }
  EXPECT_FALSE(NoFailScope::active());
  EXPECT_EQ(charge_stats(ctl).forced, 1u);
  EXPECT_EQ(g->current(), uint64_t(2 * kUnit));
  uncharge_object(*g, kUnit);
  uncharge_object(*g, 10);
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
}

TEST(ObjStock, AReclaimableCacheMakesRoom) {
  Controller ctl(shards(1));
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  g->set_max(16 * kUnit);
  LruCache cache(*g, "cache");
  ASSERT_EQ(cache.grow(16), 16);
  ASSERT_EQ(try_charge_object(*g, 3 * kUnit), ChargeStatus::kOk);
  EXPECT_GT(cache.evicted(), 0u);
  EXPECT_LE(g->current(), 16u * kUnit);
  uncharge_object(*g, 3 * kUnit);
  cache.drop();
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
}

TEST(ObjStock, RemovedGroupStaysValidUntilItsLastBytesGo) {
  Controller ctl(shards(2));
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  Group* raw = g.get();
  ASSERT_EQ(try_charge_object(*raw, 123), ChargeStatus::kOk);
  g.reset();
  ASSERT_EQ(ctl.remove("g"), 0);
  EXPECT_EQ(ctl.nr_dying(), 1u);                     // the object layer's reference keeps it
  EXPECT_EQ(ctl.root().current(), uint64_t(kUnit));  // still charged, through the root
  uncharge_object(*raw, 123);                        // no reference held by the caller
  settle(ctl);
  EXPECT_EQ(ctl.nr_dying(), 0u);
  EXPECT_EQ(ctl.root().current(), 0u);
}

// A free after Controller::remove must not put the dead group back into a reserve: with no
// drain at all, the group is released as soon as its last bytes go, and nothing stays charged.
void frees_after_removal_leave_no_reserve(Controller& ctl, ObjStock& os) {
  GroupRef g;
  GroupRef other;
  ASSERT_EQ(ctl.create("g", &g), 0);
  ASSERT_EQ(ctl.create("other", &other), 0);
  Group* raw = g.get();
  std::vector<uint64_t> sizes;
  for (int i = 0; i < 50; ++i) {
    sizes.push_back(24 + 40 * static_cast<uint64_t>(i));
    ASSERT_EQ(os.charge(*raw, sizes.back(), kDefaultCharge, StatRegistry::kAnon), ChargeStatus::kOk);
  }
  g.reset();
  ASSERT_EQ(ctl.remove("g"), 0);
  // Controller::remove drains its own object stock; a stock of the test's (the try-lock path)
  // gets the same drain here. After it, nothing drains any more.
  if (&os != &ctl.obj_stock()) os.drain_owner(raw);
  EXPECT_EQ(ctl.nr_dying(), 1u);
  for (uint64_t b : sizes) os.uncharge(*raw, b, StatRegistry::kAnon);
  EXPECT_EQ(ctl.nr_dying(), 0u) << "a reserve still holds the removed group";
  // More traffic on another group changes nothing for it, and leaves nothing of it behind.
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(os.charge(*other, 100, kDefaultCharge, StatRegistry::kAnon), ChargeStatus::kOk);
    os.uncharge(*other, 100, StatRegistry::kAnon);
  }
  EXPECT_EQ(ctl.nr_dying(), 0u);
  os.drain_all(nullptr);
  settle(ctl);
  EXPECT_EQ(ctl.root().current(), 0u);
}

TEST(ObjStock, FreesAfterRemovalLeaveNoReserveWithoutADrain) {
  on_own_stock(frees_after_removal_leave_no_reserve);
}

TEST(ObjStock, FreesAfterRemovalLeaveNoReserveWithoutADrainTryLockPath) {
  on_try_lock_path(frees_after_removal_leave_no_reserve);
}

// Objects allocated by one thread and freed by another move units out of one shard's share of
// the group's count and into another's (each shard keeps a few units as credit). Removed groups
// must still be released once their last bytes go, whatever credit the shards held, in both the
// rseq and the try-lock modes.
void removed_groups_are_released(Controller& ctl, ObjStock& os) {
  constexpr int kGroups = 4;
  constexpr int kObjects = 3000;  // about 100 units per group: many times a shard's credit
  std::vector<Group*> raw;
  for (int i = 0; i < kGroups; ++i) {
    GroupRef g;
    ASSERT_EQ(ctl.create("g" + std::to_string(i), &g), 0);
    raw.push_back(g.get());
  }
  std::vector<std::vector<uint64_t>> sizes(kGroups);
  std::vector<std::thread> ts;
  for (int i = 0; i < kGroups; ++i) {
    ts.emplace_back([&, i] {
      std::mt19937_64 rng(99 + i);
      for (int k = 0; k < kObjects; ++k) {
        const uint64_t b = 16 + rng() % 240;
        ASSERT_EQ(os.charge(*raw[i], b, kDefaultCharge, StatRegistry::kAnon), ChargeStatus::kOk);
        sizes[i].push_back(b);
      }
    });
  }
  for (auto& t : ts) t.join();
  ts.clear();
  for (int i = 0; i < kGroups; ++i) ASSERT_EQ(ctl.remove("g" + std::to_string(i)), 0);
  EXPECT_EQ(ctl.nr_dying(), size_t(kGroups));
  // Each group's objects are freed by two threads other than the one that charged them.
  for (int t = 0; t < 2; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kGroups; ++i) {
        const std::vector<uint64_t>& v = sizes[(i + t + 1) % kGroups];
        for (size_t k = static_cast<size_t>(t); k < v.size(); k += 2)
          os.uncharge(*raw[(i + t + 1) % kGroups], v[k], StatRegistry::kAnon);
      }
    });
  }
  for (auto& t : ts) t.join();
  os.drain_all(nullptr);
  settle(ctl);
  EXPECT_EQ(ctl.nr_dying(), 0u);
  EXPECT_EQ(ctl.root().current(), 0u);
}

TEST(ObjStock, RemovedGroupsAreReleasedAfterCrossThreadFrees) {
  on_own_stock(removed_groups_are_released);
}

TEST(ObjStock, RemovedGroupsAreReleasedAfterCrossThreadFreesTryLockPath) {
  on_try_lock_path(removed_groups_are_released);
}

// Random allocate/free from several threads over three groups and two kinds, with frees made by
// other threads; afterwards usage and memory.stat match what is still allocated exactly.
void random_exactness(Controller& ctl, ObjStock& os, int threads, int ops) {
  const int objects = ctl.stat_index("objects");
  GroupRef g[3];
  ASSERT_EQ(ctl.create("x", &g[0]), 0);
  ASSERT_EQ(ctl.create("y", &g[1]), 0);
  ASSERT_EQ(ctl.create("x/z", &g[2]), 0);
  struct Block {
    int group, kind;
    uint64_t bytes;
  };
  std::mutex mu;
  std::vector<Block> shared;  // blocks any thread may free
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(1234 + t);
      std::vector<Block> mine;
      for (int i = 0; i < ops; ++i) {
        const int r = static_cast<int>(rng() % 10);
        if (r < 5 || mine.empty()) {
          Block b{static_cast<int>(rng() % 3), rng() % 2 ? objects : StatRegistry::kAnon,
                  1 + rng() % (rng() % 8 == 0 ? 20000 : 300)};
          ASSERT_TRUE(charged(os.charge(*g[b.group], b.bytes, kDefaultCharge, b.kind)));
          mine.push_back(b);
        } else if (r < 8) {
          const size_t k = rng() % mine.size();
          os.uncharge(*g[mine[k].group], mine[k].bytes, mine[k].kind);
          mine[k] = mine.back();
          mine.pop_back();
        } else if (r < 9) {
          std::lock_guard lock(mu);
          shared.push_back(mine.back());
          mine.pop_back();
        } else {
          std::lock_guard lock(mu);
          if (!shared.empty()) {
            const Block b = shared.back();
            shared.pop_back();
            os.uncharge(*g[b.group], b.bytes, b.kind);
          }
        }
      }
      std::lock_guard lock(mu);
      shared.insert(shared.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : ts) t.join();

  auto check = [&] {
    os.drain_all(nullptr);
    settle(ctl);
    int64_t live[3][2] = {};
    for (const Block& b : shared) live[b.group][b.kind == objects] += static_cast<int64_t>(b.bytes);
    for (int i = 0; i < 3; ++i) {
      const int64_t local = live[i][0] + live[i][1];
      const int64_t below = i == 0 ? round_up(live[2][0] + live[2][1]) : 0;
      EXPECT_EQ(int64_t(g[i]->current()), round_up(local) + below) << i;
      EXPECT_EQ(g[i]->stat_local(StatRegistry::kAnon), live[i][0]) << i;
      EXPECT_EQ(g[i]->stat_local(objects), live[i][1]) << i;
      EXPECT_LT(ObjStock::pooled(*g[i]), kUnit);
    }
  };
  check();
  // Free half from this thread, check, then the rest.
  for (size_t i = shared.size() / 2; i < shared.size(); ++i)
    os.uncharge(*g[shared[i].group], shared[i].bytes, shared[i].kind);
  shared.resize(shared.size() / 2);
  check();
  for (const Block& b : shared) os.uncharge(*g[b.group], b.bytes, b.kind);
  shared.clear();
  check();
  for (auto& x : g) EXPECT_EQ(x->current(), 0u);
}

TEST(ObjStock, RandomExactnessManyThreads) {
  on_own_stock([](Controller& ctl, ObjStock& os) { random_exactness(ctl, os, 4, 20000); });
}

TEST(ObjStock, RandomExactnessTryLockPath) {
  on_try_lock_path([](Controller& ctl, ObjStock& os) { random_exactness(ctl, os, 4, 20000); });
}

// Removal, drains and frees at the same time: each round, threads charge objects to fresh groups,
// hand some to other threads, and free them while the groups are removed and every reserve is
// drained concurrently. Frees hold no reference; the object layer's count (and the shards'
// credit of it) must keep each group alive exactly until its last bytes go, so that after the
// last round every group has been freed and nothing is left charged. ASan and TSan runs check
// the lifetime; the counters check the accounting.
void wait_zero(std::atomic<int>& n) {
  for (int v = n.load(); v != 0; v = n.load()) n.wait(v);
}

void churn_removal(Controller& ctl, ObjStock& os) {
  constexpr int kThreads = 3;
  constexpr int kRounds = 40;
  constexpr int kGroups = 3;
  struct Block {
    Group* group;
    uint64_t bytes;
  };
  for (int round = 0; round < kRounds; ++round) {
    std::vector<GroupRef> refs(kGroups);
    for (int i = 0; i < kGroups; ++i)
      ASSERT_EQ(ctl.create("r" + std::to_string(round) + "_" + std::to_string(i), &refs[i]), 0);
    std::mutex mu;
    std::vector<Block> handed;  // blocks that any thread may free
    std::atomic<int> charging{kThreads};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) {
      ts.emplace_back([&, t] {
        std::mt19937_64 rng(round * 31 + t);
        std::vector<Block> mine;
        for (int k = 0; k < 600; ++k) {
          Group* g = refs[rng() % kGroups].get();
          const uint64_t b = 1 + rng() % (rng() % 16 == 0 ? 9000 : 300);
          ASSERT_EQ(os.charge(*g, b, kDefaultCharge, StatRegistry::kAnon), ChargeStatus::kOk);
          mine.push_back({g, b});
          if (rng() % 3 == 0) {
            const size_t j = rng() % mine.size();
            os.uncharge(*mine[j].group, mine[j].bytes, StatRegistry::kAnon);
            mine[j] = mine.back();
            mine.pop_back();
          }
        }
        {
          std::lock_guard lock(mu);
          handed.insert(handed.end(), mine.begin(), mine.end());
        }
        charging.fetch_sub(1);
        charging.notify_all();
        // Free blocks charged by any thread while the groups are being removed and drained.
        wait_zero(charging);
        for (;;) {
          Block b;
          {
            std::lock_guard lock(mu);
            if (handed.empty()) break;
            const size_t j = rng() % handed.size();
            b = handed[j];
            handed[j] = handed.back();
            handed.pop_back();
          }
          os.uncharge(*b.group, b.bytes, StatRegistry::kAnon);
        }
      });
    }
    std::thread drainer([&] {
      wait_zero(charging);
      for (int k = 0; k < 20; ++k) {
        os.drain_all(nullptr);
        std::this_thread::yield();
      }
    });
    wait_zero(charging);
    refs.clear();  // frees from here on hold no reference
    for (int i = 0; i < kGroups; ++i)
      ASSERT_EQ(ctl.remove("r" + std::to_string(round) + "_" + std::to_string(i)), 0);
    for (auto& t : ts) t.join();
    drainer.join();
  }
  os.drain_all(nullptr);  // first: its deferred statistics reach the groups, then the fold
  settle(ctl);
  EXPECT_EQ(ctl.nr_dying(), 0u);
  EXPECT_EQ(ctl.root().current(), 0u);
  EXPECT_EQ(ctl.root().stat(StatRegistry::kAnon), 0);
}

TEST(ObjStock, RemovalDrainsAndFreesAtOnce) {
  on_own_stock(churn_removal);
}

TEST(ObjStock, RemovalDrainsAndFreesAtOnceTryLockPath) {
  on_try_lock_path(churn_removal);
}

}  // namespace
}  // namespace memcg
