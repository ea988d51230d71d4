// Tests of the per-CPU stock, its critical sections and CPU helpers.

#include "memcg/percpu/internal/stock.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

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

namespace memcg {
namespace {

using internal::CsResult;

// Counts what the stock gives back and the references it holds.
class FakeOwner final : public StockOwner {
 public:
  explicit FakeOwner(const FakeOwner* parent = nullptr) : parent_(parent) {}

  void stock_uncharge(int64_t units) noexcept override {
    if (units <= 0) errors.fetch_add(1);
    given_back.fetch_add(units);
  }
  void stock_stat(int kind, int64_t units) noexcept override {
    if (kind < 0 || kind >= kKinds || units == 0) errors.fetch_add(1);
    else stat[kind].fetch_add(units);
  }
  void stock_get() noexcept override { refs.fetch_add(1); }
  void stock_put() noexcept override {
    if (refs.fetch_sub(1) <= 0) errors.fetch_add(1);
  }
  bool stock_is_within(const StockOwner* root) const noexcept override {
    for (const FakeOwner* p = this; p != nullptr; p = p->parent_) {
      if (p == root) return true;
    }
    return false;
  }

  static constexpr int kKinds = 300;
  std::atomic<int64_t> given_back{0};
  std::atomic<int64_t> stat[kKinds] = {};  // what the stock passed on, per kind
  std::atomic<int> refs{0};
  std::atomic<int> errors{0};

 private:
  const FakeOwner* parent_;
};

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// The CPUs the process may use, read before any test narrows the affinity.
const std::vector<int> kCpus = allowed_cpus();

bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// Pins the test thread to one CPU (so that every call uses one shard) and restores the
// original affinity afterwards.
class PinnedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(sched_getaffinity(0, sizeof saved_, &saved_), 0);
    cpus_ = kCpus;
    ASSERT_FALSE(cpus_.empty());
    ASSERT_TRUE(pin_to(cpus_[0]));
  }
  void TearDown() override { pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_); }

  cpu_set_t saved_;
  std::vector<int> cpus_;
};

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

// ---- stress ----------------------------------------------------------------------------------

// Workers switch CPUs every few hundred operations while consuming and refilling random amounts
// for ten owners (more than a shard's slots, so evictions happen); a drainer keeps draining
// subtrees and owners. In the end every refilled unit must have come back exactly once.
void stress(Stock::Mode mode, int shards) {
  const std::vector<int>& cpus = kCpus;
  ASSERT_FALSE(cpus.empty());
  constexpr int kWorkers = 4;
  constexpr int kOwners = 10;
  constexpr int64_t kBatch = 32;
  constexpr int kMaxOps = 400'000;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(2000);

  // Owner 0 is the root; 1..3 its children; 4..9 grandchildren.
  std::vector<std::unique_ptr<FakeOwner>> owners;
  owners.push_back(std::make_unique<FakeOwner>());
  for (int i = 1; i <= 3; ++i) owners.push_back(std::make_unique<FakeOwner>(owners[0].get()));
  for (int i = 4; i < kOwners; ++i) {
    owners.push_back(std::make_unique<FakeOwner>(owners[1 + (i - 4) / 2].get()));
  }

  // Kinds the workers use: cached ones, one beyond what a tag holds, and none.
  const std::array<int, 4> kinds = {0, 1, Stock::kMaxCachedKind + 1, Stock::kNoKind};
  std::array<std::atomic<int64_t>, kOwners> refilled{}, consumed{};
  // Net units charged under each kind (consumed minus refilled with that kind).
  std::array<std::array<std::atomic<int64_t>, 4>, kOwners> net{};
  std::atomic<int> running{kWorkers};
  std::atomic<bool> slack_ok{true};
  {
    Stock stock(shards, kBatch, mode);
    if (mode == Stock::Mode::kAuto && shards == 0) {
      EXPECT_EQ(stock.uses_rseq(), MEMCG_RSEQ_CS && internal::rseq_mode());
    }
    std::vector<std::thread> threads;
    for (int w = 0; w < kWorkers; ++w) {
      threads.emplace_back([&, w] {
        std::mt19937_64 rng(1234 + w);
        std::array<int64_t, kOwners> my_refilled{}, my_consumed{};
        std::array<std::array<int64_t, 4>, kOwners> my_net{};
        int next_switch = 0;
        for (int op = 0; op < kMaxOps; ++op) {
          if (op == next_switch) {
            if (std::chrono::steady_clock::now() > deadline) break;
            pin_to(cpus[rng() % cpus.size()]);
            next_switch = op + 100 + static_cast<int>(rng() % 400);
          }
          const int k = static_cast<int>(rng() % kOwners);
          const int64_t n = static_cast<int64_t>(rng() % (kBatch + 8));
          const size_t kind = rng() % kinds.size();
          switch (rng() % 16) {
            case 0:
              stock.drain_cpu_local();
              break;
            case 1:
            case 2:
            case 3:
            case 4:
            case 5:
            case 6:
            case 7:
              if (n > 0 && stock.consume(owners[k].get(), n, kinds[kind])) {
                my_consumed[k] += n;
                my_net[k][kind] += n;
              }
              break;
            default:
              stock.refill(owners[k].get(), n, kinds[kind]);
              my_refilled[k] += n;
              my_net[k][kind] -= n;
              break;
          }
        }
        for (int k = 0; k < kOwners; ++k) {
          refilled[k] += my_refilled[k];
          consumed[k] += my_consumed[k];
          for (size_t j = 0; j < kinds.size(); ++j) net[k][j] += my_net[k][j];
        }
        running.fetch_sub(1);
      });
    }
    threads.emplace_back([&] {
      std::mt19937_64 rng(99);
      int rounds = 0;
      while (running.load() > 0 && rounds < 200'000) {
        ++rounds;
        const int k = static_cast<int>(rng() % kOwners);
        switch (rng() % 5) {
          case 0:
            stock.drain_all(owners[k].get());
            break;
          case 4:
            stock.fold_stats();
            break;
          case 1:
            stock.drain_owner(owners[k].get());
            break;
          case 2: {
            int64_t sum = 0;
            for (auto& o : owners) sum += stock.stocked(o.get());
            if (sum > stock.slack_bound()) slack_ok = false;
            break;
          }
          default:
            pin_to(cpus[rng() % cpus.size()]);
            break;
        }
        if (rounds % 64 == 0) std::this_thread::yield();
      }
    });
    for (auto& t : threads) t.join();

    const Stock::Stats st = stock.stats();
    EXPECT_GT(st.hits, 0u);
    EXPECT_GT(st.evictions, 0u);
    EXPECT_GT(st.overflow_drains, 0u);
    stock.drain_all(nullptr);
    for (auto& o : owners) EXPECT_EQ(stock.stocked(o.get()), 0);
  }
  EXPECT_TRUE(slack_ok.load());
  int64_t total = 0;
  for (int k = 0; k < kOwners; ++k) {
    FakeOwner& o = *owners[k];
    EXPECT_EQ(o.given_back.load() + consumed[k].load(), refilled[k].load()) << "owner " << k;
    EXPECT_EQ(o.refs.load(), 0) << "owner " << k;
    EXPECT_EQ(o.errors.load(), 0) << "owner " << k;
    for (size_t j = 0; j + 1 < kinds.size(); ++j) {
      EXPECT_EQ(o.stat[kinds[j]].load(), net[k][j].load()) << "owner " << k << " kind " << kinds[j];
    }
    total += refilled[k].load();
  }
  EXPECT_GT(total, 0);
}

class StockStress : public PinnedTest, public ::testing::WithParamInterface<Stock::Mode> {};

INSTANTIATE_TEST_SUITE_P(Modes, StockStress,
                         ::testing::Values(Stock::Mode::kAuto, Stock::Mode::kFallback),
                         [](const auto& info) {
                           return info.param == Stock::Mode::kAuto ? "Auto" : "Fallback";
                         });

TEST_P(StockStress, MigratingThreadsNeverLoseOrDuplicateUnits) {
  stress(GetParam(), 0);
}

TEST_P(StockStress, OneShardForAllCpus) {
  stress(GetParam(), 1);
}

// ---- CPU helpers and critical sections -------------------------------------------------------

using CpuTest = PinnedTest;

TEST_F(CpuTest, CurrentCpuIsWithinPossibleCpus) {
  const int n = internal::nr_cpu_ids();
  EXPECT_GE(n, 1);
  for (int c : cpus_) {
    if (!pin_to(c)) continue;
    EXPECT_EQ(internal::current_cpu(), c);
    EXPECT_LT(internal::current_cpu(), n);
  }
}

TEST_F(CpuTest, EnvVariableRule) {
  EXPECT_FALSE(internal::env_disables_rseq(nullptr));
  EXPECT_FALSE(internal::env_disables_rseq(""));
  EXPECT_FALSE(internal::env_disables_rseq("0"));
  EXPECT_TRUE(internal::env_disables_rseq("1"));
  EXPECT_TRUE(internal::env_disables_rseq("yes"));
  EXPECT_TRUE(internal::env_disables_rseq("00"));
}

TEST_F(CpuTest, RseqModeIsStable) {
  const bool mode = internal::rseq_mode();
  EXPECT_EQ(internal::rseq_mode(), mode);
  if (MEMCG_TSAN) {
    EXPECT_FALSE(mode);
  }
}

class RseqCsTest : public PinnedTest {
 protected:
  void SetUp() override {
    PinnedTest::SetUp();
    if (!MEMCG_RSEQ_CS || !internal::rseq_mode()) GTEST_SKIP() << "rseq mode not available";
  }
  // Retries while the section aborts (preemption, migration); bounded.
  template <typename F>
  CsResult retry(F f) {
    CsResult r = CsResult::kAborted;
    for (int i = 0; i < 1000 && r == CsResult::kAborted; ++i) r = f(internal::current_cpu());
    return r;
  }
};

TEST_F(RseqCsTest, AddBounded) {
  alignas(64) uint64_t disabled = 0;
  int a = 0, b = 0;
  const void* owner = &a;
  int64_t count = 5;
  auto add = [&](const void* expect, int64_t delta, int64_t lo, int64_t hi) {
    return retry([&](int cpu) {
      return internal::cs_add_bounded(cpu, &disabled, &owner, expect, &count, delta, lo, hi);
    });
  };
  EXPECT_EQ(add(&a, -3, 0, INT64_MAX), CsResult::kOk);
  EXPECT_EQ(count, 2);
  EXPECT_EQ(add(&a, -3, 0, INT64_MAX), CsResult::kCompareFailed);  // below lo
  EXPECT_EQ(add(&a, 9, INT64_MIN, 10), CsResult::kCompareFailed);  // above hi
  EXPECT_EQ(add(&a, 8, INT64_MIN, 10), CsResult::kOk);
  EXPECT_EQ(count, 10);
  EXPECT_EQ(add(&b, -1, 0, INT64_MAX), CsResult::kCompareFailed);  // other owner
  count = INT64_MAX;
  EXPECT_EQ(add(&a, 1, INT64_MIN, INT64_MAX), CsResult::kCompareFailed);  // overflow
  count = 10;
  disabled = 1;
  EXPECT_EQ(add(&a, -1, 0, INT64_MAX), CsResult::kCompareFailed);
  disabled = 0;
  EXPECT_EQ(count, 10);
  // Named CPU is not ours: always aborts, nothing stored.
  const int other = (internal::current_cpu() + 1) % std::max(2, internal::nr_cpu_ids());
  EXPECT_EQ(internal::cs_add_bounded(other, &disabled, &owner, &a, &count, -1, 0, INT64_MAX),
            CsResult::kAborted);
  EXPECT_EQ(count, 10);
}

TEST_F(RseqCsTest, SlotUpdate) {
  alignas(64) uint64_t disabled = 0;
  int a = 0, b = 0;
  const void* owner = &a;
  // units 10, tag 3, count -2
  auto make = [](uint64_t units, uint64_t tag, int64_t count) {
    return units | (tag << 8) | (static_cast<uint64_t>(count) << 16);
  };
  uint64_t word = make(10, 3, -2);
  auto update = [&](const void* expect_owner, uint64_t add, uint64_t mask, uint64_t expect) {
    return retry([&](int cpu) {
      return internal::cs_slot_update(cpu, &disabled, &owner, expect_owner, &word, add, mask,
                                      expect, /*hi=*/16, /*dmax=*/4);
    });
  };
  const auto stat = [](int64_t v) { return static_cast<uint64_t>(v) << 16; };
  // Take 4 units under tag 3: count -2 -> 2.
  EXPECT_EQ(update(&a, static_cast<uint64_t>(-4) + stat(4), 0xff00, 3 << 8), CsResult::kOk);
  EXPECT_EQ(word, make(6, 3, 2));
  // Too few units: the borrow leaves the byte above hi.
  EXPECT_EQ(update(&a, static_cast<uint64_t>(-7), 0xff00, 3 << 8), CsResult::kCompareFailed);
  // Above hi.
  EXPECT_EQ(update(&a, 11, 0xff00, 3 << 8), CsResult::kCompareFailed);
  // Count out of [-4, 4].
  EXPECT_EQ(update(&a, static_cast<uint64_t>(-3) + stat(3), 0xff00, 3 << 8),
            CsResult::kCompareFailed);
  EXPECT_EQ(update(&a, 9 + stat(-7), 0xff00, 3 << 8), CsResult::kCompareFailed);
  // Tag not the expected one.
  EXPECT_EQ(update(&a, 1, 0xff00, 4 << 8), CsResult::kCompareFailed);
  // Re-tagging requires the count the caller saw (zero): here it is 2, so it fails.
  EXPECT_EQ(update(&a, 1 + (uint64_t{1} << 8) + stat(-1), ~uint64_t{0xff}, (4 << 8) + stat(-1)),
            CsResult::kCompareFailed);
  EXPECT_EQ(word, make(6, 3, 2));
  word = make(6, 3, 0);
  EXPECT_EQ(update(&a, 1 + (uint64_t{1} << 8) + stat(-1), ~uint64_t{0xff}, (4 << 8) + stat(-1)),
            CsResult::kOk);
  EXPECT_EQ(word, make(7, 4, -1));
  // Other owner, disabled word, other CPU: nothing stored.
  EXPECT_EQ(update(&b, 1, 0xff00, 4 << 8), CsResult::kCompareFailed);
  disabled = 1;
  EXPECT_EQ(update(&a, 1, 0xff00, 4 << 8), CsResult::kCompareFailed);
  disabled = 0;
  const int other = (internal::current_cpu() + 1) % std::max(2, internal::nr_cpu_ids());
  EXPECT_EQ(internal::cs_slot_update(other, &disabled, &owner, &a, &word, 1, 0xff00, 4 << 8, 16, 4),
            CsResult::kAborted);
  EXPECT_EQ(word, make(7, 4, -1));
}

TEST_F(RseqCsTest, CompareEqualStorePointer) {
  alignas(64) uint64_t disabled = 0;
  int a = 0, b = 0;
  void* slot = &a;
  auto cas = [&](void* expect, void* newv) {
    return retry(
        [&](int cpu) { return internal::cs_cmpeq_store_ptr(cpu, &disabled, &slot, expect, newv); });
  };
  EXPECT_EQ(cas(&a, &b), CsResult::kOk);
  EXPECT_EQ(slot, &b);
  EXPECT_EQ(cas(&a, nullptr), CsResult::kCompareFailed);
  EXPECT_EQ(slot, &b);
  disabled = 1;
  EXPECT_EQ(cas(&b, nullptr), CsResult::kCompareFailed);
  disabled = 0;
  EXPECT_EQ(cas(&b, nullptr), CsResult::kOk);
  EXPECT_EQ(slot, nullptr);
  const int other = (internal::current_cpu() + 1) % std::max(2, internal::nr_cpu_ids());
  EXPECT_EQ(internal::cs_cmpeq_store_ptr(other, &disabled, &slot, nullptr, &a), CsResult::kAborted);
  EXPECT_EQ(slot, nullptr);
}

TEST_F(RseqCsTest, FenceEveryCpu) {
  for (int c = 0; c < internal::nr_cpu_ids(); ++c) internal::fence_cpu(c);
  internal::fence_cpu(internal::nr_cpu_ids() + 5);  // beyond the CPUs: harmless
}

// A thread on each of two CPUs bumps a counter inside critical sections, while this thread
// repeatedly takes one CPU's counter over with disable + fence and moves its value out. No
// increment may be lost or duplicated.
TEST_F(RseqCsTest, DisableFenceProtocolHandsOverData) {
  if (cpus_.size() < 2) GTEST_SKIP() << "needs two CPUs";
  struct alignas(64) PerCpu {
    std::atomic<uint64_t> disabled{0};
    void* owner = nullptr;
    alignas(64) int64_t count = 0;
  };
  std::vector<PerCpu> per_cpu(static_cast<size_t>(internal::nr_cpu_ids()));
  std::atomic<bool> stop{false};
  std::atomic<int64_t> done{0};
  std::atomic<int> finished{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      pin_to(cpus_[w]);
      int64_t mine = 0;
      for (int i = 0; i < 200'000 && !stop.load(std::memory_order_relaxed); ++i) {
        for (;;) {
          const int cpu = internal::current_cpu();
          PerCpu& p = per_cpu[static_cast<size_t>(cpu)];
          const CsResult r =
              internal::cs_add_bounded(cpu, reinterpret_cast<const uint64_t*>(&p.disabled),
                                       &p.owner, nullptr, &p.count, 1, INT64_MIN, INT64_MAX);
          if (r == CsResult::kOk) {
            ++mine;
            break;
          }
          if (r == CsResult::kCompareFailed) std::this_thread::yield();  // taken over
        }
      }
      done += mine;
      finished.fetch_add(1);
    });
  }
  int64_t moved = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < deadline) {
    for (int c : {cpus_[0], cpus_[1]}) {
      PerCpu& p = per_cpu[static_cast<size_t>(c)];
      p.disabled.store(1);
      internal::fence_cpu(c);
      const int64_t v = __atomic_exchange_n(&p.count, 0, __ATOMIC_SEQ_CST);
      moved += v;
      p.disabled.store(0, std::memory_order_release);
    }
    if (finished.load() == 2) break;
  }
  stop = true;
  for (auto& t : workers) t.join();
  for (auto& p : per_cpu) moved += p.count;
  EXPECT_EQ(moved, done.load());
}

}  // namespace
}  // namespace memcg
