// A group's removal told to its vmpressure listeners and PSI triggers (vmpressure.hpp, psi.hpp
// "Removal"), as to its memory.events listeners: one final notification, callback and eventfd,
// with removed() true; then the registration lets go of the group, so that it no longer keeps it
// dying and no event or poll follows; registering on a removed group fails with ENOENT.
//
// Run under the asan preset too: the handles of a removed group are reset after their controller
// is gone, and from inside their own final notification.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/reclaim/vmpressure.hpp"
#include "memcg/files/files.hpp"

#include "manual_controller.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kSec = 1'000'000'000;
constexpr ReclaimReason kLimit = ReclaimReason::kLimit;

// An eventfd the test owns (the registrations keep duplicates of it).
struct EventFd {
  EventFd() : fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~EventFd() { ::close(fd); }
  bool readable() const {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
  }
  uint64_t consume() const {
    uint64_t n = 0;
    return ::read(fd, &n, sizeof n) == sizeof n ? n : 0;
  }
  const int fd;
};

TEST(PressureRemoval, VmpressureListenerIsToldOnceThenTheGroupIsReleased) {
  testing::ManualController s(kSec);
  GroupRef parent = s.make("p");
  GroupRef g = s.make("p/g");
  EventFd efd;
  EventFd parent_efd;
  PressureListener l;
  PressureListener on_parent;
  int calls = 0;
  int removal_calls = 0;
  PressureLevel last = PressureLevel::kLow;
  ASSERT_EQ(l.listen(*g, PressureLevel::kMedium, PressureMode::kDefault,
                     [&](PressureLevel level) {
                       ++calls;
                       if (l.removed()) ++removal_calls;
                       last = level;
                     },
                     efd.fd),
            0);
  ASSERT_EQ(on_parent.listen(*parent, PressureLevel::kLow, PressureMode::kHierarchy, nullptr,
                             parent_efd.fd),
            0);
  const int64_t listeners = nr_pressure_listeners();
  vmpressure_tree(*g, kLimit, vmpressure_window(*g), 0);  // one critical window
  ASSERT_EQ(calls, 1);
  EXPECT_EQ(last, PressureLevel::kCritical);
  EXPECT_EQ(efd.consume(), 1u);
  EXPECT_EQ(parent_efd.consume(), 1u);
  EXPECT_FALSE(l.removed());

  ASSERT_EQ(s.ctl.remove(*g), 0);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(removal_calls, 1) << "the final notification did not say removed()";
  EXPECT_EQ(last, PressureLevel::kMedium);  // the listener's own level
  EXPECT_TRUE(l.removed());
  EXPECT_TRUE(efd.readable()) << "the eventfd was not signalled on removal";
  EXPECT_EQ(efd.consume(), 1u);
  EXPECT_EQ(l.delivered(), 1u);  // the removal notice is not an event
  EXPECT_EQ(nr_pressure_listeners(), listeners - 1);
  EXPECT_FALSE(on_parent.removed());
  EXPECT_EQ(parent_efd.consume(), 0u);

  // The listener no longer keeps the group: it goes with the caller's last reference.
  g = GroupRef();
  EXPECT_EQ(s.ctl.nr_dying(), 0u) << "the listener kept its removed group dying";
  vmpressure_tree(*parent, kLimit, vmpressure_window(*parent), 0);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(efd.consume(), 0u);
  EXPECT_EQ(parent_efd.consume(), 1u);
  l.reset();
  EXPECT_EQ(nr_pressure_listeners(), listeners - 1);
  EXPECT_EQ(l.delivered(), 0u);
}

TEST(PressureRemoval, PsiTriggerIsToldOnceThenTheGroupIsReleased) {
  testing::ManualController s(0);
  GroupRef parent = s.make("p");
  GroupRef g = s.make("p/g");
  EventFd efd;
  EventFd parent_efd;
  PsiTrigger t;
  PsiTrigger on_parent;
  int calls = 0;
  int removal_calls = 0;
  ASSERT_EQ(t.arm(*g, "some 150000 1000000",
                  [&] {
                    ++calls;
                    if (t.removed()) ++removal_calls;
                  },
                  efd.fd),
            0);
  ASSERT_EQ(on_parent.arm(*parent, "some 150000 1000000", nullptr, parent_efd.fd), 0);
  s.clock.advance(5 * kSec);
  {
    MemStall st(*g);
    s.clock.advance(200 * kMs);
  }
  ASSERT_EQ(calls, 1);
  EXPECT_EQ(efd.consume(), 1u);
  EXPECT_EQ(parent_efd.consume(), 1u);

  // A stall in progress on the group (the section holds its own reference): the trigger is
  // polled on time, so without the removal notice it would fire again on a later tick.
  s.clock.advance(2 * kSec);
  std::optional<MemStall> stall;
  stall.emplace(*g);
  s.clock.advance(50 * kMs);
  ASSERT_EQ(s.ctl.remove(*g), 0);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(removal_calls, 1) << "the final notification did not say removed()";
  EXPECT_TRUE(t.removed());
  EXPECT_TRUE(efd.readable()) << "the eventfd was not signalled on removal";
  EXPECT_EQ(efd.consume(), 1u);
  EXPECT_EQ(t.delivered(), 1u);  // the removal notice is not an event
  EXPECT_FALSE(on_parent.removed());

  for (int i = 0; i < 4; ++i) {
    s.clock.advance(500 * kMs);
    s.ctl.tick();
  }
  EXPECT_EQ(calls, 2) << "an event after the removal notice";
  EXPECT_EQ(efd.consume(), 0u);
  EXPECT_GE(parent_efd.consume(), 1u);  // the parent's trigger still works
  stall.reset();
  g = GroupRef();
  EXPECT_EQ(s.ctl.nr_dying(), 0u) << "the trigger kept its removed group dying";
  t.reset();
  EXPECT_FALSE(t);
}

TEST(PressureRemoval, RegisteringOnARemovedGroupFailsWithEnoent) {
  testing::ManualController s(kSec);
  GroupRef g = s.make("g");
  GroupRef watched = s.make("w");
  PressureListener keep_l;
  PsiTrigger keep_t;
  ASSERT_EQ(keep_l.listen(*watched, "low", [](PressureLevel) {}), 0);
  ASSERT_EQ(keep_t.arm(*watched, "some 1000 1000000", [] {}), 0);
  std::unique_ptr<File> file;
  ASSERT_EQ(open_file(*g, "memory.pressure", &file), 0);
  ASSERT_EQ(s.ctl.remove(*g), 0);
  ASSERT_EQ(s.ctl.remove(*watched), 0);
  const int64_t listeners = nr_pressure_listeners();
  EventFd efd;
  for (Group* r : {g.get(), watched.get()}) {
    PressureListener l;
    EXPECT_EQ(l.listen(*r, "low", [](PressureLevel) {}), ENOENT);
    EXPECT_EQ(l.listen(*r, PressureLevel::kCritical, PressureMode::kLocal, nullptr, efd.fd),
              ENOENT);
    const std::string line = std::to_string(efd.fd) + " " + std::to_string(efd.fd) + " low";
    EXPECT_EQ(register_event_control(*r, line, &l), ENOENT);
    EXPECT_FALSE(l);
    PsiTrigger t;
    EXPECT_EQ(t.arm(*r, "some 1000 1000000", [] {}), ENOENT);
    EXPECT_EQ(t.arm(*r, PsiTriggerSpec{PsiState::kFull, 1000, 2000000}, nullptr, efd.fd, false),
              ENOENT);
    EXPECT_FALSE(t);
  }
  EXPECT_EQ(nr_pressure_listeners(), listeners);
  // A trigger written to a memory.pressure file of the removed group (file_removal_test).
  EXPECT_EQ(file->write("some 1000 1000000"), ENODEV);
  EXPECT_EQ(pressure_file_eventfd(*file), -1);
  // Bad input is still EINVAL first where it was.
  PsiTrigger t;
  EXPECT_EQ(t.arm(*g, "some 0 0", [] {}), EINVAL);
}

// memory.pressure: the eventfd of a trigger written to the open file is signalled once on the
// group's removal (the kernel's POLLERR|POLLPRI on the file), and nothing follows.
TEST(PressureRemoval, PressureFileEventfdIsSignalledOnRemoval) {
  testing::ManualController s(kSec);
  GroupRef g = s.make("g");
  std::unique_ptr<File> file;
  ASSERT_EQ(open_file(*g, "memory.pressure", &file), 0);
  ASSERT_EQ(file->write("some 1000 1000000"), 0);
  const int efd = pressure_file_eventfd(*file);
  ASSERT_GE(efd, 0);
  pollfd p{efd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);
  ASSERT_EQ(s.ctl.remove(*g), 0);
  EXPECT_EQ(::poll(&p, 1, 0), 1) << "the removal was not signalled";
  uint64_t n = 0;
  EXPECT_EQ(::read(efd, &n, sizeof n), static_cast<ssize_t>(sizeof n));
  EXPECT_EQ(n, 1u);
  {
    MemStall st(*g);
    s.clock.advance(500 * kMs);
  }
  s.ctl.tick();
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "an event after the removal notice";
  std::string text;
  EXPECT_EQ(file->read(&text), ENODEV);  // the file went with the group (file_removal_test)
}

// A removed group's handles hold nothing of it: they may be reset after their controller is gone
// (the checked lifetimes find nothing left), and their final notification may reset them.
TEST(PressureRemoval, HandlesOfARemovedGroupOutliveTheController) {
  ManualClock clock(kSec);
  Options o = testing::ManualController::options(&clock);
  o.check_lifetimes = true;
  auto ctl = std::make_unique<Controller>(o);
  PressureListener l;
  PsiTrigger t;
  PressureListener self_l;
  PsiTrigger self_t;
  int self_calls = 0;
  {
    GroupRef g;
    ASSERT_EQ(ctl->create("g", &g), 0);
    ASSERT_EQ(l.listen(*g, "critical", [](PressureLevel) {}), 0);
    ASSERT_EQ(t.arm(*g, "full 1000 1000000", [] {}), 0);
    // Each resets itself and the other kind's handle from inside its final notification.
    ASSERT_EQ(self_l.listen(*g, "low",
                            [&](PressureLevel) {
                              ++self_calls;
                              self_l.reset();
                              self_t.reset();
                            }),
              0);
    ASSERT_EQ(self_t.arm(*g, "some 1000 1000000",
                         [&] {
                           ++self_calls;
                           self_t.reset();
                         }),
              0);
    ASSERT_EQ(ctl->remove(*g), 0);
  }
  EXPECT_EQ(self_calls, 1);  // the listener's notice reset the trigger before its own
  EXPECT_FALSE(self_l);
  EXPECT_FALSE(self_t);
  EXPECT_TRUE(l.removed());
  EXPECT_TRUE(t.removed());
  EXPECT_EQ(ctl->nr_dying(), 0u);
  ctl.reset();  // aborts (checked lifetimes) if a handle still held the group
  l.reset();
  t.reset();
}

// Removal while other threads raise vmpressure windows and PSI stalls on the group and reset
// handles (SystemClock: the timer thread polls the triggers): every handle left is told, none
// is told twice, and the group is released.
TEST(PressureRemoval, RemovalRacesDeliveriesAndResets) {
  testing::Watchdog wd("RemovalRacesDeliveriesAndResets", seconds(60));
  Options o;
  o.nr_shards = 1;
  Controller ctl(o);
  for (int round = 0; round < 30; ++round) {
    GroupRef g;
    ASSERT_EQ(ctl.create("g", &g), 0);
    constexpr int kN = 4;
    std::vector<PressureListener> ls(kN);
    std::vector<PsiTrigger> ts(kN);
    std::atomic<int> removal_calls{0};
    for (int i = 0; i < kN; ++i) {
      ASSERT_EQ(ls[i].listen(*g, "low",
                             [&, i](PressureLevel) {
                               if (ls[i].removed()) removal_calls.fetch_add(1);
                             }),
                0);
      ASSERT_EQ(ts[i].arm(*g, "some 100 100000",
                          [&, i] {
                            if (ts[i].removed()) removal_calls.fetch_add(1);
                          }),
                0);
    }
    std::atomic<bool> stop{false};
    std::thread raiser([&, gr = GroupRef(g.get())] {
      while (!stop.load()) {
        vmpressure_tree(*gr, kLimit, vmpressure_window(*gr), 0);
        MemStall st(*gr);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    std::this_thread::sleep_for(milliseconds(round % 4));
    ls[round % kN].reset();  // one of each leaves before the removal
    ts[(round + 1) % kN].reset();
    ASSERT_EQ(ctl.remove(*g), 0);
    stop.store(true);
    raiser.join();
    // The three of each kind left, once each (an event that began before the removal may also
    // run after it and see the mark, so at least).
    EXPECT_GE(removal_calls.load(), 2 * (kN - 1)) << "round " << round;
    for (int i = 0; i < kN; ++i) {
      if (ls[i]) {
        EXPECT_TRUE(ls[i].removed());
      }
      if (ts[i]) {
        EXPECT_TRUE(ts[i].removed());
      }
    }
    g = GroupRef();
    // The handles left do not pin the group. A timer-thread poll that began before the removal
    // holds it until that poll ends, so the release may come a moment later: bounded wait.
    const auto give_up = std::chrono::steady_clock::now() + seconds(10);
    while (ctl.nr_dying() != 0 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(milliseconds(1));
    EXPECT_EQ(ctl.nr_dying(), 0u) << "round " << round;
    ls.clear();
    ts.clear();
  }
}

}  // namespace
}  // namespace memcg
