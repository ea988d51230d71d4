// memory.events delivery (notify.hpp): what a callback is given stays valid for the whole call,
// destroying a listener waits for that listener's own calls only, and a group's removal is told
// to its listeners (a final notification marked as the removal) which then let go of it.
//
// Run under the asan preset too: NestedDestroyKeepsTheGroupOfACallbackInFlight reads the group
// from a callback after the group's last listener reference went, which ASan reports as a
// heap-use-after-free if the delivery does not hold the group itself.
#include <poll.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/signal/notify.hpp"

#include "watchdog.hpp"

namespace memcg {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

Options manual_options(ManualClock* clock) {
  Options o;
  o.nr_shards = 1;
  o.clock = clock;
  return o;
}

// Waits up to `limit` for `pred`; false on timeout.
template <typename Pred>
bool wait_for(Pred pred, milliseconds limit) {
  const auto end = steady_clock::now() + limit;
  while (!pred()) {
    if (steady_clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

// A deferred notification of g's memory.events is queued (two changes within 10 ms) and the
// clock is past its interval: the next tick delivers it.
void defer_one(ManualClock& clock, Group& g, EventListener& l) {
  g.raise(Event::kMax);
  g.raise(Event::kMax);
  l.consume();
  clock.advance(2 * kEventNotifyIntervalNs);
}

// A callback of listener B runs on a ticking thread while B's group is removed and B is destroyed
// from inside another listener's callback: B held the group's last reference but for the one of
// the delivery in flight, which must keep the group alive until that callback returns.
TEST(NotifyDelivery, NestedDestroyKeepsTheGroupOfACallbackInFlight) {
  testing::Watchdog wd("NestedDestroyKeepsTheGroupOfACallbackInFlight", seconds(30));
  ManualClock clock(1'000'000'000);
  Controller ctl(manual_options(&clock));
  GroupRef g;
  GroupRef h;
  ASSERT_EQ(ctl.create("g", &g), 0);
  ASSERT_EQ(ctl.create("h", &h), 0);

  const size_t g_path_len = g->path().size();
  std::atomic<bool> armed{false};
  std::atomic<int> stage{0};  // 1: B's first armed call is blocked; 2: let it go on
  std::atomic<size_t> path_len{0};
  std::unique_ptr<EventListener> b;
  ASSERT_EQ(EventListener::open(
                *g, EventsFile::kEvents,
                [&](Group& group, EventsFile) {
                  if (!armed.load()) return;
                  int expected = 0;
                  if (stage.compare_exchange_strong(expected, 1)) {
                    while (stage.load() != 2) std::this_thread::sleep_for(milliseconds(1));
                  }
                  path_len.store(group.path().size());  // reads the group it was given
                },
                &b),
            0);
  defer_one(clock, *g, *b);
  armed.store(true);
  std::thread ticker([&] { ctl.tick(); });
  ASSERT_TRUE(wait_for([&] { return stage.load() == 1; }, milliseconds(10000)));

  // The group goes while B's call is blocked; then A's callback destroys B.
  ASSERT_EQ(ctl.remove(*g), 0);
  g = GroupRef();
  std::unique_ptr<EventListener> a;
  ASSERT_EQ(EventListener::open(*h, EventsFile::kEvents, [&](Group&, EventsFile) { b.reset(); },
                                &a),
            0);
  h->raise(Event::kMax);
  EXPECT_EQ(b, nullptr);
  stage.store(2);
  ticker.join();
  EXPECT_EQ(path_len.load(), g_path_len);
  EXPECT_EQ(ctl.nr_dying(), 0u);
}

// Destroying listener B waits for B's own calls only. A's callback, delivered in the same tick
// batch as B's file, takes a user lock that is held around B's destruction: waiting for anything
// but B's calls deadlocks.
TEST(NotifyDelivery, DestroyingOneListenerDoesNotWaitForAnother) {
  testing::Watchdog wd("DestroyingOneListenerDoesNotWaitForAnother", seconds(30));
  ManualClock clock(1'000'000'000);
  Controller ctl(manual_options(&clock));
  GroupRef ga;
  GroupRef gb;
  ASSERT_EQ(ctl.create("a", &ga), 0);
  ASSERT_EQ(ctl.create("b", &gb), 0);
  std::mutex user_lock;
  std::atomic<bool> armed{false};
  std::atomic<bool> entered{false};
  std::unique_ptr<EventListener> a;
  std::unique_ptr<EventListener> b;
  ASSERT_EQ(EventListener::open(*ga, EventsFile::kEvents,
                                [&](Group&, EventsFile) {
                                  if (!armed.load()) return;
                                  entered.store(true);
                                  std::lock_guard lock(user_lock);
                                },
                                &a),
            0);
  ASSERT_EQ(EventListener::open(*gb, EventsFile::kEvents, nullptr, &b), 0);
  ga->raise(Event::kMax);
  gb->raise(Event::kMax);
  ga->raise(Event::kMax);  // both files deferred, delivered by one tick
  gb->raise(Event::kMax);
  clock.advance(2 * kEventNotifyIntervalNs);
  armed.store(true);

  std::unique_lock held(user_lock);
  std::thread ticker([&] { ctl.tick(); });
  ASSERT_TRUE(wait_for([&] { return entered.load(); }, milliseconds(10000)));
  // A's call now waits for user_lock. B's destruction must not wait for it.
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    b.reset();
    destroyed.store(true);
  });
  const bool in_time = wait_for([&] { return destroyed.load(); }, milliseconds(5000));
  held.unlock();  // lets A's call (and, before the fix, B's destruction) finish
  destroyer.join();
  ticker.join();
  EXPECT_TRUE(in_time) << "destroying B waited for A's callback";
}

// A group's removal: each listener of its files gets one final notification, callback and
// eventfd, with removed() true and the group offline; then the listener lets go of the group.
TEST(NotifyDelivery, RemovalIsToldOnceThenTheGroupIsReleased) {
  ManualClock clock(1'000'000'000);
  Controller ctl(manual_options(&clock));
  GroupRef parent;
  GroupRef g;
  ASSERT_EQ(ctl.create("p", &parent), 0);
  ASSERT_EQ(ctl.create("p/g", &g), 0);
  std::unique_ptr<EventListener> events;
  std::unique_ptr<EventListener> local;
  std::unique_ptr<EventListener> on_parent;
  int calls = 0;
  int removal_calls = 0;
  bool saw_offline = false;
  auto cb = [&](Group& group, EventsFile) {
    ++calls;
    if (events && events->removed()) ++removal_calls;
    saw_offline = !group.is_online();
  };
  ASSERT_EQ(EventListener::open(*g, EventsFile::kEvents, cb, &events), 0);
  ASSERT_EQ(EventListener::open(*g, EventsFile::kEventsLocal, nullptr, &local), 0);
  ASSERT_EQ(EventListener::open(*parent, EventsFile::kEvents, nullptr, &on_parent), 0);
  g->raise(Event::kMax);
  g->raise(Event::kMax);  // deferred: the removal notice covers it
  EXPECT_EQ(events->consume(), 1u);
  EXPECT_EQ(local->consume(), 1u);
  EXPECT_EQ(on_parent->consume(), 1u);
  calls = 0;
  EXPECT_FALSE(events->removed());
  EXPECT_EQ(events->group(), g.get());

  ASSERT_EQ(ctl.remove(*g), 0);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(removal_calls, 1);
  EXPECT_TRUE(saw_offline);
  for (EventListener* l : {events.get(), local.get()}) {
    EXPECT_TRUE(l->removed());
    EXPECT_EQ(l->group(), nullptr);
    pollfd p{l->fd(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 1);
    EXPECT_EQ(l->consume(), 1u);
  }
  // The parent's memory.events stays; it is not told anything.
  EXPECT_FALSE(on_parent->removed());
  EXPECT_EQ(on_parent->consume(), 0u);

  // The listeners no longer keep the group: it goes with the caller's last reference.
  g = GroupRef();
  EXPECT_EQ(ctl.nr_dying(), 0u);
  clock.advance(2 * kEventNotifyIntervalNs);
  ctl.tick();
  parent->raise(Event::kMax);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(events->consume(), 0u);
  EXPECT_EQ(local->consume(), 0u);
  events.reset();
  local.reset();
}

TEST(NotifyDelivery, OpeningOnARemovedGroupFailsWithEnoent) {
  ManualClock clock(1'000'000'000);
  Controller ctl(manual_options(&clock));
  GroupRef g;
  GroupRef watched;
  ASSERT_EQ(ctl.create("g", &g), 0);
  ASSERT_EQ(ctl.create("w", &watched), 0);
  std::unique_ptr<EventListener> keep;
  ASSERT_EQ(EventListener::open(*watched, EventsFile::kEvents, nullptr, &keep), 0);
  ASSERT_EQ(ctl.remove(*g), 0);        // never watched
  ASSERT_EQ(ctl.remove(*watched), 0);  // watched before
  for (Group* r : {g.get(), watched.get()}) {
    for (EventsFile f : {EventsFile::kEvents, EventsFile::kEventsLocal}) {
      std::unique_ptr<EventListener> l;
      EXPECT_EQ(EventListener::open(*r, f, nullptr, &l), ENOENT);
      EXPECT_EQ(l, nullptr);
    }
  }
  EXPECT_EQ(EventListener::open(ctl.root(), EventsFile::kEvents, nullptr, nullptr), EINVAL);
}

// Removal while raises and deferred deliveries (SystemClock timer) run: every remaining listener
// is told, and every removed group is released.
TEST(NotifyDelivery, RemovalRacesDeliveriesAndListenerChurn) {
  testing::Watchdog wd("RemovalRacesDeliveriesAndListenerChurn", seconds(60));
  Options o;
  o.nr_shards = 1;
  Controller ctl(o);
  for (int round = 0; round < 40; ++round) {
    GroupRef g;
    ASSERT_EQ(ctl.create("g", &g), 0);
    std::atomic<int> removal_calls{0};
    std::unique_ptr<EventListener> ls[4];
    std::atomic<EventListener*> selves[4] = {};
    for (int i = 0; i < 4; ++i) {
      ASSERT_EQ(EventListener::open(
                    *g, EventsFile::kEvents,
                    [&removal_calls, &selves, i](Group&, EventsFile) {
                      EventListener* self = selves[i].load();
                      if (self && self->removed()) removal_calls.fetch_add(1);
                    },
                    &ls[i]),
                0);
      selves[i].store(ls[i].get());
    }
    std::atomic<bool> stop{false};
    std::thread raiser([&, gr = GroupRef(g.get())] {
      while (!stop.load()) gr->raise(Event::kHigh);
    });
    std::this_thread::sleep_for(milliseconds(round % 5));
    selves[round % 4].store(nullptr);
    ls[round % 4].reset();  // one leaves before the removal
    ASSERT_EQ(ctl.remove(*g), 0);
    stop.store(true);
    raiser.join();
    // At least the three final notifications (a raise's call that began before the removal may
    // also run after it and see the mark).
    EXPECT_GE(removal_calls.load(), 3) << "round " << round;
    for (int i = 0; i < 4; ++i) {
      if (ls[i]) {
        EXPECT_TRUE(ls[i]->removed());
      }
    }
    g = GroupRef();
    EXPECT_EQ(ctl.nr_dying(), 0u) << "round " << round;
  }
}

}  // namespace
}  // namespace memcg
