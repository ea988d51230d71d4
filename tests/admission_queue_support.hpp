// The fixture and helpers of the admission queue's tests (admission_queue_test.cpp,
// admission_queue_fairness_test.cpp): a controller on a ManualClock, a run that holds the single
// worker, a done callable that records the status.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "charge_wait_support.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/admission/admission_queue.hpp"
#include "memcg/core/admission/reservation.hpp"
#include "memcg/core/tree/controller.hpp"

namespace memcg {
namespace testing_queue {

using namespace std::chrono_literals;
using testing_wait::eventually;
using testing_wait::kUnit;
using testing_wait::on_clock;

constexpr uint64_t kMs = 1'000'000;

struct QueueTest : ::testing::Test {
  ManualClock clock{kMs};
  Controller ctl{on_clock(&clock)};
  GroupRef make(const char* name, int64_t max_units = -1) {
    GroupRef g;
    if (ctl.create(name, &g) != 0) throw std::runtime_error(name);
    if (max_units >= 0) g->set_max(static_cast<uint64_t>(max_units) * kUnit);
    return g;
  }
  static AdmissionQueueOptions one_worker() {
    AdmissionQueueOptions o;
    o.workers = 1;
    return o;
  }
};

// Holds the single worker in a run until release(): everything submitted meanwhile is queued.
struct Blocker {
  std::atomic<bool> running{false}, go{false};
  WorkItem item() {
    WorkItem w;
    w.run = [this](Reservation&) {
      running = true;
      while (!go.load()) std::this_thread::sleep_for(100us);
    };
    return w;
  }
  void release() { go = true; }
};

// A done callable that records the status (and the thread it ran on).
struct Outcome {
  std::atomic<int> status{-1};
  std::atomic<int> ran{0};
  std::thread::id thread;
  WorkItem item(uint64_t bytes = kUnit) {
    WorkItem w;
    w.bytes = bytes;
    w.run = [this](Reservation&) { ++ran; };
    w.done = [this](ReserveStatus s) {
      thread = std::this_thread::get_id();
      status = static_cast<int>(s);
    };
    return w;
  }
  bool is(ReserveStatus s) const { return status.load() == static_cast<int>(s); }
};

}  // namespace testing_queue
}  // namespace memcg
