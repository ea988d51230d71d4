// jemalloc's background purge thread uncharging a tenant's freed pages while a charge waits on
// the tenant's parent: the purge runs the arena's decommit hook on jemalloc's own thread, which
// never reaches a safe point. The wake it skips in the hook must not hold a reference to the
// group (a removed tenant would stay dying for the life of the process), and the waiter must be
// served all the same.
#include <gtest/gtest.h>
#include <jemalloc/jemalloc.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
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

template <typename Pred>
bool within(std::chrono::milliseconds limit, Pred pred) {
  const auto until = Clk::now() + limit;
  while (!pred()) {
    if (Clk::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(JemallocPurgeWake, ABackgroundPurgeWithAWaiterPinsNoRemovedTenant) {
  Watchdog dog("background purge with a waiter", std::chrono::seconds(90));
  Options opts;
  opts.batch = 1;  // no stock: t's counter shows every unit the purge gives back
  Controller ctl(opts);
  GroupRef t, a, w;
  ASSERT_EQ(ctl.create("t", &t), 0);
  ASSERT_EQ(ctl.create("t/a", &a), 0);
  ASSERT_EQ(ctl.create("t/w", &w), 0);
  ArenaOptions o;
  o.dirty_decay_ms = 100;
  o.background_purge = true;  // freed pages go back on jemalloc's background thread
  auto arena = make_arena(*a, o);
  const uint64_t idle = arena->charged_bytes();

  // A bound thread allocates 16 MiB and holds it; t is then full, and a charge of 1 MiB in t/w
  // waits (it fits the limit, not what is free; its reclaim finds nothing: every page is in use).
  std::atomic<int> step{0};
  std::thread worker([&] {
    ScopedArenaAttach in(*arena);
    std::vector<void*> blocks;
    for (int i = 0; i < 16; ++i) {
      void* p = std::malloc(kMiB);
      touch(p, kMiB);
      blocks.push_back(p);
    }
    step.store(1);
    while (step.load() != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // Freed: dirty pages, still charged, that jemalloc's background thread purges after the
    // decay time. The thread stays bound and idle (leaving the binding would purge the arena
    // on this thread).
    for (void* p : blocks) std::free(p);
    flush_thread_cache();
    step.store(3);
    while (step.load() != 4) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  ASSERT_TRUE(within(std::chrono::seconds(30), [&] { return step.load() == 1; }));
  t->set_max(t->current());
  const int64_t units = static_cast<int64_t>(kMiB / ctl.unit_size());
  std::atomic<int> waited{-1};
  std::thread waiter([&] {
    const WaitStatus s = try_charge_wait_for(*w, units, std::chrono::seconds(30));
    waited.store(static_cast<int>(s));
  });
  EXPECT_TRUE(within(std::chrono::seconds(30), [&] { return wait_stats(*t).waiters == 1; }));
  EXPECT_EQ(waited.load(), -1) << "served before any page was freed";
  step.store(2);
  ASSERT_TRUE(within(std::chrono::seconds(30), [&] { return step.load() == 3; }));
  EXPECT_GT(arena->charged_bytes(), idle + 8 * kMiB) << "freed pages were purged at once";

  // jemalloc's background thread purges the dirty pages (decay), the waiter is served.
  EXPECT_TRUE(within(std::chrono::seconds(30), [&] { return waited.load() != -1; }));
  waiter.join();
  EXPECT_EQ(waited.load(), static_cast<int>(WaitStatus::kOk));
  std::printf("arena charged after the purge: %llu KiB (idle %llu KiB)\n",
              static_cast<unsigned long long>(arena->charged_bytes() >> 10),
              static_cast<unsigned long long>(idle >> 10));
  if (waited.load() == static_cast<int>(WaitStatus::kOk)) uncharge_direct(*w, units);

  step.store(4);
  worker.join();
  release(arena);
  a.reset();
  ASSERT_EQ(ctl.remove("t/a"), 0);
  EXPECT_TRUE(within(std::chrono::seconds(5), [&] { return ctl.nr_dying() == 0; }))
      << "a removed tenant stays dying: a record of jemalloc's background thread pins it";
}

}  // namespace
}  // namespace memcg::jemalloc
