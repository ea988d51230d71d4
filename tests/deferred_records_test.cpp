// What charges and uncharges inside allocator hooks leave for the thread's next safe point
// (charge_ladder.hpp, safe_point.hpp), as hosts run them: plain pthreads that exit right after
// a refused allocation, and an allocator's background thread that never reaches a safe point.
// Built in every preset (AllocHookScope needs no allocator).
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>

#include "charge_wait_support.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/charge/internal/alloc_hook.hpp"
#include "memcg/core/wait/internal/charge_wait_hooks.hpp"
#include "memcg/core/charge/safe_point.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;
using internal::AllocHookScope;
using testing_wait::AsyncCall;
using testing_wait::eventually;
using testing_wait::ParkingClock;

// Runs `fn` on a raw pthread (no std::thread state to free through operator delete, which
// would be a safe point under the global hook) and joins it.
void on_pthread(const std::function<void()>& fn) {
  auto* arg = new std::function<void()>(fn);
  pthread_t t;
  ASSERT_EQ(pthread_create(
                &t, nullptr,
                [](void* p) -> void* {
                  auto* f = static_cast<std::function<void()>*>(p);
                  (*f)();
                  return nullptr;
                },
                arg),
            0);
  ASSERT_EQ(pthread_join(t, nullptr), 0);
  delete arg;
}

Options checked() {
  Options o;
  o.batch = 1;
  o.nr_shards = 1;
  o.check_lifetimes = true;
  return o;
}

// A refused charge in a hook leaves a record holding a group reference; the thread exits before
// any safe point. Its exit lets the reference go, balanced.
void refused_then_exit(Controller& ctl, Group& g) {
  on_pthread([&] {
    AllocHookScope hook;
    EXPECT_EQ(try_charge(g, 8, kDefaultCharge), ChargeStatus::kNoMem);
  });
  (void)ctl;
}

TEST(HookRecords, ARefusedHookChargeOnAnExitingPthreadLeavesTheCountsBalanced) {
  Controller ctl(checked());
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  g->set_max(4 * ctl.unit_size());
  const int64_t refs = g->nr_refs();
  refused_then_exit(ctl, *g);
  EXPECT_EQ(g->thread_record_refs().load(), 0);
  EXPECT_EQ(g->nr_refs(), refs);
}

TEST(HookRecordsDeathTest, ARefusedHookChargeOnAnExitingPthreadPassesTheLifetimeCheck) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto ctl = std::make_unique<Controller>(checked());
        GroupRef g;
        if (ctl->create("t", &g) != 0) std::exit(3);
        g->set_max(4 * ctl->unit_size());
        refused_then_exit(*ctl, *g);
        g.reset();
        ctl.reset();  // aborts if a reference is counted that nobody holds
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// A thread whose uncharge in a hook skipped the wake of a waiting charge, and which never
// reaches a safe point (jemalloc's background purge thread): the removed group is freed all the
// same, and the waiter is served by its poll.
TEST(HookRecords, AWakeSkippedInAHookPinsNoGroup) {
  memcg::testing::Watchdog dog("hook wake pins no group", std::chrono::seconds(60));
  Controller ctl(checked());
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  g->set_max(16 * ctl.unit_size());
  ASSERT_EQ(try_charge(*g, 16, kDefaultCharge), ChargeStatus::kOk);
  AsyncCall waiter([&](std::stop_token) { return try_charge_wait_for(*g, 8, 20s); });
  ASSERT_TRUE(eventually([&] { return internal::charge_waiters_on_path(*g); }));

  std::atomic<int> step{0};
  pthread_t bg;
  struct Arg {
    Group* g;
    std::atomic<int>* step;
  } arg{g.get(), &step};
  ASSERT_EQ(pthread_create(
                &bg, nullptr,
                [](void* p) -> void* {
                  auto* a = static_cast<Arg*>(p);
                  {
                    AllocHookScope hook;  // a decommit hook
                    uncharge_direct(*a->g, 8);
                  }
                  a->step->store(1);
                  while (a->step->load() != 2) std::this_thread::sleep_for(1ms);  // no safe point
                  return nullptr;
                },
                &arg),
            0);
  ASSERT_TRUE(eventually([&] { return step.load() == 1; }));
  ASSERT_TRUE(eventually([&] { return waiter.done(); }));
  EXPECT_EQ(waiter.result.load(), static_cast<int>(WaitStatus::kOk));
  uncharge_direct(*g, 16);
  g.reset();
  ASSERT_EQ(ctl.remove("t"), 0);
  EXPECT_EQ(ctl.nr_dying(), 0u) << "a thread's wake record pins the removed group";
  step = 2;
  ASSERT_EQ(pthread_join(bg, nullptr), 0);
}

// The same wake, on a clock whose polls never come: only the uncharging thread's safe point can
// serve the waiter, and it does.
TEST(HookRecords, AWakeSkippedInAHookRunsAtTheThreadsSafePoint) {
  memcg::testing::Watchdog dog("hook wake at the safe point", std::chrono::seconds(60));
  ParkingClock clock;
  Controller ctl(testing_wait::on_clock(&clock));
  GroupRef g;
  ASSERT_EQ(ctl.create("t", &g), 0);
  g->set_max(16 * ctl.unit_size());
  ASSERT_EQ(try_charge(*g, 16, kDefaultCharge), ChargeStatus::kOk);
  AsyncCall waiter([&](std::stop_token st) {
    return try_charge_wait_for(*g, 8, 100s, st);
  });
  ASSERT_TRUE(eventually([&] { return clock.parks.load() >= 1; }));
  on_pthread([&] {
    {
      AllocHookScope hook;
      uncharge_direct(*g, 8);
    }
    std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(waiter.done()) << "served before the safe point: the test shows nothing";
    EXPECT_TRUE(safe_point());
  });
  ASSERT_TRUE(eventually([&] { return waiter.done(); }));
  EXPECT_EQ(waiter.result.load(), static_cast<int>(WaitStatus::kOk));
  uncharge_direct(*g, 16);
}

}  // namespace
}  // namespace memcg
