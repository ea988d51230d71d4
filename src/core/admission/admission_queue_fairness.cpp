// The admission queue's fairness (admission_queue.hpp): virtual time by the memory admitted
// over the weight, and the bounded hold-back of the groups ahead of a head starved on a shared
// limited level.

#include <algorithm>
#include <cstdint>

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

// The smallest virtual time of the backlogged groups, or vclock when none is.
uint64_t AdmissionQueueCore::min_vtime() const noexcept {
  uint64_t m = UINT64_MAX;
  for (const auto& e : groups)
    if (e->backlogged()) m = std::min(m, e->vtime);
  return m == UINT64_MAX ? vclock : m;
}

// The smallest virtual time of the backlogged groups under `level` (all when null) but
// `except`; UINT64_MAX when there is none.
uint64_t AdmissionQueueCore::min_vtime_of(const GroupEntry* except,
                                          const Group* level) const noexcept {
  uint64_t m = UINT64_MAX;
  for (const auto& e : groups)
    if (e.get() != except && e->backlogged() && (level == nullptr || under(*e->group, level)))
      m = std::min(m, e->vtime);
  return m;
}

// Virtual time not used for lack of room that only the group's own items can give back (its
// own memory.max), or given up at the end of a hold-back, is not credit: like a group back
// from idle, it moves up to the others' smallest.
void AdmissionQueueCore::catch_up(GroupEntry* e, const Group* level) noexcept {
  const uint64_t m = min_vtime_of(e, level);
  if (m != UINT64_MAX) e->vtime = std::max(e->vtime, m);
}

void AdmissionQueueCore::starve(GroupEntry* e, const Group* level) noexcept {
  if (e->starved_at == nullptr) ++nstarved;
  if (e->starved_at != level) e->holding = false;
  e->starved_at = level;
}

void AdmissionQueueCore::unstarve(GroupEntry* e) noexcept {
  if (e->starved_at != nullptr) --nstarved;
  e->starved_at = nullptr;
  e->holding = false;
}

// Whether `x`'s head waits for a starved group (the hold-back, admission_queue.hpp): one that
// is starved at a level above x, and that x is ahead of by kHoldLagItems of its own head item
// in virtual time. A hold that lasted options.hold_ns ends: the starved group gives up its
// lag (catch_up).
bool AdmissionQueueCore::held_back(const GroupEntry* x) noexcept {
  if (nstarved == 0 || options.hold_ns == 0) return false;
  const uint32_t w = std::max<uint32_t>(x->stats->weight.load(std::memory_order_relaxed), 1);
  const uint64_t lag = kHoldLagItems * virtual_cost(x->items.begin()->second->units, w);
  for (const auto& sp : groups) {
    GroupEntry* s = sp.get();
    if (s == x || s->starved_at == nullptr) continue;
    if (!s->backlogged()) {
      unstarve(s);
      continue;
    }
    if (x->vtime < s->vtime || x->vtime - s->vtime < lag || !under(*x->group, s->starved_at))
      continue;
    const uint64_t now = clock.now_ns();
    if (!s->holding) {
      s->holding = true;
      s->hold_since = now;
    } else if (now - std::min(now, s->hold_since) >= options.hold_ns) {
      catch_up(s, s->starved_at);
      unstarve(s);
      continue;
    }
    return true;
  }
  return false;
}

// Moves every virtual time down by the smallest of the backlogged groups (those below it, idle,
// to 0: they re-enter at the smallest anyway), keeping their differences.
void AdmissionQueueCore::rebase() noexcept {
  const uint64_t base = min_vtime();
  for (auto& e : groups) e->vtime = e->vtime > base ? e->vtime - base : 0;
  vclock = vclock > base ? vclock - base : 0;
}

}  // namespace internal
}  // namespace memcg
