#include "memcg/base/clock.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>

namespace memcg {

uint64_t SystemClock::now_ns() const noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

void SystemClock::sleep_ns(uint64_t ns) noexcept {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000u), static_cast<long>(ns % 1'000'000'000u)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

namespace {

// Waits on w.cv for at most `ns` of real time; returns and clears w.woken.
bool wait_real(ClockWaiter& w, std::unique_lock<std::mutex>& lock, uint64_t ns,
               const std::stop_token& stop) {
  if (!w.woken && ns > 0) {
    // Capped so that the steady clock's time point cannot overflow.
    const auto d = std::chrono::nanoseconds(std::min<uint64_t>(ns, uint64_t{1} << 62));
    w.cv.wait_for(lock, stop, d, [&] { return w.woken; });
  }
  const bool woken = w.woken;
  w.woken = false;
  return woken;
}

constexpr uint64_t kVirtualPollNs = 1'000'000;  // 1 ms

}  // namespace

bool Clock::wait_until(ClockWaiter& w, std::unique_lock<std::mutex>& lock, uint64_t deadline_ns,
                       const std::stop_token& stop) {
  const uint64_t now = now_ns();
  return wait_real(w, lock, now < deadline_ns ? std::min(deadline_ns - now, kVirtualPollNs) : 0,
                   stop);
}

bool SystemClock::wait_until(ClockWaiter& w, std::unique_lock<std::mutex>& lock,
                             uint64_t deadline_ns, const std::stop_token& stop) {
  const uint64_t now = now_ns();
  return wait_real(w, lock, now < deadline_ns ? deadline_ns - now : 0, stop);
}

SystemClock& SystemClock::instance() noexcept {
  static SystemClock clock;
  return clock;
}

}  // namespace memcg
