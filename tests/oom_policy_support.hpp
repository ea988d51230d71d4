// Shared by the OOM policy tests (oom_policy_test.cpp: the victim order and the handlers;
// oom_spill_test.cpp: spill before kill): a controller of one shard, members that record the
// reasons they are called with, a domain of 100 units.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "memcg/base/clock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"

namespace memcg::testing_oom {

struct Sim {
  explicit Sim(Clock* clock = nullptr) : ctl(options(clock)) {}
  static Options options(Clock* clock) {
    Options o;
    o.nr_shards = 1;
    if (clock) o.clock = clock;
    return o;
  }
  GroupRef make(const char* path) {
    GroupRef g;
    if (ctl.create(path, &g) != 0) throw std::runtime_error(path);
    return g;
  }
  Controller ctl;
};

// A member whose callback records every reason it is called with and releases everything on a
// kill (and, if `spill_frees` > 0, that many units on a spill request).
struct Query {
  Query(Group& g, const char* name, int64_t spill_frees = 0)
      : spill(spill_frees),
        m(g, name, [this](Member& self) {
          const CancelReason r = Member::cancel_reason();
          reasons.push_back(r);
          if (r == CancelReason::kOomKill) self.uncharge(self.charged());
          if (r == CancelReason::kSpill && spill > 0) self.uncharge(spill);
        }) {}
  // Charges `units` one unit at a time, then states it was admitted with `admitted`.
  void hold(int64_t units, int64_t admitted) {
    for (int64_t i = 0; i < units; ++i) ASSERT_TRUE(charged(m.charge(1)));
    m.add_admitted(admitted);
  }
  int64_t spill;
  std::vector<CancelReason> reasons;
  Member m;
};

// A domain of 100 units (4 KiB each), filled to its limit by the callers.
constexpr uint64_t kDomainBytes = 100 * 4096;

}  // namespace memcg::testing_oom
