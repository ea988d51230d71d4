// A kill ends the victim's own waits (oom.hpp, Member::charge_wait; reservation.hpp, kKilled): a
// killed member unwinds and waits for nothing, as a fatal signal ends a task's memcg wait in the
// kernel. Before, a member killed while it waited kept its memory until its deadline, and the
// killer gave up on it and chose a second victim.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "memcg/base/events.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/admission/reservation.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

struct Tree {
  Controller ctl;
  GroupRef g;
  int64_t unit;
  static Options options() {
    Options o;
    o.batch = 1;  // no stock: the counters show every unit
    o.nr_shards = 1;
    return o;
  }
  Tree() : ctl(options()), unit(static_cast<int64_t>(ctl.unit_size())) {
    EXPECT_EQ(ctl.create("g", &g), 0);
    g->set_max(10 * unit);
  }
  void wait_for_a_waiter() const {
    for (auto until = Steady::now() + 20s;
         wait_stats(*g).waiters == 0 && Steady::now() < until;)
      std::this_thread::sleep_for(1ms);
    ASSERT_EQ(wait_stats(*g).waiters, 1u);
  }
};

TEST(KillEndsWait, AMemberKilledWhileItWaitsStopsWaitingAtOnce) {
  memcg::testing::Watchdog dog("kill ends wait", std::chrono::seconds(60));
  Tree t;
  std::atomic<int> told{0};
  // The callback only asks the work to stop; the work gives its memory back when it unwinds,
  // on its own thread (here: once its wait returns).
  Member a(*t.g, "a", [&](Member&) { ++told; });
  Member b(*t.g, "b", [](Member&) {});
  ASSERT_EQ(a.charge(6), ChargeStatus::kOk);
  ASSERT_EQ(b.charge(3), ChargeStatus::kOk);

  std::atomic<int> waited{-1};
  std::atomic<int64_t> waited_ms{-1};
  std::thread work([&] {
    const auto start = Steady::now();
    waited = static_cast<int>(a.charge_wait(3, 20s));  // 1 unit free: it waits
    waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Steady::now() - start)
                    .count();
    a.uncharge(a.charged());  // unwinding
  });
  t.wait_for_a_waiter();

  // Another member's small charge finds no room: the killer chooses a (the largest).
  Member c(*t.g, "c", [](Member&) {});
  EXPECT_EQ(c.charge(2), ChargeStatus::kOk);
  work.join();

  EXPECT_EQ(told.load(), 1);
  EXPECT_TRUE(a.killed());
  EXPECT_EQ(waited.load(), static_cast<int>(WaitStatus::kCancelled));
  // The 20 s deadline is far away: the kill, not the deadline, ended the wait (5 s leaves room
  // for a loaded machine).
  EXPECT_LT(waited_ms.load(), 5000);
  EXPECT_EQ(t.g->events().get(Event::kOomKill), 1u) << "a second victim was killed";
  EXPECT_EQ(a.charged(), 0);
  EXPECT_FALSE(b.killed());
  EXPECT_EQ(b.uncharge(b.charged()), 3);
  EXPECT_EQ(c.uncharge(c.charged()), 2);
  EXPECT_EQ(t.g->memory().usage(), 0);
}

TEST(KillEndsWait, AReservationKilledWhileItGrowsReturnsKilledAtOnce) {
  memcg::testing::Watchdog dog("kill ends growth wait", std::chrono::seconds(60));
  Tree t;
  Member a(*t.g, "a", [](Member&) {});
  Member b(*t.g, "b", [](Member&) {});
  ASSERT_EQ(b.charge(3), ChargeStatus::kOk);
  const uint64_t unit = static_cast<uint64_t>(t.unit);

  std::atomic<int> grew{-1};
  std::atomic<int64_t> grew_ms{-1};
  std::atomic<bool> held{false};
  std::thread work([&] {
    Reservation r(a);
    if (r.reserve(6 * unit) != ReserveStatus::kOk) return;
    held = true;
    const auto start = Steady::now();
    grew = static_cast<int>(r.grow_for(3 * unit, 20s));  // 1 unit free: it waits
    grew_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Steady::now() - start).count();
    // ~Reservation gives back what it holds.
  });
  t.wait_for_a_waiter();
  ASSERT_TRUE(held.load());

  Member c(*t.g, "c", [](Member&) {});
  EXPECT_EQ(c.charge(2), ChargeStatus::kOk);
  work.join();

  EXPECT_TRUE(a.killed());
  EXPECT_EQ(grew.load(), static_cast<int>(ReserveStatus::kKilled));
  EXPECT_LT(grew_ms.load(), 5000);
  EXPECT_EQ(t.g->events().get(Event::kOomKill), 1u);
  EXPECT_EQ(a.charged(), 0);
  EXPECT_EQ(b.uncharge(b.charged()), 3);
  EXPECT_EQ(c.uncharge(c.charged()), 2);
  EXPECT_EQ(t.g->memory().usage(), 0);
}

TEST(KillEndsWait, TheCallersOwnStopIsStillCancelledNotKilled) {
  memcg::testing::Watchdog dog("stop is cancel", std::chrono::seconds(60));
  Tree t;
  Member a(*t.g, "a", [](Member&) {});
  ASSERT_EQ(a.charge(8), ChargeStatus::kOk);
  std::stop_source stop;
  std::atomic<int> waited{-1};
  std::thread work([&] { waited = static_cast<int>(a.charge_wait(3, 20s, stop.get_token())); });
  t.wait_for_a_waiter();
  stop.request_stop();
  work.join();
  EXPECT_EQ(waited.load(), static_cast<int>(WaitStatus::kCancelled));
  EXPECT_FALSE(a.killed());
  EXPECT_EQ(t.g->events().get(Event::kOomKill), 0u);
  EXPECT_EQ(a.uncharge(a.charged()), 8);
}

}  // namespace
}  // namespace memcg
