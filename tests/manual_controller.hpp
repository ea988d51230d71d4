// A controller on virtual time for the pressure tests (vmpressure, PSI): one shard, a
// ManualClock the test advances, and groups created by path.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"

namespace memcg::testing {

struct ManualController {
  explicit ManualController(uint64_t start_ns) : clock(start_ns), ctl(options(&clock)) {}
  static Options options(Clock* clock) {
    Options o;
    o.nr_shards = 1;
    o.clock = clock;
    return o;
  }
  GroupRef make(const char* path) {
    GroupRef g;
    if (ctl.create(path, &g) != 0) throw std::runtime_error(path);
    return g;
  }
  ManualClock clock;  // before ctl: the controller reads it from its constructor on
  Controller ctl;
};

}  // namespace memcg::testing
