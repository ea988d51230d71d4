// Helpers shared by the allocator-integration tests (object stock, pmr and STL allocators, the
// global hook): exact usage and statistics need both stocks emptied and the statistics folded.
#pragma once

#include <cstdint>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/percpu/internal/stock.hpp"

namespace memcg::testing {

// The charge unit of the controllers these tests create (the default, 4 KiB).
inline constexpr int64_t kUnit = 4096;

// Empties both stocks and folds statistics: afterwards usage and memory.stat are exact.
inline void settle(Controller& ctl) {
  ctl.obj_stock().drain_all(nullptr);
  ctl.stock().drain_all(nullptr);
  ctl.flush_stats();
}

// Bytes rounded up to whole units: what the counters hold for `bytes` of live objects.
inline int64_t round_up(int64_t bytes) {
  return (bytes + kUnit - 1) / kUnit * kUnit;
}

}  // namespace memcg::testing
