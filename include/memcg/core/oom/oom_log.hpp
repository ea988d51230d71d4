// OomLog: the last OOM and preemption reports of one controller, kept so that an operator can
// see after the fact who was killed or asked to give memory back, and who held the memory then
// (memcg::http serves it as /v1/oom; OomKiller::last_report() keeps only the latest).
//
// Each entry is a copy of the report with a sequence number (1, 2, ... per controller, never
// reused, so a reader can tell what it missed), the time on the controller's clock, and the five
// largest consumers of the OOM domain at the decision: members (charged and admitted sizes) and
// groups (memory.current and the admitted sizes of the members in their subtree), largest first.
// A member killed in that decision counts with what it held when chosen, and its groups with it.
//
// Bounds: at most capacity() entries (default 32, 1..1024), oldest dropped first. Every string
// of an entry (names, paths, handler outcomes, error messages) is cut by one helper to kMaxName
// bytes on a UTF-8 character boundary and made valid UTF-8 (an invalid byte becomes U+FFFD), and
// every list to kMaxListed items, so an entry holds at most kMaxEntryText bytes of text (about
// 37 KiB; a typical one well under 1 KiB) and the ring at most capacity() times that, whatever
// the names and messages are.
//
// Thread safety: every call may be made from any thread. append() is called by the OOM killer
// under the OOM lock; the ring has its own mutex, taken last, and no callback runs under it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "memcg/core/oom/oom.hpp"

namespace memcg {

class Controller;
class Group;

// One of the largest consumers at the moment of a report.
struct OomConsumer {
  bool is_group = false;       // a group (its memory.current) or a member (what it charged)
  std::string name;            // the member's name, or the group's path
  std::string group;           // the member's group path (the group's own path for a group)
  uint64_t bytes = 0;          // charged (member) or memory.current (group)
  uint64_t admitted_bytes = 0; // admitted sizes of its reservations (a group: of its members)
};

// What kind of report an entry holds.
enum class OomLogKind : uint8_t { kOomKill, kPreempt };
const char* oom_log_kind_name(OomLogKind k) noexcept;  // "oom_kill", "preempt"

struct OomLogEntry {
  uint64_t seq = 0;      // 1, 2, ... in the order appended
  uint64_t time_ns = 0;  // the controller's clock at append
  OomLogKind kind = OomLogKind::kOomKill;
  OomReport oom;         // when kind == kOomKill
  PreemptReport preempt; // when kind == kPreempt
  std::vector<OomConsumer> members;  // largest first, at most 5
  std::vector<OomConsumer> groups;   // largest first, at most 5 (the domain's subtree)
};

// How an OOM ended, by what happened (its OomDecider folded): a kill (a victim of either order,
// also one whose kill was left to a preemption in progress), an OOM handler that made room, a
// spill that made room with nobody killed, or nothing (no member could be killed and nothing
// made room).
enum class OomOutcome : uint8_t { kKill, kHandled, kSpilled, kNone };
inline constexpr int kNumOomOutcomes = static_cast<int>(OomOutcome::kNone) + 1;
OomOutcome oom_outcome_of(OomDecider d) noexcept;
const char* oom_outcome_name(OomOutcome o) noexcept;  // "kill", "handled", "spilled", "none"

// Totals since the controller was created; they count every report, also those dropped.
struct OomLogTotals {
  uint64_t reports = 0;         // OOM reports (every OOM killer decision that was reported)
  uint64_t kills = 0;           // members killed in them
  uint64_t group_kills = 0;     // reports that killed a whole memory.oom.group
  uint64_t kill_failures = 0;   // kill callbacks that threw
  // OOM reports by outcome (index: OomOutcome); they add up to `reports`.
  uint64_t by_outcome[kNumOomOutcomes] = {};
  uint64_t preemptions = 0;     // preemption reports
  uint64_t preempt_asked = 0;   // members asked to give memory back in them
  // OOM reports by what ended them (OomReport::decider, index: OomDecider): the kernel's or the
  // excess order's victim, a handler, a spill, a kill left to a preemption, or nothing.
  uint64_t by_decider[kNumOomDeciders] = {};
};

class OomLog {
 public:
  static constexpr size_t kDefaultCapacity = 32;
  static constexpr size_t kMaxCapacity = 1024;
  static constexpr size_t kMaxName = 256;    // bytes kept of a name, path or error
  static constexpr size_t kMaxListed = 16;   // items kept of a report's killed/failed/asked lists
  static constexpr size_t kTopConsumers = 5;
  // The strings an entry can hold: the report's 4 names (domain, victim, oom group, handler),
  // 2 a candidate (at most 5), 1 a killed or spilled member, 2 a failure, 3 a handler call (the
  // lists at most kMaxListed each), and 2 a top consumer (kTopConsumers members and groups).
  static constexpr size_t kMaxEntryStrings =
      4 + 2 * 5 + kMaxListed * (1 + 1 + 2 + 3) + 2 * 2 * kTopConsumers;
  static constexpr size_t kMaxEntryText = kMaxEntryStrings * kMaxName;

  OomLog() = default;
  OomLog(const OomLog&) = delete;
  OomLog& operator=(const OomLog&) = delete;

  // EINVAL (nothing changed) unless 1 <= n <= kMaxCapacity; else 0, dropping the oldest
  // entries beyond n.
  [[nodiscard]] int set_capacity(size_t n);
  size_t capacity() const;

  // Records a report of `domain` (its largest consumers are read now). Called by the OOM killer
  // and the preemption path; `domain` must be alive. Never throws: an entry that cannot be
  // allocated is dropped (counted in the totals all the same).
  void append(Group& domain, const OomReport& report) noexcept;
  void append(Group& domain, const PreemptReport& report) noexcept;

  // The entries held, oldest first, with seq > `after` (0: all).
  std::vector<OomLogEntry> snapshot(uint64_t after = 0) const;
  OomLogTotals totals() const;
  uint64_t last_seq() const;

 private:
  // Appends `e` with the next sequence number; that number, or 0 when it was dropped.
  uint64_t push(OomLogEntry&& e) noexcept;
  mutable std::mutex mu_;
  size_t capacity_ = kDefaultCapacity;  // guarded by mu_
  std::deque<OomLogEntry> ring_;        // guarded by mu_
  uint64_t seq_ = 0;                    // guarded by mu_
  OomLogTotals totals_;                 // guarded by mu_
};

// The OOM log of `controller` (one per controller, created with it).
OomLog& oom_log(Controller& controller) noexcept;

// The report as one text line without line feeds, for a log: "oom_kill seq=3 t=1.250s
// domain=/a victim=q1 ... top_members=q1:64MiB/32MiB,... top_groups=a/b:80MiB/40MiB,...".
std::string format_oom_log_line(const OomLogEntry& e);

}  // namespace memcg
