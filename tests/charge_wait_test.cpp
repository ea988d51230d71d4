// Waiting charges (charge_wait.hpp): every way out of a wait, the fairness cases by construction,
// PSI, exact accounting, and a randomized stress with cancellations and limit changes.
#include "memcg/core/charge_wait.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "memcg/core/controller.hpp"
#include "memcg/core/limits.hpp"
#include "memcg/core/psi.hpp"
#include "memcg/percpu/internal/stock.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kUnit = 4096;

WaitClock::time_point in(std::chrono::milliseconds ms) {
  return WaitClock::now() + ms;
}

// Polls `cond` for up to 10 s.
bool eventually(const std::function<bool()>& cond) {
  const auto end = WaitClock::now() + 10s;
  while (WaitClock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return cond();
}

Options with_batch(int64_t batch) {
  Options o;
  o.batch = batch;
  return o;
}

struct Fixture : ::testing::Test {
  // batch 1: nothing hides in the stocks, so usage is exact at every step.
  std::unique_ptr<Controller> ctl = std::make_unique<Controller>(with_batch(1));
  GroupRef make(const char* path, int64_t max_units) {
    GroupRef g;
    EXPECT_EQ(ctl->create(path, &g), 0);
    if (max_units >= 0) g->set_max(max_units * kUnit);
    return g;
  }
  int64_t usage(Group& g) { return g.memory().usage(); }
};

// A waiter on its own thread; status() joins.
struct AsyncWait {
  std::atomic<int> result{-1};
  std::jthread th;
  AsyncWait(Group& g, int64_t units, std::chrono::milliseconds timeout) {
    th = std::jthread([this, &g, units, timeout](std::stop_token st) {
      result.store(static_cast<int>(try_charge_wait(g, units, in(timeout), st)));
    });
  }
  bool done() const { return result.load() >= 0; }
  WaitStatus status() {
    th.join();
    return static_cast<WaitStatus>(result.load());
  }
};

TEST_F(Fixture, ArgumentsAndImmediateOutcomes) {
  GroupRef g = make("a", 10);
  EXPECT_EQ(try_charge_wait(*g, ctl->max_units() + 1, in(1s)), WaitStatus::kInvalid);
  EXPECT_EQ(try_charge_wait(*g, -1, in(1s)), WaitStatus::kInvalid);
  EXPECT_EQ(try_charge_bytes_wait(*g, UINT64_MAX, in(1s)), WaitStatus::kInvalid);
  EXPECT_EQ(try_charge_wait(*g, 0, in(1s)), WaitStatus::kOk);
  EXPECT_EQ(try_charge_wait(ctl->root(), 5, in(1s)), WaitStatus::kOk);
  EXPECT_EQ(usage(*g), 0);
  // Fits: charged at once, even with a past deadline.
  EXPECT_EQ(try_charge_wait(*g, 10, WaitClock::now() - 1s), WaitStatus::kOk);
  EXPECT_EQ(usage(*g), 10);
  // Full, past deadline: one try, then timed out, nothing charged, no OOM.
  EXPECT_EQ(try_charge_wait(*g, 1, WaitClock::now() - 1s), WaitStatus::kTimedOut);
  std::stop_source stopped;
  stopped.request_stop();
  EXPECT_EQ(try_charge_wait(*g, 1, in(1s), stopped.get_token()), WaitStatus::kCancelled);
  EXPECT_EQ(usage(*g), 10);
  EXPECT_EQ(g->events_local().get(Event::kOom), 0u);
  uncharge(*g, 10);
  EXPECT_STREQ(wait_status_name(WaitStatus::kTimedOut), "timed_out");
}

TEST_F(Fixture, TimesOutAndCountsAsStall) {
  GroupRef g = make("a", 4);
  ASSERT_EQ(try_charge(*g, 4), ChargeStatus::kOk);
  const uint64_t before = psi_stats(*g).total_us[0];
  const auto t0 = WaitClock::now();
  EXPECT_EQ(try_charge_wait(*g, 1, in(60ms)), WaitStatus::kTimedOut);
  EXPECT_GE(WaitClock::now() - t0, 60ms);
  EXPECT_EQ(usage(*g), 4);
  const WaitStats s = wait_stats(*g);
  EXPECT_EQ(s.waits, 1u);
  EXPECT_EQ(s.timed_out, 1u);
  EXPECT_EQ(s.waiters, 0u);
  // The wait was a memory stall of the group: some (and full: the only thread involved).
  EXPECT_GE(psi_stats(*g).total_us[0] - before, 50'000u);
  uncharge(*g, 4);
}

TEST_F(Fixture, GrantedByUncharge) {
  GroupRef g = make("a", 10);
  ASSERT_EQ(try_charge(*g, 10), ChargeStatus::kOk);
  AsyncWait w(*g, 5, 10s);
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  EXPECT_EQ(wait_stats(*g).queued_bytes, 5 * kUnit);
  uncharge(*g, 4);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(w.done());  // 4 units do not make room for 5
  uncharge(*g, 1);
  EXPECT_EQ(w.status(), WaitStatus::kOk);
  EXPECT_EQ(usage(*g), 10);
  EXPECT_EQ(wait_stats(*g).granted, 1u);
  uncharge(*g, 10);
  EXPECT_EQ(usage(*g), 0);
}

TEST_F(Fixture, QueuesOnTheAncestorWhoseLimitHeld) {
  GroupRef p = make("p", 10);
  GroupRef a = make("p/a", -1);
  GroupRef b = make("p/b", -1);
  ASSERT_EQ(try_charge(*a, 10), ChargeStatus::kOk);
  AsyncWait w(*b, 3, 10s);
  ASSERT_TRUE(eventually([&] { return wait_stats(*p).waiters == 1; }));
  EXPECT_EQ(wait_stats(*b).waiters, 0u);
  uncharge(*a, 3);  // a sibling's uncharge serves the parent's queue
  EXPECT_EQ(w.status(), WaitStatus::kOk);
  EXPECT_EQ(usage(*b), 3);
  EXPECT_EQ(usage(*p), 10);
  uncharge(*a, 7);
  uncharge(*b, 3);
}

TEST_F(Fixture, CancelledByStopToken) {
  GroupRef g = make("a", 2);
  ASSERT_EQ(try_charge(*g, 2), ChargeStatus::kOk);
  AsyncWait w(*g, 1, 10s);
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  const auto t0 = WaitClock::now();
  w.th.request_stop();
  EXPECT_EQ(w.status(), WaitStatus::kCancelled);
  EXPECT_LT(WaitClock::now() - t0, 1s);
  EXPECT_EQ(wait_stats(*g).cancelled, 1u);
  EXPECT_EQ(usage(*g), 2);
  uncharge(*g, 2);
}

TEST_F(Fixture, RaisedMaxGrants) {
  GroupRef g = make("a", 2);
  ASSERT_EQ(try_charge(*g, 2), ChargeStatus::kOk);
  AsyncWait w(*g, 3, 10s);
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  write_max(*g, 5 * kUnit, false);
  EXPECT_EQ(w.status(), WaitStatus::kOk);
  EXPECT_EQ(usage(*g), 5);
  uncharge(*g, 5);
}

TEST_F(Fixture, RemovedGroupReturnsRemoved) {
  GroupRef g = make("a", 2);
  ASSERT_EQ(try_charge(*g, 2), ChargeStatus::kOk);
  AsyncWait w(*g, 1, 10s);
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  ASSERT_EQ(ctl->remove(*g), 0);
  EXPECT_EQ(w.status(), WaitStatus::kRemoved);
  EXPECT_EQ(usage(*g), 2);
  uncharge(*g, 2);
  EXPECT_EQ(ctl->root().memory().usage(), 0);
}

TEST_F(Fixture, ControllerDestroyedWakesWaiters) {
  GroupRef g = make("a", 2);
  ASSERT_EQ(try_charge(*g, 2), ChargeStatus::kOk);
  std::vector<std::unique_ptr<AsyncWait>> ws;
  for (int i = 0; i < 4; ++i) ws.push_back(std::make_unique<AsyncWait>(*g, 1, 30s));
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 4; }));
  g.reset();  // the waiters hold their own references
  const auto t0 = WaitClock::now();
  ctl.reset();  // returns only after every waiter has left
  EXPECT_LT(WaitClock::now() - t0, 5s);
  // Each waiter has left the library; its thread stores the status just after.
  for (auto& w : ws) EXPECT_EQ(w->status(), WaitStatus::kRemoved);
}

TEST_F(Fixture, ChargeHandleForm) {
  GroupRef g = make("a", 2);
  ChargeHandle h;
  EXPECT_EQ(charge_wait(h, *g, 2 * kUnit, in(1s)), WaitStatus::kOk);
  EXPECT_TRUE(h.ok());
  EXPECT_EQ(usage(*g), 2);
  ChargeHandle h2;
  EXPECT_EQ(charge_wait(h2, *g, 1, in(20ms)), WaitStatus::kTimedOut);
  EXPECT_FALSE(h2.ok());
  std::atomic<int> st{-1};
  std::jthread t([&] {
    ChargeHandle h3;
    st = static_cast<int>(charge_wait(h3, *g, kUnit, in(10s)));
    EXPECT_TRUE(h3.ok());
  });
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  h.release();
  t.join();
  EXPECT_EQ(static_cast<WaitStatus>(st.load()), WaitStatus::kOk);
  ctl->stock().drain_all(&ctl->root());  // h3's release may sit in its CPU's stock
  EXPECT_EQ(usage(*g), 0);
}

// No head-of-line blocking: a large waiter that cannot be served does not hold back a small one
// that fits.
TEST_F(Fixture, SmallBypassesLarge) {
  set_wait_aging(*ctl, 10s);
  GroupRef g = make("a", 10);
  ASSERT_EQ(try_charge(*g, 10), ChargeStatus::kOk);
  AsyncWait large(*g, 8, 10s);
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  AsyncWait small(*g, 2, 10s);
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 2; }));
  uncharge(*g, 3);
  EXPECT_EQ(small.status(), WaitStatus::kOk);
  EXPECT_FALSE(large.done());
  uncharge(*g, 7);  // 10 - 3 + 2 - 7 = 2: room for 8
  EXPECT_EQ(large.status(), WaitStatus::kOk);
  EXPECT_EQ(usage(*g), 10);
  uncharge(*g, 10);
}

// Aging: once the oldest waiter has waited the bound, freed memory is reserved for it and later
// waiters are not served before it.
TEST_F(Fixture, AgedWaiterServedBeforeLaterOnes) {
  set_wait_aging(*ctl, 30ms);
  EXPECT_EQ(wait_aging(*ctl), 30ms);
  GroupRef g = make("a", 10);
  ASSERT_EQ(try_charge(*g, 10), ChargeStatus::kOk);
  AsyncWait old(*g, 6, 10s);
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  std::this_thread::sleep_for(50ms);  // past the aging bound
  AsyncWait young(*g, 1, 10s);
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 2; }));
  uncharge(*g, 1);  // fits the young one, but is reserved for the old one
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).reserved_bytes == kUnit; }));
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(young.done());
  uncharge(*g, 5);
  EXPECT_EQ(old.status(), WaitStatus::kOk);
  EXPECT_FALSE(young.done());
  uncharge(*g, 1);
  EXPECT_EQ(young.status(), WaitStatus::kOk);
  EXPECT_EQ(usage(*g), 10);
  uncharge(*g, 10);
  // A request larger than the limit never ages into a blocker.
  ASSERT_EQ(try_charge(*g, 10), ChargeStatus::kOk);
  AsyncWait huge(*g, 20, 300ms);
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  std::this_thread::sleep_for(50ms);
  AsyncWait small(*g, 1, 10s);
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 2; }));
  uncharge(*g, 1);
  EXPECT_EQ(small.status(), WaitStatus::kOk);
  EXPECT_EQ(huge.status(), WaitStatus::kTimedOut);
  EXPECT_EQ(wait_stats(*g).reserved_bytes, 0u);
  EXPECT_EQ(usage(*g), 10);
  uncharge(*g, 10);
}

// A reserve taken for an aged waiter that then times out is given back, not leaked.
TEST_F(Fixture, ReserveGivenBackOnTimeout) {
  set_wait_aging(*ctl, 0ms);
  GroupRef g = make("a", 10);
  ASSERT_EQ(try_charge(*g, 10), ChargeStatus::kOk);
  AsyncWait w(*g, 8, 150ms);
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  uncharge(*g, 3);
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).reserved_bytes == 3 * kUnit; }));
  EXPECT_EQ(usage(*g), 10);
  EXPECT_EQ(w.status(), WaitStatus::kTimedOut);
  EXPECT_EQ(usage(*g), 7);
  uncharge(*g, 7);
  EXPECT_EQ(usage(*g), 0);
}

// Many threads, random sizes, deadlines and cancellations, limit changes. At the end every unit
// is accounted for; the waiters with generous deadlines were all served (memory kept being freed).
TEST(ChargeWaitStress, RandomizedExactAccounting) {
  Controller ctl(with_batch(8));
  set_wait_aging(ctl, 5ms);
  GroupRef pool;
  ASSERT_EQ(ctl.create("pool", &pool), 0);
  pool->set_max(64 * kUnit);
  GroupRef kids[3];
  for (int i = 0; i < 3; ++i) ASSERT_EQ(ctl.create(*pool, "k" + std::to_string(i), &kids[i]), 0);
  std::atomic<int64_t> held_units{0};
  std::atomic<int> patient_failed{0}, ok{0}, timed{0}, cancelled{0};
  std::atomic<bool> stop_limits{false};
  std::jthread limits([&] {
    std::mt19937 rng(7);
    while (!stop_limits.load()) {
      write_max(*pool, (48 + rng() % 32) * kUnit, true);
      std::this_thread::sleep_for(3ms);
    }
    write_max(*pool, 64 * kUnit, true);
  });
  constexpr int kThreads = 8;
  std::vector<std::jthread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      for (int i = 0; i < 150; ++i) {
        Group& g = *kids[rng() % 3];
        const int64_t units = 1 + rng() % 24;
        const bool patient = rng() % 2 == 0;
        std::stop_source src;
        const bool cancel = !patient && rng() % 3 == 0;
        if (cancel) src.request_stop();
        const auto deadline = in(patient ? 20s : std::chrono::milliseconds(rng() % 5));
        const WaitStatus s = try_charge_wait(g, units, deadline, src.get_token());
        switch (s) {
          case WaitStatus::kOk:
            ++ok;
            held_units += units;
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
            if (rng() % 2) uncharge(g, units); else uncharge_direct(g, units);
            held_units -= units;
            break;
          case WaitStatus::kTimedOut:
            ++timed;
            if (patient) ++patient_failed;
            break;
          case WaitStatus::kCancelled:
            ++cancelled;
            if (patient) ++patient_failed;
            break;
          default:
            ++patient_failed;
        }
      }
    });
  }
  ts.clear();
  stop_limits = true;
  limits.join();
  EXPECT_EQ(patient_failed.load(), 0);
  EXPECT_EQ(held_units.load(), 0);
  EXPECT_GT(ok.load(), 0);
  ctl.stock().drain_all(&ctl.root());
  EXPECT_EQ(pool->memory().usage(), 0);
  for (auto& k : kids) EXPECT_EQ(k->memory().usage(), 0);
  EXPECT_EQ(wait_stats(*pool).waiters, 0u);
  EXPECT_EQ(wait_stats(*pool).reserved_bytes, 0u);
  EXPECT_EQ(pool->events_local().get(Event::kOomKill), 0u);
  const WaitStats s = wait_stats(*pool);
  EXPECT_EQ(s.waits, s.granted + s.timed_out + s.cancelled + s.removed);
}


// A group removed while many threads wait on it and its siblings: its waiters return kRemoved,
// the others go on; after a stop every thread returned a defined status, the granted units were
// uncharged and nothing stays charged. (A teardown with waiters: ControllerDestroyedWakesWaiters.)
TEST(ChargeWaitStress, RemovalAndTeardownUnderLoad) {
  for (int round = 0; round < 3; ++round) {  // different interleavings
    auto ctl = std::make_unique<Controller>(with_batch(4));
    GroupRef pool;
    ASSERT_EQ(ctl->create("pool", &pool), 0);
    pool->set_max(16 * kUnit);
    std::vector<GroupRef> kids(4);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(ctl->create(*pool, "k" + std::to_string(i), &kids[i]), 0);
    std::atomic<int> statuses[5] = {};
    std::atomic<int64_t> held{0};
    std::vector<std::jthread> ts;
    for (int t = 0; t < 8; ++t) {
      ts.emplace_back([&, t](std::stop_token st) {
        std::mt19937 rng(round * 100 + t);
        GroupRef g = kids[t % 4];  // our own reference: the group may be removed under us
        while (!st.stop_requested()) {
          const int64_t units = 1 + rng() % 8;
          const WaitStatus s = try_charge_wait(*g, units, in(2s), st);
          ++statuses[static_cast<int>(s)];
          if (s == WaitStatus::kOk) {
            held += units;
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500));
            uncharge_direct(*g, units);
            held -= units;
          } else if (s == WaitStatus::kRemoved) {
            break;
          }
        }
      });
    }
    std::this_thread::sleep_for(30ms);
    ASSERT_EQ(ctl->remove(*kids[0]), 0);  // kids[0]'s threads leave with kRemoved
    std::this_thread::sleep_for(30ms);
    for (auto& t : ts) t.request_stop();  // the waiters still queued return kCancelled
    ts.clear();
    ctl->stock().drain_all(&ctl->root());
    EXPECT_EQ(pool->memory().usage(), 0);
    EXPECT_EQ(wait_stats(*pool).waiters, 0u);
    EXPECT_EQ(held.load(), 0);
    EXPECT_GT(statuses[static_cast<int>(WaitStatus::kOk)].load(), 0);
    EXPECT_GT(statuses[static_cast<int>(WaitStatus::kRemoved)].load(), 0);
    EXPECT_EQ(statuses[static_cast<int>(WaitStatus::kInvalid)].load(), 0);
    kids.clear();
    pool.reset();
    ctl.reset();
  }
}

}  // namespace
}  // namespace memcg
