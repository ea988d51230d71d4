// Events: the counters of memory.events and memory.events.local, mirroring the kernel's memcg
// events (low, high, max, oom, oom_kill, oom_group_kill), plus extensions of this library:
// `wait`, a charge that queued on the group's memory.max; `preempt`, a member of the group
// asked to give memory back for a waiting charge of a higher class (charge_wait.hpp);
// `oom_handled`, an OOM of the group that an OOM handler ended with no kill; `oom_spill`, an OOM
// that a member of the group ended by spilling, with no kill (oom.hpp).
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

// The kernel's events in the kernel's order, then the library's own (appended, so that the
// kernel's keys keep their positions).
enum class Event : int {
  kLow,
  kHigh,
  kMax,
  kOom,
  kOomKill,
  kOomGroupKill,
  kWait,
  kPreempt,
  kOomHandled,
  kOomSpill
};
inline constexpr int kNumEvents = 10;

// The key used in memory.events ("low", "high", "max", "oom", "oom_kill", "oom_group_kill",
// "wait", "preempt", "oom_handled", "oom_spill").
const char* event_name(Event e) noexcept;

class EventCounters {
 public:
  uint64_t get(Event e) const noexcept {
    return counts_[static_cast<int>(e)].load(std::memory_order_relaxed);
  }
  void add(Event e) noexcept {
    counts_[static_cast<int>(e)].fetch_add(1, std::memory_order_relaxed);
  }
  // memory.events format: one "key value" line per event, in the enum's order (the kernel's six,
  // then the library's own).
  std::string format() const;

 private:
  std::array<std::atomic<uint64_t>, kNumEvents> counts_{};
};

}  // namespace memcg
