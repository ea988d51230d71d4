// memcg::jemalloc: per-group arenas whose extent hooks charge pages. Built and run only where the
// component is (jemalloc found, no sanitizers): this program's malloc is jemalloc.
//
// The checks compare memory.current with jemalloc's own figure for the arena (its `mapped`
// bytes), which the hooks are designed to equal exactly once no thread is allocating.
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

#include "memcg/core/attach.hpp"
#include "memcg/core/charge.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/controller.hpp"
#include "memcg/files/files.hpp"
#include "memcg/jemalloc/arena.hpp"
#include "memcg/base/nofail.hpp"
#include "memcg/core/oom.hpp"
#include "memcg/core/reclaim.hpp"

namespace memcg::jemalloc {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::unique_ptr<Arena> make_arena(Group& g, const ArenaOptions& o = {}) {
  std::unique_ptr<Arena> a;
  const int rc = Arena::create(g, &a, o);
  EXPECT_EQ(rc, 0);
  return a;
}

// Destroys the Arena and checks that its jemalloc arena went with it: every test frees its blocks
// before its controller goes (arena.hpp, REQUIRES).
void release(std::unique_ptr<Arena>& a) {
  flush_thread_cache();
  a.reset();
  EXPECT_EQ(collect_released(), 0u);
}

// Touches every page of a block, as a user would. The barrier keeps the compiler from eliding a
// malloc/free pair whose block nobody reads (it may, for malloc).
void touch(void* p, size_t n) {
  std::memset(p, 0x5a, n);
  asm volatile("" : : "r"(p) : "memory");
}

TEST(JemallocArena, CreateRefusesBadArgumentsAndChangesNothing) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  std::unique_ptr<Arena> a;
  EXPECT_EQ(Arena::create(*g, nullptr), EINVAL);
  EXPECT_EQ(Arena::create(ctl.root(), &a), EINVAL);
  ArenaOptions bad_kind;
  bad_kind.kind = 1000;
  EXPECT_EQ(Arena::create(*g, &a, bad_kind), EINVAL);
  bad_kind.kind = -1;
  EXPECT_EQ(Arena::create(*g, &a, bad_kind), EINVAL);
  ArenaOptions bad_count;
  bad_count.nr_arenas = 0;
  EXPECT_EQ(Arena::create(*g, &a, bad_count), EINVAL);
  bad_count.nr_arenas = ArenaOptions::kMaxArenas + 1;
  EXPECT_EQ(Arena::create(*g, &a, bad_count), EINVAL);
  ArenaOptions bad_decay;
  bad_decay.dirty_decay_ms = -5;
  EXPECT_EQ(Arena::create(*g, &a, bad_decay), EINVAL);
  GroupRef gone;
  ASSERT_EQ(ctl.create("gone", &gone), 0);
  ASSERT_EQ(ctl.remove(*gone), 0);
  EXPECT_EQ(Arena::create(*gone, &a), ENOENT);
  Options big;
  big.unit_shift = 16;  // a unit larger than jemalloc's page
  Controller ctl64k(big);
  GroupRef g64;
  ASSERT_EQ(ctl64k.create("t", &g64), 0);
  EXPECT_EQ(Arena::create(*g64, &a), EINVAL);
  EXPECT_EQ(a, nullptr);
  EXPECT_EQ(g->current(), 0u);
  EXPECT_EQ(g64->current(), 0u);
}

TEST(JemallocArena, ChargesMappedPagesAndReturnsToZero) {
  Options o;
  o.stat_kinds = {"arena"};
  Controller ctl(o);
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  auto a = make_arena(*g);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->kind(), ctl.stat_index("arena"));
  EXPECT_EQ(&a->group(), g.get());
  // The arena's first metadata block is charged from creation on.
  EXPECT_EQ(g->current(), a->stats().mapped);
  EXPECT_GT(g->current(), 0u);

  std::vector<std::pair<void*, size_t>> blocks;
  std::mt19937 rng(7);
  blocks.reserve(40000);  // outside the arena: only the loop's blocks are in it
  {
    ScopedArenaAttach in(*a);
    ASSERT_TRUE(in.ok());
    EXPECT_EQ(current_thread_arena(), a->index());
    EXPECT_EQ(attached_group(), g.get());
    for (int i = 0; i < 40000; ++i) {
      // Small, page-sized and large (several pages) blocks.
      const size_t n = i % 100 == 0 ? 64 * 1024 + rng() % (256 * 1024) : 16 + rng() % 4000;
      void* p = std::malloc(n);
      ASSERT_NE(p, nullptr);
      touch(p, n);
      blocks.emplace_back(p, n);
    }
  }
  EXPECT_NE(current_thread_arena(), a->index());
  for (auto& b : blocks) EXPECT_EQ(arena_of(b.first), a->index());
  ArenaStats s = a->stats();
  EXPECT_EQ(g->current(), s.charged);
  EXPECT_EQ(s.charged, s.mapped);
  EXPECT_GE(s.mapped, s.active + s.dirty);
  EXPECT_GT(s.commits, 0u);
  EXPECT_EQ(s.muzzy, 0u);  // lazy purge is refused
  ctl.flush_stats();
  EXPECT_EQ(static_cast<uint64_t>(g->stat(a->kind())), g->current());
  std::string stat;
  ASSERT_EQ(read_file(*g, "memory.stat", &stat), 0);
  EXPECT_NE(stat.find("arena " + std::to_string(g->current()) + "\n"), std::string::npos) << stat;

  for (auto& b : blocks) std::free(b.first);
  flush_thread_cache();  // the frees above went through this thread's cache
  s = a->stats();
  EXPECT_EQ(s.active, 0u);
  EXPECT_EQ(g->current(), s.mapped);
  const uint64_t freed = a->purge();
  s = a->stats();
  EXPECT_GT(freed, 0u);
  EXPECT_GT(s.decommits, 0u);
  EXPECT_EQ(s.dirty, 0u);
  EXPECT_EQ(g->current(), s.mapped);
  EXPECT_EQ(g->current(), s.charged);
  const std::string text = a->format_stats();
  EXPECT_NE(text.find("charged " + std::to_string(s.charged) + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mapped "), std::string::npos);
  a.reset();  // empty: destroyed at once, metadata included
  EXPECT_EQ(collect_released(), 0u);
  EXPECT_EQ(g->current(), 0u);
  ctl.flush_stats();
  EXPECT_EQ(g->stat(ctl.stat_index("arena")), 0);
}

TEST(JemallocArena, DefaultKindIsAnon) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  auto a = make_arena(*g);
  EXPECT_EQ(a->kind(), StatRegistry::kAnon);
  ctl.flush_stats();
  EXPECT_EQ(static_cast<uint64_t>(g->stat(StatRegistry::kAnon)), g->current());
  release(a);
}

// Two tenants, two threads each, random sizes; half of each thread's blocks are freed by a thread
// of the other tenant. Once every thread is done and has flushed its cache, each group's count is
// its arena's mapped bytes; once everything is freed and purged, it is the metadata only, and 0
// after destruction.
TEST(JemallocArena, MultiThreadedWithCrossThreadFreesTracksJemallocFigures) {
  Controller ctl;
  GroupRef ga, gb;
  ASSERT_EQ(ctl.create("a", &ga), 0);
  ASSERT_EQ(ctl.create("b", &gb), 0);
  auto aa = make_arena(*ga);
  auto ab = make_arena(*gb);
  Arena* arenas[2] = {aa.get(), ab.get()};

  std::mutex mu;
  std::vector<void*> handoff[2];  // blocks to be freed by a thread of tenant i
  // Reserved here: a vector that grows inside a thread frees its old buffer into that thread's
  // cache.
  for (auto& v : handoff) v.reserve(100000);
  std::vector<void*> kept[4];
  std::atomic<int> failures{0};
  std::atomic<int> foreign{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const int tenant = t % 2;
      ScopedArenaAttach in(*arenas[tenant]);
      if (!in.ok()) {
        failures.fetch_add(1);
        return;
      }
      std::mt19937 rng(100 + t);
      std::vector<void*> mine;
      std::vector<void*> theirs;
      theirs.reserve(100000);
      for (int round = 0; round < 20; ++round) {
        for (int i = 0; i < 2000; ++i) {
          const size_t n = rng() % 50 == 0 ? 20000 + rng() % 100000 : 8 + rng() % 2000;
          void* p = std::malloc(n);
          if (p == nullptr) {
            failures.fetch_add(1);
            continue;
          }
          touch(p, n);
          // A block of the other tenant freed by this thread sits in this thread's cache and may
          // be handed out again (arena.hpp); never right after the cache was flushed.
          if (arena_of(p) != arenas[tenant]->index()) {
            foreign.fetch_add(1);
            if (round % 2 == 1) failures.fetch_add(1);
          }
          if (rng() % 2 == 0) {
            std::lock_guard<std::mutex> l(mu);
            handoff[1 - tenant].push_back(p);
          } else {
            mine.push_back(p);
          }
        }
        // Free some of what the other tenant handed over, and some of our own.
        {
          std::lock_guard<std::mutex> l(mu);
          theirs.assign(handoff[tenant].begin(), handoff[tenant].end());
          handoff[tenant].clear();  // keeps its capacity: no reallocation by the other tenant
        }
        for (void* p : theirs) std::free(p);
        for (size_t i = 0; i < mine.size() / 3; ++i) {
          std::free(mine.back());
          mine.pop_back();
        }
        if (round % 2 == 0) flush_thread_cache();
      }
      kept[t] = std::move(mine);
      flush_thread_cache();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LT(foreign.load(), 4 * 20 * 2000 / 4);  // bounded by the caches' capacity
  for (Arena* a : arenas) {
    const ArenaStats s = a->stats();
    EXPECT_EQ(a->group().current(), s.mapped) << a->index();
    EXPECT_EQ(s.charged, s.mapped);
    EXPECT_GT(s.active, 0u);
  }
  // Everything freed (from this thread: cross-thread again), purged: the metadata only.
  for (auto& v : kept)
    for (void* p : v) std::free(p);
  for (auto& v : handoff)
    for (void* p : v) std::free(p);
  // The vectors grew inside the arenas too.
  for (auto& v : kept) std::vector<void*>().swap(v);
  for (auto& v : handoff) std::vector<void*>().swap(v);
  flush_thread_cache();
  for (Arena* a : arenas) {
    a->purge();
    const ArenaStats s = a->stats();
    EXPECT_EQ(s.active, 0u);
    EXPECT_EQ(s.dirty, 0u);
    EXPECT_EQ(a->group().current(), s.mapped);
    EXPECT_LE(s.mapped, s.metadata + 4 * kMiB);
  }
  aa.reset();
  ab.reset();
  EXPECT_EQ(collect_released(), 0u);
  EXPECT_EQ(ga->current(), 0u);
  EXPECT_EQ(gb->current(), 0u);
}

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

TEST(JemallocArena, ThreadMovesBetweenGroupsAllocateFromTheNewArena) {
  Controller ctl;
  GroupRef ga, gb;
  ASSERT_EQ(ctl.create("a", &ga), 0);
  ASSERT_EQ(ctl.create("b", &gb), 0);
  auto aa = make_arena(*ga);
  auto ab = make_arena(*gb);
  const unsigned home = current_thread_arena();
  std::vector<void*> in_a, in_b;
  in_a.reserve(1000);
  in_b.reserve(1000);
  {
    ScopedArenaAttach to_a(*aa);
    for (int i = 0; i < 1000; ++i) in_a.push_back(std::malloc(64));
    // Freed into this thread's cache: must not be handed out once the thread is in b.
    for (int i = 0; i < 500; ++i) {
      std::free(in_a.back());
      in_a.pop_back();
    }
    {
      ScopedArenaAttach to_b(*ab);
      ASSERT_TRUE(to_b.ok());
      EXPECT_EQ(attached_group(), gb.get());
      for (int i = 0; i < 1000; ++i) in_b.push_back(std::malloc(64));
    }
    EXPECT_EQ(attached_group(), ga.get());
    EXPECT_EQ(current_thread_arena(), aa->index());
    void* back = std::malloc(64);
    EXPECT_EQ(arena_of(back), aa->index());
    std::free(back);
  }
  EXPECT_EQ(current_thread_arena(), home);
  EXPECT_EQ(attached_group(), nullptr);
  for (void* p : in_a) EXPECT_EQ(arena_of(p), aa->index());
  for (void* p : in_b) EXPECT_EQ(arena_of(p), ab->index());
  for (void* p : in_a) std::free(p);
  for (void* p : in_b) std::free(p);
  flush_thread_cache();
  EXPECT_EQ(ga->current(), aa->stats().mapped);
  EXPECT_EQ(gb->current(), ab->stats().mapped);
  release(aa);
  release(ab);
}

TEST(JemallocArena, RemovedGroupKeepsItsPagesChargedUntilItsBlocksAreFreed) {
  Controller ctl;
  GroupRef parent, child;
  ASSERT_EQ(ctl.create("p", &parent), 0);
  ASSERT_EQ(ctl.create("p/c", &child), 0);
  auto a = make_arena(*child);
  std::vector<void*> blocks;
  blocks.reserve(2000);
  {
    ScopedArenaAttach in(*a);
    for (int i = 0; i < 2000; ++i) blocks.push_back(std::malloc(1000));
  }
  ArenaStats s = a->stats();
  EXPECT_EQ(parent->current(), s.mapped);
  Group* const dying = child.get();
  a.reset();  // live blocks: the jemalloc arena stays, charged
  EXPECT_EQ(collect_released(), 1u);
  child.reset();
  ASSERT_EQ(ctl.remove("p/c"), 0);
  EXPECT_EQ(ctl.nr_dying(), 1u);
  EXPECT_FALSE(dying->is_online());
  EXPECT_EQ(parent->current(), s.mapped);
  // Freed by another thread; the blocks go back to their own arena.
  std::thread([&] {
    for (void* p : blocks) std::free(p);
    flush_thread_cache();
  }).join();
  EXPECT_EQ(collect_released(), 0u);  // emptied: purged and destroyed
  EXPECT_EQ(parent->current(), 0u);
  EXPECT_EQ(ctl.nr_dying(), 0u);
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

TEST(JemallocArena, PmrResourceAllocatesInTheArenaWithoutBinding) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  ArenaOptions o;
  o.failure = ArenaFailure::kRefuse;
  auto a = make_arena(*g, o);
  ArenaResource mr(*a);
  ArenaResource same(*a);
  EXPECT_TRUE(mr.is_equal(same));
  EXPECT_FALSE(mr.is_equal(*std::pmr::new_delete_resource()));
  {
    std::pmr::vector<std::pmr::string> v(&mr);
    for (int i = 0; i < 10000; ++i) v.emplace_back(std::string(100, 'x'));
    EXPECT_EQ(arena_of(v.data()), a->index());
    EXPECT_EQ(arena_of(v.back().data()), a->index());
    void* aligned = mr.allocate(4096, 256);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(aligned) % 256, 0u);
    EXPECT_EQ(arena_of(aligned), a->index());
    mr.deallocate(aligned, 4096, 256);
    EXPECT_EQ(g->current(), a->stats().mapped);
    EXPECT_GT(a->stats().active, 10000u * 100);
    // mallocx with the flags directly.
    void* p = mallocx(5000, a->mallocx_flags());
    EXPECT_EQ(arena_of(p), a->index());
    dallocx(p, a->mallocx_flags());
  }
  EXPECT_EQ(a->stats().active, 0u);  // no thread cache in between
  g->set_max(a->charged_bytes() + kMiB);
  EXPECT_THROW(static_cast<void>(mr.allocate(8 * kMiB)), std::bad_alloc);
  EXPECT_LE(g->current(), g->max());
  release(a);
  EXPECT_EQ(g->current(), 0u);
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


// One group, several arenas: bound threads are spread over them, and the group is charged for
// the pages of all of them.
TEST(JemallocArena, SeveralArenasPerGroupSpreadThreadsAndAddUp) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  ArenaOptions o;
  o.nr_arenas = 3;
  auto a = make_arena(*g, o);
  ASSERT_EQ(a->nr_arenas(), 3);
  EXPECT_EQ(a->index(0), a->index());
  EXPECT_NE(a->index(0), a->index(1));
  EXPECT_NE(a->index(1), a->index(2));
  EXPECT_EQ(a->index(3), UINT32_MAX);
  EXPECT_EQ(a->index(-1), UINT32_MAX);
  EXPECT_TRUE(a->owns(a->index(2)));
  EXPECT_FALSE(a->owns(0));
  std::vector<void*> blocks[3];
  unsigned bound_to[3] = {};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    blocks[t].reserve(5000);
    threads.emplace_back([&, t] {
      ScopedArenaAttach in(*a);
      bound_to[t] = current_thread_arena();
      for (int i = 0; i < 5000; ++i) {
        void* p = std::malloc(32 + (i * 13) % 3000);
        if (p != nullptr) touch(p, 32);
        blocks[t].push_back(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<unsigned> distinct(std::begin(bound_to), std::end(bound_to));
  EXPECT_EQ(distinct.size(), 3u);  // one arena each, in turn
  for (int t = 0; t < 3; ++t) {
    EXPECT_TRUE(a->owns(bound_to[t]));
    for (void* p : blocks[t]) {
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(arena_of(p), bound_to[t]);
    }
  }
  const ArenaStats s = a->stats();
  EXPECT_EQ(g->current(), s.mapped);
  EXPECT_EQ(s.charged, s.mapped);
  for (auto& v : blocks)
    for (void* p : v) std::free(p);
  flush_thread_cache();
  const ArenaStats freed = a->stats();
  EXPECT_EQ(freed.active, 0u);
  EXPECT_GT(freed.dirty, 0u);
  // The group's reclaimer purges every arena of the group (memory.reclaim's path).
  const int64_t units = static_cast<int64_t>(freed.dirty / ctl.unit_size());
  EXPECT_GT(memcg::reclaim(*g, units, ReclaimReason::kProactive), 0);
  EXPECT_EQ(a->stats().dirty, 0u);
  EXPECT_EQ(g->current(), a->stats().mapped);
  release(a);
  EXPECT_EQ(g->current(), 0u);
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


TEST(JemallocArena, AttachingToARemovedGroupsArenaChangesNothing) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  auto a = make_arena(*g);
  ASSERT_EQ(ctl.remove(*g), 0);  // the Arena's reference does not keep the group online
  const unsigned home = current_thread_arena();
  {
    ScopedArenaAttach in(*a);
    EXPECT_FALSE(in.ok());
    EXPECT_EQ(current_thread_arena(), home);
    EXPECT_EQ(attached_group(), nullptr);
  }
  EXPECT_EQ(current_thread_arena(), home);
  // Direct use still works: the dying group is charged, as for any charge to a dying group.
  ArenaResource mr(*a);
  void* p = mr.allocate(100000);
  EXPECT_EQ(arena_of(p), a->index());
  EXPECT_EQ(g->current(), a->stats().mapped);
  mr.deallocate(p, 100000);
  release(a);
  EXPECT_EQ(g->current(), 0u);
}

}  // namespace
}  // namespace memcg::jemalloc
