#include "memcg/base/clock.hpp"

#include <time.h>

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

SystemClock& SystemClock::instance() noexcept {
  static SystemClock clock;
  return clock;
}

}  // namespace memcg
