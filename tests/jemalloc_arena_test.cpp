// memcg::jemalloc: per-group arenas whose extent hooks charge pages: creation, exact accounting,
// threads moving between arenas, removed groups, the pmr resource and several arenas per group.
// Built and run only where the component is (jemalloc found, no sanitizers): this program's
// malloc is jemalloc. The limit behaviour is in jemalloc_limit_test.cpp.
//
// The checks compare memory.current with jemalloc's own figure for the arena (its `mapped`
// bytes), which the hooks are designed to equal exactly once no thread is allocating.
#include <gtest/gtest.h>
#include <jemalloc/jemalloc.h>

#include <atomic>
#include <chrono>
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
  // No decay: jemalloc's background purge threads (started by any arena with background_purge)
  // may otherwise decommit the freed pages while the checks below read the counters (seen
  // once in about 30 runs: memory.current 42 MB below jemalloc's mapped, purge() freeing 0).
  ArenaOptions no_decay;
  no_decay.dirty_decay_ms = -1;
  auto a = make_arena(*g, no_decay);
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
  // The collector thread (collector.cpp) may have taken the emptied arena off the queue first:
  // then collect_released() finds nothing and the destruction ends on that thread. Wait for it.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((ctl.nr_dying() != 0 || parent->current() != 0) &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(parent->current(), 0u);
  EXPECT_EQ(ctl.nr_dying(), 0u);
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
