// Shared by the waiting-charge tests (charge_wait_*_test.cpp): deadlines, a controller with
// exact usage, waiters on their own threads, the memory.wait file.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>

#include "memcg/base/clock.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/files/files.hpp"

namespace memcg::testing_wait {

using namespace std::chrono_literals;
constexpr uint64_t kUnit = 4096;

inline WaitClock::time_point in(std::chrono::milliseconds ms) {
  return WaitClock::now() + ms;
}

// Polls `cond` for up to 10 s.
inline bool eventually(const std::function<bool()>& cond) {
  const auto end = WaitClock::now() + 10s;
  while (WaitClock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return cond();
}

inline Options with_batch(int64_t batch) {
  Options o;
  o.batch = batch;
  return o;
}

struct Fixture : ::testing::Test {
  // batch 1: nothing hides in the stocks, so usage is exact at every step.
  std::unique_ptr<Controller> ctl = std::make_unique<Controller>(with_batch(1));
  GroupRef make(const char* path, int64_t max_units) {
    GroupRef g;
    EXPECT_EQ(ctl->create(path, &g), 0);
    if (max_units >= 0) g->set_max(max_units * kUnit);
    return g;
  }
  int64_t usage(Group& g) { return g.memory().usage(); }
};

// A waiter on its own thread; status() joins.
struct AsyncWait {
  std::atomic<int> result{-1};
  std::jthread th;
  AsyncWait(Group& g, int64_t units, std::chrono::milliseconds timeout) {
    th = std::jthread([this, &g, units, timeout](std::stop_token st) {
      result.store(static_cast<int>(try_charge_wait(g, units, in(timeout), st)));
    });
  }
  bool done() const { return result.load() >= 0; }
  WaitStatus status() {
    th.join();
    return static_cast<WaitStatus>(result.load());
  }
};

inline int64_t used(Group& g) {
  return g.memory().usage();
}

inline Options on_clock(Clock* clock) {
  Options o = with_batch(1);
  o.clock = clock;
  return o;
}

// Virtual time (as ManualClock) on which a waiter blocks until it is woken, stopped or past the
// deadline: it never returns early (Clock's default looks every millisecond of real time, and
// the waiter then looks at the queues again). `parks` counts the calls to wait_until: a waiter
// calls it after each look at the queues (and its preemption requests), so a test that sees the
// count move knows that look is over. `on_wake`, if set, runs inside wake(), under the queues'
// mutexes: it may only touch lock-free state (the counters).
class ParkingClock final : public Clock {
 public:
  uint64_t now_ns() const noexcept override { return now_.load(); }
  void sleep_ns(uint64_t ns) noexcept override { now_.fetch_add(ns); }
  bool wait_until(ClockWaiter& w, std::unique_lock<std::mutex>& lock, uint64_t deadline_ns,
                  const std::stop_token& stop) override {
    parks.fetch_add(1);
    while (!w.woken && !stop.stop_requested() && now_ns() < deadline_ns)
      w.cv.wait_for(lock, std::chrono::milliseconds(1));
    const bool woken = w.woken;
    w.woken = false;
    return woken;
  }
  void wake(ClockWaiter& w) noexcept override {
    if (on_wake) on_wake();
    Clock::wake(w);
  }
  void advance(uint64_t ns) { now_.fetch_add(ns); }
  // Advances and waits until `looks` more looks have ended (waiters parked again).
  bool advance_and_settle(uint64_t ns, uint64_t looks) {
    const uint64_t before = parks.load();
    advance(ns);
    return eventually([&] { return parks.load() >= before + looks; });
  }
  std::atomic<uint64_t> parks{0};
  std::function<void()> on_wake;

 private:
  std::atomic<uint64_t> now_{1'000'000};
};

// A wait of its own thread on any overload; done() / status() as AsyncWait.
struct AsyncCall {
  std::atomic<int> result{-1};
  std::jthread th;
  explicit AsyncCall(std::function<WaitStatus(std::stop_token)> call) {
    th = std::jthread([this, call = std::move(call)](std::stop_token st) {
      result.store(static_cast<int>(call(st)));
    });
  }
  bool done() const { return result.load() >= 0; }
  WaitStatus status() {
    th.join();
    return static_cast<WaitStatus>(result.load());
  }
};

inline std::string file(Group& g, const char* name) {
  std::string out;
  EXPECT_EQ(read_file(g, name, &out), 0) << name;
  return out;
}

inline std::string wait_file(uint64_t waiters, uint64_t queued, uint64_t reserved, uint64_t waits,
                      uint64_t granted, uint64_t timed_out, uint64_t cancelled, uint64_t removed) {
  return "waiters " + std::to_string(waiters) + "\nqueued_bytes " + std::to_string(queued) +
         "\nreserved_bytes " + std::to_string(reserved) + "\nwaits " + std::to_string(waits) +
         "\ngranted " + std::to_string(granted) + "\ntimed_out " + std::to_string(timed_out) +
         "\ncancelled " + std::to_string(cancelled) + "\nremoved " + std::to_string(removed) + "\n";
}

// The first eight lines of memory.wait (the totals; the per-class lines and times follow).
inline std::string wait_head(Group& g) {
  const std::string s = file(g, "memory.wait");
  size_t pos = 0;
  for (int i = 0; i < 8 && pos != std::string::npos; ++i) pos = s.find('\n', pos) + 1;
  return s.substr(0, pos);
}

}  // namespace memcg::testing_wait
