// Concurrency stress of charging against changing limits. Four threads try-charge and uncharge
// random amounts in random groups of a three-level tree while a fifth changes memory.max (only
// through set_max_checked, so an accepted limit is never below usage) and memory.min/low.
//
// Invariant checked on every successful try_charge: at each level of the charged group, the
// charges committed there never exceed the max that was in force during the whole call. The
// counter's own usage may be transiently higher (a failing try_charge adds before it backs
// out), so committed charges are tracked beside it: a thread adds to the tracker after its
// try_charge succeeded and subtracts before it uncharges, so the tracker never exceeds what is
// really committed. A limit "in force throughout" is detected with a sequence number that the
// setter bumps before and after each change, like a seqlock.
//
// At the end every usage is 0 and no protected usage is left anywhere. Bounded by time and by
// an iteration cap; meant to be run under ThreadSanitizer too.

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"

namespace memcg {
namespace {

constexpr int kChargers = 4;
constexpr int kIterCap = 200000;  // per charger
constexpr int64_t kMaxAmount = 32;
constexpr auto kDuration = std::chrono::milliseconds(2500);

struct Tree {
  static constexpr int kGroups = 6;
  // a; a/b, a/c; a/b/x, a/b/y, a/c/z. parent index of each, -1 for the top.
  static constexpr std::array<const char*, kGroups> kPaths = {"a",     "a/b",   "a/c",
                                                              "a/b/x", "a/b/y", "a/c/z"};
  static constexpr std::array<int, kGroups> kParent = {-1, 0, 0, 1, 1, 2};
  static constexpr std::array<int64_t, kGroups> kBaseMax = {400, 250, 250, 120, 120, 120};

  Controller ctl;
  std::array<GroupRef, kGroups> g;
  std::array<std::atomic<int64_t>, kGroups> committed{};

  Tree() {
    for (int i = 0; i < kGroups; ++i) {
      EXPECT_EQ(ctl.create(kPaths[i], &g[i]), 0);
      EXPECT_EQ(g[i]->set_max_checked(static_cast<uint64_t>(kBaseMax[i]) << 12), 0);
    }
  }
};

TEST(StressTest, TryChargeAgainstChangingLimits) {
  Tree t;
  std::atomic<uint64_t> seq{0};  // odd while the setter changes a max
  std::atomic<int> running{kChargers};
  std::atomic<uint64_t> checked{0}, successes{0}, failures{0};
  std::atomic<uint64_t> over_committed{0}, over_usage{0};
  const auto deadline = std::chrono::steady_clock::now() + kDuration;

  auto charger = [&](int id) {
    std::mt19937 rng(17 + id);
    std::array<int64_t, Tree::kGroups> held{};
    for (int it = 0; it < kIterCap; ++it) {
      if ((it & 255) == 0 && std::chrono::steady_clock::now() > deadline) break;
      const int gi = static_cast<int>(rng() % Tree::kGroups);
      const int64_t n = 1 + static_cast<int64_t>(rng() % kMaxAmount);
      PageCounter& c = t.g[gi]->memory();
      if (held[gi] >= n && rng() % 2) {
        for (int l = gi; l >= 0; l = Tree::kParent[l]) t.committed[l].fetch_sub(n);
        c.uncharge(n);
        held[gi] -= n;
        continue;
      }
      const uint64_t s1 = seq.load();
      std::array<int64_t, Tree::kGroups> max{};
      for (int l = gi; l >= 0; l = Tree::kParent[l]) max[l] = t.g[l]->memory().max();
      if (c.try_charge(n) != nullptr) {
        failures.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      held[gi] += n;
      successes.fetch_add(1, std::memory_order_relaxed);
      std::array<int64_t, Tree::kGroups> now_committed{}, usage{};
      for (int l = gi; l >= 0; l = Tree::kParent[l]) {
        now_committed[l] = t.committed[l].fetch_add(n) + n;
        usage[l] = t.g[l]->memory().usage();
      }
      if (s1 % 2 != 0 || seq.load() != s1) continue;  // a max changed meanwhile
      checked.fetch_add(1, std::memory_order_relaxed);
      for (int l = gi; l >= 0; l = Tree::kParent[l]) {
        if (now_committed[l] > max[l]) over_committed.fetch_add(1);
        // The other chargers may each have one failing amount in flight.
        if (usage[l] > max[l] + (kChargers - 1) * kMaxAmount) over_usage.fetch_add(1);
      }
    }
    for (int gi = 0; gi < Tree::kGroups; ++gi) {
      for (int l = gi; l >= 0; l = Tree::kParent[l]) t.committed[l].fetch_sub(held[gi]);
      t.g[gi]->memory().uncharge(held[gi]);
    }
    running.fetch_sub(1);
  };

  std::atomic<uint64_t> accepted{0}, refused{0};
  auto setter = [&] {
    std::mt19937 rng(99);
    while (running.load() > 0) {
      const int gi = static_cast<int>(rng() % Tree::kGroups);
      Group& g = *t.g[gi];
      const uint64_t units =
          static_cast<uint64_t>(Tree::kBaseMax[gi] / 4 + rng() % (Tree::kBaseMax[gi]));
      switch (rng() % 4) {
        case 0:
        case 1: {
          seq.fetch_add(1);
          const int rc = g.set_max_checked(units << 12);
          seq.fetch_add(1);
          (rc == 0 ? accepted : refused).fetch_add(1);
          EXPECT_TRUE(rc == 0 || rc == EBUSY);
          break;
        }
        case 2:
          g.set_min((units / 2) << 12);
          break;
        default:
          g.set_low(units << 12);
          break;
      }
      std::this_thread::yield();
    }
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < kChargers; ++i) threads.emplace_back(charger, i);
  std::thread limits(setter);
  for (auto& th : threads) th.join();
  limits.join();

  EXPECT_GT(successes.load(), 0u);
  EXPECT_GT(failures.load(), 0u);
  EXPECT_GT(checked.load(), 0u);
  EXPECT_GT(accepted.load(), 0u);
  EXPECT_EQ(over_committed.load(), 0u) << "a successful try_charge committed past max";
  EXPECT_EQ(over_usage.load(), 0u);

  // Quiescent: nothing is charged anywhere.
  EXPECT_EQ(t.ctl.root().memory().usage(), 0);
  for (int i = 0; i < Tree::kGroups; ++i) {
    const PageCounter& c = t.g[i]->memory();
    EXPECT_EQ(c.usage(), 0) << Tree::kPaths[i];
    EXPECT_EQ(c.underflows(), 0u) << Tree::kPaths[i];
    EXPECT_EQ(t.committed[i].load(), 0) << Tree::kPaths[i];
    EXPECT_LE(c.local_watermark(), c.watermark()) << Tree::kPaths[i];
  }

  // Every parent's sum is the exact sum of its children's cached values (deltas come from
  // exchanged values, so racing updaters never lose or double-count one).
  auto children_sum = [&](int parent, bool low) {
    int64_t sum = 0;
    for (int i = 0; i < Tree::kGroups; ++i)
      if (Tree::kParent[i] == parent)
        sum += low ? t.g[i]->memory().low_usage() : t.g[i]->memory().min_usage();
    return sum;
  };
  for (int p = 0; p < Tree::kGroups; ++p) {
    EXPECT_EQ(t.g[p]->memory().children_min_usage(), children_sum(p, false)) << Tree::kPaths[p];
    EXPECT_EQ(t.g[p]->memory().children_low_usage(), children_sum(p, true)) << Tree::kPaths[p];
  }
  EXPECT_EQ(t.ctl.root().memory().children_min_usage(), t.g[0]->memory().min_usage());
  EXPECT_EQ(t.ctl.root().memory().children_low_usage(), t.g[0]->memory().low_usage());

  int stale = 0;
  for (int i = 0; i < Tree::kGroups; ++i)
    stale += t.g[i]->memory().min_usage() != 0 || t.g[i]->memory().low_usage() != 0;
  RecordProperty("stale_cached_before_refresh", stale);
  RecordProperty("checked", std::to_string(checked.load()));
  RecordProperty("successes", std::to_string(successes.load()));
  RecordProperty("failures", std::to_string(failures.load()));
  RecordProperty("accepted", std::to_string(accepted.load()));
  RecordProperty("refused", std::to_string(refused.load()));

  // A cached value may still be stale: the last propagation to run may have read a usage that a
  // concurrent uncharge had already lowered. One charge and uncharge at each group refreshes it.
  for (int i = 0; i < Tree::kGroups; ++i) {
    ASSERT_EQ(t.g[i]->memory().try_charge(1), nullptr);
    t.g[i]->memory().uncharge(1);
  }
  EXPECT_EQ(t.ctl.root().memory().usage(), 0);
  EXPECT_EQ(t.ctl.root().memory().children_min_usage(), 0);
  EXPECT_EQ(t.ctl.root().memory().children_low_usage(), 0);
  for (int i = 0; i < Tree::kGroups; ++i) {
    const PageCounter& c = t.g[i]->memory();
    EXPECT_EQ(c.children_min_usage(), 0) << Tree::kPaths[i];
    EXPECT_EQ(c.children_low_usage(), 0) << Tree::kPaths[i];
    EXPECT_EQ(c.min_usage(), 0) << Tree::kPaths[i];
    EXPECT_EQ(c.low_usage(), 0) << Tree::kPaths[i];
  }
}

}  // namespace
}  // namespace memcg
