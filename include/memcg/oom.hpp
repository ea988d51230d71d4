// OOM handling: killable members and the OOM killer that picks among them when a group cannot
// be brought under memory.max any other way, mirroring the kernel's memcg OOM killer and
// memory.oom.group.
//
// A Member is what the application can kill to get memory back: a query, a connection, a tenant
// session (the kernel's task). It lives in one group, charges through the member (so its size,
// the kernel's badness, is known) and has a bias, the analogue of oom_score_adj (-1000 = immune,
// up to +1000). Killing calls the member's kill callback, which must release (or arrange to
// release) the member's memory; the charge that triggered the OOM is then retried.
//
// Victim choice (events_oom.md): among members of the OOM domain's subtree, the highest
// badness = charged units + adj x (max of the domain) / 1000; immune members are never chosen; if
// a member already killed still holds memory, wait for it (report progress) rather than kill
// another. memory.oom.group: the highest group on the path from the victim's group up to the
// domain that has oom.group = 1 is killed as a whole (all its non-immune members).
//
// Thread safety: every call may be made from any thread. Kill callbacks run without library
// locks held, on the thread whose charge triggered the OOM.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "memcg/charge.hpp"
#include "memcg/group.hpp"

namespace memcg {

class Member {
 public:
  static constexpr int kImmune = -1000;
  using KillFn = std::function<void(Member&)>;

  // Joins `group` (it must be online). `on_kill` is called once, when the OOM killer picks it.
  Member(Group& group, std::string name, KillFn on_kill, int score_adj = 0);
  // Uncharges what it still holds and leaves its group.
  ~Member();
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;

  // Charges `units` for this member (they count towards its badness).
  ChargeStatus charge(int64_t units, uint32_t flags = kDefaultCharge) noexcept;
  // Uncharges up to what it holds; returns what was uncharged.
  int64_t uncharge(int64_t units) noexcept;
  int64_t charged() const noexcept { return charged_.load(std::memory_order_relaxed); }

  void set_score_adj(int adj) noexcept;  // clamped to [-1000, 1000]
  int score_adj() const noexcept { return adj_.load(std::memory_order_relaxed); }
  bool killed() const noexcept { return killed_.load(std::memory_order_acquire); }
  const std::string& name() const noexcept { return name_; }
  Group& group() const noexcept { return *group_; }

 private:
  friend class OomKiller;
  GroupRef group_;
  const std::string name_;
  KillFn on_kill_;
  std::atomic<int> adj_;
  std::atomic<int64_t> charged_{0};
  std::atomic<bool> killed_{false};
  int oom_waits_ = 0;  // guarded by the controller's OOM lock
};

// Why a victim was chosen: the OOM report.
struct OomCandidate {
  std::string member;
  std::string group;
  int64_t charged = 0;
  int score_adj = 0;
  int64_t badness = 0;
};
struct OomReport {
  std::string domain;  // the group whose limit was hit
  int64_t request_units = 0;
  std::vector<OomCandidate> top;    // highest badness first (at most 5)
  std::string victim;               // member killed ("" if none)
  std::string oom_group;            // group killed as a whole ("" if none)
  std::vector<std::string> killed;  // every member killed
  std::string format() const;       // a short human-readable report
};

// Installs the OOM killer as the controller's OOM policy (Controller::set_oom_hook). The
// controller keeps members registered per group.
class OomKiller {
 public:
  // Selects and kills in `domain` for a charge of `units`. True if it made progress (killed, or a
  // previous victim is still releasing memory).
  static bool kill(Group& domain, int64_t units, OomReport* report = nullptr);
  // The last report produced in this controller (empty if none).
  static OomReport last_report(Controller& controller);
};

namespace internal {
// Per-controller OOM state: the OOM lock (recursive, so that a kill callback may destroy its
// member) and the last report.
struct OomState {
  std::recursive_mutex mu;
  OomReport last;
};
}  // namespace internal

}  // namespace memcg
