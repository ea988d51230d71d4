// Waiting charges (charge_wait.hpp): every way out of a wait and the fairness cases by
// construction. The clock, the stress runs, the regressions and the priorities have their own files.
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/files/files.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "charge_wait_support.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/charge/limits.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/files/files.hpp"
#include "memcg/percpu/internal/stock.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;
using namespace testing_wait;

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
  EXPECT_STREQ(wait_status_name(WaitStatus::kTimedOut), "timed-out");
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
  GroupRef g = make("a", 3);
  ASSERT_EQ(try_charge(*g, 3), ChargeStatus::kOk);
  AsyncWait w(*g, 3, 10s);  // fits memory.max, not the room
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  write_max(*g, 6 * kUnit, false);
  EXPECT_EQ(w.status(), WaitStatus::kOk);
  EXPECT_EQ(usage(*g), 6);
  uncharge(*g, 6);
}

// A request larger than a memory.max of its path is refused at once, whatever its deadline, and
// counted on the group whose limit it is over; one that fits the limits waits as before.
TEST_F(Fixture, NeverFitsIsRefusedAtOnceAndCounted) {
  GroupRef pool = make("pool", 10);
  GroupRef q;
  ASSERT_EQ(ctl->create("pool/q", &q), 0);
  q->set_max(20 * kUnit);  // the parent's 10 is the lower limit
  const auto t0 = WaitClock::now();
  EXPECT_EQ(try_charge_wait_for(*q, 11, 10s), WaitStatus::kNeverFits);
  EXPECT_LT(WaitClock::now() - t0, 1s);
  EXPECT_EQ(never_fits(*q, 11), pool.get());
  EXPECT_EQ(never_fits(*q, 10), nullptr);
  EXPECT_EQ(wait_stats(*pool).never_fits, 1u);
  EXPECT_EQ(wait_stats(*q).never_fits, 0u);
  EXPECT_EQ(wait_stats(*pool).waits, 0u);  // it never queued
  EXPECT_EQ(usage(*q), 0);
  std::string text;
  ASSERT_EQ(read_file(*pool, "memory.wait", &text), 0);
  EXPECT_NE(text.find("\nnever_fits 1\n"), std::string::npos) << text;
  // The smallest limit is named when several are passed.
  q->set_max(5 * kUnit);
  EXPECT_EQ(never_fits(*q, 11), q.get());
  EXPECT_EQ(try_charge_wait_for(*q, 6, 10s), WaitStatus::kNeverFits);
  EXPECT_EQ(wait_stats(*q).never_fits, 1u);
  EXPECT_STREQ(wait_status_name(WaitStatus::kNeverFits), "never-fits");
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
  // A request larger than the limit never ages into a blocker: it is refused at once.
  ASSERT_EQ(try_charge(*g, 10), ChargeStatus::kOk);
  AsyncWait huge(*g, 20, 300ms);
  EXPECT_EQ(huge.status(), WaitStatus::kNeverFits);
  AsyncWait small(*g, 1, 10s);
  ASSERT_TRUE(eventually([&] { return wait_stats(*g).waiters == 1; }));
  uncharge(*g, 1);
  EXPECT_EQ(small.status(), WaitStatus::kOk);
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

}  // namespace
}  // namespace memcg
