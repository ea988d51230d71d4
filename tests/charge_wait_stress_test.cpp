// Waiting charges under load: randomized sizes, deadlines, cancellations, limit changes,
// removals and teardown, with exact accounting at the end.
#include "memcg/core/wait/charge_wait.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "charge_wait_support.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/charge/limits.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/files/files.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/percpu/internal/stock.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;
using namespace testing_wait;

// One counter per WaitStatus, indexed by its value.
constexpr int kStatuses = static_cast<int>(WaitStatus::kNeverFits) + 1;

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
    std::atomic<int> statuses[kStatuses] = {};
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

// Every class at once, with deadlines, cancellations, a group removed and created again while
// its threads wait, and limits written under them. Bounded: a fixed number of charges per thread
// (watchdog 120 s). At the end nothing is charged, no waiter or reserve is left, and every charge
// that queued is counted once under its class as granted, timed out, cancelled or removed.
TEST(ChargeWaitStress, ClassesDeadlinesRemovalsAndLimits) {
  testing::Watchdog dog("ClassesDeadlinesRemovalsAndLimits", std::chrono::seconds(120));
  Controller ctl(with_batch(4));
  set_wait_aging(ctl, 2ms);
  GroupRef pool;
  ASSERT_EQ(ctl.create("pool", &pool), 0);
  pool->set_max(32 * kUnit);
  GroupRef kids[3];
  for (int i = 0; i < 3; ++i) ASSERT_EQ(ctl.create(*pool, "k" + std::to_string(i), &kids[i]), 0);
  ASSERT_EQ(set_wait_priority(*kids[0], WaitPriority::kHigh), 0);
  ASSERT_EQ(set_wait_priority(*kids[2], WaitPriority::kLow), 0);
  std::mutex victim_mu;
  GroupRef victim;  // pool/v: removed and created again
  ASSERT_EQ(ctl.create(*pool, "v", &victim), 0);
  victim->set_max(8 * kUnit);
  std::atomic<int64_t> held{0};
  std::atomic<int> statuses[kStatuses] = {};
  std::atomic<int> patient_failed{0};
  std::atomic<int> kid_never_fits{0};
  std::atomic<bool> done{false};
  std::jthread churn([&] {
    std::mt19937 rng(3);
    while (!done.load()) {
      write_max(*pool, (24 + rng() % 16) * kUnit, true);
      if (rng() % 4 == 0) {
        std::lock_guard<std::mutex> lock(victim_mu);
        if (ctl.remove(*victim) == 0) {
          GroupRef fresh;
          if (ctl.create(*pool, "v", &fresh) == 0) {
            fresh->set_max(8 * kUnit);
            victim = fresh;
          }
        }
      }
      std::this_thread::sleep_for(2ms);
    }
    write_max(*pool, 32 * kUnit, true);
  });
  std::vector<std::jthread> ts;
  for (int t = 0; t < 6; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 rng(500 + t);
      for (int i = 0; i < 400; ++i) {
        const int pick = static_cast<int>(rng() % 4);
        GroupRef g;
        if (pick == 3) {
          std::lock_guard<std::mutex> lock(victim_mu);
          g = victim;
        } else {
          g = kids[pick];
        }
        const int64_t units = 1 + rng() % 12;
        const bool patient = pick != 3 && rng() % 3 == 0;
        std::stop_source src;
        if (!patient && rng() % 4 == 0) src.request_stop();
        WaitOptions o;
        o.priority = static_cast<WaitPriority>(rng() % 4 == 3 ? 255 : rng() % 3);
        const auto timeout = patient ? std::chrono::milliseconds(20'000)
                                     : std::chrono::milliseconds(rng() % 4);
        const WaitStatus s = try_charge_wait_for(*g, units, timeout, src.get_token(), o);
        ++statuses[static_cast<int>(s)];
        // Only pool/v (memory.max 8 units, requests up to 12) can refuse a request as one that
        // never fits: the pool's limit stays at 24 units or more.
        if (s == WaitStatus::kNeverFits && pick != 3) ++kid_never_fits;
        if (s == WaitStatus::kOk) {
          held += units;
          std::this_thread::sleep_for(std::chrono::microseconds(rng() % 800));
          if (rng() % 2) uncharge(*g, units); else uncharge_direct(*g, units);
          held -= units;
        } else if (patient) {
          ++patient_failed;
        }
      }
    });
  }
  ts.clear();
  done = true;
  churn.join();
  EXPECT_EQ(patient_failed.load(), 0);
  EXPECT_EQ(held.load(), 0);
  EXPECT_GT(statuses[static_cast<int>(WaitStatus::kOk)].load(), 0);
  EXPECT_EQ(statuses[static_cast<int>(WaitStatus::kInvalid)].load(), 0);
  EXPECT_EQ(kid_never_fits.load(), 0);
  ctl.stock().drain_all(&ctl.root());
  ctl.obj_stock().drain_all(&ctl.root());
  EXPECT_EQ(pool->memory().usage(), 0);
  for (auto& k : kids) EXPECT_EQ(k->memory().usage(), 0);
  for (Group* g : {pool.get(), victim.get()}) {
    const WaitStats s = wait_stats(*g);
    EXPECT_EQ(s.waiters, 0u);
    EXPECT_EQ(s.reserved_bytes, 0u);
    uint64_t waits = 0;
    for (const auto& c : s.by_priority) {
      EXPECT_EQ(c.waits, c.granted + c.timed_out + c.cancelled + c.removed);
      waits += c.waits;
    }
    EXPECT_EQ(s.waits, waits);
    EXPECT_EQ(g->events_local().get(Event::kWait), s.waits);
  }
  EXPECT_EQ(pool->events_local().get(Event::kOomKill), 0u);
}

// Cooperative preemption under load: holders in low and normal groups charge, hold and release
// through Members whose callbacks only ask their thread to stop (the cooperative pattern: the
// thread releases and destroys its member itself), while high waiters with short deadlines ask
// them. Members come and go during the requests. At the end nothing is held, every request that
// ran is counted once in memory.events `preempt`, and nobody was OOM-killed.
TEST(ChargeWaitStress, PreemptionWithMembersComingAndGoing) {
  testing::Watchdog dog("PreemptionWithMembersComingAndGoing", std::chrono::seconds(60));
  Controller ctl(with_batch(1));
  set_wait_aging(ctl, 50ms);
  GroupRef pool, lo, mid, hi;
  ASSERT_EQ(ctl.create("pool", &pool), 0);
  ASSERT_EQ(ctl.create("pool/lo", &lo), 0);
  ASSERT_EQ(ctl.create("pool/mid", &mid), 0);
  ASSERT_EQ(ctl.create("pool/hi", &hi), 0);
  pool->set_max(32 * kUnit);
  ASSERT_EQ(set_wait_preempt(*pool, true), 0);
  ASSERT_EQ(set_wait_priority(*lo, WaitPriority::kLow), 0);
  ASSERT_EQ(set_wait_priority(*hi, WaitPriority::kHigh), 0);
  std::atomic<uint64_t> asked{0}, granted{0};
  std::atomic<bool> stop{false};
  std::vector<std::jthread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      Group& g = t % 2 ? *mid : *lo;
      while (!stop.load()) {
        auto cancel = std::make_shared<std::atomic<bool>>(false);
        Member m(g, "holder" + std::to_string(t), [cancel, &asked](Member& self) {
          if (self.cancel_reason() == CancelReason::kPreempt) asked.fetch_add(1);
          cancel->store(true);  // the Member& is not touched after: its thread may destroy it
        });
        const int64_t want = 1 + rng() % 12;
        for (int64_t i = 0; i < want && !cancel->load(); ++i)
          if (!charged(m.charge(1, kMayBlock | kRetryMayFail))) break;
        for (int i = 0; i < 50 && !cancel->load(); ++i) std::this_thread::yield();
        m.uncharge(m.charged());
      }
    });
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      while (!stop.load()) {
        const int64_t n = 1 + rng() % 16;
        if (try_charge_wait_for(*hi, n, std::chrono::milliseconds(1 + rng() % 20)) ==
            WaitStatus::kOk) {
          granted.fetch_add(1);
          std::this_thread::yield();
          uncharge_direct(*hi, n);
        }
      }
    });
  std::this_thread::sleep_for(1s);
  stop.store(true);
  threads.clear();
  EXPECT_EQ(used(*pool), 0);
  EXPECT_EQ(wait_stats(*pool).waiters, 0u);
  EXPECT_EQ(wait_stats(*pool).reserved_bytes, 0u);
  EXPECT_GT(asked.load(), 0u);
  EXPECT_GT(granted.load(), 0u);
  EXPECT_EQ(pool->events().get(Event::kPreempt), asked.load());
  EXPECT_EQ(hi->events().get(Event::kPreempt), 0u);  // the waiters' own class is never asked
  EXPECT_EQ(pool->events().get(Event::kOomKill), 0u);
}

}  // namespace
}  // namespace memcg
