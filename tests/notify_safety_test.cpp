// memory.events notification against the lifetime of its group: once the last listener of a file
// is gone, no deferred notification of that file may remain queued, or the timer (or the next
// tick) would read the group after it was removed and freed. The deterministic tests interleave
// the removal at the exact point where a raise or a deferred delivery has just deferred a
// notification (internal::g_notify_defer_seam); the stress test races the same steps freely, with
// the SystemClock timer running. Run them under the asan preset too: there a stale entry is also
// reported as a heap-use-after-free by the tick that follows the group's release.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/signal/notify.hpp"

namespace memcg {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

Options manual_options(ManualClock* clock) {
  Options o;
  o.nr_shards = 1;
  o.clock = clock;
  return o;
}

// Waits up to `limit` for `flag`; false on timeout.
bool wait_flag(const std::atomic<bool>& flag, milliseconds limit) {
  const auto end = steady_clock::now() + limit;
  while (!flag.load(std::memory_order_acquire)) {
    if (steady_clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

// Installs the defer seam for the scope of the object: it counts its calls and runs `action` at
// call number `at` (0-based).
class SeamScope {
 public:
  SeamScope(int at, std::function<void()> action) {
    at_ = at;
    action_ = std::move(action);
    calls_.store(0);
    internal::g_notify_defer_seam.store(&SeamScope::run, std::memory_order_release);
  }
  ~SeamScope() {
    internal::g_notify_defer_seam.store(nullptr, std::memory_order_release);
    action_ = nullptr;
  }
  static int calls() { return calls_.load(); }

 private:
  static void run() {
    if (calls_.fetch_add(1) == at_) action_();
  }
  static inline int at_ = 0;
  static inline std::function<void()> action_;
  static inline std::atomic<int> calls_{0};
};

// Destroys `l` on another thread and waits up to `limit` for the destructor to return. Returns
// whether it returned in time; the thread is joined by the caller through `out`.
bool destroy_on_other_thread(std::unique_ptr<EventListener>& l, milliseconds limit,
                             std::thread* out) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  *out = std::thread([&l, done] {
    l.reset();
    done->store(true, std::memory_order_release);
  });
  return wait_flag(*done, limit);
}

// A raise defers a notification (second change within the interval); the file's last listener
// is destroyed just after that decision. Nothing may stay queued for the file once the destructor
// returned; then the group goes, and a later tick must not touch it.
TEST(NotifySafety, RaiseDeferringWhileLastListenerLeavesLeavesNothingQueued) {
  const int64_t queued_before = internal::deferred_notifications_queued();
  ManualClock clock(1'000'000'000);
  Controller ctl(manual_options(&clock));
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  std::unique_ptr<EventListener> l;
  ASSERT_EQ(EventListener::open(*g, EventsFile::kEvents, nullptr, &l), 0);
  g->raise(Event::kMax);  // notified at once: the next change within 10 ms is deferred
  ASSERT_EQ(l->consume(), 1u);

  std::thread destroyer;
  bool destroyed_in_time = false;
  {
    SeamScope seam(0, [&] {
      // Nothing is in flight and no lock is held here: the destructor must return promptly.
      destroyed_in_time = destroy_on_other_thread(l, milliseconds(5000), &destroyer);
    });
    g->raise(Event::kMax);
    EXPECT_EQ(SeamScope::calls(), 1);
  }
  if (destroyer.joinable()) destroyer.join();
  EXPECT_TRUE(destroyed_in_time);
  EXPECT_EQ(l, nullptr);
  EXPECT_EQ(internal::deferred_notifications_queued(), queued_before)
      << "a deferred notification of a file without listeners stayed queued";

  // The group goes; deliveries of the controller must not reach it any more.
  ASSERT_EQ(ctl.remove(*g), 0);
  g = GroupRef();
  EXPECT_EQ(ctl.nr_dying(), 0u);
  clock.advance(2 * kEventNotifyIntervalNs);
  ctl.tick();
  EXPECT_EQ(internal::deferred_notifications_queued(), queued_before);
}

// The requeue path: a deferred delivery finds the file notified again meanwhile (by a callback of
// an earlier file in the same delivery) and queues it again; the file's last listener is destroyed
// just after that decision, while the delivery is still in flight.
TEST(NotifySafety, RequeueWhileLastListenerLeavesLeavesNothingQueued) {
  const int64_t queued_before = internal::deferred_notifications_queued();
  ManualClock clock(1'000'000'000);
  Controller ctl(manual_options(&clock));
  GroupRef a, b;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_EQ(ctl.create("b", &b), 0);
  std::atomic<bool> armed{false};
  std::unique_ptr<EventListener> la, lb;
  // a's callback, once armed, changes b twice: the first is announced at once (its interval is
  // over), the second is deferred again while b's earlier deferred entry is being delivered.
  ASSERT_EQ(EventListener::open(
                *a, EventsFile::kEventsLocal,
                [&](Group&, EventsFile) {
                  if (!armed.exchange(false)) return;
                  b->raise(Event::kHigh);
                  b->raise(Event::kHigh);
                },
                &la),
            0);
  ASSERT_EQ(EventListener::open(*b, EventsFile::kEventsLocal, nullptr, &lb), 0);
  // Both files notified once, then a deferred change each (a queued before b).
  a->raise(Event::kHigh);
  b->raise(Event::kHigh);
  a->raise(Event::kHigh);
  b->raise(Event::kHigh);
  ASSERT_EQ(internal::deferred_notifications_queued(), queued_before + 2);
  clock.advance(kEventNotifyIntervalNs);
  armed.store(true);

  std::thread destroyer;
  {
    // Seam call 0: the callback's second change of b, deferred; call 1: b's requeue.
    SeamScope seam(1, [&] {
      // b's delivery is in flight on this thread: the destructor waits for it to end, so give it
      // time to get past its queue work, then let the delivery finish.
      destroy_on_other_thread(lb, milliseconds(300), &destroyer);
    });
    ctl.tick();  // delivers a (whose callback changes b twice), then b: requeued
    EXPECT_EQ(SeamScope::calls(), 2) << "the requeue path was not taken";
  }
  if (destroyer.joinable()) destroyer.join();
  EXPECT_EQ(lb, nullptr);
  la.reset();
  EXPECT_EQ(internal::deferred_notifications_queued(), queued_before)
      << "a deferred notification of a file without listeners stayed queued";

  ASSERT_EQ(ctl.remove(*b), 0);
  b = GroupRef();
  EXPECT_EQ(ctl.nr_dying(), 0u);
  clock.advance(2 * kEventNotifyIntervalNs);
  ctl.tick();
  a->raise(Event::kHigh);
  EXPECT_EQ(internal::deferred_notifications_queued(), queued_before);
}

// Free race on the SystemClock: raisers hammer groups while a churn thread gives each group
// listeners, destroys them, removes the group and drops its reference. The timer thread runs
// throughout. Bounded by a deadline; the checks are the sanitizers' plus the final counts.
TEST(NotifySafety, ListenersAndGroupsComeAndGoWhileRaisesDefer) {
  const int64_t queued_before = internal::deferred_notifications_queued();
  Options o;
  o.nr_shards = 1;
  Controller ctl(o);
  constexpr int kSlots = 4;
  struct Slot {
    std::mutex mu;
    GroupRef group;
  };
  Slot slots[kSlots];
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> raises{0}, notified{0};
  std::vector<std::thread> raisers;
  for (int t = 0; t < 2; ++t) {
    raisers.emplace_back([&, t] {
      std::mt19937 rng(t);
      while (!stop.load(std::memory_order_relaxed)) {
        GroupRef g;
        {
          Slot& s = slots[rng() % kSlots];
          std::lock_guard lock(s.mu);
          g = s.group;
        }
        if (!g) {
          std::this_thread::yield();
          continue;
        }
        g->raise(rng() % 2 ? Event::kHigh : Event::kMax);
        raises.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  const auto deadline = steady_clock::now() + milliseconds(1500);
  std::mt19937 rng(7);
  int rounds = 0;
  while (steady_clock::now() < deadline) {
    const int i = rounds % kSlots;
    const std::string name = "g" + std::to_string(rounds);
    GroupRef g;
    ASSERT_EQ(ctl.create(name, &g), 0);
    std::vector<std::unique_ptr<EventListener>> ls(1 + rng() % 3);
    for (auto& l : ls) {
      const EventsFile f = rng() % 2 ? EventsFile::kEvents : EventsFile::kEventsLocal;
      ASSERT_EQ(EventListener::open(
                    *g, f, [&](Group&, EventsFile) { notified.fetch_add(1); }, &l),
                0);
    }
    {
      std::lock_guard lock(slots[i].mu);
      slots[i].group = g;
    }
    // Let a few raises land (some notified at once, most deferred), sometimes past an interval.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3 == 0 ? 10'500 : rng() % 200));
    ls.clear();  // the last listener of each file goes while raises still defer
    {
      std::lock_guard lock(slots[i].mu);
      slots[i].group = GroupRef();
    }
    ASSERT_EQ(ctl.remove(*g), 0);
    g = GroupRef();  // freed here or by the raiser that holds it last
    ++rounds;
  }
  stop.store(true);
  for (auto& t : raisers) t.join();
  EXPECT_GT(rounds, 10);
  EXPECT_GT(raises.load(), 0u);
  EXPECT_GT(notified.load(), 0u);
  EXPECT_FALSE(internal::event_listeners_exist());
  EXPECT_EQ(internal::deferred_notifications_queued(), queued_before);
  EXPECT_EQ(ctl.nr_dying(), 0u);
  // Give the timer an interval to reach anything left behind (a use-after-free under ASan).
  std::this_thread::sleep_for(milliseconds(25));
}

}  // namespace
}  // namespace memcg
