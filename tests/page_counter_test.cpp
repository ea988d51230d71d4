// Tests of BasicPageCounter: hierarchical charge and uncharge, try_charge's failing level,
// underflow clamping, watermarks, set_max_checked and its race with try_charge, protected-usage
// propagation and the skip of unchanged values.

#include "memcg/counter/page_counter.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace memcg {
namespace {

constexpr int64_t kSentinel12 = PageCounter::sentinel(12);

// root <- mid <- leaf, each owned by the fixture.
template <class Policy>
struct Chain {
  using Counter = BasicPageCounter<Policy>;
  Counter root{nullptr, kSentinel12};
  Counter mid{&root, kSentinel12};
  Counter leaf{&mid, kSentinel12};
};

TEST(PageCounterTest, SentinelForUnitShifts) {
  // 2^63 - 1 bytes expressed in 4 KiB and 64 KiB units.
  EXPECT_EQ(PageCounter::sentinel(12), int64_t{2251799813685247});
  EXPECT_EQ(PageCounter::sentinel(12), (int64_t{1} << 51) - 1);
  EXPECT_EQ(PageCounter::sentinel(16), int64_t{140737488355327});
  EXPECT_EQ(PageCounter::sentinel(16), (int64_t{1} << 47) - 1);
  // The byte value of the sentinel still fits a signed 64-bit integer, one unit more does not.
  EXPECT_EQ(static_cast<uint64_t>(PageCounter::sentinel(12)) << 12, 9223372036854771712u);
  EXPECT_GT((static_cast<uint64_t>(PageCounter::sentinel(12)) + 1) << 12,
            static_cast<uint64_t>(INT64_MAX));
}

TEST(PageCounterTest, InitialState) {
  Chain<DefaultCounterPolicy> c;
  EXPECT_EQ(c.leaf.usage(), 0);
  EXPECT_EQ(c.leaf.max(), kSentinel12);
  EXPECT_EQ(c.leaf.high(), kSentinel12);
  EXPECT_EQ(c.leaf.min(), 0);
  EXPECT_EQ(c.leaf.low(), 0);
  EXPECT_EQ(c.leaf.sentinel(), kSentinel12);
  EXPECT_EQ(c.leaf.parent(), &c.mid);
  EXPECT_EQ(c.root.parent(), nullptr);
  EXPECT_EQ(c.leaf.margin(), kSentinel12);
}

TEST(PageCounterTest, ChargeAndUnchargeThreeLevels) {
  Chain<DefaultCounterPolicy> c;
  c.leaf.charge(7);
  EXPECT_EQ(c.leaf.usage(), 7);
  EXPECT_EQ(c.mid.usage(), 7);
  EXPECT_EQ(c.root.usage(), 7);
  c.mid.charge(3);  // a charge in the middle does not touch the level below
  EXPECT_EQ(c.leaf.usage(), 7);
  EXPECT_EQ(c.mid.usage(), 10);
  EXPECT_EQ(c.root.usage(), 10);
  EXPECT_EQ(c.leaf.try_charge(5), nullptr);
  EXPECT_EQ(c.leaf.usage(), 12);
  EXPECT_EQ(c.root.usage(), 15);
  EXPECT_TRUE(c.leaf.uncharge(12));
  EXPECT_TRUE(c.mid.uncharge(3));
  EXPECT_EQ(c.leaf.usage(), 0);
  EXPECT_EQ(c.mid.usage(), 0);
  EXPECT_EQ(c.root.usage(), 0);
  EXPECT_EQ(c.leaf.underflows() + c.mid.underflows() + c.root.underflows(), 0u);
}

TEST(PageCounterTest, ForcedChargePassesMax) {
  Chain<DefaultCounterPolicy> c;
  ASSERT_EQ(c.mid.set_max_checked(4), 0);
  c.leaf.charge(10);
  EXPECT_EQ(c.leaf.usage(), 10);
  EXPECT_EQ(c.mid.usage(), 10);
  EXPECT_EQ(c.mid.margin(), 0);
  EXPECT_EQ(c.mid.failcnt(), 0u);
}

TEST(PageCounterTest, TryChargeFailsAtMiddleLevel) {
  Chain<DefaultCounterPolicy> c;
  ASSERT_EQ(c.mid.set_max_checked(10), 0);
  ASSERT_EQ(c.leaf.try_charge(8), nullptr);
  const int64_t leaf_wm = c.leaf.watermark();

  EXPECT_EQ(c.leaf.try_charge(3), &c.mid);  // 11 > 10 at mid
  EXPECT_EQ(c.leaf.usage(), 8);
  EXPECT_EQ(c.mid.usage(), 8);
  EXPECT_EQ(c.root.usage(), 8);
  EXPECT_EQ(c.leaf.failcnt(), 0u);
  EXPECT_EQ(c.mid.failcnt(), 1u);
  EXPECT_EQ(c.root.failcnt(), 0u);
  EXPECT_EQ(c.mid.watermark(), 8);  // the failing level never records the rejected value
  EXPECT_GE(c.leaf.watermark(), leaf_wm);
  EXPECT_EQ(c.leaf.underflows() + c.mid.underflows(), 0u);

  // The lowest level that would pass its max is reported: with the leaf also limited, the leaf.
  ASSERT_EQ(c.leaf.set_max_checked(9), 0);
  EXPECT_EQ(c.leaf.try_charge(3), &c.leaf);
  EXPECT_EQ(c.leaf.failcnt(), 1u);
  EXPECT_EQ(c.mid.failcnt(), 1u);
  EXPECT_EQ(c.leaf.try_charge(2), &c.leaf);  // 10 > 9 at the leaf: the walk stops there
  EXPECT_EQ(c.leaf.failcnt(), 2u);
  EXPECT_EQ(c.mid.failcnt(), 1u);
  EXPECT_EQ(c.leaf.try_charge(1), nullptr);  // 9 at the leaf, 9 at mid
  EXPECT_EQ(c.leaf.usage(), 9);
  EXPECT_EQ(c.root.usage(), 9);
}

TEST(PageCounterTest, OverUnchargeClampsToZero) {
  Chain<DefaultCounterPolicy> c;
  c.leaf.charge(5);
  c.mid.charge(5);  // mid 10, root 10
  EXPECT_FALSE(c.leaf.uncharge(7));
  EXPECT_EQ(c.leaf.usage(), 0);  // clamped, not -2
  EXPECT_EQ(c.mid.usage(), 3);
  EXPECT_EQ(c.root.usage(), 3);
  EXPECT_EQ(c.leaf.underflows(), 1u);
  EXPECT_EQ(c.mid.underflows(), 0u);
  EXPECT_EQ(c.root.underflows(), 0u);

  EXPECT_FALSE(c.mid.uncharge(4));
  EXPECT_EQ(c.mid.usage(), 0);
  EXPECT_EQ(c.root.usage(), 0);
  EXPECT_EQ(c.mid.underflows(), 1u);
  EXPECT_EQ(c.root.underflows(), 1u);
  // The counter keeps working after a clamp.
  EXPECT_EQ(c.leaf.try_charge(2), nullptr);
  EXPECT_EQ(c.root.usage(), 2);
  EXPECT_TRUE(c.leaf.uncharge(2));
  EXPECT_EQ(c.leaf.underflows(), 1u);
}

TEST(PageCounterTest, WatermarksMonotoneAndReset) {
  Chain<DefaultCounterPolicy> c;
  std::mt19937_64 rng(7);
  int64_t held = 0;
  int64_t peak = 0;
  int64_t prev_wm = 0;
  for (int i = 0; i < 2000; ++i) {
    if (held > 0 && rng() % 2) {
      const int64_t n = 1 + static_cast<int64_t>(rng() % held);
      c.leaf.uncharge(n);
      held -= n;
    } else {
      const int64_t n = 1 + static_cast<int64_t>(rng() % 50);
      c.leaf.charge(n);
      held += n;
    }
    peak = std::max(peak, held);
    EXPECT_GE(c.leaf.watermark(), prev_wm);
    prev_wm = c.leaf.watermark();
    EXPECT_EQ(c.leaf.watermark(), peak);
    EXPECT_EQ(c.root.watermark(), peak);
    EXPECT_LE(c.leaf.local_watermark(), c.leaf.watermark());
  }

  c.leaf.uncharge(held);
  c.leaf.charge(4);
  c.leaf.reset_watermark();
  EXPECT_EQ(c.leaf.watermark(), 4);
  EXPECT_EQ(c.leaf.local_watermark(), 4);
  EXPECT_EQ(c.mid.watermark(), peak);  // other levels keep theirs

  c.leaf.charge(6);
  c.leaf.uncharge(8);
  EXPECT_EQ(c.leaf.watermark(), 10);
  EXPECT_EQ(c.leaf.local_watermark(), 10);

  // A local reset returns the local peak it replaces and leaves the all-time one alone.
  EXPECT_EQ(c.leaf.reset_local_watermark(), 10);
  EXPECT_EQ(c.leaf.local_watermark(), 2);
  EXPECT_EQ(c.leaf.watermark(), 10);
  c.leaf.charge(3);
  EXPECT_EQ(c.leaf.local_watermark(), 5);
  EXPECT_EQ(c.leaf.watermark(), 10);
  EXPECT_LE(c.leaf.local_watermark(), c.leaf.watermark());
}

TEST(PageCounterTest, SetMaxCheckedRefusesBelowUsage) {
  Chain<DefaultCounterPolicy> c;
  c.leaf.charge(20);
  EXPECT_EQ(c.leaf.set_max_checked(19), EBUSY);
  EXPECT_EQ(c.leaf.max(), kSentinel12);
  EXPECT_EQ(c.mid.set_max_checked(5), EBUSY);
  EXPECT_EQ(c.leaf.set_max_checked(20), 0);
  EXPECT_EQ(c.leaf.max(), 20);
  EXPECT_EQ(c.leaf.margin(), 0);
  EXPECT_EQ(c.leaf.set_max_checked(30), 0);
  EXPECT_EQ(c.leaf.margin(), 10);
  // exchange_max never refuses and clamps to the sentinel.
  EXPECT_EQ(c.leaf.exchange_max(3), 30);
  EXPECT_EQ(c.leaf.max(), 3);
  EXPECT_EQ(c.leaf.margin(), 0);
  EXPECT_EQ(c.leaf.exchange_max(INT64_MAX), 3);
  EXPECT_EQ(c.leaf.max(), kSentinel12);
}

// Chargers add and remove single units while a setter walks max downwards with set_max_checked.
// Once a limit is accepted no charger may get past it, so at the end usage <= max at each level.
TEST(PageCounterTest, SetMaxCheckedRacesWithTryCharge) {
  constexpr int kThreads = 3;
  constexpr int kOpsPerThread = 200000;
  Chain<DefaultCounterPolicy> c;
  std::atomic<bool> stop{false};
  std::atomic<int> running{kThreads};
  std::atomic<int64_t> held_total{0};
  std::atomic<int64_t> accepted{400};
  ASSERT_EQ(c.leaf.set_max_checked(400), 0);

  std::vector<std::thread> chargers;
  for (int t = 0; t < kThreads; ++t) {
    chargers.emplace_back([&, t] {
      std::minstd_rand rng(100 + t);
      int64_t held = 0;
      for (int i = 0; i < kOpsPerThread && !stop.load(std::memory_order_relaxed); ++i) {
        if (held > 0 && rng() % 3 == 0) {
          c.leaf.uncharge(1);
          --held;
        } else if (c.leaf.try_charge(1) == nullptr) {
          ++held;
        }
      }
      held_total.fetch_add(held);
      running.fetch_sub(1);
    });
  }
  std::thread setter([&] {
    for (int64_t v = 396; v >= 0 && running.load() > 0; v -= 4) {
      for (int tries = 0; tries < 20000 && running.load() > 0; ++tries) {
        if (c.leaf.set_max_checked(v) == 0) {
          accepted.store(v);
          break;
        }
        std::this_thread::yield();
      }
    }
  });
  setter.join();
  stop.store(true);
  for (auto& th : chargers) th.join();

  EXPECT_EQ(c.leaf.max(), accepted.load());
  EXPECT_LE(c.leaf.usage(), c.leaf.max());
  EXPECT_EQ(c.leaf.usage(), held_total.load());
  EXPECT_EQ(c.root.usage(), held_total.load());
  // Only successful charges record a watermark, and each saw a usage within the limit in force.
  EXPECT_LE(c.leaf.watermark(), 400);
  c.leaf.uncharge(held_total.load());
  EXPECT_EQ(c.root.usage(), 0);
  EXPECT_EQ(c.leaf.underflows(), 0u);
}

template <class Policy>
void ExpectProtectedUsage(bool use_low) {
  Chain<Policy> c;
  auto set = [&](int64_t v) { use_low ? c.leaf.set_low(v) : c.leaf.set_min(v); };
  auto children = [&] { return use_low ? c.mid.children_low_usage() : c.mid.children_min_usage(); };
  auto own = [&] { return use_low ? c.leaf.low_usage() : c.leaf.min_usage(); };
  auto other = [&] { return use_low ? c.mid.children_min_usage() : c.mid.children_low_usage(); };

  set(100);
  EXPECT_EQ(children(), 0);
  c.leaf.charge(50);
  EXPECT_EQ(children(), 50);
  EXPECT_EQ(own(), 50);
  c.leaf.charge(100);  // 150
  EXPECT_EQ(children(), 100);
  EXPECT_EQ(own(), 100);
  c.leaf.uncharge(120);  // 30
  EXPECT_EQ(children(), 30);
  ASSERT_EQ(c.leaf.try_charge(10), nullptr);  // 40
  EXPECT_EQ(children(), 40);
  c.leaf.uncharge(10);  // 30
  EXPECT_EQ(children(), 30);
  set(0);
  EXPECT_EQ(children(), 0);
  EXPECT_EQ(own(), 0);
  set(20);  // the setter propagates without a charge
  EXPECT_EQ(children(), 20);
  EXPECT_EQ(other(), 0);  // the other pair is untouched
  // The root has no parent and nothing above it to report to.
  EXPECT_EQ(c.root.children_min_usage() + c.root.children_low_usage(), 0);
}

TEST(PageCounterTest, ProtectedUsageMin) {
  ExpectProtectedUsage<DefaultCounterPolicy>(false);
}
TEST(PageCounterTest, ProtectedUsageLow) {
  ExpectProtectedUsage<DefaultCounterPolicy>(true);
}
TEST(PageCounterTest, ProtectedUsageMinAlwaysPropagate) {
  ExpectProtectedUsage<AlwaysPropagatePolicy>(false);
}
TEST(PageCounterTest, ProtectedUsageLowAlwaysPropagate) {
  ExpectProtectedUsage<AlwaysPropagatePolicy>(true);
}

TEST(PageCounterTest, ProtectedUsageSumsChildren) {
  using C = PageCounter;
  C root(nullptr, kSentinel12);
  C parent(&root, kSentinel12);
  C a(&parent, kSentinel12), b(&parent, kSentinel12);
  a.set_min(10);
  b.set_min(30);
  parent.set_min(25);
  a.charge(15);
  b.charge(20);
  EXPECT_EQ(parent.children_min_usage(), 10 + 20);
  EXPECT_EQ(root.children_min_usage(), 25);  // min(35, 25)
  a.uncharge(15);
  EXPECT_EQ(parent.children_min_usage(), 20);
  EXPECT_EQ(root.children_min_usage(), 20);
}

TEST(PageCounterTest, NoProtectionSupportDoesNotPropagate) {
  PageCounter root(nullptr, kSentinel12);
  PageCounter swap(&root, kSentinel12, /*protection_support=*/false);
  swap.set_min(10);
  swap.charge(5);
  EXPECT_EQ(swap.min_usage(), 0);
  EXPECT_EQ(root.children_min_usage(), 0);
}

struct CountingAlwaysPolicy : AlwaysPropagatePolicy {
  static constexpr bool kCountExchanges = true;
};

// Seed 1: a group running above its protection yields the same protected value on every charge;
// the default policy skips the exchange, the pre-6.1 policy performs it at every protected level.
template <class Policy>
void CountSteadyExchanges(uint64_t* leaf, uint64_t* mid, uint64_t* root) {
  Chain<Policy> c;
  c.mid.set_min(100);
  c.leaf.set_min(50);
  c.leaf.charge(500);  // above both settings
  const uint64_t l0 = c.leaf.protection_exchanges();
  const uint64_t m0 = c.mid.protection_exchanges();
  const uint64_t r0 = c.root.protection_exchanges();
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(c.leaf.try_charge(1), nullptr);
    c.leaf.charge(2);
    c.leaf.uncharge(3);
  }
  EXPECT_EQ(c.leaf.min_usage(), 50);
  EXPECT_EQ(c.mid.children_min_usage(), 50);
  EXPECT_EQ(c.root.children_min_usage(), 100);
  *leaf = c.leaf.protection_exchanges() - l0;
  *mid = c.mid.protection_exchanges() - m0;
  *root = c.root.protection_exchanges() - r0;
}

TEST(PageCounterTest, SteadyChargingAboveMinSkipsExchanges) {
  uint64_t leaf = 0, mid = 0, root = 0;
  CountSteadyExchanges<CountingCounterPolicy>(&leaf, &mid, &root);
  EXPECT_EQ(leaf, 0u);
  EXPECT_EQ(mid, 0u);
  EXPECT_EQ(root, 0u);
}

TEST(PageCounterTest, AlwaysPropagateExchangesOncePerChargePerLevel) {
  uint64_t leaf = 0, mid = 0, root = 0;
  CountSteadyExchanges<CountingAlwaysPolicy>(&leaf, &mid, &root);
  // 1000 rounds of three operations, one exchange of the min pair per operation at each level
  // below the root (low is 0 and never cached, so its pair is skipped); the root has no parent.
  EXPECT_EQ(leaf, 3000u);
  EXPECT_EQ(mid, 3000u);
  EXPECT_EQ(root, 0u);
}

TEST(PageCounterTest, ChangingProtectedUsageExchangesWithEitherPolicy) {
  Chain<CountingCounterPolicy> c;
  c.leaf.set_min(100);
  const uint64_t before = c.leaf.protection_exchanges();
  for (int i = 0; i < 10; ++i) c.leaf.charge(1);  // below min: the value changes every time
  EXPECT_EQ(c.leaf.protection_exchanges() - before, 10u);
  EXPECT_EQ(c.mid.children_min_usage(), 10);
}

// Charges and uncharges crossing the protection setting from several threads. The parent's sum
// is maintained from exchanged values, so at quiescence it equals the sum of the children's
// cached values exactly. A cached value may be stale (the last propagation to run may have
// read an older usage); the next charge or uncharge on that counter repairs it, after which the
// sum equals sum(min(usage, min)).
TEST(PageCounterTest, ProtectionBoundaryStress) {
  constexpr int kThreads = 4;
  constexpr int kChildren = 2;
  constexpr int kIterCap = 300000;
  constexpr int64_t kMin = 64, kLow = 96;
  PageCounter root(nullptr, kSentinel12);
  PageCounter parent(&root, kSentinel12);
  std::vector<std::unique_ptr<PageCounter>> kids;
  for (int i = 0; i < kChildren; ++i) {
    kids.push_back(std::make_unique<PageCounter>(&parent, kSentinel12));
    kids.back()->set_min(kMin);
    kids.back()->set_low(kLow);
  }
  parent.set_min(kMin);

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::minstd_rand rng(1000 + t);
      PageCounter& kid = *kids[t % kChildren];
      // Each thread holds about a third of the setting, so the sum hovers around it.
      int64_t held = 0;
      for (int i = 0; i < kIterCap; ++i) {
        if ((i & 1023) == 0 && std::chrono::steady_clock::now() > deadline) break;
        const int64_t n = 1 + static_cast<int64_t>(rng() % 16);
        if (held >= 40 || (held >= n && rng() % 2)) {
          const int64_t m = std::min(held, n);
          kid.uncharge(m);
          held -= m;
        } else if (kid.try_charge(n) == nullptr) {
          held += n;
        }
      }
      // Leave some charge behind in half the threads so the end state is not trivially 0.
      if (t % 2 == 0) kid.uncharge(held);
    });
  }
  for (auto& th : threads) th.join();

  int64_t cached_min = 0, cached_low = 0;
  for (auto& k : kids) {
    cached_min += k->min_usage();
    cached_low += k->low_usage();
    EXPECT_EQ(k->underflows(), 0u);
  }
  EXPECT_EQ(parent.children_min_usage(), cached_min);
  EXPECT_EQ(parent.children_low_usage(), cached_low);

  for (auto& k : kids) {  // repair any stale cached value
    ASSERT_EQ(k->try_charge(1), nullptr);
    k->uncharge(1);
  }
  int64_t want_min = 0, want_low = 0, total = 0;
  for (auto& k : kids) {
    want_min += std::min(k->usage(), kMin);
    want_low += std::min(k->usage(), kLow);
    total += k->usage();
  }
  EXPECT_EQ(parent.children_min_usage(), want_min);
  EXPECT_EQ(parent.children_low_usage(), want_low);
  EXPECT_EQ(parent.usage(), total);
  EXPECT_EQ(root.children_min_usage(), std::min(total, kMin));
}

}  // namespace
}  // namespace memcg
