// PSI triggers looked at on time (psi.hpp "Polls"): a rate-limited event that is pending fires
// about when the rate limit ends with no further activity, and a breach inside one long stall
// fires during the stall, both on a ManualClock (through Controller::tick) and on the
// SystemClock (through the library's timer thread; bounded real-time waits).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/signal/psi.hpp"

#include "manual_controller.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kSec = 1'000'000'000;

TEST(PsiTiming, PendingEventFiresWhenTheLimitEndsWithNoActivityManualClock) {
  testing::ManualController s(0);
  GroupRef g = s.make("g");
  PsiTrigger t;
  int events = 0;
  ASSERT_EQ(t.arm(*g, "some 150000 1000000", [&] { ++events; }), 0);
  s.clock.advance(5 * kSec);
  {
    MemStall st(*g);
    s.clock.advance(200 * kMs);
  }
  ASSERT_EQ(events, 1);  // seen when the section ended
  const uint64_t first = s.clock.now_ns();
  s.clock.advance(100 * kMs);
  {
    MemStall st(*g);
    s.clock.advance(300 * kMs);  // a breach inside the rate limit: pending
  }
  EXPECT_EQ(events, 1);
  // Nothing happens in the group from here on; only the clock and tick() move.
  s.clock.advance(first + kSec - s.clock.now_ns() - kMs);
  s.ctl.tick();
  EXPECT_EQ(events, 1) << "fired before the rate limit ended";
  s.clock.advance(2 * kMs);
  s.ctl.tick();
  EXPECT_EQ(events, 2) << "the pending event was not delivered when the limit ended";
  s.clock.advance(10 * kSec);
  s.ctl.tick();
  EXPECT_EQ(events, 2);
}

TEST(PsiTiming, LongStallFiresDuringTheStallManualClock) {
  testing::ManualController s(0);
  GroupRef g = s.make("g");
  PsiTrigger t;
  int events = 0;
  ASSERT_EQ(t.arm(*g, "some 150000 1000000", [&] { ++events; }), 0);
  s.clock.advance(5 * kSec);
  MemStall st(*g);
  s.clock.advance(100 * kMs);
  s.ctl.tick();
  EXPECT_EQ(events, 0);  // 100 ms of 150
  s.clock.advance(100 * kMs);
  s.ctl.tick();
  EXPECT_EQ(events, 1) << "no event while the stall went on past the threshold";
  // The stall holds: one event per window, each when the rate limit ends.
  s.clock.advance(500 * kMs);
  s.ctl.tick();
  EXPECT_EQ(events, 1);
  s.clock.advance(500 * kMs);
  s.ctl.tick();
  EXPECT_EQ(events, 2);
}

TEST(PsiTiming, NoPollsWithoutStallOrPendingEvent) {
  testing::ManualController s(0);
  GroupRef g = s.make("g");
  PsiTrigger t;
  int events = 0;
  ASSERT_EQ(t.arm(*g, "some 150000 1000000", [&] { ++events; }), 0);
  {
    MemStall st(*g);
    s.clock.advance(100 * kMs);  // below the threshold, then idle
  }
  for (int i = 0; i < 20; ++i) {
    s.clock.advance(100 * kMs);
    s.ctl.tick();
  }
  EXPECT_EQ(events, 0);
}

// Real time: waits are bounded (seconds), the assertions leave a wide margin for a loaded
// machine.
TEST(PsiTiming, PendingEventFiresWhenTheLimitEndsWithNoActivitySystemClock) {
  testing::Watchdog wd("PendingEventFiresWhenTheLimitEndsWithNoActivitySystemClock");
  Options o;
  o.nr_shards = 1;
  Controller ctl(o);
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  std::atomic<int> events{0};
  std::atomic<int64_t> first_ns{0};
  std::atomic<int64_t> second_ns{0};
  auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               steady_clock::now().time_since_epoch())
        .count();
  };
  PsiTrigger t;
  ASSERT_EQ(t.arm(*g, "some 50000 500000",
                  [&] {
                    const int n = events.fetch_add(1) + 1;
                    if (n == 1) first_ns.store(now_ns());
                    if (n == 2) second_ns.store(now_ns());
                  }),
            0);
  {
    MemStall st(*g);
    std::this_thread::sleep_for(milliseconds(80));
  }
  ASSERT_GE(events.load(), 1);
  {
    MemStall st(*g);
    std::this_thread::sleep_for(milliseconds(80));  // breach again inside the rate limit
  }
  const auto deadline = steady_clock::now() + std::chrono::seconds(5);
  while (events.load() < 2 && steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(5));
  ASSERT_EQ(events.load(), 2) << "the pending event was never delivered";
  // Not before the rate limit (one window after the first event).
  EXPECT_GE(second_ns.load() - first_ns.load(), 450 * int64_t{1'000'000});
}

TEST(PsiTiming, LongStallFiresDuringTheStallSystemClock) {
  testing::Watchdog wd("LongStallFiresDuringTheStallSystemClock");
  Options o;
  o.nr_shards = 1;
  Controller ctl(o);
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  std::atomic<int> events{0};
  PsiTrigger t;
  ASSERT_EQ(t.arm(*g, "some 100000 1000000", [&] { events.fetch_add(1); }), 0);
  int during = 0;
  {
    MemStall st(*g);
    const auto deadline = steady_clock::now() + std::chrono::seconds(3);
    while (events.load() == 0 && steady_clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(5));
    during = events.load();
  }
  EXPECT_GE(during, 1) << "no event during a 3 s stall";
}

}  // namespace
}  // namespace memcg
