// StatRegistry: the set of statistic items that memory.stat reports and that the rstat engine
// keeps per group. An item is a name plus a kind: a state item is an amount of memory in bytes
// (`anon`, `sock`), an event item is a count of occurrences (`pgscan_direct`). An item's index in
// the registry is its index in every group's statistic arrays (see rstat.hpp).
//
// The built-in items are the subset of the kernel's memory.stat items that this library
// maintains, in the kernel's order, at fixed indices (kAnon ... kPgfault). An application adds its
// own kinds of memory (say `hash_tables`) at start-up; they are appended after the built-in
// items, so built-in indices never move, and memory.stat prints them after the built-in ones.
// Readers of memory.stat look items up by name, as the kernel's interface asks of them.
//
// Thread safety: add() and freeze() are for start-up, before any other thread uses the registry.
// After freeze() the registry is immutable and every const method may be called from any thread.
// Cost: find() is a linear scan of a few dozen names; hot paths keep indices, never names.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace memcg {

enum class StatKind {
  kState,  // an amount in bytes; printed in bytes
  kEvent,  // a count of occurrences; printed as a count
};

struct StatItem {
  std::string name;
  StatKind kind;
};

class StatRegistry {
 public:
  // Indices of the built-in items. Their order is memory.stat's order.
  static constexpr int kAnon = 0;    // anonymous memory (caller-declared category)
  static constexpr int kFile = 1;    // file-backed memory (caller-declared category)
  static constexpr int kKernel = 2;  // kernel-like memory: internal structures of the application
  static constexpr int kSock = 3;    // network buffers charged through the socket path
  static constexpr int kShmem = 4;   // shared memory (caller-declared category)
  static constexpr int kPgscanDirect = 5;      // units scanned by reclaim on the charge path
  static constexpr int kPgscanProactive = 6;   // units scanned by memory.reclaim
  static constexpr int kPgstealDirect = 7;     // units reclaimed on the charge path
  static constexpr int kPgstealProactive = 8;  // units reclaimed by memory.reclaim
  // Charge calls that reached the page counters, i.e. that the per-CPU stock could not satisfy.
  // The kernel counts page faults here; a process has no faults to count, and a counter refill is
  // the event that costs the most on the charge path, so that is what this item counts.
  static constexpr int kPgfault = 9;
  static constexpr int kNrBuiltin = 10;

  // Longest accepted item name; memory.stat lines stay short.
  static constexpr size_t kMaxNameLength = 64;

  // A registry holding the built-in items only.
  StatRegistry();

  // Appends an application item and returns its index. Returns -1 when the registry is frozen,
  // when `name` is already registered, or when `name` is not 1..kMaxNameLength characters from
  // [a-z0-9_].
  int add(std::string name, StatKind kind);

  // After this, add() fails. Call it before the registry's size is used to size statistics.
  void freeze() noexcept { frozen_ = true; }
  bool frozen() const noexcept { return frozen_; }

  // Index of the item called `name`, or -1.
  int find(std::string_view name) const noexcept;

  size_t size() const noexcept { return items_.size(); }
  // REQUIRES: i < size().
  const StatItem& item(size_t i) const noexcept { return items_[i]; }

  // True when `name` is 1..kMaxNameLength characters from [a-z0-9_].
  static bool valid_name(std::string_view name) noexcept;

 private:
  std::vector<StatItem> items_;
  bool frozen_ = false;
};

}  // namespace memcg
