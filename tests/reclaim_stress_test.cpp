// Reclaim racing with charges, uncharges, reclaimer removal, member kills and group removal.
// Bounded in time and iterations; run under ThreadSanitizer in CI.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <random>
#include <thread>

#include "memcg/base/errors.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/files/files.hpp"
#include "memcg/alloc/lru_cache.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/percpu/internal/stock.hpp"

namespace memcg {
namespace {

TEST(ReclaimStress, EverythingAtOnceEndsWithZeroUsage) {
  Controller ctl;
  GroupRef top;
  ASSERT_EQ(ctl.create("top", &top), 0);
  top->set_max(uint64_t{8} << 20);  // tight: charges keep reclaiming
  std::atomic<bool> stop{false};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  auto time_left = [&] { return std::chrono::steady_clock::now() < deadline && !stop; };

  // Cache owners: create a group, grow and shrink a cache, sometimes drop it, remove the group.
  auto cache_owner = [&](int id) {
    std::mt19937 rng(id);
    for (int round = 0; round < 400 && time_left(); ++round) {
      GroupRef g;
      const std::string name = "c" + std::to_string(id) + "_" + std::to_string(round);
      if (ctl.create("top/" + name, &g) != 0) continue;
      if (rng() % 2) g->set_low(uint64_t{1} << 20);
      {
        auto cache = std::make_unique<LruCache>(*g, name, static_cast<int>(rng() % 50));
        for (int i = 0; i < 20 && time_left(); ++i) {
          cache->grow(rng() % 300);
          cache->shrink(rng() % 100);
        }
        if (rng() % 2) {
          // Remove the group while the cache still lives: it stays reclaimable via the parent.
          EXPECT_EQ(ctl.remove(*g), 0);
          const int err = write_file(*top, "memory.reclaim", "1M");
          EXPECT_TRUE(err == 0 || err == EAGAIN) << errno_name(err);  // EAGAIN: fell short
        }
      }  // the cache unregisters (waiting for an in-flight reclaim) and uncharges
      if (g->is_online()) {
        EXPECT_EQ(ctl.remove(*g), 0);
      }
    }
  };
  // Members: charge pinned memory; may be OOM-killed.
  auto member_owner = [&](int id) {
    std::mt19937 rng(100 + id);
    GroupRef g;
    ASSERT_EQ(ctl.create("top/m" + std::to_string(id), &g), 0);
    for (int round = 0; round < 400 && time_left(); ++round) {
      Member m(*g, "m", [](Member& victim) { victim.uncharge(victim.charged()); });
      // Any outcome is legal under this load (refused, forced, killed): the test checks the
      // counters once every owner is done.
      for (int i = 0; i < 50 && !m.killed(); ++i) static_cast<void>(m.charge(1 + rng() % 8));
      m.uncharge(rng() % 64);
    }
    ASSERT_EQ(ctl.remove(*g), 0);
  };
  // Proactive reclaim and limit changes from the side.
  auto knob_twiddler = [&] {
    std::mt19937 rng(7);
    while (time_left()) {
      const int err = write_file(*top, "memory.reclaim", std::to_string(1 + rng() % 4) + "M");
      EXPECT_TRUE(err == 0 || err == EAGAIN) << errno_name(err);  // EAGAIN: fell short
      EXPECT_EQ(write_file(*top, "memory.high", rng() % 2 ? "6M" : "max"), 0);
      std::this_thread::yield();
    }
  };

  std::vector<std::thread> threads;
  threads.emplace_back(cache_owner, 1);
  threads.emplace_back(cache_owner, 2);
  threads.emplace_back(member_owner, 1);
  threads.emplace_back(knob_twiddler);
  for (auto& t : threads) t.join();

  ctl.stock().drain_all(&ctl.root());
  EXPECT_EQ(top->memory().usage(), 0);
  EXPECT_EQ(ctl.root().memory().usage(), 0);
  EXPECT_EQ(top->memory().children_low_usage(), 0);
  EXPECT_EQ(ctl.nr_dying(), 0u);
  EXPECT_EQ(top->memory().underflows(), 0u);
}

}  // namespace
}  // namespace memcg
