// The CPU helpers and the restartable critical sections the stock is built on.

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

// The rseq area the hot-path sections take (never used when the sections do not exist).
struct rseq* rseq_area_or_null() {
#if MEMCG_HAVE_GLIBC_RSEQ
  return internal::rseq_area();
#else
  return nullptr;
#endif
}

// The hot path's form of the slot update: the tag and the units checked together, the count
// against [-hi, hi].
TEST_F(RseqCsTest, SlotAdd) {
  alignas(64) uint64_t disabled = 0;
  int a = 0, b = 0;
  const void* owner = &a;
  auto make = [](uint64_t units, uint64_t tag, int64_t count) {
    return units | (tag << 8) | (static_cast<uint64_t>(count) << 16);
  };
  const auto stat = [](int64_t v) { return static_cast<uint64_t>(v) << 16; };
  const uint64_t hi = 16, span = 32;
  uint64_t word = make(10, 3, -2);
  auto add = [&](const void* expect_owner, uint64_t delta, uint32_t mask, uint32_t expect) {
    return retry([&](int cpu) {
      return internal::cs_slot_add(rseq_area_or_null(), cpu, disabled, owner, expect_owner,
                                   word, delta, mask, expect, hi, span);
    });
  };
  // Take 4 units under tag 3: count -2 -> 2.
  EXPECT_EQ(add(&a, static_cast<uint64_t>(-4) + stat(4), 0xffff, 3 << 8), CsResult::kOk);
  EXPECT_EQ(word, make(6, 3, 2));
  // Too few units: the borrow takes the tag below the expected one.
  EXPECT_EQ(add(&a, static_cast<uint64_t>(-7) + stat(7), 0xffff, 3 << 8),
            CsResult::kCompareFailed);
  // Exactly all of them, then back up to hi exactly.
  EXPECT_EQ(add(&a, static_cast<uint64_t>(-6) + stat(-6), 0xffff, 3 << 8), CsResult::kOk);
  EXPECT_EQ(word, make(0, 3, -4));
  EXPECT_EQ(add(&a, 16 + stat(4), 0xffff, 3 << 8), CsResult::kOk);
  EXPECT_EQ(word, make(16, 3, 0));
  // Above hi.
  EXPECT_EQ(add(&a, 1, 0xffff, 3 << 8), CsResult::kCompareFailed);
  // Count out of [-16, 16] on either side.
  EXPECT_EQ(add(&a, static_cast<uint64_t>(-1) + stat(17), 0xffff, 3 << 8),
            CsResult::kCompareFailed);
  EXPECT_EQ(add(&a, static_cast<uint64_t>(-1) + stat(-17), 0xffff, 3 << 8),
            CsResult::kCompareFailed);
  EXPECT_EQ(add(&a, static_cast<uint64_t>(-1) + stat(-16), 0xffff, 3 << 8), CsResult::kOk);
  EXPECT_EQ(word, make(15, 3, -16));
  // Tag other than expected, above and below.
  EXPECT_EQ(add(&a, static_cast<uint64_t>(-1), 0xffff, 4 << 8), CsResult::kCompareFailed);
  EXPECT_EQ(add(&a, static_cast<uint64_t>(-1), 0xffff, 2 << 8), CsResult::kCompareFailed);
  // Units alone (mask 0xff): any tag, the count not changed; a borrow fails.
  EXPECT_EQ(add(&a, static_cast<uint64_t>(-15), 0xff, 0), CsResult::kOk);
  EXPECT_EQ(word, make(0, 3, -16));
  EXPECT_EQ(add(&a, static_cast<uint64_t>(-1), 0xff, 0), CsResult::kCompareFailed);
  EXPECT_EQ(word, make(0, 3, -16));
  // Other owner, disabled word, other CPU: nothing stored.
  EXPECT_EQ(add(&b, 1, 0xff, 0), CsResult::kCompareFailed);
  disabled = 1;
  EXPECT_EQ(add(&a, 1, 0xff, 0), CsResult::kCompareFailed);
  disabled = 0;
  const int other = (internal::current_cpu() + 1) % std::max(2, internal::nr_cpu_ids());
  EXPECT_EQ(internal::cs_slot_add(rseq_area_or_null(), other, disabled, owner, &a, word, 1, 0xff,
                                  0, hi, span),
            CsResult::kAborted);
  EXPECT_EQ(word, make(0, 3, -16));
}

TEST_F(RseqCsTest, AddFloorAndCeil) {
  alignas(64) uint64_t disabled = 0;
  int a = 0, b = 0;
  const void* owner = &a;
  int64_t count = 5;
  auto floor = [&](const void* expect, int64_t delta, int64_t lo) {
    return retry([&](int cpu) {
      return internal::cs_add_floor(rseq_area_or_null(), cpu, disabled, owner, expect, count,
                                    delta, lo);
    });
  };
  auto ceil = [&](const void* expect, int64_t delta, int64_t hi) {
    return retry([&](int cpu) {
      return internal::cs_add_ceil(rseq_area_or_null(), cpu, disabled, owner, expect, count,
                                   delta, hi);
    });
  };
  EXPECT_EQ(floor(&a, -5, 0), CsResult::kOk);
  EXPECT_EQ(count, 0);
  EXPECT_EQ(floor(&a, -1, 0), CsResult::kCompareFailed);
  EXPECT_EQ(ceil(&a, 10, 10), CsResult::kOk);
  EXPECT_EQ(count, 10);
  EXPECT_EQ(ceil(&a, 1, 10), CsResult::kCompareFailed);
  EXPECT_EQ(ceil(&a, -3, 10), CsResult::kOk);  // a ceiling only: going down is fine
  EXPECT_EQ(count, 7);
  EXPECT_EQ(floor(&a, 3, 0), CsResult::kOk);  // a floor only: going up is fine
  EXPECT_EQ(count, 10);
  EXPECT_EQ(floor(&b, -1, 0), CsResult::kCompareFailed);
  EXPECT_EQ(ceil(&b, -1, 10), CsResult::kCompareFailed);
  disabled = 1;
  EXPECT_EQ(floor(&a, -1, 0), CsResult::kCompareFailed);
  EXPECT_EQ(ceil(&a, -1, 10), CsResult::kCompareFailed);
  disabled = 0;
  const int other = (internal::current_cpu() + 1) % std::max(2, internal::nr_cpu_ids());
  EXPECT_EQ(internal::cs_add_floor(rseq_area_or_null(), other, disabled, owner, &a, count, -1, 0),
            CsResult::kAborted);
  EXPECT_EQ(internal::cs_add_ceil(rseq_area_or_null(), other, disabled, owner, &a, count, -1, 10),
            CsResult::kAborted);
  EXPECT_EQ(count, 10);
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
