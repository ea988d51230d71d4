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

#include "memcg/base/clock.hpp"
#include "memcg/core/controller.hpp"
#include "memcg/core/limits.hpp"
#include "memcg/core/psi.hpp"
#include "memcg/files/files.hpp"
#include "memcg/percpu/internal/stock.hpp"
#include "watchdog.hpp"

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
  EXPECT_EQ(try_charge_wait(*g, 1, WaitClock::time_point::min()), WaitStatus::kTimedOut);
  EXPECT_EQ(wait_stats(*g).waits, 0u);  // none of them queued
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
  // Every charge that queued raised `wait` once, on the pool (the only limit).
  EXPECT_EQ(pool->events_local().get(Event::kWait), s.waits);
  for (auto& k : kids) EXPECT_EQ(k->events().get(Event::kWait), 0u);
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

// ---- the controller's clock ---------------------------------------------------------------------

int64_t used(Group& g) {
  return g.memory().usage();
}

Options on_clock(Clock* clock) {
  Options o = with_batch(1);
  o.clock = clock;
  return o;
}

// A wait of its own thread on any overload; done() / status() as AsyncWait.
struct AsyncCall {
  std::atomic<int> result{-1};
  std::jthread th;
  explicit AsyncCall(std::function<WaitStatus(std::stop_token)> call) {
    th = std::jthread([this, call = std::move(call)](std::stop_token st) {
      result.store(static_cast<int>(call(st)));
    });
  }
  bool done() const { return result.load() >= 0; }
  WaitStatus status() {
    th.join();
    return static_cast<WaitStatus>(result.load());
  }
};

std::string file(Group& g, const char* name) {
  std::string out;
  EXPECT_EQ(read_file(g, name, &out), 0) << name;
  return out;
}

std::string wait_file(uint64_t waiters, uint64_t queued, uint64_t reserved, uint64_t waits,
                      uint64_t granted, uint64_t timed_out, uint64_t cancelled, uint64_t removed) {
  return "waiters " + std::to_string(waiters) + "\nqueued_bytes " + std::to_string(queued) +
         "\nreserved_bytes " + std::to_string(reserved) + "\nwaits " + std::to_string(waits) +
         "\ngranted " + std::to_string(granted) + "\ntimed_out " + std::to_string(timed_out) +
         "\ncancelled " + std::to_string(cancelled) + "\nremoved " + std::to_string(removed) + "\n";
}

// On a ManualClock the deadline is virtual time: real time passing does not end the wait, the
// clock moved past the deadline by another thread does. The poll (every 10 ms of that clock)
// runs on the way without ending it early.
TEST(ChargeWaitClock, ManualClockTimesOutWhenAdvancedPastTheDeadline) {
  testing::Watchdog dog("ManualClockTimesOutWhenAdvancedPastTheDeadline");
  ManualClock clock(1'000'000);
  Controller ctl(on_clock(&clock));
  GroupRef g;
  ASSERT_EQ(ctl.create("a", &g), 0);
  g->set_max(4 * kUnit);
  ASSERT_EQ(try_charge(*g, 4), ChargeStatus::kOk);
  AsyncCall w([&](std::stop_token st) { return try_charge_wait_for(*g, 1, 1s, st); });
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  EXPECT_EQ(file(*g, "memory.wait"), wait_file(1, kUnit, 0, 1, 0, 0, 0, 0));
  std::this_thread::sleep_for(50ms);  // real time: 50 ms, virtual time: none
  EXPECT_FALSE(w.done());
  ASSERT_EQ(clock.now_ns(), 1'000'000u);  // nothing in the ladder slept: the deadline is 1s on
  clock.advance(1'000'000'000 - 1);       // one nanosecond short of it (many polls passed)
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(w.done());
  clock.advance(1);
  EXPECT_EQ(w.status(), WaitStatus::kTimedOut);
  EXPECT_EQ(used(*g), 4);
  EXPECT_EQ(file(*g, "memory.wait"), wait_file(0, 0, 0, 1, 0, 1, 0, 0));
  uncharge(*g, 4);
}

TEST(ChargeWaitClock, ManualClockWaiterGrantedByUncharge) {
  testing::Watchdog dog("ManualClockWaiterGrantedByUncharge");
  ManualClock clock;
  Controller ctl(on_clock(&clock));
  GroupRef g;
  ASSERT_EQ(ctl.create("a", &g), 0);
  g->set_max(4 * kUnit);
  ASSERT_EQ(try_charge(*g, 4), ChargeStatus::kOk);
  AsyncCall w([&](std::stop_token st) { return try_charge_wait_for(*g, 2, 1s, st); });
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  uncharge(*g, 2);
  EXPECT_EQ(w.status(), WaitStatus::kOk);
  EXPECT_EQ(clock.now_ns(), 0u);  // granted with no time passing
  EXPECT_EQ(used(*g), 4);
  EXPECT_EQ(file(*g, "memory.wait"), wait_file(0, 0, 0, 1, 1, 0, 0, 0));
  uncharge(*g, 4);
}

// The steady-clock overloads turn their deadline into a timeout on the controller's clock.
TEST(ChargeWaitClock, SteadyDeadlineIsATimeoutOnTheControllersClock) {
  testing::Watchdog dog("SteadyDeadlineIsATimeoutOnTheControllersClock");
  ManualClock clock;
  Controller ctl(on_clock(&clock));
  GroupRef g;
  ASSERT_EQ(ctl.create("a", &g), 0);
  g->set_max(2 * kUnit);
  ASSERT_EQ(try_charge(*g, 2), ChargeStatus::kOk);
  AsyncCall w([&](std::stop_token st) { return try_charge_wait(*g, 1, in(100ms), st); });
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  std::this_thread::sleep_for(300ms);  // the steady deadline passed; the virtual one has not
  EXPECT_FALSE(w.done());
  clock.advance(100'000'000);
  EXPECT_EQ(w.status(), WaitStatus::kTimedOut);
  uncharge(*g, 2);
}

// A Clock that counts and records its waits and wakes and otherwise behaves as the default.
class RecordingClock final : public Clock {
 public:
  uint64_t now_ns() const noexcept override { return SystemClock::instance().now_ns(); }
  void sleep_ns(uint64_t ns) noexcept override { SystemClock::instance().sleep_ns(ns); }
  bool wait_until(ClockWaiter& w, std::unique_lock<std::mutex>& lock, uint64_t deadline_ns,
                  const std::stop_token& stop) override {
    EXPECT_TRUE(lock.owns_lock());
    {
      std::lock_guard<std::mutex> g(mu_);
      ++waits_;
      waited_.push_back(&w);
    }
    return Clock::wait_until(w, lock, deadline_ns, stop);
  }
  void wake(ClockWaiter& w) noexcept override {
    {
      std::lock_guard<std::mutex> g(mu_);
      ++wakes_;
      woken_.push_back(&w);
    }
    Clock::wake(w);
  }
  int waits() const {
    std::lock_guard<std::mutex> g(mu_);
    return waits_;
  }
  int wakes() const {
    std::lock_guard<std::mutex> g(mu_);
    return wakes_;
  }
  // Every woken waiter had waited (or was about to: a wake may come first) on this clock.
  std::vector<ClockWaiter*> woken() const {
    std::lock_guard<std::mutex> g(mu_);
    return woken_;
  }
  bool waited_on(ClockWaiter* w) const {
    std::lock_guard<std::mutex> g(mu_);
    return std::find(waited_.begin(), waited_.end(), w) != waited_.end();
  }

 private:
  mutable std::mutex mu_;
  int waits_ = 0, wakes_ = 0;
  std::vector<ClockWaiter*> waited_, woken_;
};

TEST(ChargeWaitClock, WaitsAndWakesGoThroughTheClock) {
  testing::Watchdog dog("WaitsAndWakesGoThroughTheClock");
  RecordingClock clock;
  auto ctl = std::make_unique<Controller>(on_clock(&clock));
  GroupRef g;
  ASSERT_EQ(ctl->create("a", &g), 0);
  g->set_max(2 * kUnit);
  ASSERT_EQ(try_charge(*g, 2), ChargeStatus::kOk);

  // Granted by an uncharge: the granting thread wakes the waiter through the clock.
  {
    AsyncCall w([&](std::stop_token st) { return try_charge_wait_for(*g, 1, 10s, st); });
    ASSERT_TRUE(eventually([&] { return clock.waits() >= 1; }));
    EXPECT_EQ(clock.wakes(), 0);
    uncharge(*g, 1);
    EXPECT_EQ(w.status(), WaitStatus::kOk);
    EXPECT_EQ(clock.wakes(), 1);
    ASSERT_EQ(clock.woken().size(), 1u);
    EXPECT_TRUE(clock.waited_on(clock.woken()[0]));
  }
  // Removed: the removing thread wakes it.
  {
    GroupRef b;
    ASSERT_EQ(ctl->create("b", &b), 0);
    b->set_max(kUnit);
    ASSERT_EQ(try_charge(*b, 1), ChargeStatus::kOk);
    const int waits_before = clock.waits();
    AsyncCall w([&](std::stop_token st) { return try_charge_wait_for(*b, 1, 10s, st); });
    ASSERT_TRUE(eventually([&] { return clock.waits() > waits_before; }));
    ASSERT_EQ(ctl->remove(*b), 0);
    EXPECT_EQ(w.status(), WaitStatus::kRemoved);
    EXPECT_EQ(clock.wakes(), 2);
    EXPECT_TRUE(clock.waited_on(clock.woken()[1]));
    uncharge(*b, 1);
  }
  // The controller destroyed: its destructor wakes the waiter, then waits for it to leave on
  // the clock as well (woken by the leaving waiter).
  const int waits_before = clock.waits();
  AsyncCall w([&](std::stop_token st) { return try_charge_wait_for(*g, 1, 10s, st); });
  ASSERT_TRUE(eventually([&] { return clock.waits() > waits_before; }));
  g.reset();
  ctl.reset();
  EXPECT_EQ(w.status(), WaitStatus::kRemoved);
  // The waiter (by the destructor), then the destructor (by the waiter, as it left: it cannot
  // leave before the destructor waits, as that needs the mutex the destructor holds until then).
  EXPECT_EQ(clock.wakes(), 4);
  for (ClockWaiter* woken : clock.woken()) EXPECT_TRUE(clock.waited_on(woken));
}

// `wait` is raised once per charge that queues, on the group whose memory.max held: in its
// memory.events and memory.events.local, and in its ancestors' memory.events only.
TEST(ChargeWaitClock, WaitEventOnTheLimitingGroup) {
  testing::Watchdog dog("WaitEventOnTheLimitingGroup");
  ManualClock clock;
  Controller ctl(on_clock(&clock));
  GroupRef top, p, a, b;
  ASSERT_EQ(ctl.create("top", &top), 0);
  ASSERT_EQ(ctl.create("top/p", &p), 0);
  ASSERT_EQ(ctl.create("top/p/a", &a), 0);
  ASSERT_EQ(ctl.create("top/p/b", &b), 0);
  p->set_max(10 * kUnit);
  ASSERT_EQ(try_charge(*a, 10), ChargeStatus::kOk);
  // Charges that do not queue raise nothing: one that fits, one with no time to wait.
  EXPECT_EQ(try_charge_wait_for(*b, 1, 0s), WaitStatus::kTimedOut);
  EXPECT_EQ(p->events().get(Event::kWait), 0u);

  AsyncCall w([&](std::stop_token st) { return try_charge_wait_for(*b, 3, 10s, st); });
  ASSERT_TRUE(eventually([&] { return wait_stats(*p).waiters == 1; }));
  const std::string none = "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\nwait 0\n";
  const std::string events_p = file(*p, "memory.events");
  EXPECT_NE(events_p.find("\nwait 1\n"), std::string::npos) << events_p;
  EXPECT_EQ(events_p.rfind("wait 1\n"), events_p.size() - 7);  // the last line
  EXPECT_NE(file(*p, "memory.events.local").find("\nwait 1\n"), std::string::npos);
  EXPECT_NE(file(*top, "memory.events").find("\nwait 1\n"), std::string::npos);
  EXPECT_EQ(top->events_local().get(Event::kWait), 0u);
  EXPECT_EQ(file(*b, "memory.events"), none);  // the charged group is not the limiting one
  EXPECT_EQ(file(*b, "memory.events.local"), none);
  EXPECT_EQ(a->events().get(Event::kWait), 0u);
  // memory.wait shows the queue where it is: on p, not on the charged group.
  EXPECT_EQ(file(*p, "memory.wait"), wait_file(1, 3 * kUnit, 0, 1, 0, 0, 0, 0));
  EXPECT_EQ(file(*b, "memory.wait"), wait_file(0, 0, 0, 0, 0, 0, 0, 0));

  uncharge(*a, 3);
  EXPECT_EQ(w.status(), WaitStatus::kOk);
  EXPECT_EQ(file(*p, "memory.wait"), wait_file(0, 0, 0, 1, 1, 0, 0, 0));
  EXPECT_EQ(p->events_local().get(Event::kWait), 1u);  // once per charge, not per wake
  EXPECT_EQ(top->events().get(Event::kWait), 1u);
  uncharge(*a, 7);
  uncharge(*b, 3);
}

// The _for overloads: argument checks, negative and huge timeouts, the handle form.
TEST(ChargeWaitClock, ForOverloads) {
  testing::Watchdog dog("ForOverloads");
  ManualClock clock(Clock::kMaxNs - 5);  // near the end of time: the deadline saturates
  Controller ctl(on_clock(&clock));
  GroupRef g;
  ASSERT_EQ(ctl.create("a", &g), 0);
  g->set_max(4 * kUnit);
  EXPECT_EQ(try_charge_wait_for(*g, ctl.max_units() + 1, 1s), WaitStatus::kInvalid);
  EXPECT_EQ(try_charge_wait_for(*g, -1, 1s), WaitStatus::kInvalid);
  EXPECT_EQ(try_charge_bytes_wait_for(*g, UINT64_MAX, 1s), WaitStatus::kInvalid);
  ChargeHandle h;
  EXPECT_EQ(charge_wait_for(h, *g, UINT64_MAX, 1s), WaitStatus::kInvalid);
  EXPECT_FALSE(h.ok());
  EXPECT_EQ(try_charge_wait_for(*g, 0, 1s), WaitStatus::kOk);
  EXPECT_EQ(try_charge_wait_for(ctl.root(), 5, 1s), WaitStatus::kOk);
  EXPECT_EQ(used(*g), 0);
  // A negative timeout is 0: one try.
  EXPECT_EQ(try_charge_wait_for(*g, 3, -1s), WaitStatus::kOk);
  EXPECT_EQ(try_charge_wait_for(*g, 2, -1s), WaitStatus::kTimedOut);
  EXPECT_EQ(try_charge_bytes_wait_for(*g, kUnit + 1, std::chrono::nanoseconds::min()),
            WaitStatus::kTimedOut);  // rounds up to 2 units
  EXPECT_EQ(try_charge_bytes_wait_for(*g, kUnit, 0s), WaitStatus::kOk);
  EXPECT_EQ(used(*g), 4);
  EXPECT_EQ(wait_stats(*g).waits, 0u);  // nothing queued
  EXPECT_EQ(clock.now_ns(), Clock::kMaxNs - 5);

  // The largest timeout: the deadline saturates at kMaxNs, which the clock can still reach.
  AsyncCall w([&](std::stop_token st) {
    ChargeHandle out;
    const WaitStatus s = charge_wait_for(out, *g, kUnit, std::chrono::nanoseconds::max(), st);
    EXPECT_FALSE(out.ok());
    return s;
  });
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  clock.advance(3);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(w.done());
  clock.advance(100);  // saturates at kMaxNs: the deadline
  EXPECT_EQ(w.status(), WaitStatus::kTimedOut);
  EXPECT_EQ(clock.now_ns(), Clock::kMaxNs);

  // At kMaxNs every deadline has passed: the handle form still takes what fits at once.
  uncharge(*g, 2);
  EXPECT_EQ(charge_wait_for(h, *g, 2 * kUnit, 1h), WaitStatus::kOk);
  EXPECT_TRUE(h.ok());
  EXPECT_EQ(used(*g), 4);
  h.release();
  ctl.stock().drain_all(&ctl.root());
  EXPECT_EQ(used(*g), 2);
  uncharge(*g, 2);
}

}  // namespace
}  // namespace memcg
