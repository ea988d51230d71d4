// SimClock: the virtual clock of a scenario, and the scheduler of the lanes of a `parallel:`
// block (docs/scenarios.md, "Concurrency").
//
// Outside a block it is a ManualClock: time moves when the runner advances it, and a sleep of
// the library (a memory.high throttle) moves it by what would have been slept.
//
// Inside a block each lane is a thread of its own, but only one runs at a time: a lane runs
// until it yields (the end of a step, a `tick`, a sleep or a wait inside the library), and the
// scheduler then resumes the lane that is due first, in virtual time, ties going to the lane
// that yielded first. When no lane is due now, time jumps to the earliest one. So the library
// sees real threads (attached to groups, stalling in PSI, waking each other), and the run is the
// same every time: the interleaving depends on virtual time and file order only.
//
// Waits: a lane that waits in the library (Clock::wait_until) is due at its deadline; a wake()
// from the running thread makes it due at once. The library's lock is released while it is
// parked, and a parked lane holds no other library lock (sleeps and waits are taken without
// one), so the lane that runs can never block on a parked one. The exception the runner must
// respect: an application handler the library calls (a listener's notification) may run under
// that registration's call lock, so a handler never sleeps on this clock (run.cpp defers the
// time it spends to the end of the step).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "memcg/base/clock.hpp"

namespace memcgctl {

class SimClock final : public memcg::Clock {
 public:
  SimClock();
  ~SimClock() override;
  SimClock(const SimClock&) = delete;
  SimClock& operator=(const SimClock&) = delete;

  uint64_t now_ns() const noexcept override { return now_.load(std::memory_order_acquire); }
  // Moves time forward (saturating at kMaxNs). Only while no lane runs: between steps, or by the
  // scheduler.
  void advance(uint64_t ns) noexcept;
  // A lane: yields, due `ns` later. Another thread: advances time by `ns`.
  void sleep_ns(uint64_t ns) noexcept override;
  // A lane: parks until woken or the deadline. Another thread (a step outside any block): nobody
  // else can run to wake it, so time moves to the deadline.
  bool wait_until(memcg::ClockWaiter& w, std::unique_lock<std::mutex>& lock, uint64_t deadline_ns,
                  const std::stop_token& stop) override;
  void wake(memcg::ClockWaiter& w) noexcept override;

  // Runs body(0) ... body(n - 1), each on a thread of its own, one at a time as described above;
  // returns when every body has returned. `on_advance` runs on the calling thread each time the
  // scheduler moves time forward, while every lane is parked.
  void run_lanes(size_t n, const std::function<void(size_t)>& body,
                 const std::function<void()>& on_advance);
  // From a lane: lets the other lanes run; this one is due again `ns` later (0: after the lanes
  // that are due now).
  void yield_for(uint64_t ns);
  // Called on the thread that is about to sleep on this clock, before it sleeps (no library lock
  // is held then; a wait does not call it: waiting changes no usage). Set before any lane runs.
  void set_on_block(std::function<void()> fn) { on_block_ = std::move(fn); }
  // True on a lane's thread.
  static bool in_lane() noexcept;

  uint64_t total_slept_ns() const noexcept { return slept_.load(std::memory_order_relaxed); }

 private:
  struct Lane;
  // Hands the turn back to the scheduler and blocks until it is this lane's turn again.
  // REQUIRES: `l` holds mu_; the lane's `at` is set.
  void park(Lane& lane, std::unique_lock<std::mutex>& l);
  uint64_t later(uint64_t ns) const noexcept;

  std::mutex mu_;  // the scheduler's state; taken after a library lock, never before one
  std::condition_variable scheduler_cv_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  bool yielded_ = false;  // the running lane has handed its turn back
  uint64_t seq_ = 0;      // yield order: breaks ties between lanes due at the same time
  std::atomic<uint64_t> now_{0};
  std::atomic<uint64_t> slept_{0};
  std::function<void()> on_block_;
};

}  // namespace memcgctl
