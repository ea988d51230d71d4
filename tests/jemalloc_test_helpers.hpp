// Helpers shared by the memcg::jemalloc tests: an arena that must be created, its destruction
// checked (every test frees its blocks before its controller goes, arena.hpp REQUIRES), and a
// touch of every page of a block.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>

#include <gtest/gtest.h>

#include "memcg/jemalloc/arena.hpp"

namespace memcg::jemalloc::testing {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;

inline std::unique_ptr<Arena> make_arena(Group& g, const ArenaOptions& o = {}) {
  std::unique_ptr<Arena> a;
  const int rc = Arena::create(g, &a, o);
  EXPECT_EQ(rc, 0);
  return a;
}

// Destroys the Arena and checks that its jemalloc arena went with it.
inline void release(std::unique_ptr<Arena>& a) {
  flush_thread_cache();
  a.reset();
  EXPECT_EQ(collect_released(), 0u);
}

// Touches every page of a block, as a user would. The barrier keeps the compiler from eliding a
// malloc/free pair whose block nobody reads (it may, for malloc).
inline void touch(void* p, size_t n) {
  std::memset(p, 0x5a, n);
  asm volatile("" : : "r"(p) : "memory");
}

}  // namespace memcg::jemalloc::testing
