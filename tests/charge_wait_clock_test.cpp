// Waiting charges on the controller's clock: virtual deadlines, waits and wakes through the
// Clock, the `wait` event, the _for overloads.
#include "memcg/core/wait/charge_wait.hpp"

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
  EXPECT_EQ(wait_head(*g), wait_file(1, kUnit, 0, 1, 0, 0, 0, 0));
  std::this_thread::sleep_for(50ms);  // real time: 50 ms, virtual time: none
  EXPECT_FALSE(w.done());
  ASSERT_EQ(clock.now_ns(), 1'000'000u);  // nothing in the ladder slept: the deadline is 1s on
  clock.advance(1'000'000'000 - 1);       // one nanosecond short of it (many polls passed)
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(w.done());
  clock.advance(1);
  EXPECT_EQ(w.status(), WaitStatus::kTimedOut);
  EXPECT_EQ(used(*g), 4);
  EXPECT_EQ(wait_head(*g), wait_file(0, 0, 0, 1, 0, 1, 0, 0));
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
  EXPECT_EQ(wait_head(*g), wait_file(0, 0, 0, 1, 1, 0, 0, 0));
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
  const std::string none =
      "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\nwait 0\npreempt 0\n"
      "oom_handled 0\noom_spill 0\n";
  const std::string events_p = file(*p, "memory.events");
  EXPECT_NE(events_p.find("\nwait 1\n"), std::string::npos) << events_p;
  // After the kernel's keys, before `preempt`, `oom_handled` and `oom_spill` (the last lines).
  EXPECT_EQ(events_p.rfind("wait 1\n"), events_p.size() - 7 - 10 - 14 - 12);
  EXPECT_NE(file(*p, "memory.events.local").find("\nwait 1\n"), std::string::npos);
  EXPECT_NE(file(*top, "memory.events").find("\nwait 1\n"), std::string::npos);
  EXPECT_EQ(top->events_local().get(Event::kWait), 0u);
  EXPECT_EQ(file(*b, "memory.events"), none);  // the charged group is not the limiting one
  EXPECT_EQ(file(*b, "memory.events.local"), none);
  EXPECT_EQ(a->events().get(Event::kWait), 0u);
  // memory.wait shows the queue where it is: on p, not on the charged group.
  EXPECT_EQ(wait_head(*p), wait_file(1, 3 * kUnit, 0, 1, 0, 0, 0, 0));
  EXPECT_EQ(wait_head(*b), wait_file(0, 0, 0, 0, 0, 0, 0, 0));

  uncharge(*a, 3);
  EXPECT_EQ(w.status(), WaitStatus::kOk);
  EXPECT_EQ(wait_head(*p), wait_file(0, 0, 0, 1, 1, 0, 0, 0));
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
