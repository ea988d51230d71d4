// EventBus (memcg/core/signal/event_bus.hpp): ids and order, resuming after an id, the gap event,
// filters, the producers inside the library, slow subscribers dropped with a counted reason while
// charges go on, the subscriber bound, and subscribers racing producers (run under TSan).
#include "memcg/core/signal/event_bus.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/tree/controller.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;

Options one_shard() {
  Options o;
  o.nr_shards = 1;
  return o;
}

uint64_t publish_n(EventBus& bus, int n, const char* group = "a") {
  uint64_t last = 0;
  for (int i = 0; i < n; ++i)
    last = bus.publish(BusEventType::kAction, group, "{\"i\":" + std::to_string(i) + "}");
  return last;
}

std::vector<BusEvent> take_all(Subscription& s) {
  std::vector<BusEvent> out;
  while (s.take(&out) != 0) {
  }
  return out;
}

TEST(EventBus, NothingIsRecordedBeforeItIsEnabled) {
  Controller ctl(one_shard());
  EXPECT_FALSE(ctl.events().recording());
  EXPECT_EQ(ctl.events().publish(BusEventType::kAction, "a", "{}"), 0u);
  GroupRef a;
  ASSERT_EQ(ctl.create("a", &a), 0);
  a->raise(Event::kHigh);
  const EventBusStats st = ctl.events().stats();
  EXPECT_EQ(st.published, 0u);
  EXPECT_EQ(st.held, 0u);
  EXPECT_EQ(st.last_id, 0u);
}

TEST(EventBus, IdsAreConsecutiveInPublicationOrder) {
  Controller ctl(one_shard());
  EventBus& bus = ctl.events();
  ASSERT_EQ(bus.enable(), 0);
  const uint64_t first = bus.publish(BusEventType::kAction, "a", "{\"n\":1}");
  ASSERT_NE(first, 0u);
  const uint64_t last = publish_n(bus, 9);
  EXPECT_EQ(last, first + 9);
  const std::vector<BusEvent> all = bus.snapshot();
  ASSERT_EQ(all.size(), 10u);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].id, first + i);
    EXPECT_EQ(all[i].type, BusEventType::kAction);
    EXPECT_EQ(all[i].group, "a");
    EXPECT_GT(all[i].time_ns, uint64_t{1'600'000'000} * 1'000'000'000);  // wall clock
    if (i > 0) {
      EXPECT_GE(all[i].time_ns, all[i - 1].time_ns);
    }
  }
  EXPECT_EQ(all[0].payload, "{\"n\":1}");
  const EventBusStats st = bus.stats();
  EXPECT_EQ(st.first_id, first);
  EXPECT_EQ(st.last_id, last);
  EXPECT_EQ(st.published, 10u);
}

TEST(EventBus, MalformedPayloadsAreRefusedAndLargeOnesTruncated) {
  Controller ctl(one_shard());
  EventBus& bus = ctl.events();
  EventBusOptions o;
  o.max_payload_bytes = 256;
  ASSERT_EQ(bus.enable(o), 0);
  EXPECT_EQ(bus.publish(BusEventType::kAction, "a", ""), 0u);
  EXPECT_EQ(bus.publish(BusEventType::kAction, "a", "not json"), 0u);
  EXPECT_EQ(bus.publish(BusEventType::kAction, "a", "{\"a\":\n1}"), 0u);  // would split an SSE line
  const std::string big = "{\"x\":\"" + std::string(1000, 'y') + "\"}";
  ASSERT_NE(bus.publish(BusEventType::kAction, "a", big), 0u);
  const std::vector<BusEvent> all = bus.snapshot();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].payload, "{\"truncated\":true,\"bytes\":1008}");
  EXPECT_EQ(bus.stats().truncated, 1u);
  // Options out of range are refused; once enabled, later options are ignored.
  Controller other(one_shard());
  EventBusOptions bad;
  bad.capacity = 1;
  EXPECT_EQ(other.events().enable(bad), EINVAL);
  EXPECT_FALSE(other.events().recording());
}

TEST(EventBus, TheRingIsBoundedInEventsAndBytes) {
  Controller ctl(one_shard());
  EventBus& bus = ctl.events();
  EventBusOptions o;
  o.capacity = 16;
  o.max_bytes = 64 << 10;
  ASSERT_EQ(bus.enable(o), 0);
  const uint64_t last = publish_n(bus, 100);
  EventBusStats st = bus.stats();
  EXPECT_EQ(st.held, 16u);
  EXPECT_EQ(st.evicted, 84u);
  EXPECT_EQ(st.first_id, last - 15);
  // Bytes: 40 events of ~5 KB in a 64 KiB budget: 13 fit.
  const std::string chunk = "{\"x\":\"" + std::string(5000, 'z') + "\"}";
  for (int i = 0; i < 40; ++i) ASSERT_NE(bus.publish(BusEventType::kAction, "a", chunk), 0u);
  st = bus.stats();
  EXPECT_LE(st.held_bytes, size_t{64} << 10);
  EXPECT_EQ(st.held, 13u);
}

TEST(EventBus, ASubscriberResumesAfterAnIdTheRingHolds) {
  Controller ctl(one_shard());
  EventBus& bus = ctl.events();
  ASSERT_EQ(bus.enable(), 0);
  const uint64_t last = publish_n(bus, 20);
  std::unique_ptr<Subscription> s;
  ASSERT_EQ(bus.subscribe({}, last - 10, 0, nullptr, &s), 0);
  std::vector<BusEvent> got = take_all(*s);
  ASSERT_EQ(got.size(), 10u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].id, last - 9 + i);
  EXPECT_EQ(s->cursor(), last);
  // From now on, only new events; 0 means "from now".
  std::unique_ptr<Subscription> now;
  ASSERT_EQ(bus.subscribe({}, 0, 0, nullptr, &now), 0);
  EXPECT_TRUE(take_all(*now).empty());
  const uint64_t next = publish_n(bus, 1);
  got = take_all(*now);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, next);
  EXPECT_EQ(take_all(*s).size(), 1u);
}

TEST(EventBus, AnIdTheRingNoLongerHoldsGivesAGapEventFirst) {
  Controller ctl(one_shard());
  EventBus& bus = ctl.events();
  EventBusOptions o;
  o.capacity = 16;
  ASSERT_EQ(bus.enable(o), 0);
  const uint64_t first = bus.publish(BusEventType::kAction, "a", "{}");
  const uint64_t last = publish_n(bus, 99);
  std::unique_ptr<Subscription> s;
  ASSERT_EQ(bus.subscribe({}, first + 1, 0, nullptr, &s), 0);
  const std::vector<BusEvent> got = take_all(*s);
  ASSERT_EQ(got.size(), 17u);
  EXPECT_EQ(got[0].type, BusEventType::kGap);
  EXPECT_EQ(got[0].id, last - 16);  // resuming after it gives the oldest held
  EXPECT_NE(got[0].payload.find("\"first_missed\":" + std::to_string(first + 2)),
            std::string::npos)
      << got[0].payload;
  EXPECT_NE(got[0].payload.find("\"last_missed\":" + std::to_string(last - 16)),
            std::string::npos);
  EXPECT_NE(got[0].payload.find("\"reason\":\"evicted\""), std::string::npos);
  for (size_t i = 1; i < got.size(); ++i) EXPECT_EQ(got[i].id, last - 16 + i);
  // An id this bus never gave (an earlier run's, or made up): a gap, then new events only.
  std::unique_ptr<Subscription> ahead;
  ASSERT_EQ(bus.subscribe({}, last + 1000, 0, nullptr, &ahead), 0);
  const std::vector<BusEvent> g2 = take_all(*ahead);
  ASSERT_EQ(g2.size(), 1u);
  EXPECT_EQ(g2[0].type, BusEventType::kGap);
  EXPECT_EQ(g2[0].id, last);
  EXPECT_NE(g2[0].payload.find("\"reason\":\"unknown_id\""), std::string::npos);
}

TEST(EventBus, FiltersBySubtreeAndType) {
  Controller ctl(one_shard());
  EventBus& bus = ctl.events();
  ASSERT_EQ(bus.enable(), 0);
  BusFilter f;
  f.subtree = "/a/";
  f.types = bus_type_bit(BusEventType::kAction) | bus_type_bit(BusEventType::kWrite);
  std::unique_ptr<Subscription> s;
  ASSERT_EQ(bus.subscribe(f, 0, 0, nullptr, &s), 0);
  bus.publish(BusEventType::kAction, "a", "{}");
  bus.publish(BusEventType::kAction, "a/b/c", "{}");
  bus.publish(BusEventType::kAction, "ab", "{}");      // not under a
  bus.publish(BusEventType::kAction, "/", "{}");       // the root: not under a
  bus.publish(BusEventType::kBudget, "a", "{}");       // another type
  bus.publish(BusEventType::kWrite, "a/x", "{}");
  const std::vector<BusEvent> got = take_all(*s);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].group, "a");
  EXPECT_EQ(got[1].group, "a/b/c");
  EXPECT_EQ(got[2].type, BusEventType::kWrite);
  // The cursor passed the skipped events too: nothing is pending.
  EXPECT_EQ(s->cursor(), bus.stats().last_id);
  // Bad subtrees are refused.
  for (const char* bad : {"a/../b", "a//b", "./a", "a b", "a\n"}) {
    BusFilter b;
    b.subtree = bad;
    std::unique_ptr<Subscription> x;
    EXPECT_EQ(bus.subscribe(b, 0, 0, nullptr, &x), EINVAL) << bad;
  }
  BusEventType t;
  EXPECT_TRUE(parse_bus_event_type("memory_event", &t));
  EXPECT_EQ(t, BusEventType::kMemoryEvent);
  EXPECT_FALSE(parse_bus_event_type("memory", &t));
  for (int i = 0; i < kNumBusEventTypes; ++i) {
    ASSERT_TRUE(parse_bus_event_type(bus_event_type_name(static_cast<BusEventType>(i)), &t));
    EXPECT_EQ(static_cast<int>(t), i);
  }
}

TEST(EventBus, TheLibraryPublishesGroupsAndMemoryEvents) {
  Controller ctl(one_shard());
  ASSERT_EQ(ctl.events().enable(), 0);
  GroupRef a, b;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_EQ(ctl.create("a/b", &b), 0);
  b->raise(Event::kHigh);
  b->raise(Event::kHigh);
  ASSERT_EQ(ctl.remove(*b), 0);
  const std::vector<BusEvent> all = ctl.events().snapshot();
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[0].type, BusEventType::kGroupCreated);
  EXPECT_EQ(all[0].group, "a");
  EXPECT_EQ(all[1].type, BusEventType::kGroupCreated);
  EXPECT_EQ(all[1].group, "a/b");
  EXPECT_EQ(all[2].type, BusEventType::kMemoryEvent);
  EXPECT_EQ(all[2].group, "a/b");
  EXPECT_EQ(all[2].payload, "{\"counter\":\"high\",\"local\":1,\"value\":1}");
  EXPECT_EQ(all[3].payload, "{\"counter\":\"high\",\"local\":2,\"value\":2}");
  EXPECT_EQ(all[4].type, BusEventType::kGroupRemoved);
  EXPECT_EQ(all[4].group, "a/b");
}

void release_all(Member& m) { m.uncharge(m.charged()); }

TEST(EventBus, AnOomKillPublishesItsReportAndItsEvents) {
  Controller ctl(one_shard());
  ASSERT_EQ(ctl.events().enable(), 0);
  GroupRef d;
  ASSERT_EQ(ctl.create("d", &d), 0);
  d->set_max(100 * ctl.unit_size());
  Member big(*d, "big", release_all);
  Member charger(*d, "charger", release_all, Member::kImmune);
  for (int i = 0; i < 80; ++i) ASSERT_TRUE(charged(big.charge(1)));
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(charged(charger.charge(1)));  // past 100: big dies
  BusFilter f;
  f.types = bus_type_bit(BusEventType::kOom);
  const std::vector<BusEvent> ooms = ctl.events().snapshot(f);
  ASSERT_EQ(ooms.size(), 1u);
  EXPECT_EQ(ooms[0].group, "d");
  EXPECT_EQ(ooms[0].payload.rfind("{\"seq\":1,\"decider\":\"", 0), 0u) << ooms[0].payload;
  EXPECT_NE(ooms[0].payload.find("\"victim\":\"big\""), std::string::npos) << ooms[0].payload;
  EXPECT_NE(ooms[0].payload.find("\"text\":\""), std::string::npos);
  f.types = bus_type_bit(BusEventType::kMemoryEvent);
  bool oom_kill = false;
  for (const BusEvent& e : ctl.events().snapshot(f))
    oom_kill = oom_kill || e.payload.find("\"counter\":\"oom_kill\"") != std::string::npos;
  EXPECT_TRUE(oom_kill);
  release_all(charger);
}

TEST(EventBus, WakeCallbacksRunOnTheNotifierWithNoLibraryLockHeld) {
  Controller ctl(one_shard());
  EventBus& bus = ctl.events();
  std::atomic<int> wakes{0};
  std::atomic<bool> other_thread{true};
  const std::thread::id self = std::this_thread::get_id();
  std::unique_ptr<Subscription> s;
  ASSERT_EQ(bus.subscribe({}, 0, 0,
                          [&] {
                            if (std::this_thread::get_id() == self) other_thread = false;
                            // Would deadlock under the bus's lock.
                            (void)bus.stats();
                            wakes.fetch_add(1);
                          },
                          &s),
            0);
  publish_n(bus, 5);
  for (int i = 0; i < 500 && wakes.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_GE(wakes.load(), 1);
  EXPECT_TRUE(other_thread.load());
  EXPECT_EQ(take_all(*s).size(), 5u);
  s->close();
  const int after_close = wakes.load();
  publish_n(bus, 5);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(wakes.load(), after_close);
}

TEST(EventBus, ASlowSubscriberIsDroppedWithItsReasonWhileChargesGoOn) {
  Controller ctl(one_shard());
  EventBus& bus = ctl.events();
  ASSERT_EQ(bus.enable(), 0);
  GroupRef a;
  ASSERT_EQ(ctl.create("a", &a), 0);
  std::unique_ptr<Subscription> slow, fast;
  ASSERT_EQ(bus.subscribe({}, 0, 32, nullptr, &slow), 0);  // never takes
  ASSERT_EQ(bus.subscribe({}, 0, 32, nullptr, &fast), 0);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> charges{0};
  std::thread charger([&] {
    while (!stop.load()) {
      if (charged(try_charge(*a, 1))) uncharge(*a, 1);
      charges.fetch_add(1, std::memory_order_relaxed);
    }
  });
  // Bounded waits on the charger: on a loaded machine it may not have run at all yet.
  auto charges_pass = [&](uint64_t mark) {
    for (int i = 0; i < 10'000 && charges.load() <= mark; ++i) std::this_thread::sleep_for(1ms);
    return charges.load() > mark;
  };
  ASSERT_TRUE(charges_pass(0));
  size_t taken = 0;
  for (int i = 0; i < 200; ++i) {
    publish_n(bus, 8);
    std::vector<BusEvent> got;
    while (fast->take(&got) != 0) {
    }
    taken += got.size();
  }
  for (int i = 0; i < 500 && !slow->dropped(); ++i) std::this_thread::sleep_for(10ms);
  // Charges go on once the slow subscriber is dropped: nothing waits for it.
  const bool after_drop = charges_pass(charges.load());
  stop = true;
  charger.join();
  EXPECT_TRUE(after_drop);
  EXPECT_TRUE(slow->dropped());
  EXPECT_EQ(slow->drop_reason(), BusDropReason::kLagging);
  std::vector<BusEvent> none;
  EXPECT_EQ(slow->take(&none), 0u);
  EXPECT_FALSE(fast->dropped());
  EXPECT_EQ(taken, 1600u);
  const EventBusStats st = bus.stats();
  EXPECT_EQ(st.dropped[static_cast<int>(BusDropReason::kLagging)], 1u);
  EXPECT_EQ(st.subscribers, 2u);  // listed until closed
}

TEST(EventBus, AReaderLappedByTheRingIsDroppedAsOverrun) {
  Controller ctl(one_shard());
  EventBus& bus = ctl.events();
  EventBusOptions o;
  o.capacity = 16;
  ASSERT_EQ(bus.enable(o), 0);
  std::unique_ptr<Subscription> s;
  ASSERT_EQ(bus.subscribe({}, 0, 0, nullptr, &s), 0);  // max_lag = the capacity
  publish_n(bus, 40);
  std::vector<BusEvent> got;
  EXPECT_EQ(s->take(&got), 0u);
  EXPECT_TRUE(s->dropped());
  EXPECT_EQ(s->drop_reason(), BusDropReason::kOverrun);
  EXPECT_EQ(bus.stats().dropped[static_cast<int>(BusDropReason::kOverrun)], 1u);
  // A lag bound past the ring is the ring's: lapped, it is dropped as overrun too.
  std::unique_ptr<Subscription> x;
  ASSERT_EQ(bus.subscribe({}, 0, 1000, nullptr, &x), 0);
  publish_n(bus, 17);
  EXPECT_EQ(x->take(&got), 0u);
  EXPECT_EQ(x->drop_reason(), BusDropReason::kOverrun);
}

TEST(EventBus, SubscribersAreBounded) {
  Controller ctl(one_shard());
  EventBus& bus = ctl.events();
  EventBusOptions o;
  o.max_subscribers = 2000;
  ASSERT_EQ(bus.enable(o), 0);
  std::vector<std::unique_ptr<Subscription>> subs(2000);
  std::atomic<int> wakes{0};
  for (auto& s : subs)
    ASSERT_EQ(bus.subscribe({}, 0, 0, [&] { wakes.fetch_add(1); }, &s), 0);
  std::unique_ptr<Subscription> extra;
  EXPECT_EQ(bus.subscribe({}, 0, 0, nullptr, &extra), EAGAIN);
  EXPECT_EQ(bus.stats().refused, 1u);
  publish_n(bus, 1);
  for (int i = 0; i < 500 && wakes.load() < 2000; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(wakes.load(), 2000);
  subs.clear();
  EXPECT_EQ(bus.stats().subscribers, 0u);
  EXPECT_EQ(bus.subscribe({}, 0, 0, nullptr, &extra), 0);
}

TEST(EventBus, WaitSeesEventsOfAnotherThread) {
  Controller ctl(one_shard());
  EventBus& bus = ctl.events();
  std::unique_ptr<Subscription> s;
  ASSERT_EQ(bus.subscribe({}, 0, 0, nullptr, &s), 0);
  EXPECT_FALSE(s->wait(20ms));
  std::thread producer([&] {
    std::this_thread::sleep_for(20ms);
    publish_n(bus, 1);
  });
  EXPECT_TRUE(s->wait(5000ms));
  producer.join();
  EXPECT_EQ(take_all(*s).size(), 1u);
}

TEST(EventBus, SubscriptionsOutlivingTheControllerAreDroppedAsClosed) {
  auto ctl = std::make_unique<Controller>(one_shard());
  std::atomic<int> wakes{0};
  std::unique_ptr<Subscription> s;
  ASSERT_EQ(ctl->events().subscribe({}, 0, 0, [&] { wakes.fetch_add(1); }, &s), 0);
  ctl.reset();
  EXPECT_TRUE(s->dropped());
  EXPECT_EQ(s->drop_reason(), BusDropReason::kClosed);
  EXPECT_EQ(wakes.load(), 1);
  std::vector<BusEvent> got;
  EXPECT_EQ(s->take(&got), 0u);
  EXPECT_FALSE(s->wait(10ms));
}

// Producers on several threads, subscribers taking as they come: each sees every event once,
// in id order, with no gap (the ring and the lag bound are large enough).
TEST(EventBus, ConcurrentProducersAndSubscribersSeeOneOrder) {
  Controller ctl(one_shard());
  EventBus& bus = ctl.events();
  EventBusOptions o;
  o.capacity = 100'000;
  ASSERT_EQ(bus.enable(o), 0);
  constexpr int kProducers = 3, kEach = 2000, kSubs = 3;
  std::vector<std::unique_ptr<Subscription>> subs(kSubs);
  for (auto& s : subs) ASSERT_EQ(bus.subscribe({}, 0, 0, nullptr, &s), 0);
  std::atomic<bool> done{false};
  std::vector<std::vector<uint64_t>> seen(kSubs);
  std::vector<std::thread> readers;
  for (int i = 0; i < kSubs; ++i)
    readers.emplace_back([&, i] {
      std::vector<BusEvent> got;
      for (;;) {
        const bool finished = done.load();
        got.clear();
        while (subs[i]->take(&got, 64) != 0) {
        }
        for (const BusEvent& e : got) seen[i].push_back(e.id);
        if (finished && got.empty()) break;
        subs[i]->wait(5ms);
      }
    });
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) producers.emplace_back([&] { publish_n(bus, kEach); });
  for (auto& t : producers) t.join();
  done = true;
  for (auto& t : readers) t.join();
  for (int i = 0; i < kSubs; ++i) {
    ASSERT_EQ(seen[i].size(), size_t{kProducers * kEach}) << i;
    for (size_t j = 1; j < seen[i].size(); ++j) ASSERT_EQ(seen[i][j], seen[i][j - 1] + 1);
    EXPECT_FALSE(subs[i]->dropped());
  }
}

}  // namespace
}  // namespace memcg
