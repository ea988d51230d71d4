// Events: the counters of memory.events and memory.events.local, mirroring the kernel's memcg
// events (low, high, max, oom, oom_kill, oom_group_kill).
//
// Each group keeps two arrays. `local` counts what happened to the group itself. The
// hierarchical array counts what happened to the group or any descendant: raising an event on
// G increments G and every ancestor below the root (the root never shows counts), unless the
// controller runs with `local_events` (the kernel's memory_localevents mount option), where only
// G's hierarchical counter moves.
//
// Thread safety: raise() and reads are lock-free and may run from any thread. Events are rare
// (slow paths only), so the counters live away from the hot usage counter.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace memcg {

enum class Event : int { kLow, kHigh, kMax, kOom, kOomKill, kOomGroupKill };
inline constexpr int kNumEvents = 6;

// The key used in memory.events ("low", "high", "max", "oom", "oom_kill", "oom_group_kill").
const char* event_name(Event e) noexcept;

class EventCounters {
 public:
  uint64_t get(Event e) const noexcept {
    return counts_[static_cast<int>(e)].load(std::memory_order_relaxed);
  }
  void add(Event e) noexcept {
    counts_[static_cast<int>(e)].fetch_add(1, std::memory_order_relaxed);
  }
  // memory.events format: six "key value" lines in the kernel's order.
  std::string format() const;

 private:
  std::array<std::atomic<uint64_t>, kNumEvents> counts_{};
};

}  // namespace memcg
