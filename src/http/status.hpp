// A group's status on the pages (GET /, GET /group/<path>): what troubled the group itself in the
// last kStatusWindowNs on the controller's clock, from the samples the history takes of every
// group (history.hpp). Not installed.
//
// The flags, worst first (their values order them, so a larger status sorts first):
//   oom_kill  members of the group itself were OOM-killed (memory.events.local oom_kill)
//   psi_full  every task of the group stalled for >= 5 % of a sample interval (MemcgPressureFull)
//   timeouts  charges waiting on its memory.max timed out (memory.wait timed_out)
//   max       its own memory.max events (memory.events.local max)
//   psi_some  some task stalled for >= 20 % of a sample interval (MemcgPressureSome)
//   high      its own memory.high events (memory.events.local high)
// PSI flags go to the group in trouble, not to its ancestors: a group whose child has the same
// PSI flag in the same sample does not get it (a child's stalls count in every ancestor), as the
// alerts of contrib/prometheus do.
//
// Bounds: one entry per group seen in the last sample (about 150 bytes plus its path); groups
// gone are dropped at the next sample.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace memcg::http::detail {

enum StatusFlag : uint32_t {
  kStatusHigh = 1u << 0,
  kStatusPsiSome = 1u << 1,
  kStatusMax = 1u << 2,
  kStatusTimeouts = 1u << 3,
  kStatusPsiFull = 1u << 4,
  kStatusOomKill = 1u << 5,
};
inline constexpr int kNumStatusFlags = 6;
// Flags at or above this are trouble ("bad"), below it warnings.
inline constexpr uint32_t kStatusBad = kStatusTimeouts;
inline constexpr uint64_t kStatusWindowNs = 60'000'000'000;  // "recent": the last minute
inline constexpr uint32_t kStatusSomePpm = 200'000;           // 20 %
inline constexpr uint32_t kStatusFullPpm = 50'000;            // 5 %

// One flag's names: in data-status (`key`), for people (`text`), and the alert whose runbook
// (docs/operations.md#<anchor>) says what to do.
struct StatusInfo {
  StatusFlag flag;
  const char* key;
  const char* text;
  const char* alert;
  const char* anchor;
};
// Worst first.
extern const StatusInfo kStatusInfo[kNumStatusFlags];

// The cumulative counts of one group at a sample.
struct StatusRead {
  std::string path;
  uint64_t psi_ns[2] = {0, 0};                 // some, full stall time
  uint64_t local[3] = {0, 0, 0};               // own high, max, oom_kill events
  uint64_t timed_out = 0;                      // memory.wait timed_out
};

class StatusTracker {
 public:
  // One sample of every group at `now_ns`. REQUIRES: the caller serialises calls.
  void update(const std::vector<StatusRead>& reads, uint64_t now_ns);
  // The status of `path` at the last sample (0 when unknown or calm).
  uint32_t status(const std::string& path) const;
  size_t bytes() const;

 private:
  struct Entry {
    StatusRead last;
    uint64_t t_ns = 0;
    uint64_t seen_ns[kNumStatusFlags] = {};  // when each flag last held (by bit index)
    uint32_t status = 0;
    uint64_t round = 0;
  };
  std::map<std::string, Entry> entries_;
  uint64_t round_ = 0;
};

// "oom_kill psi_full": the keys of `status`, worst first ("ok" when 0).
std::string status_keys(uint32_t status);

}  // namespace memcg::http::detail
