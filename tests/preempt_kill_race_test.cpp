// An OOM kill that chooses a member while a preemption request runs that member's callback
// (oom.hpp, Member::on_kill; charge_wait.hpp, set_wait_preempt): the member must still be told
// of the kill, once, after the request returns, and the killer must wait for it rather than
// kill a second member.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/base/events.hpp"
#include "memcg/core/oom/oom.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

using namespace std::chrono_literals;

struct Log {
  std::mutex mu;
  std::vector<std::string> lines;
  void add(std::string s) {
    std::lock_guard<std::mutex> l(mu);
    lines.push_back(std::move(s));
  }
  int count(const std::string& s) {
    std::lock_guard<std::mutex> l(mu);
    int n = 0;
    for (const auto& x : lines) n += x == s;
    return n;
  }
};

TEST(PreemptKillRace, AKillChosenDuringAPreemptionRequestIsToldAfterIt) {
  memcg::testing::Watchdog dog("preempt/kill race", std::chrono::seconds(60));
  Options o;
  o.batch = 1;  // no stock: the counters show every unit
  o.nr_shards = 1;
  Controller ctl(o);
  const int64_t unit = static_cast<int64_t>(ctl.unit_size());
  GroupRef p, lo, hi, k;
  ASSERT_EQ(ctl.create("p", &p), 0);
  ASSERT_EQ(ctl.create("p/lo", &lo), 0);
  ASSERT_EQ(ctl.create("p/hi", &hi), 0);
  ASSERT_EQ(ctl.create("p/k", &k), 0);
  p->set_max(10 * unit);
  ASSERT_EQ(set_wait_preempt(*p, true), 0);
  ASSERT_EQ(set_wait_priority(*lo, WaitPriority::kLow), 0);
  ASSERT_EQ(set_wait_priority(*hi, WaitPriority::kHigh), 0);

  Log log;
  std::atomic<bool> in_request{false};
  std::atomic<bool> let_go{false};
  // X: asked to give memory back, it holds on (a long unwind) until let go; killed, it releases.
  Member x(*lo, "x", [&](Member& m) {
    if (Member::cancel_reason() == CancelReason::kPreempt) {
      log.add("ask:x");
      in_request = true;
      while (!let_go.load()) std::this_thread::sleep_for(1ms);
      return;
    }
    log.add("kill:x");
    m.uncharge(m.charged());
  });
  Member y(*lo, "y", [&](Member& m) {
    log.add(Member::cancel_reason() == CancelReason::kPreempt ? "ask:y" : "kill:y");
    m.uncharge(m.charged());
  });
  ASSERT_EQ(x.charge(8), ChargeStatus::kOk);
  ASSERT_EQ(y.charge(1), ChargeStatus::kOk);

  // A high-class waiting charge that the room cannot serve asks x (the largest low member).
  std::atomic<int> waited{-1};
  std::thread waiter([&] {
    const WaitStatus s = try_charge_wait_for(*hi, 5, 20s);
    waited = static_cast<int>(s);
    if (s == WaitStatus::kOk) uncharge_direct(*hi, 5);
  });
  while (!in_request.load()) std::this_thread::sleep_for(1ms);

  // Meanwhile a small charge in p finds no room: the OOM killer chooses x (highest badness),
  // whose callback is out for the request.
  std::atomic<int> charged{-1};
  Member z(*k, "z", nullptr);
  std::thread charger([&] { charged = static_cast<int>(z.charge(2)); });
  // The killer has chosen x (it marks its choice killed at once) and waits for x's memory; a
  // fixed sleep here could let x go before the choice on a loaded machine, and the race would
  // not be run at all.
  for (auto until = std::chrono::steady_clock::now() + 20s;
       !x.killed() && std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(x.killed()) << "the OOM killer did not choose x during the request";
  EXPECT_TRUE(in_request.load());
  EXPECT_EQ(log.count("kill:x"), 0) << "told of the kill while its request still runs";
  let_go = true;
  charger.join();
  waiter.join();

  EXPECT_EQ(log.count("ask:x"), 1);
  EXPECT_EQ(log.count("kill:x"), 1) << "the member chosen during the request was never told";
  EXPECT_EQ(log.count("kill:y"), 0) << "a second member was killed for one OOM";
  EXPECT_TRUE(x.killed());
  EXPECT_EQ(x.charged(), 0);
  EXPECT_EQ(p->events().get(Event::kOomKill), 1u);
  EXPECT_EQ(charged.load(), static_cast<int>(ChargeStatus::kOk));
  EXPECT_EQ(waited.load(), static_cast<int>(WaitStatus::kOk));
  z.uncharge(z.charged());
}

}  // namespace
}  // namespace memcg
