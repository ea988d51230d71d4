// Tests of the per-CPU stock: slots, refills, drains, eviction and the stat counts it caches.

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "memcg/base/internal/cpu.hpp"
#include "memcg/base/internal/rseq.hpp"
#include "memcg/percpu/internal/stock.hpp"

#include "stock_support.hpp"

namespace memcg {
namespace {

using internal::CsResult;
using namespace testing_stock;

// Every stock test runs in both modes.
class StockTest : public PinnedTest, public ::testing::WithParamInterface<Stock::Mode> {
 protected:
  std::unique_ptr<Stock> make(int64_t batch = 64, int shards = 0) {
    return std::make_unique<Stock>(shards, batch, GetParam());
  }
};

INSTANTIATE_TEST_SUITE_P(Modes, StockTest,
                         ::testing::Values(Stock::Mode::kAuto, Stock::Mode::kFallback),
                         [](const auto& info) {
                           return info.param == Stock::Mode::kAuto ? "Auto" : "Fallback";
                         });

TEST_P(StockTest, ModeSelection) {
  auto stock = make();
  if (GetParam() == Stock::Mode::kFallback) {
    EXPECT_FALSE(stock->uses_rseq());
  } else {
    EXPECT_EQ(stock->uses_rseq(), MEMCG_RSEQ_CS && internal::rseq_mode());
  }
  EXPECT_EQ(stock->nr_shards(), internal::nr_cpu_ids());
  EXPECT_EQ(stock->batch(), 64);
  EXPECT_EQ(stock->slack_bound(), int64_t{internal::nr_cpu_ids()} * 7 * 64);
  if (internal::nr_cpu_ids() > 1) {
    // Fewer shards than CPUs: critical sections cannot be used.
    Stock few(1, 64, GetParam());
    EXPECT_FALSE(few.uses_rseq());
  }
}

TEST_P(StockTest, FirstRefillInstallsThenConsumeTakes) {
  FakeOwner o;
  auto stock = make();
  EXPECT_FALSE(stock->consume(&o, 1));  // nothing cached yet
  stock->refill(&o, 10);
  EXPECT_EQ(o.refs.load(), 1);
  EXPECT_EQ(stock->stocked(&o), 10);
  EXPECT_TRUE(stock->consume(&o, 4));
  EXPECT_EQ(stock->stocked(&o), 6);
  EXPECT_FALSE(stock->consume(&o, 7));  // no partial use
  EXPECT_EQ(stock->stocked(&o), 6);
  EXPECT_TRUE(stock->consume(&o, 6));
  EXPECT_EQ(stock->stocked(&o), 0);
  EXPECT_FALSE(stock->consume(&o, 1));
  EXPECT_EQ(o.refs.load(), 1);  // an empty slot still caches its owner
  stock->refill(&o, 3);
  EXPECT_TRUE(stock->consume(&o, 3));
  EXPECT_EQ(o.given_back.load(), 0);
  stock.reset();
  EXPECT_EQ(o.refs.load(), 0);
  EXPECT_EQ(o.errors.load(), 0);
}

// refill_hit is the hot path alone: it never installs a slot, never passes anything to the
// owner, and takes nothing that would leave the slot above the batch; in fallback mode it never
// hits at all.
TEST_P(StockTest, RefillHitTakesUnitsOnlyIntoAnExistingSlotWithRoom) {
  FakeOwner o;
  auto stock = make();
  EXPECT_FALSE(stock->refill_hit(&o, 1));  // no slot: nothing installed
  EXPECT_EQ(stock->stocked(&o), 0);
  EXPECT_EQ(o.refs.load(), 0);
  stock->refill(&o, 10);
  const bool hits = stock->uses_rseq();
  EXPECT_EQ(stock->refill_hit(&o, 50), hits);
  EXPECT_EQ(stock->stocked(&o), hits ? 60 : 10);
  EXPECT_FALSE(stock->refill_hit(&o, 64 - stock->stocked(&o) + 1));  // would pass the batch
  EXPECT_FALSE(stock->refill_hit(&o, 65));                           // beyond any slot
  EXPECT_EQ(stock->stocked(&o), hits ? 60 : 10);
  EXPECT_EQ(o.given_back.load(), 0);  // a miss passes nothing on
  stock.reset();
  EXPECT_EQ(o.given_back.load(), hits ? 60 : 10);
  EXPECT_EQ(o.refs.load(), 0);
  EXPECT_EQ(o.errors.load(), 0);
}

TEST_P(StockTest, RefillUpToBatchKeepsAboveDrainsSlot) {
  FakeOwner o;
  auto stock = make(64);
  stock->refill(&o, 60);
  stock->refill(&o, 4);  // exactly the batch: kept
  EXPECT_EQ(stock->stocked(&o), 64);
  EXPECT_EQ(o.given_back.load(), 0);
  stock->refill(&o, 1);  // 65 > 64: the whole slot goes back
  EXPECT_EQ(o.given_back.load(), 65);
  EXPECT_EQ(stock->stocked(&o), 0);
  EXPECT_EQ(o.refs.load(), 0);
  EXPECT_EQ(stock->stats().overflow_drains, 1u);
  stock->refill(&o, 2);  // reinstalls
  EXPECT_EQ(o.refs.load(), 1);
  EXPECT_EQ(stock->stocked(&o), 2);
}

TEST_P(StockTest, RequestsAboveBatchBypass) {
  FakeOwner o;
  auto stock = make(32);
  stock->refill(&o, 33);
  EXPECT_EQ(o.given_back.load(), 33);
  EXPECT_EQ(o.refs.load(), 0);
  stock->refill(&o, 32);
  EXPECT_FALSE(stock->consume(&o, 33));
  EXPECT_EQ(stock->stocked(&o), 32);
  stock->refill(&o, 0);  // nothing to do
  EXPECT_EQ(stock->stocked(&o), 32);
  EXPECT_EQ(o.given_back.load(), 33);
}

TEST_P(StockTest, EightOwnersEvictRoundRobin) {
  std::array<FakeOwner, 10> o;
  auto stock = make();
  for (int i = 0; i < 7; ++i) stock->refill(&o[i], i + 1);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(o[i].refs.load(), 1) << i;

  stock->refill(&o[7], 20);  // shard full: the cursor's slot (owner 0) is drained
  EXPECT_EQ(o[0].given_back.load(), 1);
  EXPECT_EQ(o[0].refs.load(), 0);
  EXPECT_EQ(stock->stocked(&o[7]), 20);
  stock->refill(&o[8], 20);  // next victim: owner 1
  EXPECT_EQ(o[1].given_back.load(), 2);
  EXPECT_EQ(o[1].refs.load(), 0);
  stock->refill(&o[0], 5);  // next victim: owner 2
  EXPECT_EQ(o[2].given_back.load(), 3);
  EXPECT_EQ(stock->stocked(&o[0]), 5);
  for (int i = 3; i < 7; ++i) {
    EXPECT_EQ(o[i].given_back.load(), 0) << i;
    EXPECT_EQ(stock->stocked(&o[i]), i + 1) << i;
  }
  EXPECT_EQ(stock->stats().evictions, 3u);
  stock.reset();
  for (auto& x : o) {
    EXPECT_EQ(x.refs.load(), 0);
    EXPECT_EQ(x.errors.load(), 0);
  }
  // Owners 0..8 refilled 1..7, 20, 20, and 5: everything came back.
  int64_t back = 0;
  for (auto& x : o) back += x.given_back.load();
  EXPECT_EQ(back, 28 + 40 + 5);
}

TEST_P(StockTest, EvictionFillsAnEmptiedSlotFirst) {
  std::array<FakeOwner, 8> o;
  auto stock = make();
  for (int i = 0; i < 7; ++i) stock->refill(&o[i], 1);
  stock->drain_owner(&o[4]);
  stock->refill(&o[7], 1);  // slot 4 is free again: no eviction
  EXPECT_EQ(stock->stats().evictions, 0u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(o[i].refs.load(), i == 4 ? 0 : 1) << i;
}

TEST_P(StockTest, DrainAllDrainsOnlyTheSubtree) {
  FakeOwner root;
  FakeOwner a(&root), a1(&a), b(&root);
  auto stock = make();
  stock->refill(&root, 1);
  stock->refill(&a, 2);
  stock->refill(&a1, 3);
  stock->refill(&b, 4);
  stock->drain_all(&a);
  EXPECT_EQ(a.given_back.load(), 2);
  EXPECT_EQ(a1.given_back.load(), 3);
  EXPECT_EQ(a.refs.load() + a1.refs.load(), 0);
  EXPECT_EQ(stock->stocked(&b), 4);
  EXPECT_EQ(stock->stocked(&root), 1);
  EXPECT_EQ(root.given_back.load() + b.given_back.load(), 0);
  stock->drain_all(&root);
  EXPECT_EQ(root.given_back.load(), 1);
  EXPECT_EQ(b.given_back.load(), 4);
  EXPECT_EQ(root.refs.load() + b.refs.load(), 0);
}

TEST_P(StockTest, DrainsReachOtherCpus) {
  if (cpus_.size() < 2) GTEST_SKIP() << "needs two CPUs";
  FakeOwner root;
  FakeOwner a(&root), b(&root);
  auto stock = make();
  for (int c : {cpus_[0], cpus_[1]}) {
    ASSERT_TRUE(pin_to(c));
    stock->refill(&a, 5);
    stock->refill(&b, 7);
  }
  ASSERT_TRUE(pin_to(cpus_[0]));
  EXPECT_EQ(stock->stocked(&a), 10);
  EXPECT_EQ(stock->stocked(&b), 14);
  EXPECT_EQ(a.refs.load(), 2);

  stock->drain_owner(&a);  // both shards, that owner only
  EXPECT_EQ(a.given_back.load(), 10);
  EXPECT_EQ(a.refs.load(), 0);
  EXPECT_EQ(stock->stocked(&b), 14);

  stock->refill(&a, 1);
  stock->drain_cpu_local();  // this CPU's shard only
  EXPECT_EQ(a.given_back.load(), 11);
  EXPECT_EQ(b.given_back.load(), 7);
  EXPECT_EQ(stock->stocked(&b), 7);

  stock->drain_all(&root);  // the other CPU's shard too
  EXPECT_EQ(b.given_back.load(), 14);
  EXPECT_EQ(b.refs.load(), 0);
  EXPECT_EQ(stock->stocked(&b), 0);
  EXPECT_GE(stock->stats().remote_drains, 2u);
}

TEST_P(StockTest, DestructorDrainsEveryShard) {
  FakeOwner a, b;
  {
    auto stock = make();
    for (int c : cpus_) {
      if (c > 3) break;
      ASSERT_TRUE(pin_to(c));
      stock->refill(&a, 9);
      stock->refill(&b, 1);
    }
  }
  int64_t shards = 0;  // CPUs used above, one shard each
  for (int c : cpus_) shards += c <= 3;
  EXPECT_EQ(a.given_back.load(), 9 * shards);
  EXPECT_EQ(b.given_back.load(), shards);
  EXPECT_EQ(a.refs.load() + b.refs.load(), 0);
}

TEST_P(StockTest, StatsCount) {
  FakeOwner o;
  auto stock = make();
  stock->refill(&o, 5);  // install
  stock->refill(&o, 5);  // add
  EXPECT_TRUE(stock->consume(&o, 3));
  EXPECT_FALSE(stock->consume(&o, 30));
  const Stock::Stats st = stock->stats();
  EXPECT_EQ(st.refills, 2u);
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 1u);
}

TEST_P(StockTest, SmallerShardCountFoldsCpus) {
  FakeOwner o;
  auto stock = make(64, 1);
  EXPECT_FALSE(stock->uses_rseq() && internal::nr_cpu_ids() > 1);
  for (int c : cpus_) {
    ASSERT_TRUE(pin_to(c));
    stock->refill(&o, 1);  // one shard: every CPU adds to the same slot
  }
  EXPECT_EQ(o.refs.load(), 1);
  EXPECT_EQ(stock->stocked(&o), static_cast<int64_t>(std::min<size_t>(cpus_.size(), 64)));
}

// ---- statistics cached in the slots ----------------------------------------------------------

TEST_P(StockTest, HitsCacheTheKindCountUntilFolded) {
  FakeOwner o;
  auto stock = make();
  stock->refill(&o, 20);  // no kind: the surplus of a batch
  ASSERT_TRUE(stock->consume(&o, 5, 3));
  ASSERT_TRUE(stock->consume(&o, 2, 3));
  stock->refill(&o, 1, 3);
  EXPECT_EQ(o.stat[3].load(), 0);  // cached in the slot
  EXPECT_EQ(stock->stocked(&o), 14);
  stock->fold_stats();
  EXPECT_EQ(o.stat[3].load(), 6);
  EXPECT_EQ(stock->stocked(&o), 14);  // units stay
  stock->fold_stats();                // nothing left to pass on
  EXPECT_EQ(o.stat[3].load(), 6);
  stock->drain_all(nullptr);
  EXPECT_EQ(o.given_back.load(), 14);
  EXPECT_EQ(o.errors.load(), 0);
}

TEST_P(StockTest, CountBeyondTheBatchIsPassedOn) {
  FakeOwner o;
  auto stock = make(8);
  int64_t charged = 0;
  for (int i = 0; i < 40; ++i) {
    stock->refill(&o, 1);  // units without a kind
    ASSERT_TRUE(stock->consume(&o, 1, 0));
    ++charged;
  }
  // The slot never held more than batch (8) units of count: the rest was passed on.
  EXPECT_GE(o.stat[0].load(), charged - 8);
  EXPECT_GT(stock->stats().stat_spills, 0u);
  stock->fold_stats();
  EXPECT_EQ(o.stat[0].load(), charged);
  for (int i = 0; i < 40; ++i) stock->refill(&o, 1, 0);  // and back down, through -batch
  EXPECT_LE(o.stat[0].load(), 8);
  stock->fold_stats();
  EXPECT_EQ(o.stat[0].load(), 0);
  stock->drain_all(nullptr);
  EXPECT_EQ(o.errors.load(), 0);
}

TEST_P(StockTest, SlotRetagsAtZeroCountAndPassesOtherKindsAtOnce) {
  FakeOwner o;
  auto stock = make();
  stock->refill(&o, 30);
  ASSERT_TRUE(stock->consume(&o, 4, 1));  // the slot now caches kind 1
  ASSERT_TRUE(stock->consume(&o, 3, 2));  // kind 1 has a count: kind 2 goes straight on
  EXPECT_EQ(o.stat[2].load(), 3);
  EXPECT_EQ(o.stat[1].load(), 0);
  EXPECT_EQ(stock->stats().stat_direct, 1u);
  stock->refill(&o, 4, 1);                // kind 1 back to zero
  ASSERT_TRUE(stock->consume(&o, 5, 2));  // so the slot takes kind 2
  EXPECT_EQ(o.stat[2].load(), 3);
  EXPECT_EQ(stock->stats().stat_direct, 1u);
  // A kind beyond what a tag holds is always passed on.
  ASSERT_TRUE(stock->consume(&o, 1, Stock::kMaxCachedKind + 1));
  EXPECT_EQ(o.stat[Stock::kMaxCachedKind + 1].load(), 1);
  ASSERT_TRUE(stock->consume(&o, 1, Stock::kMaxCachedKind));
  EXPECT_EQ(o.stat[Stock::kMaxCachedKind].load(), 1);  // kind 2's count is not zero
  stock->drain_all(nullptr);                            // passes kind 2's count
  EXPECT_EQ(o.stat[1].load(), 0);
  EXPECT_EQ(o.stat[2].load(), 8);
  EXPECT_EQ(o.given_back.load(), 30 - 4 - 3 + 4 - 5 - 1 - 1);
  EXPECT_EQ(o.errors.load(), 0);
}

TEST_P(StockTest, EvictionOverflowAndBypassPassTheCountOn) {
  FakeOwner o[8];
  auto stock = make(16);
  for (int i = 0; i < 7; ++i) {
    stock->refill(&o[i], 10);
    ASSERT_TRUE(stock->consume(&o[i], 3, 5));
  }
  stock->refill(&o[7], 1, 5);  // evicts owner 0's slot, count included
  EXPECT_EQ(o[0].stat[5].load(), 3);
  EXPECT_EQ(o[7].stat[5].load(), 0);  // installed with its count
  stock->refill(&o[1], 10, 5);        // 7 + 10 > 16: the slot overflows
  EXPECT_EQ(o[1].stat[5].load(), 3 - 10);
  stock->refill(&o[2], 17, 5);  // above the batch: bypasses the stock
  EXPECT_EQ(o[2].stat[5].load(), -17);
  stock->fold_stats();
  EXPECT_EQ(o[2].stat[5].load(), -17 + 3);
  EXPECT_EQ(o[7].stat[5].load(), -1);
  stock->drain_all(nullptr);
  for (FakeOwner& x : o) EXPECT_EQ(x.errors.load(), 0);
}

TEST_P(StockTest, FoldReachesOtherCpus) {
  if (cpus_.size() < 2) GTEST_SKIP() << "needs two CPUs";
  FakeOwner o;
  auto stock = make();
  std::thread t([&] {
    pin_to(cpus_[1]);
    stock->refill(&o, 10);
    ASSERT_TRUE(stock->consume(&o, 6, 4));
  });
  t.join();
  EXPECT_EQ(o.stat[4].load(), 0);
  stock->fold_stats();  // from another CPU
  EXPECT_EQ(o.stat[4].load(), 6);
  EXPECT_EQ(stock->stocked(&o), 4);
  stock->drain_all(nullptr);
  EXPECT_EQ(o.errors.load(), 0);
}

}  // namespace
}  // namespace memcg
