// The global operator new/delete hook (hook.hpp; this program links memcg::hook): every form
// charges an attached thread's group exactly malloc_usable_size of its block, frees uncharge
// exactly that from the same group whichever thread frees and after the allocating thread moved
// or exited, unattached allocations are never charged nor uncharged, limits fail with
// std::bad_alloc (null for nothrow), and charging that reclaims does not recurse.
#include "memcg/hook/hook.hpp"

#include <gtest/gtest.h>
#include <malloc.h>

#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/charge/attach.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/alloc/lru_cache.hpp"
#include "memcg/base/nofail.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/alloc/pmr.hpp"
#include "memcg/percpu/internal/stock.hpp"

#include "alloc_test_support.hpp"

namespace memcg {
namespace {

using testing::kUnit;
using testing::round_up;
using testing::settle;

// What the hook charges for a block returned by operator new with alignment `align`.
int64_t footprint(void* p, size_t align = __STDCPP_DEFAULT_NEW_ALIGNMENT__) {
  const size_t pre = align > hook::kHeaderBytes ? align : hook::kHeaderBytes;
  return int64_t(malloc_usable_size(static_cast<char*>(p) - pre));
}

void no_policies(Controller& ctl) {
  ctl.set_reclaim_hook([](Group&, int64_t) { return int64_t{0}; });
  ctl.set_oom_hook([](Group&, int64_t) { return false; });
}

TEST(Hook, EveryFormChargesAndUnchargesExactly) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  int64_t expect = 0;
  void *a, *b, *c, *d, *e, *f, *h, *i;
  {
    ScopedAttach attach(*g);
    a = ::operator new(10);
    b = ::operator new[](100);
    c = ::operator new(1000, std::nothrow);
    d = ::operator new[](30, std::nothrow);
    e = ::operator new (50, std::align_val_t{64});
    f = ::operator new[](5000, std::align_val_t{256});
    h = ::operator new (7, std::align_val_t{32}, std::nothrow);
    i = ::operator new[](70, std::align_val_t{128}, std::nothrow);
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(e) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h) % 32, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(i) % 128, 0u);
  expect = footprint(a) + footprint(b) + footprint(c) + footprint(d) + footprint(e, 64) +
           footprint(f, 256) + footprint(h, 32) + footprint(i, 128);
  settle(ctl);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), expect);
  EXPECT_EQ(int64_t(g->current()), round_up(expect));
  // Freed while unattached, with every delete form.
  ::operator delete (a, size_t{10});
  ::operator delete[](b);
  ::operator delete(c, std::nothrow);
  ::operator delete[](d, size_t{30});
  ::operator delete (e, size_t{50}, std::align_val_t{64});
  ::operator delete[](f, std::align_val_t{256});
  ::operator delete (h, std::align_val_t{32}, std::nothrow);
  ::operator delete[](i, size_t{70}, std::align_val_t{128});
  settle(ctl);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), 0);
  EXPECT_EQ(g->current(), 0u);
}

TEST(Hook, UnattachedAllocationsAreNeverCharged) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  auto before = std::make_unique<std::string>(1000, 'x');  // the root's
  std::unique_ptr<std::string> mine;
  {
    ScopedAttach attach(*g);
    before.reset();  // freed while attached: nothing to uncharge
    mine = std::make_unique<std::string>(1000, 'y');
  }
  // (Not settled while attached: the library's own allocations there would be charged too.)
  settle(ctl);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), footprint(mine.get()) + footprint(mine->data()));
  mine.reset();
  settle(ctl);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), 0);
  EXPECT_EQ(g->current(), 0u);
}

// Random new/delete from attached threads of three groups; a third of the blocks are handed to
// other threads and freed there, and whatever is left when the threads exit is freed here.
TEST(Hook, RandomExactnessAcrossThreadsAndThreadExit) {
  Controller ctl;
  GroupRef g[3];
  ASSERT_EQ(ctl.create("a", &g[0]), 0);
  ASSERT_EQ(ctl.create("b", &g[1]), 0);
  ASSERT_EQ(ctl.create("c", &g[2]), 0);
  struct Block {
    char* p;
    int group;
  };
  std::mutex mu;
  std::vector<Block> handed;
  handed.reserve(100000);  // grown by this (unattached) thread only
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      std::vector<Block> mine;
      mine.reserve(20000);  // before attaching: the root's
      ScopedAttach attach(*g[t % 3]);
      std::mt19937 rng(5 + t);
      for (int i = 0; i < 6000; ++i) {
        const unsigned r = rng() % 10;
        if (r < 5 || mine.empty()) {
          mine.push_back({new char[1 + rng() % 600], t % 3});
        } else if (r < 8) {
          const size_t k = rng() % mine.size();
          delete[] mine[k].p;
          mine[k] = mine.back();
          mine.pop_back();
        } else {
          std::lock_guard lock(mu);
          if (r == 8 || handed.empty()) {
            handed.push_back(mine.back());
            mine.pop_back();
          } else {
            delete[] handed.back().p;  // allocated by another thread, maybe another group
            handed.pop_back();
          }
        }
      }
      std::lock_guard lock(mu);
      handed.insert(handed.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : ts) t.join();
  int64_t live[3] = {};
  for (const Block& b : handed) live[b.group] += footprint(b.p);
  settle(ctl);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(g[i]->stat(StatRegistry::kAnon), live[i]) << i;
    EXPECT_EQ(int64_t(g[i]->current()), round_up(live[i])) << i;
  }
  for (const Block& b : handed) delete[] b.p;
  settle(ctl);
  for (auto& x : g) {
    EXPECT_EQ(x->current(), 0u);
    EXPECT_EQ(x->stat(StatRegistry::kAnon), 0);
  }
}

TEST(Hook, LimitThrowsAndNothrowReturnsNull) {
  Controller ctl;
  no_policies(ctl);
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  g->set_max(16 * kUnit);
  const uint64_t failed = hook::failed_charges();
  {
    ScopedAttach attach(*g);
    EXPECT_THROW((void)std::make_unique<char[]>(32 * kUnit), std::bad_alloc);
    EXPECT_EQ(::operator new(32 * kUnit, std::nothrow), nullptr);
    std::vector<std::string> v;
    bool threw = false;
    try {
      for (int i = 0; i < 100000; ++i) v.emplace_back(100, 'z');
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    EXPECT_TRUE(threw);
    EXPECT_LE(g->current(), 16u * kUnit);
    {
      NoFailScope nofail;
      auto forced = std::make_unique<char[]>(32 * kUnit);
      EXPECT_GT(g->current(), 16u * kUnit);
    }
  }
  EXPECT_GE(hook::failed_charges(), failed + 3);
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
}

TEST(Hook, ChargingThatReclaimsDoesNotRecurse) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  g->set_max(64 * kUnit);
  // Grown unattached: its own bookkeeping is the root's (see hook.hpp, "Hazard").
  LruCache cache(*g, "cache");
  ASSERT_EQ(cache.grow(60), 60);
  {
    ScopedAttach attach(*g);
    std::map<int, std::string> m;  // reclaim runs inside operator new, and allocates
    for (int i = 0; i < 400; ++i) m[i] = std::string(300, 'q');
    EXPECT_GT(cache.evicted(), 0u);
    EXPECT_LE(g->current(), 64u * kUnit);
  }
  cache.drop();
  settle(ctl);
  EXPECT_EQ(g->current(), 0u);
}

TEST(Hook, ResourcesAreNotChargedTwice) {
  Controller ctl;
  GroupRef g, other;
  ASSERT_EQ(ctl.create("g", &g), 0);
  ASSERT_EQ(ctl.create("other", &other), 0);
  MemoryResource mr(*other);
  std::pmr::vector<char> v(&mr);
  {
    ScopedAttach attach(*g);
    v.assign(1000, 'x');
  }
  settle(ctl);
  EXPECT_EQ(other->stat(StatRegistry::kAnon), 1000);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), 0);
}

TEST(Hook, KindIsRecordedPerBlock) {
  Controller ctl(Options{.stat_kinds = {"heap"}});
  const int heap = ctl.stat_index("heap");
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  hook::set_kind(heap);
  char* p;
  {
    ScopedAttach attach(*g);
    p = new char[100];
  }
  hook::set_kind(StatRegistry::kAnon);
  settle(ctl);
  EXPECT_EQ(g->stat(heap), footprint(p));
  delete[] p;  // uncharged from `heap` although the hook's kind changed meanwhile
  settle(ctl);
  EXPECT_EQ(g->stat(heap), 0);
}

TEST(Hook, RequestedSizeMode) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  hook::set_charge_usable_size(false);
  char* p;
  {
    ScopedAttach attach(*g);
    p = new char[100];
    asm volatile("" : : "g"(p) : "memory");  // keep the compiler from eliding the pair
  }
  hook::set_charge_usable_size(true);
  settle(ctl);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), int64_t(100 + hook::kHeaderBytes));
  delete[] p;
  settle(ctl);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), 0);
  EXPECT_EQ(g->current(), 0u);
}

// The controller's own structures, allocated by an attached thread, are the library's: not
// charged (internal/lock.hpp), and freed safely when the controller goes, after its groups.
TEST(Hook, ControllerStructuresAllocatedWhileAttached) {
  for (int i = 0; i < 3; ++i) {
    Controller ctl;
    GroupRef g, child;
    ASSERT_EQ(ctl.create("g", &g), 0);
    {
      ScopedAttach attach(*g);
      ASSERT_EQ(ctl.create("g/child", &child), 0);
      ctl.flush_stats();
    }
    settle(ctl);
    EXPECT_EQ(g->stat(StatRegistry::kAnon), 0);
    EXPECT_EQ(g->current(), 0u);
    child.reset();
    g.reset();
  }
}

}  // namespace
}  // namespace memcg
