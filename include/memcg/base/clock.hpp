// Clock: the time source of everything in memcg that depends on time (periodic statistics
// flush, memory.high throttling sleeps, pressure windows, PSI averages, notification rate
// limits).
//
// Why injectable: the kernel's behaviour is defined in wall-clock terms (2 s flush period, 10 ms
// minimum throttle, 1 s socket-pressure hold). Tests and the scenario runner must reproduce those
// rules exactly and quickly, so they run on a ManualClock whose time only moves when told to.
//
// Thread safety: both implementations may be used from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stop_token>

namespace memcg {

// A thread blocked in Clock::wait_until, and what wakes it. One per waiting thread; the waiter
// and whoever calls Clock::wake hold the same mutex.
struct ClockWaiter {
  std::condition_variable_any cv;
  bool woken = false;          // set by Clock::wake, cleared by wait_until's return
  void* clock_data = nullptr;  // for a Clock implementation's own bookkeeping
};

class Clock {
 public:
  // The latest time the library works with (about 292 years after the clock's zero). Keeping
  // times at or below it leaves room for every `time + period` the library computes; later
  // readings are taken as this time.
  static constexpr uint64_t kMaxNs = INT64_MAX;
  // t + d, at most kMaxNs: a later time that never wraps around to the past.
  static constexpr uint64_t after(uint64_t t, uint64_t d) noexcept {
    return t >= kMaxNs ? kMaxNs : (d < kMaxNs - t ? t + d : kMaxNs);
  }

  virtual ~Clock() = default;
  // Monotonic time in nanoseconds. Never goes backwards. Should stay at or below kMaxNs.
  // The library reads it under its own locks (PSI's among them): an implementation must not call
  // into the library from here.
  virtual uint64_t now_ns() const noexcept = 0;
  // Blocks the calling thread for `ns` (a ManualClock advances its time instead).
  virtual void sleep_ns(uint64_t ns) noexcept = 0;

  // Blocks the calling thread until wake(w), a stop request on `stop`, or this clock reaching
  // `deadline_ns`, whichever comes first. `lock` is held on entry and on return and released
  // while blocked. Returns true when woken by wake(). May return early: callers re-check what
  // they wait for and the time.
  // Why on the clock: a wait with a deadline is time like a sleep, and a simulation that runs
  // threads one at a time on virtual time must see who waits and who wakes whom. The default
  // waits on w.cv; as this clock's time may move without notice, it looks at the clock at least
  // every millisecond of real time (SystemClock waits until the deadline itself).
  virtual bool wait_until(ClockWaiter& w, std::unique_lock<std::mutex>& lock, uint64_t deadline_ns,
                          const std::stop_token& stop);
  // Wakes the thread in wait_until(w, ...), if any, or makes its next call return at once.
  // REQUIRES: the mutex of the waiter's lock is held.
  virtual void wake(ClockWaiter& w) noexcept {
    w.woken = true;
    w.cv.notify_one();
  }
};

// CLOCK_MONOTONIC and nanosleep.
class SystemClock final : public Clock {
 public:
  uint64_t now_ns() const noexcept override;
  void sleep_ns(uint64_t ns) noexcept override;
  bool wait_until(ClockWaiter& w, std::unique_lock<std::mutex>& lock, uint64_t deadline_ns,
                  const std::stop_token& stop) override;
  // The process-wide instance used when a Controller is given no clock.
  static SystemClock& instance() noexcept;
};

// Virtual time for tests and simulations: time moves only through advance() and sleep_ns(),
// and stops at kMaxNs (an advance past it saturates instead of wrapping around to the past).
// A wait_until() on it returns when woken or once another thread's advance() has passed the
// deadline (the default of Clock: it looks every millisecond of real time).
class ManualClock final : public Clock {
 public:
  explicit ManualClock(uint64_t start_ns = 0) : now_(start_ns < kMaxNs ? start_ns : kMaxNs) {}
  uint64_t now_ns() const noexcept override { return now_.load(std::memory_order_acquire); }
  // A sleeping thread does not wait: it moves virtual time forward by what it would have slept.
  void sleep_ns(uint64_t ns) noexcept override {
    slept_.fetch_add(ns, std::memory_order_relaxed);
    advance(ns);
  }
  void advance(uint64_t ns) noexcept {
    uint64_t now = now_.load(std::memory_order_relaxed);
    // acq_rel, as a plain fetch_add would be: readers that see the new time see what came first.
    while (!now_.compare_exchange_weak(now, after(now, ns), std::memory_order_acq_rel,
                                       std::memory_order_relaxed)) {
    }
  }
  uint64_t total_slept_ns() const noexcept { return slept_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> now_;
  std::atomic<uint64_t> slept_{0};
};

}  // namespace memcg
