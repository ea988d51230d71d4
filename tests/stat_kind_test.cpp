// Statistic kinds that are not the controller's: every public charge path (unit charges on the
// stock hit and the slow path, direct uncharges, byte charges, charge handles, the object layer)
// charges the units and changes no memory.stat item; the stock never caches such a kind; a
// MemoryResource refuses one at construction. Before, an out-of-range kind indexed the
// statistics engine's per-shard counters past their block (the next shard's tree links, or past
// the allocation: ASan reports it).
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <memory_resource>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/alloc/pmr.hpp"
#include "memcg/percpu/internal/stock.hpp"

#include "alloc_test_support.hpp"

namespace memcg {
namespace {

using testing::settle;

// Kinds a caller might pass by mistake, relative to a controller with `n` kinds.
std::vector<int> bad_kinds(int n) {
  return {n, n + 1, n + 3, 127, 128, 200, 253, 254, 255, 300, 100000, -2, -100, INT_MIN, INT_MAX};
}

void expect_only_anon(Controller& ctl, Group& g, int64_t anon_bytes) {
  for (size_t i = 0; i < ctl.stats().size(); ++i) {
    const int item = static_cast<int>(i);
    if (item == StatRegistry::kPgfault) continue;  // counts counter refills, whatever the kind
    EXPECT_EQ(g.stat(item), item == StatRegistry::kAnon ? anon_bytes : 0)
        << ctl.stats().item(i).name;
  }
}

// One shard: the statistics engine's blocks are one per node, so an index past the items
// lands past the allocation.
TEST(StatKind, InvalidKindsAreChargedAndCountedInNoItem) {
  Options o;
  o.nr_shards = 1;
  o.batch = 8;
  o.stat_kinds = {"app"};
  Controller ctl(o);
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  const int n = static_cast<int>(ctl.stats().size());
  ASSERT_EQ(try_charge(*g, 1, kDefaultCharge, StatRegistry::kAnon), ChargeStatus::kOk);
  for (int kind : bad_kinds(n)) {
    SCOPED_TRACE(kind);
    // Stock hits and refills (the slot may re-tag itself to the kind when its count is zero).
    for (int i = 0; i < 40; ++i)
      ASSERT_EQ(try_charge(*g, 1, kDefaultCharge, kind), ChargeStatus::kOk);
    for (int i = 0; i < 40; ++i) uncharge(*g, 1, kind);
    // Past the batch: the slow path, and a direct uncharge.
    ASSERT_EQ(try_charge(*g, 20, kDefaultCharge, kind), ChargeStatus::kOk);
    uncharge_direct(*g, 20, kind);
    ASSERT_EQ(try_charge_bytes(*g, 10000, kDefaultCharge, kind), ChargeStatus::kOk);
    uncharge_bytes(*g, 10000, kind);
    {
      ChargeHandle h(*g, 5000, kDefaultCharge, kind);
      EXPECT_TRUE(h.ok());
    }
    // The object layer, on the reserve path and past one unit.
    ASSERT_EQ(try_charge_object(*g, 100, kDefaultCharge, kind), ChargeStatus::kOk);
    ASSERT_EQ(try_charge_object(*g, 3 * 4096 + 5, kDefaultCharge, kind), ChargeStatus::kOk);
    uncharge_object(*g, 100, kind);
    uncharge_object(*g, 3 * 4096 + 5, kind);
    g->stat_add(kind, 4096, 1);
    EXPECT_EQ(g->stat(kind), 0);
  }
  settle(ctl);
  expect_only_anon(ctl, *g, 4096);
  uncharge(*g, 1, StatRegistry::kAnon);
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
  expect_only_anon(ctl, *g, 0);
}

// The same through a stock that restartable sequences may serve, from several threads at once.
TEST(StatKind, InvalidKindsConcurrentlyOnEveryShard) {
  Options o;
  o.stat_kinds = {"app"};
  Controller ctl(o);
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  const std::vector<int> kinds = bad_kinds(static_cast<int>(ctl.stats().size()));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 200; ++round) {
        const int kind = kinds[(round + t) % kinds.size()];
        for (int i = 0; i < 10; ++i) (void)try_charge(*g, 1, kDefaultCharge, kind);
        for (int i = 0; i < 10; ++i) uncharge(*g, 1, kind);
        (void)try_charge_object(*g, 64, kDefaultCharge, kind);
        uncharge_object(*g, 64, kind);
      }
    });
  }
  for (auto& th : threads) th.join();
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
  expect_only_anon(ctl, *g, 0);
}

// A stock slot caches any kind its tag byte can name and passes the others on at once; the
// owner decides what a kind means (a Group ignores one it does not have).
struct RecordingOwner final : StockOwner {
  std::vector<std::pair<int, int64_t>> stats;
  int64_t uncharged = 0;
  int refs = 0;
  void stock_uncharge(int64_t units) noexcept override { uncharged += units; }
  void stock_stat(int kind, int64_t units) noexcept override { stats.emplace_back(kind, units); }
  void stock_get() noexcept override { ++refs; }
  void stock_put() noexcept override { --refs; }
  bool stock_is_within(const StockOwner* root) const noexcept override { return root == this; }
};

TEST(StatKind, StockCachesOnlyKindsATagCanName) {
  // One shard on the try-lock path: every call of this thread lands on it.
  Stock stock(1, 16, Stock::Mode::kFallback);
  RecordingOwner o;
  stock.refill(&o, 2, Stock::kMaxCachedKind);  // the largest a tag names: cached
  EXPECT_TRUE(o.stats.empty());
  stock.drain_all(nullptr);
  ASSERT_EQ(o.stats.size(), 1u);
  EXPECT_EQ(o.stats[0], std::make_pair(Stock::kMaxCachedKind, int64_t{-2}));
  o.stats.clear();
  // Past a byte: passed on at the refill and at each hit, as it is, never cached.
  stock.refill(&o, 4, Stock::kMaxCachedKind + 1);
  ASSERT_EQ(o.stats.size(), 1u);
  EXPECT_EQ(o.stats[0], std::make_pair(Stock::kMaxCachedKind + 1, int64_t{-4}));
  EXPECT_TRUE(stock.consume(&o, 1, INT32_MAX));
  ASSERT_EQ(o.stats.size(), 2u);
  EXPECT_EQ(o.stats[1], std::make_pair(INT32_MAX, int64_t{1}));
  EXPECT_TRUE(stock.consume(&o, 1, INT32_MIN));
  ASSERT_EQ(o.stats.size(), 3u);
  EXPECT_EQ(o.stats[2], std::make_pair(INT32_MIN, int64_t{1}));
  stock.fold_stats();
  EXPECT_EQ(o.stats.size(), 3u);  // nothing was cached
  stock.drain_all(nullptr);
  EXPECT_EQ(o.refs, 0);
}

TEST(StatKind, MemoryResourceRefusesAKindNotOfItsController) {
  Options o;
  o.stat_kinds = {"app"};
  Controller ctl(o);
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  const int n = static_cast<int>(ctl.stats().size());
  for (int kind : bad_kinds(n)) {
    MemoryResourceOptions mo;
    mo.kind = kind;
    EXPECT_THROW(MemoryResource(*g, mo), std::invalid_argument) << kind;
    EXPECT_THROW(MemoryResource(ctl, std::pmr::new_delete_resource(), mo), std::invalid_argument)
        << kind;
  }
  for (int kind : {kNoStatKind, 0, ctl.stat_index("app")}) {
    MemoryResourceOptions mo;
    mo.kind = kind;
    EXPECT_NO_THROW(MemoryResource(*g, mo)) << kind;
  }
}

}  // namespace
}  // namespace memcg
