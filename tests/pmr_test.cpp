// MemoryResource (pmr.hpp) and Allocator<T> (allocator.hpp): exact charges, limits with and
// without a reclaimer, per-thread groups with cross-thread frees and thread exit, equality.
#include "memcg/alloc/pmr.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory_resource>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memcg/alloc/allocator.hpp"
#include "memcg/core/charge/attach.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/alloc/lru_cache.hpp"
#include "memcg/base/nofail.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/percpu/internal/stock.hpp"

#include "alloc_test_support.hpp"

namespace memcg {
namespace {

using testing::kUnit;
using testing::round_up;
using testing::settle;

// Failing limits fail fast: no reclaim to wait for, no OOM victim.
void no_policies(Controller& ctl) {
  ctl.set_reclaim_hook([](Group&, int64_t) { return int64_t{0}; });
  ctl.set_oom_hook([](Group&, int64_t) { return false; });
}

TEST(Pmr, ChargesExactlyAndReturnsToZero) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  MemoryResource mr(*g);
  {
    std::pmr::vector<int> v(&mr);
    for (int i = 0; i < 1000; ++i) v.push_back(i);
    settle(ctl);
    EXPECT_EQ(g->stat(StatRegistry::kAnon), int64_t(v.capacity() * sizeof(int)));
    EXPECT_EQ(int64_t(g->current()), round_up(int64_t(v.capacity() * sizeof(int))));
  }
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), 0);
}

TEST(Pmr, ContainerFailsWithBadAllocAtTheLimit) {
  Controller ctl;
  no_policies(ctl);
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  g->set_max(64 * kUnit);
  MemoryResource mr(*g);
  std::pmr::vector<std::pmr::string> v(&mr);
  bool threw = false;
  try {
    for (int i = 0; i < 100000; ++i) v.emplace_back(200, 'x');
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  EXPECT_TRUE(threw);
  EXPECT_LE(g->current(), 64u * kUnit);
  EXPECT_GE(g->events().get(Event::kMax), 1u);
  // Counters consistent: exactly what the surviving container holds.
  settle(ctl);
  const int64_t live = int64_t(v.capacity() * sizeof(std::pmr::string)) +
                       int64_t(v.size()) * int64_t(v[0].capacity() + 1);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), live);
  EXPECT_EQ(int64_t(g->current()), round_up(live));
  v.clear();
  v.shrink_to_fit();
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
  // Inside a NoFailScope the same allocation is forced instead.
  {
    std::pmr::vector<char> big(&mr);
    NoFailScope nofail;
    big.resize(80 * kUnit);
    EXPECT_GT(g->current(), 64u * kUnit);
    EXPECT_GE(charge_stats(ctl).forced, 1u);
  }
}

TEST(Pmr, SucceedsAfterReclaimingACache) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  g->set_max(64 * kUnit);
  LruCache cache(*g, "cache");
  ASSERT_EQ(cache.grow(64), 64);
  MemoryResource mr(*g);
  std::pmr::vector<char> v(&mr);
  EXPECT_NO_THROW(v.resize(16 * kUnit));
  EXPECT_GT(cache.evicted(), 0u);
  EXPECT_LE(g->current(), 64u * kUnit);
}

TEST(Pmr, PerThreadGroupsCrossThreadFreesAndThreadExit) {
  Controller ctl;
  GroupRef g[2];
  ASSERT_EQ(ctl.create("a", &g[0]), 0);
  ASSERT_EQ(ctl.create("b", &g[1]), 0);
  MemoryResource mr(ctl);  // charges whoever allocates
  struct Block {
    void* p;
    size_t bytes, align;
    int group;
  };
  std::mutex mu;
  std::vector<Block> left;  // outlives the threads that allocated
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      ScopedAttach attach(*g[t % 2]);
      ASSERT_TRUE(attach.ok());
      std::mt19937 rng(77 + t);
      std::vector<Block> mine;
      for (int i = 0; i < 5000; ++i) {
        if (rng() % 3 != 0 || mine.empty()) {
          const size_t align = size_t{8} << (rng() % 4);  // 8 .. 64
          const size_t bytes = 1 + rng() % 500;
          mine.push_back({mr.allocate(bytes, align), bytes, align, t % 2});
        } else {
          const size_t k = rng() % mine.size();
          mr.deallocate(mine[k].p, mine[k].bytes, mine[k].align);
          mine[k] = mine.back();
          mine.pop_back();
        }
      }
      std::lock_guard lock(mu);
      left.insert(left.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : ts) t.join();
  // Freed here, by an unattached thread, after the allocating threads exited.
  int64_t live[2] = {};
  for (const Block& b : left) live[b.group] += int64_t(b.bytes + std::max<size_t>(b.align, 16));
  settle(ctl);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(g[i]->stat(StatRegistry::kAnon), live[i]);
    EXPECT_EQ(int64_t(g[i]->current()), round_up(live[i]));
  }
  for (const Block& b : left) mr.deallocate(b.p, b.bytes, b.align);
  settle(ctl);
  for (auto& x : g) {
    EXPECT_EQ(x->current(), 0u);
    EXPECT_EQ(x->stat(StatRegistry::kAnon), 0);
  }
  // Unattached: the root, nothing recorded.
  void* p = mr.allocate(100, 8);
  mr.deallocate(p, 100, 8);
}

TEST(Pmr, BlocksOfARemovedGroupAreStillUncharged) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  MemoryResource mr(ctl);
  void* p;
  {
    ScopedAttach attach(*g);
    p = mr.allocate(1000, 8);
  }
  Group* raw = g.get();
  g.reset();
  ASSERT_EQ(ctl.remove(*raw), 0);
  mr.deallocate(p, 1000, 8);
  settle(ctl);
  EXPECT_EQ(ctl.nr_dying(), 0u);
  EXPECT_EQ(ctl.root().current(), 0u);
}

TEST(Pmr, ResourcesCompareByIdentity) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  MemoryResource a(*g), b(*g);
  EXPECT_TRUE(a.is_equal(a));
  EXPECT_FALSE(a.is_equal(b));
}

// Many threads share one resource and one group; bounded in time for ThreadSanitizer.
TEST(Pmr, ConcurrentUseIsExact) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  MemoryResource mr(*g);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  std::vector<std::thread> ts;
  std::mutex mu;
  int64_t live = 0;
  std::vector<std::pair<void*, size_t>> kept;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<std::pair<void*, size_t>> mine;
      for (int i = 0; i < 20000 && std::chrono::steady_clock::now() < deadline; ++i) {
        if (rng() % 2 || mine.empty()) {
          const size_t n = 16 + rng() % 241;
          mine.emplace_back(mr.allocate(n), n);
        } else {
          mr.deallocate(mine.back().first, mine.back().second);
          mine.pop_back();
        }
      }
      std::lock_guard lock(mu);
      for (auto& [p, n] : mine) live += int64_t(n);
      kept.insert(kept.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : ts) t.join();
  settle(ctl);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), live);
  EXPECT_EQ(int64_t(g->current()), round_up(live));
  for (auto& [p, n] : kept) mr.deallocate(p, n);
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
}

TEST(Allocator, MapChargesItsNodesExactly) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  using A = Allocator<std::pair<const int, int>>;
  {
    std::map<int, int, std::less<int>, A> m{A(*g)};
    for (int i = 0; i < 1000; ++i) m[i] = i;
    settle(ctl);
    // Each node is one allocation of the node type; its size is not visible, but it is the
    // same for all nodes.
    const int64_t bytes = g->stat(StatRegistry::kAnon);
    EXPECT_EQ(bytes % 1000, 0);
    EXPECT_GT(bytes, 1000 * int64_t(sizeof(std::pair<const int, int>)));
    EXPECT_EQ(int64_t(g->current()), round_up(bytes));
  }
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
}

TEST(Allocator, EqualityAndLimits) {
  Controller ctl;
  no_policies(ctl);
  GroupRef a, b;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_EQ(ctl.create("b", &b), 0);
  EXPECT_TRUE(Allocator<int>(*a) == Allocator<long>(*a));
  EXPECT_FALSE(Allocator<int>(*a) == Allocator<int>(*b));
  EXPECT_FALSE(Allocator<int>(*a) == Allocator<int>(*a, StatRegistry::kKernel));
  a->set_max(4 * kUnit);
  std::vector<char, Allocator<char>> v{Allocator<char>(*a)};
  EXPECT_THROW(v.resize(5 * kUnit), std::bad_alloc);
  EXPECT_NO_THROW(v.resize(3 * kUnit));
  // Move assignment across groups moves element-wise: each group pays for its own.
  std::vector<char, Allocator<char>> w{Allocator<char>(*b)};
  w = std::move(v);
  settle(ctl);
  EXPECT_EQ(b->stat(StatRegistry::kAnon), int64_t(w.capacity()));
  EXPECT_EQ(a->stat(StatRegistry::kAnon), int64_t(v.capacity()));
}

struct alignas(64) Wide {
  char c[64];
};

TEST(Allocator, OverAlignedTypes) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  std::vector<Wide, Allocator<Wide>> v{Allocator<Wide>(*g)};
  v.resize(10);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 64, 0u);
  settle(ctl);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), int64_t(v.capacity() * sizeof(Wide)));
}

}  // namespace
}  // namespace memcg
