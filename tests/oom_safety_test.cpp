// The OOM killer inside a host process: kill callbacks and event listeners run without library
// locks (they may destroy members, join threads, use the library), a killer waits for a victim
// that releases asynchronously, a throwing callback fails only its kill, and badness follows the
// kernel's formula (events_oom.md). Every scenario that could hang runs under a watchdog.
#include "watchdog.hpp"
#include "memcg/core/oom/oom.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/files/files.hpp"
#include "memcg/core/signal/notify.hpp"
#include "memcg/percpu/internal/stock.hpp"

namespace memcg {
namespace {

using testing::Watchdog;

using namespace std::chrono_literals;

constexpr int64_t kMiB = 256;  // units of 4 KiB per MiB


struct Sim {
  explicit Sim(Clock* clock = nullptr) : ctl(options(clock)) {}
  static Options options(Clock* clock) {
    Options o;
    o.nr_shards = 1;
    if (clock) o.clock = clock;
    return o;
  }
  GroupRef make(const char* path) {
    GroupRef g;
    if (ctl.create(path, &g) != 0) throw std::runtime_error(path);
    return g;
  }
  // memory.current without what sits in the stocks.
  int64_t usage(const GroupRef& g) {
    ctl.stock().drain_all(&ctl.root());
    return g->memory().usage();
  }
  Controller ctl;
};

void release_all(Member& m) {
  m.uncharge(m.charged());
}

// Charges `units` one unit at a time (small charges: the OOM killer may run); false at the first
// failure.
bool charge_units(Member& m, int64_t units) {
  for (int64_t i = 0; i < units; ++i)
    if (!charged(m.charge(1))) return false;
  return true;
}

// ---- callbacks and listeners run without the OOM lock ---------------------------------------

// The shape: the kill callback cancels a query and joins its worker, whose teardown
// destroys a member. Under the OOM lock the worker's ~Member waited for the lock for ever.
TEST(OomCallbacks, MayJoinAWorkerWhoseTeardownDestroysAMember) {
  Watchdog dog("kill callback joining a worker that destroys a member");
  Sim s;
  GroupRef d = s.make("d"), q = s.make("d/q");
  d->set_max(uint64_t{4} << 20);
  std::atomic<bool> cancel{false};
  auto scratch = std::make_unique<Member>(*q, "scratch", release_all);
  std::thread worker([&] {
    while (!cancel.load()) std::this_thread::sleep_for(1ms);
    scratch.reset();  // teardown
  });
  Member query(*q, "query", [&](Member& m) {
    cancel.store(true);
    worker.join();
    release_all(m);
  });
  Member other(*d, "other", release_all);
  ASSERT_TRUE(charge_units(query, 3 * kMiB));
  ASSERT_TRUE(charge_units(other, 2 * kMiB));  // the OOM kills the query
  EXPECT_TRUE(query.killed());
  EXPECT_FALSE(other.killed());
  EXPECT_TRUE(scratch == nullptr);
  EXPECT_FALSE(worker.joinable());
  EXPECT_EQ(q->events_local().get(Event::kOomKill), 1u);
}

// The worker's teardown charges into an OOM of its own (another domain of the controller).
TEST(OomCallbacks, MayJoinAWorkerThatChargesIntoAnotherOom) {
  Watchdog dog("kill callback joining a worker that runs an OOM");
  Sim s;
  GroupRef d = s.make("d"), e = s.make("e");
  d->set_max(uint64_t{4} << 20);
  e->set_max(uint64_t{1} << 20);
  Member e_big(*e, "e_big", release_all);
  Member e_worker(*e, "e_worker", release_all);
  ASSERT_TRUE(charge_units(e_big, kMiB / 2 + kMiB / 8));
  ASSERT_TRUE(charge_units(e_worker, kMiB / 8));
  std::atomic<bool> cancel{false};
  bool worker_charged = false;
  std::thread worker([&] {
    while (!cancel.load()) std::this_thread::sleep_for(1ms);
    worker_charged = charge_units(e_worker, kMiB / 2);  // past e's max: e_big is killed
  });
  Member query(*d, "query", [&](Member& m) {
    cancel.store(true);
    worker.join();
    release_all(m);
  });
  Member other(*d, "other", release_all);
  ASSERT_TRUE(charge_units(query, 3 * kMiB));
  ASSERT_TRUE(charge_units(other, 2 * kMiB));
  EXPECT_TRUE(query.killed());
  EXPECT_TRUE(worker_charged);
  EXPECT_TRUE(e_big.killed());
  EXPECT_FALSE(e_worker.killed());
}

// memory.oom.group: a member's callback destroys a member of the group that comes later in the
// walk, which the group kill then skips (it used to read the freed member).
TEST(OomCallbacks, GroupKillSkipsAMemberDestroyedByAnEarlierCallback) {
  Watchdog dog("group kill");
  Sim s;
  GroupRef d = s.make("d"), p = s.make("d/p");
  d->set_max(uint64_t{4} << 20);
  p->set_oom_group(true);
  int a_calls = 0, c_calls = 0;
  std::unique_ptr<Member> c;
  Member a(*p, "a", [&](Member& m) { ++a_calls, release_all(m); });
  Member b(*p, "b", [&](Member& m) {
    c.reset();
    release_all(m);
  });
  c = std::make_unique<Member>(*p, "c", [&](Member& m) { ++c_calls, release_all(m); });
  Member charger(*d, "charger", release_all, Member::kImmune);
  ASSERT_TRUE(charge_units(a, 2 * kMiB));  // the largest: the victim
  ASSERT_TRUE(charge_units(b, kMiB));
  ASSERT_TRUE(charge_units(*c, kMiB / 2));
  ASSERT_TRUE(charge_units(charger, kMiB));  // the OOM kills all of p
  EXPECT_TRUE(c == nullptr);
  EXPECT_EQ(a_calls, 1);
  EXPECT_EQ(c_calls, 0);
  EXPECT_TRUE(a.killed() && b.killed());
  EXPECT_EQ(p->events_local().get(Event::kOomGroupKill), 1u);
  EXPECT_EQ(p->events_local().get(Event::kOomKill), 2u);
  const OomReport r = OomKiller::last_report(s.ctl);
  EXPECT_EQ(r.killed, (std::vector<std::string>{"a", "b"}));
}

// The callback destroys the member whose charge triggered the OOM, on the charging thread: the
// charge fails and leaves nothing charged (it used to read the freed member's "killed" flag).
TEST(OomCallbacks, CallbackMayDestroyTheChargingMember) {
  Watchdog dog("callback destroying the charging member");
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(uint64_t{1} << 20);
  std::unique_ptr<Member> m;
  m = std::make_unique<Member>(*d, "m", [&](Member&) { m.reset(); });
  Member* raw = m.get();
  ChargeStatus last = ChargeStatus::kOk;
  for (int64_t i = 0; i < 2 * kMiB && m; ++i) last = raw->charge(1);
  EXPECT_TRUE(m == nullptr);
  EXPECT_EQ(last, ChargeStatus::kNoMem);
  EXPECT_EQ(s.usage(d), 0);
  EXPECT_EQ(d->events_local().get(Event::kOomKill), 1u);
}

// The same with a charge that cannot fail (it is forced past max), and the group removed by the
// callback as well: the charge still uses the group after the callback, then gives the units
// back rather than leaving them charged to a member that no longer exists.
TEST(OomCallbacks, NoFailChargeOfAMemberDestroyedWithItsGroup) {
  Watchdog dog("nofail charge of a destroyed member");
  Sim s;
  GroupRef parent = s.make("p");
  GroupRef d = s.make("p/d");
  d->set_max(uint64_t{1} << 20);
  std::unique_ptr<Member> m;
  int removed = -1;
  m = std::make_unique<Member>(*d, "m", [&](Member&) {
    m.reset();
    removed = s.ctl.remove("p/d");
  });
  Member* raw = m.get();
  d = GroupRef();  // the member holds the last reference but the tree's
  ASSERT_TRUE(charge_units(*raw, kMiB));
  EXPECT_EQ(raw->charge(1, kMayBlock | kNoFail), ChargeStatus::kNoMem);
  EXPECT_TRUE(m == nullptr);
  EXPECT_EQ(removed, 0);
  EXPECT_EQ(s.usage(parent), 0);
}

// The usual kill: the callback cancels the victim's query and joins its worker, whose teardown
// destroys the victim's own Member while the callback still runs on the charging thread. Nothing
// may wait for the callback there (a deadlock), and the killer must not touch the destroyed
// member afterwards (ASan).
TEST(OomCallbacks, MayJoinAWorkerThatDestroysTheVictim) {
  Watchdog dog("kill callback joining the worker that destroys the victim");
  Sim s;
  GroupRef d = s.make("d"), q = s.make("d/q");
  d->set_max(uint64_t{2} << 20);
  std::atomic<bool> cancel{false};
  std::unique_ptr<Member> victim;
  std::thread worker;
  victim = std::make_unique<Member>(*q, "victim", [&](Member&) {
    cancel.store(true);
    worker.join();  // the worker destroys the member this callback was called for
  });
  ASSERT_TRUE(charge_units(*victim, kMiB + kMiB / 2));
  worker = std::thread([&] {
    while (!cancel.load()) std::this_thread::sleep_for(1ms);
    victim.reset();  // the query's teardown: its memory goes back with its member
  });
  Member charger(*d, "charger", release_all, Member::kImmune);
  EXPECT_TRUE(charge_units(charger, kMiB));
  EXPECT_TRUE(victim == nullptr);
  EXPECT_EQ(q->events_local().get(Event::kOomKill), 1u);
  EXPECT_EQ(s.usage(d), kMiB);
  EXPECT_EQ(OomKiller::last_report(s.ctl).victim, "victim");
}

// An oom_kill listener may wait for a thread that uses the OOM killer (here: its report). It
// listens to the victim's own group, where nothing but oom_kill happens, so that the
// notification is delivered at once, on the killing thread (not deferred by the rate limit).
TEST(OomCallbacks, OomKillListenerMayWaitForAThreadUsingTheKiller) {
  Watchdog dog("oom_kill listener");
  Sim s;
  GroupRef d = s.make("d"), v = s.make("d/v");
  d->set_max(uint64_t{2} << 20);
  std::atomic<int> reports{0};
  std::unique_ptr<EventListener> listener;
  ASSERT_EQ(EventListener::open(
                *v, EventsFile::kEventsLocal,
                [&](Group&, EventsFile) {
                  std::thread t([&] {
                    OomKiller::last_report(s.ctl);
                    reports.fetch_add(1);
                  });
                  t.join();
                },
                &listener),
            0);
  Member victim(*v, "victim", release_all);
  Member charger(*d, "charger", release_all, Member::kImmune);
  ASSERT_TRUE(charge_units(victim, kMiB + kMiB / 2));
  ASSERT_TRUE(charge_units(charger, kMiB));
  EXPECT_TRUE(victim.killed());
  EXPECT_EQ(reports.load(), 1);
  listener.reset();
}

// ---- waiting for a victim that releases later -------------------------------------------------

// The callback hands the release to another thread (50 ms later): the killer waits for it
// rather than killing the next member, here the charging one.
TEST(OomWait, AsynchronousReleaseKillsOnlyOneVictim) {
  Watchdog dog("waiting for an asynchronous release");
  Sim s;  // the system clock: the release happens in real time
  GroupRef d = s.make("d");
  d->set_max(uint64_t{4} << 20);
  std::thread releaser;
  Member big(*d, "big", [&](Member& m) {
    releaser = std::thread([&m] {
      std::this_thread::sleep_for(50ms);
      release_all(m);
    });
  });
  Member small(*d, "small", release_all);
  ASSERT_TRUE(charge_units(big, 3 * kMiB));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(charge_units(small, 2 * kMiB));
  const auto waited = std::chrono::steady_clock::now() - start;
  releaser.join();
  EXPECT_TRUE(big.killed());
  EXPECT_FALSE(small.killed());
  EXPECT_EQ(d->events_local().get(Event::kOomKill), 1u);
  EXPECT_GE(waited, 40ms);
  EXPECT_LT(waited, std::chrono::nanoseconds(kOomVictimWaitNs));
}

// A victim that never releases holds back the next choice for kOomVictimWaitNs on the
// controller's clock, then the next victim is chosen.
TEST(OomWait, AVictimThatNeverReleasesIsGivenUpAfterTheTimeout) {
  Watchdog dog("waiting for a victim that never releases");
  ManualClock clock;
  Sim s(&clock);
  GroupRef d = s.make("d");
  d->set_max(uint64_t{4} << 20);
  Member stuck(*d, "stuck", nullptr);  // killing it frees nothing
  Member next(*d, "next", release_all);
  Member charger(*d, "charger", release_all, Member::kImmune);
  ASSERT_TRUE(charge_units(stuck, 2 * kMiB));
  ASSERT_TRUE(charge_units(next, kMiB + kMiB / 2));
  ASSERT_TRUE(charge_units(charger, kMiB));
  EXPECT_TRUE(stuck.killed());
  EXPECT_TRUE(next.killed());
  EXPECT_EQ(d->events_local().get(Event::kOomKill), 2u);
  // It waited the whole timeout (in steps), and not much longer.
  EXPECT_GE(clock.total_slept_ns(), kOomVictimWaitNs);
  EXPECT_LE(clock.total_slept_ns(), kOomVictimWaitNs + 10'000'000);
  EXPECT_EQ(OomKiller::last_report(s.ctl).victim, "next");
}

// A callback later in a group kill charges into the same domain while the group's first victim,
// whose callback has returned, is still releasing: that charge waits for it too, rather than
// killing a bystander.
TEST(OomWait, ACallbackChargingDuringAGroupKillWaitsForAnEarlierVictim) {
  Watchdog dog("charge from a callback during a group kill");
  Sim s;
  GroupRef d = s.make("d"), p = s.make("d/p");
  d->set_max(uint64_t{4} << 20);
  p->set_oom_group(true);
  std::thread releaser;
  Member charger(*d, "charger", release_all, Member::kImmune);
  bool charged_in_callback = false;
  Member a(*p, "a", [&](Member& m) {
    releaser = std::thread([&m] {
      std::this_thread::sleep_for(50ms);
      release_all(m);
    });
  });
  Member b(*p, "b", [&](Member& m) {
    release_all(m);
    charged_in_callback = charge_units(charger, kMiB);
  });
  Member bystander(*d, "bystander", release_all);
  ASSERT_TRUE(charge_units(a, 2 * kMiB));
  ASSERT_TRUE(charge_units(b, kMiB / 2));
  ASSERT_TRUE(charge_units(bystander, kMiB / 2));
  ASSERT_TRUE(charge_units(charger, kMiB + kMiB / 4));  // the OOM kills a and b
  ASSERT_TRUE(releaser.joinable());
  releaser.join();
  EXPECT_TRUE(charged_in_callback);
  EXPECT_TRUE(a.killed() && b.killed());
  EXPECT_FALSE(bystander.killed());
}

// A memory.max write below usage waits for its victim the same way.
TEST(OomWait, WriteMaxWaitsForAnAsynchronousVictim) {
  Watchdog dog("memory.max write waiting for a victim");
  Sim s;
  GroupRef g = s.make("g");
  std::thread releaser;
  Member a(*g, "a", [&](Member& m) {
    releaser = std::thread([&m] {
      std::this_thread::sleep_for(50ms);
      release_all(m);
    });
  });
  Member b(*g, "b", release_all);
  ASSERT_TRUE(charge_units(a, 3 * kMiB));
  ASSERT_TRUE(charge_units(b, kMiB));
  ASSERT_EQ(write_file(*g, "memory.max", "2M"), 0);
  releaser.join();
  EXPECT_TRUE(a.killed());
  EXPECT_FALSE(b.killed());
  EXPECT_LE(s.usage(g), 2 * kMiB);
  EXPECT_EQ(g->events_local().get(Event::kOomKill), 1u);
}

// ---- a callback that throws ----------------------------------------------------------------

TEST(OomThrow, AThrowingCallbackFailsItsKillAndTheNextCandidateDies) {
  Watchdog dog("throwing callback");
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(uint64_t{4} << 20);
  int thrower_calls = 0;
  Member thrower(*d, "thrower", [&](Member&) {
    ++thrower_calls;
    throw std::runtime_error("busy");
  });
  Member next(*d, "next", release_all);
  Member charger(*d, "charger", release_all, Member::kImmune);
  ASSERT_TRUE(charge_units(thrower, 3 * kMiB));
  ASSERT_TRUE(charge_units(next, kMiB / 2));
  ASSERT_TRUE(charge_units(charger, kMiB / 2));
  EXPECT_TRUE(charge_units(charger, kMiB / 4));  // one OOM: thrower fails, next dies
  EXPECT_EQ(thrower_calls, 1);
  EXPECT_FALSE(thrower.killed());
  EXPECT_TRUE(next.killed());
  EXPECT_EQ(d->events_local().get(Event::kOomKill), 1u);
  const OomReport r = OomKiller::last_report(s.ctl);
  ASSERT_EQ(r.failed.size(), 1u);
  EXPECT_EQ(r.failed[0].member, "thrower");
  EXPECT_EQ(r.failed[0].error, "busy");
  EXPECT_EQ(r.victim, "next");
  EXPECT_EQ(r.killed, std::vector<std::string>{"next"});
  EXPECT_NE(r.format().find("kill of thrower failed: its callback threw: busy"), std::string::npos)
      << r.format();
  // The survivor is still a candidate for a later OOM.
  EXPECT_FALSE(charge_units(charger, 2 * kMiB));
  EXPECT_EQ(thrower_calls, 2);
}

TEST(OomThrow, WhenEveryCallbackThrowsTheChargeFails) {
  Watchdog dog("every callback throwing");
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(uint64_t{1} << 20);
  auto throws = [](Member&) { throw 42; };
  Member a(*d, "a", throws), b(*d, "b", throws);
  ASSERT_TRUE(charge_units(a, kMiB / 2));
  ASSERT_TRUE(charge_units(b, kMiB / 4));
  EXPECT_FALSE(charge_units(b, kMiB / 2));
  EXPECT_FALSE(a.killed() || b.killed());
  EXPECT_EQ(d->events_local().get(Event::kOomKill), 0u);
  const OomReport r = OomKiller::last_report(s.ctl);
  ASSERT_EQ(r.failed.size(), 2u);
  EXPECT_EQ(r.failed[0].error, "unknown exception");
  EXPECT_TRUE(r.victim.empty());
  EXPECT_NE(r.format().find("no killable member"), std::string::npos);
}

TEST(OomThrow, AGroupKillGoesOnPastAThrowingMember) {
  Watchdog dog("group kill with a throwing member");
  Sim s;
  GroupRef d = s.make("d"), p = s.make("d/p");
  d->set_max(uint64_t{4} << 20);
  p->set_oom_group(true);
  Member a(*p, "a", release_all);
  Member t(*p, "t", [](Member&) { throw std::runtime_error("no"); });
  Member c(*p, "c", release_all);
  Member charger(*d, "charger", release_all, Member::kImmune);
  ASSERT_TRUE(charge_units(a, 2 * kMiB));
  ASSERT_TRUE(charge_units(t, kMiB / 2));
  ASSERT_TRUE(charge_units(c, kMiB / 2));
  ASSERT_TRUE(charge_units(charger, kMiB + kMiB / 2));
  EXPECT_TRUE(a.killed() && c.killed());
  EXPECT_FALSE(t.killed());
  EXPECT_EQ(p->events_local().get(Event::kOomKill), 2u);
  EXPECT_EQ(p->events_local().get(Event::kOomGroupKill), 1u);
  const OomReport r = OomKiller::last_report(s.ctl);
  ASSERT_EQ(r.failed.size(), 1u);
  EXPECT_EQ(r.failed[0].member, "t");
}

// ---- badness: the kernel's formula -----------------------------------------------------------

// points = charged + adj x (total / 1000), negatives kept. Here total = max = 2560 units, so
// adj counts 2 units per point: -500 -> 256 - 1000 = -744, -900 -> 256 - 1800 = -1544,
// +300 -> 100 + 600 = 700 (adj x total / 1000 would give 868). Both negative scores used to
// clamp to 1, and the tie went to the more protected member, which joined first.
TEST(OomBadness, NegativeScoresKeepTheirOrder) {
  Sim s;
  GroupRef d = s.make("d");
  d->set_max(uint64_t{10} << 20);
  Member p900(*d, "p900", release_all, -900);
  Member p500(*d, "p500", release_all, -500);
  Member p300(*d, "plus300", release_all, 300);
  Member charger(*d, "charger", release_all, Member::kImmune);
  ASSERT_TRUE(charge_units(p900, kMiB));
  ASSERT_TRUE(charge_units(p500, kMiB));
  ASSERT_TRUE(charge_units(p300, 100));
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 10 * kMiB, &r));  // more than the domain could hold
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].member, "plus300");
  EXPECT_EQ(r.top[0].badness, 700);
  EXPECT_EQ(r.top[1].member, "p500");
  EXPECT_EQ(r.top[1].badness, -744);
  EXPECT_EQ(r.top[2].member, "p900");
  EXPECT_EQ(r.top[2].badness, -1544);
  EXPECT_TRUE(p300.killed());
  // With the positive one gone, the less protected of the two negative ones dies.
  ASSERT_TRUE(OomKiller::kill(*d, 10 * kMiB, &r));
  EXPECT_EQ(r.victim, "p500");
  EXPECT_FALSE(p900.killed());
}

// Equal badness: the member later in walk order (groups in pre-order, then joining order).
TEST(OomBadness, TiesGoToTheLaterMember) {
  Sim s;
  GroupRef d = s.make("d"), x = s.make("d/x"), y = s.make("d/y");
  d->set_max(uint64_t{10} << 20);
  Member a(*x, "a", release_all), b(*x, "b", release_all), c(*y, "c", release_all);
  Member e(*x, "e", release_all);
  for (Member* m : {&a, &b, &c, &e}) ASSERT_TRUE(charge_units(*m, kMiB));
  OomReport r;
  ASSERT_TRUE(OomKiller::kill(*d, 10 * kMiB, &r));
  EXPECT_EQ(r.victim, "c");  // y comes after x in the walk
  ASSERT_EQ(r.top.size(), 4u);
  EXPECT_EQ(r.top[1].member, "e");
  EXPECT_EQ(r.top[2].member, "b");
  EXPECT_EQ(r.top[3].member, "a");
  ASSERT_TRUE(OomKiller::kill(*d, 10 * kMiB, &r));
  EXPECT_EQ(r.victim, "e");  // within x, the later to join
}

}  // namespace
}  // namespace memcg
