// The per-CPU stock under migrating threads: no unit is lost or counted twice.

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

}  // namespace
}  // namespace memcg
