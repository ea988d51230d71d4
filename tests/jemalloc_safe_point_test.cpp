// memcg::jemalloc: nothing blocks inside jemalloc's hooks. The hooks take or are refused the
// counters; the ladder (reclaim, OOM policy, memory.high, the wake of waiting charges) runs at
// the thread's next safe point, once per refused allocation (arena.hpp, "Safe points").
#include <gtest/gtest.h>
#include <jemalloc/jemalloc.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "memcg/base/nofail.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/wait/charge_wait.hpp"
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
using testing::kMiB;
using testing::make_arena;
using testing::release;
using testing::touch;

ArenaOptions refuse_options() {
  ArenaOptions o;
  o.failure = ArenaFailure::kRefuse;
  return o;
}

TEST(JemallocSafePoint, JemallocServesMallocHere) {
  EXPECT_TRUE(jemalloc_serves_malloc());
}

// A refused malloc(1 MiB): jemalloc's commit is refused, then it asks the alloc hook for a fresh
// committed region for the same allocation. One allocation, one ladder: one failure, one `max`.
TEST(JemallocSafePoint, ARefusedLargeMallocRunsTheLadderOnce) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  auto a = make_arena(*g, refuse_options());
  g->set_max(a->charged_bytes() + 64 * 1024);
  const uint64_t failed_before = charge_stats(ctl).failed;
  const uint64_t max_before = g->events().get(Event::kMax);
  void* p;
  {
    ScopedArenaAttach in(*a);
    p = std::malloc(kMiB);
  }
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(a->stats().failed_charges, 1u);
  EXPECT_EQ(charge_stats(ctl).failed - failed_before, 1u);
  EXPECT_EQ(g->events().get(Event::kMax) - max_before, 1u);
  EXPECT_EQ(g->events().get(Event::kOom), 0u);  // costly: no OOM decision
  EXPECT_EQ(g->current(), a->stats().mapped);
  release(a);
}

// A refused malloc(3000) (a slab of a few pages, so OOM-eligible): the OOM policy runs once, as
// for a direct try_charge(1), and kills once; the next allocation succeeds.
TEST(JemallocSafePoint, ARefusedSmallMallocRunsTheOomPolicyOnce) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  auto a = make_arena(*g, refuse_options());
  const int64_t unit = static_cast<int64_t>(ctl.unit_size());
  g->set_max(a->charged_bytes() + 4 * kMiB);
  std::atomic<int> oom_calls{0};
  ctl.set_oom_hook([&](Group& domain, int64_t units) {
    oom_calls.fetch_add(1);
    return OomKiller::kill(domain, units);
  });
  std::atomic<int> kills{0};
  Member query(*g, "query", [&](Member& m) {
    kills.fetch_add(1);
    m.uncharge(m.charged());
  });
  ASSERT_EQ(query.charge(static_cast<int64_t>(4 * kMiB) / unit), ChargeStatus::kOk);
  void* p;
  void* q;
  {
    ScopedArenaAttach in(*a);
    p = std::malloc(3000);
    EXPECT_EQ(oom_calls.load(), 0);  // not inside jemalloc
    safe_point();
    q = std::malloc(3000);
  }
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(oom_calls.load(), 1);
  EXPECT_EQ(kills.load(), 1);
  EXPECT_EQ(a->stats().failed_charges, 1u);
  EXPECT_EQ(g->events().get(Event::kOom), 1u);
  EXPECT_EQ(g->events().get(Event::kOomKill), 1u);
  EXPECT_EQ(g->current(), a->stats().mapped);
  std::free(q);
  release(a);
}

// oom.hpp's recommended kill callback: cancel the victim's work and join its worker. The worker
// is bound to the same arena and allocates a large block while unwinding; jemalloc holds the
// arena's growth mutex through the commit hook, so an OOM run from the hook deadlocks the join.
TEST(JemallocSafePoint, KillCallbackJoinsAWorkerOfTheSameArena) {
  Watchdog dog("kill callback joining a worker of the same arena", std::chrono::seconds(30));
  for (int round = 0; round < 5; ++round) {
    Controller ctl;
    GroupRef g;
    ASSERT_EQ(ctl.create("t", &g), 0);
    for (ArenaFailure mode : {ArenaFailure::kRefuse, ArenaFailure::kNeverFail}) {
      ArenaOptions o;
      o.failure = mode;
      o.dirty_decay_ms = 0;
      auto a = make_arena(*g, o);
      const int64_t unit = static_cast<int64_t>(ctl.unit_size());
      g->set_max(a->charged_bytes() + 4 * kMiB);
      std::atomic<bool> cancel{false};
      std::atomic<bool> unwound{false};
      std::thread worker;
      std::atomic<int> kills{0};
      Member query(*g, "query", [&](Member& m) {
        kills.fetch_add(1);
        cancel.store(true);
        if (worker.joinable()) worker.join();
        m.uncharge(m.charged());
      });
      ASSERT_EQ(query.charge(static_cast<int64_t>(4 * kMiB) / unit - 4), ChargeStatus::kOk);
      std::atomic<bool> started{false};
      worker = std::thread([&] {
        ScopedArenaAttach in(*a);
        started.store(true);
        while (!cancel.load()) std::this_thread::yield();
        // Unwinding: a large block, a fresh extent of the arena.
        void* big = std::malloc(3 * kMiB);
        if (big != nullptr) touch(big, 3 * kMiB);
        std::free(big);
        flush_thread_cache();
        unwound.store(true);
      });
      while (!started.load()) std::this_thread::yield();
      std::vector<void*> small;
      small.reserve(4000);
      {
        ScopedArenaAttach in(*a);
        for (int i = 0; i < 4000 && kills.load() == 0; ++i) {
          if (void* p = std::malloc(2000)) small.push_back(p);
          safe_point();
        }
      }
      EXPECT_EQ(kills.load(), 1);
      EXPECT_TRUE(unwound.load());
      if (worker.joinable()) {  // not killed: let it go
        cancel.store(true);
        worker.join();
      }
      for (void* p : small) std::free(p);
      flush_thread_cache();
      EXPECT_EQ(g->current(), a->stats().mapped);
      release(a);
      g->set_max(UINT64_MAX);
    }
  }
}

// A charge waits (charge_wait.hpp) while a thread bound to a tenant arena frees under the wait
// state's mutex: its queue nodes live in the arena, and with no thread cache and no decay, the
// free empties a slab that jemalloc decommits at once. The decommit hook's uncharge must not
// take the wait state's mutex again.
TEST(JemallocSafePoint, DecommitUnderTheWaitMutexDoesNotSelfDeadlock) {
  Watchdog dog("a decommit hook under the charge-wait mutex", std::chrono::seconds(30));
  Controller ctl;
  GroupRef tenant, full;
  ASSERT_EQ(ctl.create("tenant", &tenant), 0);
  ASSERT_EQ(ctl.create("full", &full), 0);
  full->set_max(kMiB);
  ASSERT_EQ(try_charge_bytes(*full, kMiB), ChargeStatus::kOk);
  ArenaOptions o;
  o.dirty_decay_ms = 0;
  auto a = make_arena(*tenant, o);
  // Another waiter keeps the waiters' count up while ours leaves.
  std::atomic<bool> stop{false};
  std::thread other([&] {
    while (!stop.load())
      (void)try_charge_bytes_wait_for(*full, 4096, std::chrono::milliseconds(20));
  });
  for (int i = 0; i < 200; ++i) {
    std::thread bound([&] {
      ScopedArenaAttach in(*a);
      bool off = false;
      mallctl("thread.tcache.enabled", nullptr, nullptr, &off, sizeof off);
      (void)try_charge_bytes_wait_for(*full, 4096, std::chrono::milliseconds(1));
      bool on = true;
      mallctl("thread.tcache.enabled", nullptr, nullptr, &on, sizeof on);
    });
    bound.join();
  }
  stop.store(true);
  other.join();
  uncharge_bytes(*full, kMiB);
  EXPECT_GT(a->stats().decommits, 0u);
  EXPECT_EQ(tenant->current(), a->stats().mapped);
  // The wait state's queue nodes that a bound thread allocated live in the tenant's arena
  // (arena.hpp: the library's structures of a bound thread count there) and may outlive it.
  flush_thread_cache();
  a.reset();
}

// The two-thread form of the above: a library lock against jemalloc's growth mutex. One thread,
// bound to the tenant's arena at its limit, allocates: the arena's commit runs with jemalloc's
// growth mutex held, and a ladder run there walks the tenant's subtree (the controller's
// hierarchy lock, shared) and its reclaimer lists (each group's mutex). The other thread, bound
// to the same arena without a thread cache, creates child groups (under the hierarchy lock,
// exclusive) and adds reclaimers to them (under the group's mutex): its blocks come from the
// arena and need the growth mutex for fresh extents. A ladder run inside the hook deadlocks the
// two (seen: the hook in Controller::walk, the other thread in Controller::create waiting for
// jemalloc); at a safe point it cannot. (The charge-wait queues allocate nothing under their
// mutexes, so the form with the wait mutex does not arise.)
TEST(JemallocSafePoint, CommitReclaimAgainstALibraryLockHolderOfTheSameArena) {
  Watchdog dog("a commit hook's reclaim against a lock holder bound to the same arena",
               std::chrono::seconds(30));
  struct Empty final : Reclaimer {
    int64_t reclaimable() const noexcept override { return 0; }
    ReclaimResult reclaim(int64_t, int) override { return {}; }
  } empty;
  Controller ctl;
  GroupRef tenant;
  ASSERT_EQ(ctl.create("tenant", &tenant), 0);
  ArenaOptions o = refuse_options();
  o.dirty_decay_ms = 0;  // freed extents are decommitted at once: new ones need the growth mutex
  auto a = make_arena(*tenant, o);
  tenant->set_max(a->charged_bytes() + 4 * kMiB);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> registrations{0};
  std::thread registrar([&] {
    ScopedArenaAttach in(*a);
    bool off = false;
    mallctl("thread.tcache.enabled", nullptr, nullptr, &off, sizeof off);
    NoFailScope nofail;  // its own allocations pass the tenant's limit (counted as forced)
    for (int round = 0; !stop.load(); ++round) {
      GroupRef child;
      if (ctl.create("tenant/c" + std::to_string(round), &child) != 0) continue;
      {
        std::vector<ReclaimerRegistration> regs;
        regs.reserve(4096);
        for (int i = 0; i < 4096 && !stop.load(); ++i) regs.emplace_back(*child, empty);
        registrations.fetch_add(regs.size());
      }
      EXPECT_EQ(ctl.remove(*child), 0);
    }
    bool on = true;
    mallctl("thread.tcache.enabled", nullptr, nullptr, &on, sizeof on);
  });
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  uint64_t refused = 0;
  {
    ScopedArenaAttach in(*a);
    std::vector<void*> held;
    held.reserve(64);
    while (std::chrono::steady_clock::now() < end) {
      void* p = std::malloc(256 * 1024);
      if (p == nullptr) {
        ++refused;
        if (!held.empty()) {  // churn at the limit
          std::free(held.back());
          held.pop_back();
        }
        continue;
      }
      touch(p, 256 * 1024);
      held.push_back(p);
    }
    for (void* p : held) std::free(p);
  }
  stop.store(true);
  registrar.join();
  EXPECT_GT(refused, 10u);
  EXPECT_GT(registrations.load(), 4096u);
  std::printf("refused %llu, registrations %llu\n", static_cast<unsigned long long>(refused),
              static_cast<unsigned long long>(registrations.load()));
  flush_thread_cache();
  a.reset();  // the removed children live in the arena until their last reference goes
}
}  // namespace
}  // namespace memcg::jemalloc
