// The admission queue's fairness (admission_queue.hpp): virtual time by the memory admitted
// over the weight, and the bounded hold-back of the groups ahead of a head starved on a shared
// limited level. The order is an index (AdmissionQueueCore::backlog) of the backlogged groups
// by virtual time; the starved groups are a list of their own, each with the groups it holds
// back, which leave the index while held: a pass looks at the groups it may try, not at all.

#include <algorithm>
#include <cstdint>
#include <new>

#include "admission_queue_core.hpp"
#include "memcg/core/admission/admission.hpp"

namespace memcg {
namespace internal {

// The lowest level of `g`'s path (root excluded) with a memory.max where `need` more units do
// not fit beside its usage and the running admissions' promises (admission.hpp); null when every
// level has room now. Reads counters only (admit_stats takes the level's leaf lock): called with
// no queue lock held.
const Group* blocking_level(const Group& g, int64_t need) noexcept {
  const int64_t unlimited = g.controller().max_units();
  for (const Group* a = &g; a != nullptr && !a->is_root(); a = a->parent()) {
    const int64_t max = a->memory().max();
    if (max >= unlimited) continue;
    const int64_t promised = std::max<int64_t>(0, admit_stats(*a).promised_units);
    if (a->memory().usage() + promised + need > max) return a;
  }
  return nullptr;
}

bool under(const Group& g, const Group* level) noexcept {
  for (const Group* a = &g; a != nullptr; a = a->parent())
    if (a == level) return true;
  return false;
}

// ---- entries: a group is known while it has items queued --------------------------------------

GroupEntry* AdmissionQueueCore::entry_for(Group& g, QueueGroupState* stats) {
  HookBypass bypass;
  auto found = entries.find(g.id());
  GroupEntry* e = found != entries.end() ? found->second.get() : nullptr;
  if (e != nullptr && e->group) {
    if (e->held_by != nullptr) release(e);  // its head may change: the next pass looks again
    return e;
  }
  // Idle time is not credit: a group re-enters at the others' smallest virtual time, or where
  // it was if that is ahead (its lead). A group without a lead was never ahead of where it
  // re-enters: nothing of its past matters.
  const uint64_t m = min_vtime();
  if (e != nullptr) {  // a lead: its entry comes back, with its node of the index
    leads.erase({e->vtime, e});
    e->group = GroupRef(&g);
    e->stats = stats;
    e->vtime = std::max(e->vtime, m);
    e->parked.value() = e->key();
    backlog.insert(std::move(e->parked));
    return e;
  }
  auto made = std::make_unique<GroupEntry>();
  e = made.get();
  e->gid = g.id();
  e->group = GroupRef(&g);
  e->stats = stats;
  e->vtime = m;
  e->order = next_order++;
  auto slot = entries.emplace(g.id(), std::move(made)).first;
  try {
    backlog.insert(e->key());
  } catch (...) {
    entries.erase(slot);
    throw;
  }
  return e;
}

void AdmissionQueueCore::drop_entry(GroupEntry* e) noexcept {
  HookBypass bypass;
  unstarve(e);  // nothing queued: it holds nobody back
  if (e->held_by != nullptr) {
    GroupEntry* s = e->held_by;
    if (e->hprev != nullptr) e->hprev->hnext = e->hnext;
    else s->held = e->hnext;
    if (e->hnext != nullptr) e->hnext->hprev = e->hprev;
    e->hprev = e->hnext = nullptr;
    e->held_by = nullptr;  // its node of the index is parked already
  } else {
    e->parked = backlog.extract(e->key());
  }
  // The group's reference goes under the lock: never the last one, since the item that left
  // holds its own (its reservation), and items are destroyed with no lock held.
  e->group = GroupRef();
  e->stats = nullptr;
  if (e->vtime > floor()) {
    // Ahead of where it would re-enter: kept (without its group) until the others pass it.
    // Without memory for that the group loses its lead (it re-enters at the others' smallest).
    try {
      leads.emplace(e->vtime, e);
      return;
    } catch (...) {
    }
  }
  entries.erase(e->gid);
}

void AdmissionQueueCore::prune_leads() noexcept {
  HookBypass bypass;
  const uint64_t f = floor();
  while (!leads.empty() && leads.begin()->first <= f) {
    const uint64_t gid = leads.begin()->second->gid;
    leads.erase(leads.begin());
    entries.erase(gid);
  }
}

// ---- virtual time --------------------------------------------------------------------------------

void AdmissionQueueCore::set_vtime(GroupEntry* e, uint64_t v) noexcept {
  if (e->vtime == v) return;
  if (e->held_by != nullptr) {
    e->vtime = v;  // its parked key is refreshed when it comes back
    return;
  }
  auto node = backlog.extract(e->key());
  e->vtime = v;
  node.value() = e->key();
  backlog.insert(std::move(node));
}

// The smallest virtual time of the backlogged groups, or vclock when none is. A held group is
// ahead of the group holding it, which is backlogged: the index's first is the smallest.
uint64_t AdmissionQueueCore::min_vtime() const noexcept {
  return backlog.empty() ? vclock : backlog.begin()->vtime;
}

// The smallest virtual time of the backlogged groups under `level` (all when null) but
// `except`; UINT64_MAX when there is none.
uint64_t AdmissionQueueCore::min_vtime_of(const GroupEntry* except,
                                          const Group* level) const noexcept {
  uint64_t m = UINT64_MAX;
  for (const VKey& k : backlog)
    if (k.entry != except && (level == nullptr || under(*k.entry->group, level))) {
      m = k.vtime;
      break;
    }
  if (level == nullptr) return m;
  // Under a level, a held group may be the smallest there (its holder being elsewhere): rare
  // (the end of a hold), so these are walked.
  for (const GroupEntry* s = starved; s != nullptr; s = s->snext)
    for (const GroupEntry* x = s->held; x != nullptr; x = x->hnext)
      if (x != except && x->vtime < m && under(*x->group, level)) m = x->vtime;
  return m;
}

// Virtual time not used for lack of room that only the group's own items can give back (its
// own memory.max), or given up at the end of a hold-back, is not credit: like a group back
// from idle, it moves up to the others' smallest.
void AdmissionQueueCore::catch_up(GroupEntry* e, const Group* level) noexcept {
  const uint64_t m = min_vtime_of(e, level);
  if (m != UINT64_MAX) set_vtime(e, std::max(e->vtime, m));
}

void AdmissionQueueCore::admitted(GroupEntry* e, uint64_t units) noexcept {
  unstarve(e);
  vclock = e->vtime;
  const uint32_t w = e->stats->weight.load(std::memory_order_relaxed);
  const uint64_t cost = virtual_cost(units, w);
  set_vtime(e, e->vtime > UINT64_MAX - cost ? UINT64_MAX : e->vtime + cost);
  if (e->vtime >= kRebaseAt) rebase();
  prune_leads();
}

// Moves every virtual time down by the smallest of the backlogged groups (those below it, idle,
// to 0: they re-enter at the smallest anyway), keeping their differences. Rare (2^62).
void AdmissionQueueCore::rebase() noexcept {
  const uint64_t base = min_vtime();
  auto down = [base](uint64_t v) { return v > base ? v - base : 0; };
  std::set<VKey> moved;
  while (!backlog.empty()) {
    auto node = backlog.extract(backlog.begin());
    GroupEntry* e = node.value().entry;
    e->vtime = down(e->vtime);
    node.value() = e->key();
    moved.insert(moved.end(), std::move(node));  // the order is kept: no comparison moves
  }
  backlog.swap(moved);
  for (auto& [id, e] : entries)
    if (e->held_by != nullptr) e->vtime = down(e->vtime);
  std::set<std::pair<uint64_t, GroupEntry*>> by_vtime;
  while (!leads.empty()) {
    auto node = leads.extract(leads.begin());
    GroupEntry* e = node.value().second;
    e->vtime = down(e->vtime);
    node.value().first = e->vtime;
    by_vtime.insert(by_vtime.end(), std::move(node));
  }
  leads.swap(by_vtime);
  vclock = down(vclock);
}

// ---- the hold-back ---------------------------------------------------------------------------------

void AdmissionQueueCore::starve(GroupEntry* e, const Group* level) noexcept {
  if (e->starved_at == nullptr) {
    e->sprev = nullptr;
    e->snext = starved;
    if (starved != nullptr) starved->sprev = e;
    starved = e;
  }
  if (e->starved_at != level) {  // another level: another hold, the old one's groups go on
    e->holding = false;
    untime(e);
    release_held(e);
  }
  e->starved_at = level;
}

void AdmissionQueueCore::unstarve(GroupEntry* e) noexcept {
  if (e->starved_at != nullptr) {
    if (e->sprev != nullptr) e->sprev->snext = e->snext;
    else starved = e->snext;
    if (e->snext != nullptr) e->snext->sprev = e->sprev;
    e->sprev = e->snext = nullptr;
  }
  e->starved_at = nullptr;
  e->holding = false;
  untime(e);
  release_held(e);
}

void AdmissionQueueCore::untime(GroupEntry* s) noexcept {
  if (!s->hold_timed) return;
  const uint64_t end = Clock::after(s->hold_since, options.hold_ns);
  hold_ends.erase({end, s});
  s->hold_timed = false;
}

void AdmissionQueueCore::release(GroupEntry* x) noexcept {
  GroupEntry* s = x->held_by;
  if (x->hprev != nullptr) x->hprev->hnext = x->hnext;
  else s->held = x->hnext;
  if (x->hnext != nullptr) x->hnext->hprev = x->hprev;
  x->hprev = x->hnext = nullptr;
  x->held_by = nullptr;
  x->parked.value() = x->key();
  backlog.insert(std::move(x->parked));
}

void AdmissionQueueCore::release_held(GroupEntry* s) noexcept {
  while (s->held != nullptr) release(s->held);
}

// Whether `x`'s head waits for a starved group (the hold-back, admission_queue.hpp): one that
// is starved at a level above x, and that x is ahead of by kHoldLagItems of its own head item
// in virtual time. Then x leaves the index until that group lets it go (admitted, no longer
// starved there, its hold ended). A hold that lasted options.hold_ns ends: the starved group
// gives up its lag (catch_up). O(starved groups).
bool AdmissionQueueCore::held_back(GroupEntry* x) {
  if (starved == nullptr || options.hold_ns == 0) return false;
  const uint32_t w = std::max<uint32_t>(x->stats->weight.load(std::memory_order_relaxed), 1);
  const uint64_t lag = kHoldLagItems * virtual_cost(x->items.begin()->second->units, w);
  for (GroupEntry* s = starved; s != nullptr;) {
    GroupEntry* next = s->snext;
    if (s == x || x->vtime < s->vtime || x->vtime - s->vtime < lag ||
        !under(*x->group, s->starved_at)) {
      s = next;
      continue;
    }
    const uint64_t now = clock.now_ns();
    if (!s->holding) {
      HookBypass bypass;
      hold_ends.emplace(Clock::after(now, options.hold_ns), s);  // may throw: nothing changed
      s->holding = true;
      s->hold_since = now;
      s->hold_timed = true;
    } else if (now - std::min(now, s->hold_since) >= options.hold_ns) {
      release_held(s);
      catch_up(s, s->starved_at);
      unstarve(s);
      s = next;
      continue;
    }
    x->parked = backlog.extract(x->key());
    x->held_by = s;
    x->hprev = nullptr;
    x->hnext = s->held;
    if (s->held != nullptr) s->held->hprev = x;
    s->held = x;
    return true;
  }
  return false;
}

// The holds that lasted options.hold_ns, of starved groups holding some group back now (the
// others end when they would hold one again: held_back).
void AdmissionQueueCore::end_holds(uint64_t now) {
  while (!hold_ends.empty() && hold_ends.begin()->first <= now) {
    GroupEntry* s = hold_ends.begin()->second;
    hold_ends.erase(hold_ends.begin());
    s->hold_timed = false;
    if (s->held == nullptr) continue;
    release_held(s);
    catch_up(s, s->starved_at);
    unstarve(s);
  }
}

}  // namespace internal
}  // namespace memcg
