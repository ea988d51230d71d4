// Shared by the admission tests (admission_test.cpp: the learning rule and admission by
// expected peak; admission_growth_test.cpp: growth past admission): a pool group on a manual
// clock, and admissions that teach it a peak.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "charge_wait_support.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/admission/reservation.hpp"

namespace memcg::testing_admit {

using namespace std::chrono_literals;
using testing_wait::file;
using testing_wait::kUnit;
using testing_wait::on_clock;

// One waiting admission of `admitted` units on `g` that then peaks at `peak` units.
inline void run_one(Group& g, int64_t admitted, int64_t peak) {
  Reservation r(g);
  ASSERT_EQ(r.reserve_for(admitted * kUnit, 1s), ReserveStatus::kOk);
  if (peak > admitted) {
    ASSERT_EQ(r.grow((peak - admitted) * kUnit), ReserveStatus::kOk);
  }
  r.shrink(r.bytes() / 2);  // shrinking before the end does not lower the peak learned
}

struct AdmitTest : ::testing::Test {
  ManualClock clock{1'000'000};
  Controller ctl{on_clock(&clock)};
  GroupRef g;
  void SetUp() override {
    ASSERT_EQ(ctl.create("pool", &g), 0);
    g->set_max(1000 * kUnit);
  }
  std::string wait_line(const char* key) {
    const std::string f = file(*g, "memory.wait");
    const std::string k = std::string(key) + " ";
    const size_t at = f.find("\n" + k);
    if (at == std::string::npos) return "";
    const size_t end = f.find('\n', at + 1);
    return f.substr(at + 1 + k.size(), end - at - 1 - k.size());
  }
};

}  // namespace memcg::testing_admit
