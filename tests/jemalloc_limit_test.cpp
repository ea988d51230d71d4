// memcg::jemalloc at a group's limit: refusal (malloc null, new throws), the arena's dirty pages
// and other reclaimers making room, one tenant's limit never failing another, memory.high, the
// library used from a full tenant, and an arena created at the limit. Built and run only where
// the component is (jemalloc found, no sanitizers). The accounting itself is in
// jemalloc_arena_test.cpp; never-fail arenas in jemalloc_nofail_test.cpp.
#include <gtest/gtest.h>
#include <jemalloc/jemalloc.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/charge/attach.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/files/files.hpp"
#include "memcg/jemalloc/arena.hpp"
#include "memcg/base/nofail.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "jemalloc_test_helpers.hpp"


namespace memcg::jemalloc {
namespace {

using testing::kMiB;
using testing::make_arena;
using testing::release;
using testing::touch;

TEST(JemallocArena, AtMaxMallocReturnsNullAndNewThrows) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  g->set_max(16 * kMiB);
  ArenaOptions o;
  o.failure = ArenaFailure::kRefuse;
  o.dirty_decay_ms = -1;
  auto a = make_arena(*g, o);
  std::vector<void*> blocks;
  blocks.reserve(64);
  bool got_null = false, got_bad_alloc = false;
  void* forced = nullptr;
  {
    ScopedArenaAttach in(*a);
    ASSERT_TRUE(in.ok());
    for (int i = 0; i < 64; ++i) {
      void* p = std::malloc(kMiB);
      if (p == nullptr) {
        got_null = true;
        break;
      }
      touch(p, kMiB);
      blocks.push_back(p);
    }
    try {
      char* q = new char[2 * kMiB];
      blocks.push_back(q);
    } catch (const std::bad_alloc&) {
      got_bad_alloc = true;
    }
    {
      // operator new, not malloc: GCC assumes malloc reads no program state and may drop the
      // scope's thread-local store around a bare malloc call (arena.hpp).
      NoFailScope nofail;
      forced = new char[2 * kMiB];  // charged past max instead of failing
    }
  }
  EXPECT_TRUE(got_null);
  EXPECT_TRUE(got_bad_alloc);
  ASSERT_NE(forced, nullptr);
  const ArenaStats s = a->stats();
  EXPECT_GT(s.failed_charges, 0u);
  EXPECT_GT(charge_stats(ctl).failed, 0u);
  EXPECT_GT(charge_stats(ctl).forced, 0u);
  EXPECT_GT(g->events().get(Event::kMax), 0u);
  EXPECT_EQ(g->current(), s.mapped);
  EXPECT_GT(g->current(), g->max());  // only by the forced block
  EXPECT_LE(g->current(), g->max() + 2 * kMiB);
  delete[] static_cast<char*>(forced);
  for (void* p : blocks) std::free(p);
  flush_thread_cache();
  a->purge();
  EXPECT_EQ(g->current(), a->stats().mapped);
  EXPECT_LE(g->current(), 4 * kMiB);
  release(a);
  EXPECT_EQ(g->current(), 0u);
}

TEST(JemallocArena, DirtyPagesAreReclaimedBeforeAChargeFails) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  ArenaOptions o;
  o.dirty_decay_ms = -1;  // dirty pages stay until purged
  auto a = make_arena(*g, o);
  g->set_max(a->charged_bytes() + 8 * kMiB);
  void* big = nullptr;
  // Small blocks: their slabs stay dirty once freed (this arena never decays on its own).
  std::vector<void*> small;
  small.reserve(20000);
  {
    ScopedArenaAttach in(*a);
    for (int i = 0; i < 20000; ++i) {
      void* p = std::malloc(256);
      ASSERT_NE(p, nullptr);
      touch(p, 256);
      small.push_back(p);
    }
  }
  for (void* p : small) std::free(p);
  flush_thread_cache();
  ArenaStats s = a->stats();
  EXPECT_EQ(s.active, 0u);
  EXPECT_GE(s.dirty, 4 * kMiB);  // freed, still charged
  EXPECT_EQ(g->current(), s.mapped);
  {
    // 7 MiB fits no dirty extent: new pages are committed, past max unless the dirty pages go.
    ScopedArenaAttach in(*a);
    big = std::malloc(7 * kMiB);
  }
  ASSERT_NE(big, nullptr);
  touch(big, 7 * kMiB);
  s = a->stats();
  EXPECT_GT(s.decommits, 0u);
  EXPECT_LE(g->current(), g->max());
  EXPECT_EQ(g->current(), s.mapped);
  std::free(big);
  release(a);
}

// Frees its charge on request, as an application cache would.
class HeldCharge final : public Reclaimer {
 public:
  HeldCharge(Group& g, int64_t units) : g_(g), held_(units) {
    EXPECT_EQ(try_charge(g_, units, kDefaultCharge), ChargeStatus::kOk);
  }
  ~HeldCharge() override { uncharge_direct(g_, held_.exchange(0)); }
  int64_t reclaimable() const noexcept override { return held_.load(); }
  ReclaimResult reclaim(int64_t nr, int) override {
    const int64_t take = std::min(nr, held_.load());
    held_.fetch_sub(take);
    uncharge_direct(g_, take);
    calls.fetch_add(1);
    return {take, take};
  }
  std::atomic<int> calls{0};

 private:
  Group& g_;
  std::atomic<int64_t> held_;
};

TEST(JemallocArena, AnotherReclaimerInTheGroupMakesRoom) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  auto a = make_arena(*g);
  g->set_max(a->charged_bytes() + 8 * kMiB);
  HeldCharge cache(*g, static_cast<int64_t>(6 * kMiB / ctl.unit_size()));
  ReclaimerRegistration reg(*g, cache);
  void* p;
  {
    ScopedArenaAttach in(*a);
    p = std::malloc(4 * kMiB);
  }
  ASSERT_NE(p, nullptr);
  touch(p, 4 * kMiB);
  EXPECT_GT(cache.calls.load(), 0);
  EXPECT_LE(g->current(), g->max());
  EXPECT_EQ(g->current(),
            a->stats().mapped + static_cast<uint64_t>(cache.reclaimable()) * ctl.unit_size());
  std::free(p);
  release(a);
}

TEST(JemallocArena, ATenantAtItsLimitNeverFailsAnother) {
  Controller ctl;
  GroupRef ga, gb;
  ASSERT_EQ(ctl.create("a", &ga), 0);
  ASSERT_EQ(ctl.create("b", &gb), 0);
  ArenaOptions refuse;
  refuse.failure = ArenaFailure::kRefuse;
  auto aa = make_arena(*ga, refuse);
  auto ab = make_arena(*gb, refuse);
  ga->set_max(aa->charged_bytes() + 4 * kMiB);
  std::atomic<int> a_failures{0}, b_failures{0};
  std::atomic<bool> stop{false};
  std::thread ta([&] {
    ScopedArenaAttach in(*aa);
    std::vector<void*> held;
    while (!stop.load()) {
      void* p = std::malloc(256 * 1024);
      if (p == nullptr) {
        a_failures.fetch_add(1);
        for (void* q : held) std::free(q);
        held.clear();
      } else {
        touch(p, 256 * 1024);
        held.push_back(p);
      }
    }
    for (void* q : held) std::free(q);
    flush_thread_cache();
  });
  std::thread tb([&] {
    ScopedArenaAttach in(*ab);
    for (int round = 0; round < 200; ++round) {
      std::vector<void*> held;
      for (int i = 0; i < 64; ++i) {
        void* p = std::malloc(256 * 1024);
        if (p == nullptr) {
          b_failures.fetch_add(1);
          continue;
        }
        touch(p, 256 * 1024);
        held.push_back(p);
      }
      for (void* q : held) std::free(q);
    }
    flush_thread_cache();
    stop.store(true);
  });
  tb.join();
  ta.join();
  EXPECT_GT(a_failures.load(), 0);
  EXPECT_EQ(b_failures.load(), 0);
  EXPECT_GT(gb->peak(), 16 * kMiB);
  EXPECT_LE(ga->peak(), ga->max());
  EXPECT_EQ(ga->current(), aa->stats().mapped);
  EXPECT_EQ(gb->current(), ab->stats().mapped);
  release(aa);
  release(ab);
}

TEST(JemallocArena, MemoryHighThrottlesTheAllocatingThread) {
  ManualClock clock;
  Options o;
  o.clock = &clock;
  Controller ctl(o);
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  auto a = make_arena(*g);
  g->set_high(a->charged_bytes() + 2 * kMiB);
  std::vector<void*> blocks;
  blocks.reserve(32);
  {
    ScopedArenaAttach in(*a);
    for (int i = 0; i < 32; ++i) {
      void* p = std::malloc(kMiB);
      ASSERT_NE(p, nullptr);  // high never fails a charge
      touch(p, kMiB);
      blocks.push_back(p);
    }
  }
  EXPECT_GT(g->events().get(Event::kHigh), 0u);
  EXPECT_GT(clock.total_slept_ns(), 0u);
  EXPECT_GT(ctl.charge_counters().throttled_ms.load(), 0u);
  EXPECT_EQ(g->current(), a->stats().mapped);
  for (void* p : blocks) std::free(p);
  release(a);
}

// A thread bound to a full arena can still use the library: what the library allocates under
// its own locks is charged forced, without reclaim (which would take those locks again).
TEST(JemallocArena, LibraryCallsFromAFullTenantNeitherFailNorDeadlock) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  ArenaOptions o;
  o.failure = ArenaFailure::kRefuse;
  auto a = make_arena(*g, o);
  g->set_max(a->charged_bytes() + kMiB);
  // The library's structures that a bound thread allocates live in its arena, and keep it from
  // being destroyed while they do (arena.hpp): grow the parent's child list beforehand, from here,
  // so that only the groups themselves (freed at their removal) are allocated in the arena.
  for (int i = 0; i < 300; ++i) ASSERT_EQ(ctl.create(*g, "c" + std::to_string(i)), 0);
  for (int i = 0; i < 300; ++i) ASSERT_EQ(ctl.remove("t/c" + std::to_string(i)), 0);
  std::vector<void*> fill;
  fill.reserve(64);
  int created = 0;
  {
    ScopedArenaAttach in(*a);
    for (int i = 0; i < 64; ++i) {
      void* p = std::malloc(64 * 1024);
      if (p == nullptr) break;
      touch(p, 64 * 1024);
      fill.push_back(p);
    }
    for (int i = 0; i < 300; ++i) created += ctl.create(*g, "c" + std::to_string(i)) == 0;
  }
  EXPECT_LT(fill.size(), 64u);  // the tenant did reach its limit
  EXPECT_EQ(created, 300);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(ctl.remove("t/c" + std::to_string(i)), 0);
  EXPECT_EQ(g->current(), a->stats().mapped);
  for (void* p : fill) std::free(p);
  release(a);
}


// Creating an arena charges its first metadata while jemalloc holds its control lock: at the
// group's limit that charge must not reclaim (a reclaimer's purge would take the lock again).
TEST(JemallocArena, CreatingAnArenaAtTheLimitDoesNotReclaimUnderJemallocsLock) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  ArenaOptions o;
  o.dirty_decay_ms = -1;
  auto first = make_arena(*g, o);
  std::vector<void*> small;
  small.reserve(4000);
  {
    ScopedArenaAttach in(*first);
    for (int i = 0; i < 4000; ++i) small.push_back(std::malloc(512));
  }
  for (void* p : small) std::free(p);
  flush_thread_cache();
  ASSERT_GT(first->stats().dirty, 0u);  // something the first arena's reclaimer could purge
  g->set_max(g->current());
  auto second = make_arena(*g);
  ASSERT_NE(second, nullptr);
  EXPECT_GT(g->current(), g->max());  // the metadata block, forced
  EXPECT_GT(first->stats().dirty, 0u);  // nothing was reclaimed for it
  EXPECT_EQ(g->current(), first->stats().mapped + second->stats().mapped);
  release(second);
  release(first);
  EXPECT_EQ(g->current(), 0u);
}


}  // namespace
}  // namespace memcg::jemalloc
