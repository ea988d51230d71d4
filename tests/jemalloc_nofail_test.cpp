// memcg::jemalloc's never-fail arenas under a limit, idle memory going back on time, released
// arenas collected on their own, and a torture run of bound threads against limit writers,
// reclaim, removals and OOM kill callbacks that join workers.
#include <gtest/gtest.h>
#include <jemalloc/jemalloc.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <thread>
#include <vector>

#include "memcg/base/clock.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/charge/safe_point.hpp"
#include "memcg/jemalloc/arena.hpp"
#include "jemalloc_test_helpers.hpp"
#include "watchdog.hpp"

namespace memcg::jemalloc {
namespace {

using memcg::testing::Watchdog;
using Clk = std::chrono::steady_clock;
using testing::kMiB;
using testing::make_arena;
using testing::release;
using testing::touch;

TEST(JemallocNoFail, TheDefaultIsNeverFail) {
  EXPECT_EQ(ArenaOptions{}.failure, ArenaFailure::kNeverFail);
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  ArenaOptions o;
  o.failure = static_cast<ArenaFailure>(7);
  std::unique_ptr<Arena> a;
  EXPECT_EQ(Arena::create(*g, &a, o), EINVAL);
  EXPECT_EQ(a, nullptr);
  EXPECT_EQ(g->current(), 0u);
}

// Code that cannot take a failure runs to the end at a limit: every operator new succeeds, the
// overshoot between two safe points stays within arena.hpp's bound, the OOM policy kills the
// member holding the rest when nothing can be reclaimed, and the group is back under max once
// the code frees.
TEST(JemallocNoFail, NeverFailArenaRunsToTheEndUnderALimit) {
  Watchdog dog("never-fail arena under a limit", std::chrono::seconds(60));
  Options opts;
  opts.stat_kinds = {kArenaForcedKindName};
  Controller ctl(opts);
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  ArenaOptions o;
  o.dirty_decay_ms = 0;  // freed pages go back at once
  auto a = make_arena(*g, o);
  const int64_t unit = static_cast<int64_t>(ctl.unit_size());
  g->set_max(a->charged_bytes() + 8 * kMiB);
  std::atomic<int> kills{0};
  Member victim(*g, "victim", [&](Member& m) {
    kills.fetch_add(1);
    m.uncharge(m.charged());
  });
  ASSERT_EQ(victim.charge(static_cast<int64_t>(2 * kMiB) / unit), ChargeStatus::kOk);
  constexpr size_t kBlock = 256 * 1024;
  constexpr int kBlocks = 96;  // 24 MiB against 8 MiB
  std::vector<char*> held;
  held.reserve(kBlocks);
  uint64_t worst_interval_forced = 0;
  uint64_t worst_step_over = 0;  // usage growth past max(max, usage at the last safe point)
  {
    ScopedArenaAttach in(*a);
    for (int i = 0; i < kBlocks; ++i) {
      const uint64_t forced_before = a->stats().forced;
      const uint64_t base = std::max<uint64_t>(g->max(), g->current());
      char* p = new char[kBlock];  // never throws; its return is a safe point
      touch(p, kBlock);
      held.push_back(p);
      worst_interval_forced = std::max(worst_interval_forced, a->stats().forced - forced_before);
      const uint64_t now = g->current();
      if (now > base) worst_step_over = std::max(worst_step_over, now - base);
    }
  }
  EXPECT_EQ(held.size(), static_cast<size_t>(kBlocks));
  EXPECT_EQ(kills.load(), 1);  // nothing reclaimable: the OOM policy was applied
  EXPECT_GE(g->events().get(Event::kOom), 1u);
  const ArenaStats s = a->stats();
  EXPECT_GT(s.forced, 0u);
  EXPECT_EQ(s.failed_charges, 0u);
  // arena.hpp's bound: the pages of the allocations made between two safe points plus one
  // jemalloc metadata block (kNeverFailSlackBytes).
  EXPECT_LE(worst_interval_forced, kBlock + kNeverFailSlackBytes);
  EXPECT_LE(worst_step_over, kBlock + kNeverFailSlackBytes);
  std::printf("never-fail: worst forced per interval %llu B, worst step over %llu B\n",
              static_cast<unsigned long long>(worst_interval_forced),
              static_cast<unsigned long long>(worst_step_over));
  // Forced bytes in memory.stat (the registered kind) and the `max` events.
  const int forced_kind = ctl.stat_index(kArenaForcedKindName);
  ASSERT_GE(forced_kind, 0);
  ctl.flush_stats();
  EXPECT_EQ(static_cast<uint64_t>(g->stat(forced_kind)), s.forced);
  EXPECT_GT(g->events().get(Event::kMax), 0u);
  EXPECT_GT(g->current(), g->max());  // the code holds more than max: nothing else to take
  for (char* p : held) delete[] p;
  flush_thread_cache();
  EXPECT_LE(g->current(), g->max());
  EXPECT_EQ(g->current(), a->stats().mapped);
  release(a);
  EXPECT_EQ(g->current(), 0u);
}

// A never-fail thread that keeps allocating past memory.max while nothing can be reclaimed (its
// own live blocks hold the memory, no member to kill): the ladder runs once, then not again for
// that group (on any thread) until kStalledLadderBackoffNs of the controller's clock passed
// (safe_point.hpp), while every block is still charged and counted as forced. Before, each
// forced commit ran reclaim up to 18 times and the OOM decision (example_jemalloc_tenants spun
// at 100 % CPU into its timeout).
TEST(JemallocNoFail, AStalledLadderIsNotRerunAtEveryForcedCommit) {
  Watchdog dog("stalled never-fail ladder", std::chrono::seconds(30));
  ManualClock clock(uint64_t{1} << 40);
  Options opts;
  opts.clock = &clock;
  Controller ctl(opts);
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  ArenaOptions o;
  o.dirty_decay_ms = -1;  // nothing decays on its own
  auto a = make_arena(*g, o);
  g->set_max(a->charged_bytes() + kMiB);
  std::atomic<int> oom_calls{0};
  ctl.set_oom_hook([&](Group& domain, int64_t units) {
    oom_calls.fetch_add(1);
    return OomKiller::kill(domain, units);
  });
  constexpr size_t kBlock = 256 * 1024;
  constexpr int kBlocks = 64;  // 16 MiB against 1 MiB: each block a forced commit
  std::vector<char*> held;
  held.reserve(kBlocks + 1);
  const uint64_t max_before = g->events().get(Event::kMax);
  uint64_t commits = 0;
  {
    ScopedArenaAttach in(*a);
    const uint64_t commits_before = a->stats().commits;
    for (int i = 0; i < kBlocks; ++i) {
      char* p = new char[kBlock];  // never throws; its return is a safe point
      touch(p, kBlock);
      held.push_back(p);
    }
    commits = a->stats().commits - commits_before;
    EXPECT_EQ(oom_calls.load(), 1);
    EXPECT_EQ(g->events().get(Event::kMax) - max_before, 1u);
    EXPECT_EQ(g->events().get(Event::kOom), 1u);
    clock.advance(kStalledLadderBackoffNs);  // the pause is over: the next pass runs in full
    char* p = new char[kBlock];
    touch(p, kBlock);
    held.push_back(p);
    EXPECT_EQ(oom_calls.load(), 2);
    EXPECT_EQ(g->events().get(Event::kMax) - max_before, 2u);
  }
  EXPECT_GE(commits, static_cast<uint64_t>(kBlocks) / 2);  // the ladders had that many chances
  const ArenaStats s = a->stats();
  EXPECT_GE(s.forced, (kBlocks - 4) * kBlock);  // every block past the limit is counted
  EXPECT_EQ(s.failed_charges, 0u);
  EXPECT_GT(g->current(), g->max());
  for (char* p : held) delete[] p;
  flush_thread_cache();
  a->purge();
  EXPECT_LE(g->current(), g->max());
  EXPECT_EQ(g->current(), a->stats().mapped);
  release(a);
  EXPECT_EQ(g->current(), 0u);
}

// Forced bytes are the overshoot past memory.max, not the commit traffic (arena.hpp): pages
// purged and committed again while the group stays over its limit add nothing. Before, every
// forced commit counted again (example_jemalloc_tenants: 2.3 GiB forced for a 116 MiB peak).
TEST(JemallocNoFail, ForcedBytesCountTheOvershootNotRecommits) {
  Watchdog dog("forced bytes against recommits", std::chrono::seconds(30));
  ManualClock clock(uint64_t{1} << 40);
  Options opts;
  opts.clock = &clock;
  opts.stat_kinds = {kArenaForcedKindName};
  Controller ctl(opts);
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  ArenaOptions o;
  o.dirty_decay_ms = -1;  // nothing decays on its own
  auto a = make_arena(*g, o);
  g->set_max(a->charged_bytes() + kMiB);
  constexpr size_t kBlock = 256 * 1024;
  constexpr int kBlocks = 16;  // 4 MiB against 1 MiB
  std::vector<char*> held;
  held.reserve(kBlocks);  // outside the tenant's arena
  auto allocate = [&](int n) {
    ScopedArenaAttach in(*a);
    for (int i = 0; i < n; ++i) {
      char* p = new char[kBlock];
      touch(p, kBlock);
      held.push_back(p);
    }
  };
  allocate(kBlocks);
  const uint64_t over = g->current() - g->max();
  const uint64_t forced = a->stats().forced;
  EXPECT_GE(forced, over);  // the overshoot, once
  EXPECT_LE(forced, g->peak() - g->max());
  // Half of it freed and purged, then allocated again: the group never got back under its
  // limit, so the recommitted pages are no further overshoot.
  for (int i = 0; i < kBlocks / 2; ++i) {
    delete[] held.back();
    held.pop_back();
  }
  flush_thread_cache();
  EXPECT_GT(a->purge(), 0u);
  ASSERT_GT(g->current(), g->max());
  allocate(kBlocks / 2);
  const uint64_t again = a->stats().forced - forced;
  EXPECT_LT(again, kBlock);  // counting every forced commit: at least 2 MiB
  std::printf("forced %llu B for an overshoot of %llu B; %llu B more after recommitting 2 MiB\n",
              static_cast<unsigned long long>(forced), static_cast<unsigned long long>(over),
              static_cast<unsigned long long>(again));
  ctl.flush_stats();
  EXPECT_EQ(static_cast<uint64_t>(g->stat(ctl.stat_index(kArenaForcedKindName))),
            a->stats().forced);
  for (char* p : held) delete[] p;
  flush_thread_cache();
  a->purge();
  release(a);
  EXPECT_EQ(g->current(), 0u);
}

// Freed pages of an arena that allocates no more are uncharged within kIdleDecayFactor x
// dirty_decay_ms + kIdleSlackMs (jemalloc's background purge threads). The thread stays bound and idle, as a
// storage engine's worker does between requests (leaving the binding would purge the arena).
TEST(JemallocNoFail, IdleArenaPagesAreUnchargedWithinTheStatedTime) {
  Watchdog dog("idle arena decay", std::chrono::seconds(60));
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  ArenaOptions o;
  o.dirty_decay_ms = std::getenv("MEMCG_TEST_DECAY_MS") ? std::atoi(std::getenv("MEMCG_TEST_DECAY_MS")) : 200;
  o.background_purge = std::getenv("MEMCG_TEST_NO_BACKGROUND_PURGE") == nullptr;
  auto a = make_arena(*g, o);
  const uint64_t idle = a->charged_bytes();
  std::atomic<bool> freed{false}, done{false};
  std::thread t([&] {
    ScopedArenaAttach in(*a);
    std::vector<void*> blocks;
    blocks.reserve(5000);
    for (int i = 0; i < 4000; ++i) {
      void* p = std::malloc(4000);
      touch(p, 4000);
      blocks.push_back(p);
    }
    for (int i = 0; i < 16; ++i) {
      void* p = std::malloc(kMiB);
      touch(p, kMiB);
      blocks.push_back(p);
    }
    for (void* p : blocks) std::free(p);
    flush_thread_cache();
    freed.store(true);
    while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  while (!freed.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto freed_at = Clk::now();
  EXPECT_GT(a->charged_bytes(), idle + 8 * kMiB);  // freed, still charged (dirty)
  const auto limit = std::chrono::milliseconds(kIdleDecayFactor * o.dirty_decay_ms + kIdleSlackMs);
  while (a->charged_bytes() > idle + 256 * 1024 &&
         Clk::now() - freed_at < limit + std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clk::now() - freed_at);
  std::printf("idle arena: uncharged in %lld ms\n", static_cast<long long>(took.count()));
  EXPECT_LE(a->charged_bytes(), idle + 256 * 1024);
  EXPECT_LE(took, limit);
  EXPECT_EQ(g->current(), a->stats().mapped);
  done.store(true);
  t.join();
  release(a);
}

// A removed tenant's arena goes once its last block is freed, with no other Arena call.
TEST(JemallocNoFail, ReleasedArenaIsCollectedOnItsOwn) {
  Watchdog dog("released arena collection", std::chrono::seconds(60));
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  auto a = make_arena(*g);
  void* p = mallocx(100000, a->mallocx_flags());
  ASSERT_NE(p, nullptr);
  a.reset();  // the block keeps the jemalloc arena
  ASSERT_EQ(ctl.remove(*g), 0);
  EXPECT_GT(g->current(), 0u);
  std::thread([p] { dallocx(p, MALLOCX_TCACHE_NONE); }).join();
  const auto start = Clk::now();
  while (g->current() != 0 && Clk::now() - start < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clk::now() - start);
  EXPECT_EQ(g->current(), 0u);
  EXPECT_LE(took.count(), 1000);
}

// Threads bound to several arenas allocate and free across them while others write
// memory.max/high, reclaim, remove groups and run OOM kill callbacks that join workers.
TEST(JemallocNoFail, TortureBoundThreadsAgainstLimitsReclaimRemovalAndKills) {
  Watchdog dog("jemalloc torture", std::chrono::seconds(120));
  Controller ctl;
  constexpr int kGroups = 3;
  GroupRef groups[kGroups];
  std::unique_ptr<Arena> arenas[kGroups];
  for (int i = 0; i < kGroups; ++i) {
    ASSERT_EQ(ctl.create("t" + std::to_string(i), &groups[i]), 0);
    ArenaOptions o;
    o.failure = i == 0 ? ArenaFailure::kRefuse : ArenaFailure::kNeverFail;
    o.dirty_decay_ms = i == 2 ? 0 : 50;
    arenas[i] = make_arena(*groups[i], o);
    groups[i]->set_max(arenas[i]->charged_bytes() + 8 * kMiB);
  }
  const auto until = Clk::now() + std::chrono::seconds(3);
  std::atomic<bool> stop{false};
  // Blocks handed across arenas: freed by whoever takes them.
  std::mutex pool_mu;
  std::vector<void*> pool;
  pool.reserve(1024);
  auto allocator = [&](int gi, unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<void*> mine;
    mine.reserve(256);  // arena 0 refuses: no container growth while bound
    ScopedArenaAttach in(*arenas[gi]);
    while (!stop.load(std::memory_order_relaxed)) {
      const size_t size = (rng() % 4 == 0) ? (64 * 1024 + rng() % (512 * 1024)) : (16 + rng() % 4000);
      if (void* p = std::malloc(size)) {
        touch(p, std::min<size_t>(size, 4096));
        mine.push_back(p);
      }
      if (mine.size() > 200 || rng() % 8 == 0) {
        std::lock_guard<std::mutex> lock(pool_mu);
        for (size_t k = 0; k < mine.size() / 2; ++k) pool.push_back(mine[k]);
        mine.erase(mine.begin(), mine.begin() + static_cast<long>(mine.size() / 2));
        while (pool.size() > 300) {
          std::free(pool.back());
          pool.pop_back();
        }
      }
      if (rng() % 16 == 0) safe_point();
    }
    for (void* p : mine) std::free(p);
    flush_thread_cache();
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back(allocator, i % kGroups, 1000u + i);
  // Knob writer and proactive reclaim.
  threads.emplace_back([&] {
    std::mt19937 rng(7);
    while (!stop.load()) {
      Group& g = *groups[rng() % kGroups];
      const uint64_t base = 2 * kMiB + (rng() % 16) * kMiB;
      g.set_max(base + 2 * kMiB);
      g.set_high(rng() % 2 ? base : UINT64_MAX);
      reclaim(g, static_cast<int64_t>(kMiB / ctl.unit_size()), ReclaimReason::kProactive);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  // OOM victims whose kill callback cancels and joins a worker bound to the same arena.
  std::atomic<int> kills{0};
  threads.emplace_back([&] {
    int round = 0;
    while (!stop.load()) {
      const int gi = 1 + round++ % 2;
      std::atomic<bool> cancel{false};
      std::thread worker;
      std::mutex join_mu;  // the callback (on a charging thread) and this thread both join
      auto cancel_and_join = [&] {
        cancel.store(true);
        std::thread t;  // joined outside the mutex: the worker's own callback may want it
        {
          std::lock_guard<std::mutex> lock(join_mu);
          if (worker.joinable() && worker.get_id() != std::this_thread::get_id())
            t = std::move(worker);
        }
        if (t.joinable()) t.join();
      };
      // ~Member waits for a callback running on another thread: the locals above outlive it.
      Member m(*groups[gi], "w", [&](Member& self) {
        kills.fetch_add(1);
        self.uncharge(self.charged());
        cancel_and_join();
      });
      (void)m.charge(static_cast<int64_t>(kMiB / ctl.unit_size()), kNoFail);
      {
        std::lock_guard<std::mutex> lock(join_mu);
        worker = std::thread([&] {
          std::vector<void*> v;
          v.reserve(128);
          ScopedArenaAttach in(*arenas[gi]);
          while (!cancel.load() && !stop.load()) {
            if (void* p = std::malloc(8192)) v.push_back(p);
            if (v.size() > 64) {
              for (void* p : v) std::free(p);
              v.clear();
            }
            safe_point();
          }
          void* big = std::malloc(2 * kMiB);  // unwinding
          std::free(big);
          for (void* p : v) std::free(p);
          flush_thread_cache();
        });
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      cancel_and_join();
    }
  });
  // A group created and removed with an arena of its own.
  threads.emplace_back([&] {
    int n = 0;
    while (!stop.load() && n < 50) {
      GroupRef g;
      if (ctl.create("r" + std::to_string(n++), &g) != 0) continue;
      auto a = make_arena(*g);
      std::vector<void*> v;
      v.reserve(100);
      {
        ScopedArenaAttach in(*a);
        for (int i = 0; i < 100; ++i) v.push_back(std::malloc(3000));
      }
      flush_thread_cache();
      EXPECT_EQ(ctl.remove(*g), 0);
      a.reset();  // its blocks live: the jemalloc arena waits for the collector
      for (void* p : v) dallocx(p, MALLOCX_TCACHE_NONE);
    }
  });
  while (Clk::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop.store(true);
  for (auto& t : threads) t.join();
  for (void* p : pool) std::free(p);
  pool.clear();
  flush_thread_cache();
  for (int i = 0; i < kGroups; ++i) {
    groups[i]->set_max(UINT64_MAX);
    EXPECT_EQ(groups[i]->current(), arenas[i]->stats().mapped) << "group " << i;
  }
  for (int i = 0; i < kGroups; ++i) release(arenas[i]);
  for (int i = 0; i < kGroups; ++i) EXPECT_EQ(groups[i]->current(), 0u) << "group " << i;
  EXPECT_EQ(collect_released(), 0u);
  std::printf("torture: %d kills\n", kills.load());
}

}  // namespace
}  // namespace memcg::jemalloc
