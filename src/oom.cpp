// The OOM killer: members, victim selection, memory.oom.group.
#include "memcg/oom.hpp"
#include "memcg/internal/lock.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "memcg/controller.hpp"

namespace memcg {

struct OomKillerAccess {
  static std::mutex& policy_mutex(Group& g) { return g.policy_mutex_; }
  static const std::vector<Member*>& members(Group& g) { return g.members_; }
};

Member::Member(Group& group, std::string name, KillFn on_kill, int score_adj)
    : group_(&group), name_(std::move(name)), on_kill_(std::move(on_kill)), adj_(0) {
  set_score_adj(score_adj);
  // A member counts as an attached task: its group cannot be removed while it lives.
  if (group.attach() != 0) throw std::invalid_argument("memcg: member of a removed group");
  internal::LockGuard lock(group.policy_mutex_);
  group.members_.push_back(this);
}

Member::~Member() {
  Group& g = *group_;
  {
    internal::LockGuard oom(g.controller().oom_state().mu);
    internal::LockGuard lock(g.policy_mutex_);
    auto& v = g.members_;
    v.erase(std::remove(v.begin(), v.end(), this), v.end());
  }
  uncharge_direct(g, charged_.exchange(0, std::memory_order_relaxed));
  g.detach();
}

ChargeStatus Member::charge(int64_t units, uint32_t flags) noexcept {
  const std::atomic<bool>* outer = internal::tl_charging_member_killed;
  internal::tl_charging_member_killed = &killed_;
  const ChargeStatus s = try_charge(*group_, units, flags);
  internal::tl_charging_member_killed = outer;
  if (memcg::charged(s)) charged_.fetch_add(units, std::memory_order_relaxed);
  return s;
}

int64_t Member::uncharge(int64_t units) noexcept {
  int64_t have = charged_.load(std::memory_order_relaxed);
  int64_t take;
  do {
    take = std::clamp<int64_t>(units, 0, have);
  } while (!charged_.compare_exchange_weak(have, have - take, std::memory_order_relaxed));
  // Straight from the counters: a killed member's memory must be seen as free at once.
  uncharge_direct(*group_, take);
  return take;
}

void Member::set_score_adj(int adj) noexcept {
  adj_.store(std::clamp(adj, kImmune, 1000), std::memory_order_relaxed);
}

namespace {

struct Candidate {
  Member* member;
  int64_t badness;
};

// Every member in the subtree of `root`, in walk order (pre-order, then joining order).
std::vector<Member*> members_below(Group& root) {
  std::vector<Member*> out;
  root.controller().walk(root, [&](Group& g) {
    internal::LockGuard lock(OomKillerAccess::policy_mutex(g));
    const auto& v = OomKillerAccess::members(g);
    out.insert(out.end(), v.begin(), v.end());
  });
  return out;
}

}  // namespace

std::string OomReport::format() const {
  std::ostringstream o;
  o << "memory cgroup out of memory in " << domain << " (request " << request_units << " units)\n";
  for (const OomCandidate& c : top)
    o << "  candidate " << c.member << " in " << c.group << ": charged=" << c.charged
      << " adj=" << c.score_adj << " badness=" << c.badness << "\n";
  if (victim.empty()) {
    o << "  no killable member\n";
  } else {
    o << "  killed " << victim;
    if (!oom_group.empty()) o << " and every member of oom.group " << oom_group;
    o << " (" << killed.size() << " killed)\n";
  }
  return o.str();
}

bool OomKiller::kill(Group& domain, int64_t units, OomReport* report_out) {
  Controller& ctl = domain.controller();
  internal::OomState& state = ctl.oom_state();
  internal::LockGuard oom(state.mu);

  // Someone freed memory while this charge waited for the lock.
  if (domain.memory().margin() >= units) return true;

  OomReport report;
  report.domain = domain.path();
  report.request_units = units;

  const std::vector<Member*> members = members_below(domain);
  const int64_t max = domain.memory().max();
  const int64_t total =
      std::max<int64_t>(1, max >= ctl.max_units() ? domain.memory().usage() : max);
  std::vector<Candidate> candidates;
  for (Member* m : members) {
    if (m->killed()) {
      // A victim is still giving its memory back: wait for it once rather than kill another.
      if (m->charged() > 0 && m->oom_waits_++ == 0) return true;
      continue;
    }
    const int adj = m->score_adj();
    if (adj == Member::kImmune) continue;
    const int64_t points = m->charged() + static_cast<int64_t>(adj) * total / 1000;
    candidates.push_back({m, std::max<int64_t>(points, 1)});
  }
  // Highest badness first; ties keep walk order (deterministic).
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.badness > b.badness; });
  for (size_t i = 0; i < candidates.size() && i < 5; ++i) {
    const Member& m = *candidates[i].member;
    report.top.push_back(
        {m.name(), m.group().path(), m.charged(), m.score_adj(), candidates[i].badness});
  }
  if (candidates.empty()) {
    state.last = report;
    if (report_out) *report_out = report;
    return false;
  }

  Member* victim = candidates.front().member;
  // memory.oom.group: the highest group from the victim's up to the domain that asks for it.
  Group* kill_group = nullptr;
  if (!victim->group().is_root())
    for (Group* g = &victim->group(); g; g = g->parent()) {
      if (g->oom_group()) kill_group = g;
      if (g == &domain) break;
    }

  auto kill_one = [&](Member* m) {
    if (m->killed_.exchange(true, std::memory_order_acq_rel)) return;
    m->group().raise(Event::kOomKill);
    report.killed.push_back(m->name());
    if (m->on_kill_) m->on_kill_(*m);
  };
  report.victim = victim->name();
  kill_one(victim);
  if (kill_group) {
    report.oom_group = kill_group->path();
    kill_group->raise(Event::kOomGroupKill);
    for (Member* m : members_below(*kill_group))
      if (m->score_adj() != Member::kImmune) kill_one(m);
  }
  state.last = report;
  if (report_out) *report_out = report;
  return true;
}

OomReport OomKiller::last_report(Controller& controller) {
  internal::OomState& state = controller.oom_state();
  internal::LockGuard oom(state.mu);
  return state.last;
}

}  // namespace memcg
