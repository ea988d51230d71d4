// The scenario runner: a `queue` step, an admission queue served by a shared pool of lanes on
// the virtual clock (scenario.hpp, QueueStep; docs/scenarios.md, "`queue`").
//
// Lanes run one at a time (sim_clock.hpp), so the queue's state needs no lock of its own; its
// mutex exists for Clock::wait_until, where an idle lane parks. A try may itself park its lane
// (the library's zero-timeout wait yields), letting other lanes run: the tenant whose head is in
// a try is marked `trying`, and nothing else touches it until the try returns.
#include <algorithm>
#include <array>
#include <deque>

#include "runner.hpp"

namespace memcgctl::detail {

namespace {
// The library queue's fairness (admission_queue.hpp), on the virtual clock: an admission of U
// units costs its group U * kVirtualPerUnit / weight of virtual time, so while every group is
// backlogged the memory admitted follows the weights.
constexpr uint64_t kVirtualPerUnit = 1'000'000;
// A group whose head is refused for lack of room on a shared limited level holds back the
// groups under that level that are this many of their head items ahead of it, for at most
// kHoldNs of virtual time at a time (the library's defaults).
constexpr uint64_t kHoldLagItems = 4;
constexpr uint64_t kHoldNs = 2'000'000;
constexpr size_t kNone = SIZE_MAX;

uint64_t virtual_cost(int64_t units, uint32_t weight) {
  return static_cast<uint64_t>(std::max<int64_t>(units, 1)) *
         (kVirtualPerUnit / std::max(weight, 1u));
}

// The lowest level of `g`'s path (root excluded) with a memory.max where an admission of
// `units`, at the growth factor in force, does not fit beside its usage and the running
// admissions' promises; null when every level has room.
const memcg::Group* blocking_level(const memcg::Group& g, int64_t units) {
  const int64_t unlimited = g.controller().max_units();
  const int64_t need = units * static_cast<int64_t>(memcg::admit_growth(g)) / 1000;
  for (const memcg::Group* a = &g; a != nullptr && !a->is_root(); a = a->parent()) {
    const int64_t max = a->memory().max();
    if (max >= unlimited) continue;
    const int64_t promised = std::max<int64_t>(0, memcg::admit_stats(*a).promised_units);
    if (a->memory().usage() + promised + std::min(need, max) > max) return a;
  }
  return nullptr;
}

bool under(const memcg::Group& g, const memcg::Group* level) {
  for (const memcg::Group* a = &g; a != nullptr; a = a->parent())
    if (a == level) return true;
  return false;
}

// Items within a group: high before normal before low, each in file order.
size_t class_of(memcg::WaitPriority p) {
  return p == memcg::WaitPriority::kHigh ? 0 : p == memcg::WaitPriority::kLow ? 2 : 1;
}
}  // namespace

struct QueueState {
  struct Tenant {
    memcg::GroupRef group;
    uint32_t weight = kDefaultAdmitWeight;
    uint64_t vtime = 0;                        // weighted units admitted so far
    const memcg::Group* starved_at = nullptr;  // the shared level its head found full
    uint64_t hold_since = 0;                   // when it began to hold others back; 0: not
    std::array<std::deque<size_t>, 3> queued;  // items not yet admitted, by class
    bool trying = false;                       // a lane is in a try of its head
    uint64_t items = 0, admitted = 0, timed_out = 0, refused = 0, tries = 0, killed = 0;
    size_t head() const {
      for (const auto& q : queued)
        if (!q.empty()) return q.front();
      return kNone;
    }
    void pop() {
      for (auto& q : queued)
        if (!q.empty()) {
          q.pop_front();
          return;
        }
    }
  };
  struct Item {
    size_t tenant = 0;
    std::string name;  // MEMBER#N
    MemberState* st = nullptr;
    bool tried = false;
    uint64_t first_try_ns = 0, deadline_at = 0, admitted_ns = 0, end_ns = 0;
    uint64_t tries = 0;
    uint64_t order = 0;  // admission order, from 1; 0: not admitted
    size_t lane = kNone;
    memcg::ReserveStatus status = memcg::ReserveStatus::kTimedOut;
    bool killed = false;
  };
  std::vector<Tenant> tenants;
  std::vector<Item> items;
  size_t queued = 0;  // items neither admitted nor ended
  uint64_t admissions = 0;
  std::mutex mu;  // for the clock's waits only (see the top of the file)
  std::vector<std::unique_ptr<memcg::ClockWaiter>> waiters;
  std::vector<char> idle;
  std::vector<uint64_t> lane_items;
};

void Runner::queue_wake(QueueState& qs, bool all) {
  std::lock_guard<std::mutex> l(qs.mu);
  for (size_t i = 0; i < qs.idle.size(); ++i) {
    if (!qs.idle[i]) continue;
    qs.idle[i] = 0;
    clock_.wake(*qs.waiters[i]);
    if (!all) return;
  }
}

void Runner::queue_end_item(QueueState& qs, size_t i, memcg::ReserveStatus status) {
  QueueState::Item& it = qs.items[i];
  it.status = status;
  it.end_ns = clock_.now_ns();
  if (it.st != nullptr && it.st->member) {
    it.st->reservation.reset();
    it.st->member->uncharge(it.st->member->charged());
    it.st->member.reset();
  }
}

size_t Runner::queue_take(const QueueStep& q, QueueState& qs) {
  std::vector<char> tried_now(qs.tenants.size(), 0);
  for (;;) {
    const uint64_t now = clock_.now_ns();
    // Items past their deadline leave first: a try is made only before it.
    for (QueueState::Tenant& t : qs.tenants) {
      while (!t.trying && t.head() != kNone && qs.items[t.head()].tried &&
             now >= qs.items[t.head()].deadline_at) {
        const size_t h = t.head();
        t.pop();
        --qs.queued;
        ++t.timed_out;
        queue_end_item(qs, h, memcg::ReserveStatus::kTimedOut);
      }
    }
    // The next group to try: the least virtual time, then the order of `tenants`; a group held
    // back for a starved one is passed over.
    size_t pick = kNone;
    for (size_t k = 0; k < qs.tenants.size(); ++k) {
      const QueueState::Tenant& t = qs.tenants[k];
      if (tried_now[k] || t.trying || t.head() == kNone) continue;
      if (pick == kNone || t.vtime < qs.tenants[pick].vtime) pick = k;
    }
    if (pick != kNone && queue_held_back(q, qs, pick)) {
      tried_now[pick] = 1;
      continue;
    }
    if (pick == kNone) break;
    tried_now[pick] = 1;
    QueueState::Tenant& t = qs.tenants[pick];
    const size_t h = t.head();
    QueueState::Item& it = qs.items[h];
    const QueueStep::Item& spec = q.items[h];
    if (it.st == nullptr) {
      // The item's member, in its group, made at its first try and kept until it ends.
      MemberState& base = *members_.at(q.member);
      auto fresh = make_member(*t.group, it.name, base.immune, base.release_on_preempt,
                               base.unwind_ns);
      it.st = fresh.get();
      members_[it.name] = std::move(fresh);
      it.st->reservation = std::make_unique<memcg::Reservation>(
          *it.st->member, memcg::ReserveOptions{q.oom, memcg::WaitPriority::kDefault});
    }
    if (!it.tried) {
      it.tried = true;
      it.first_try_ns = now;
      it.deadline_at = memcg::Clock::after(now, spec.deadline_ns);
    }
    ++it.tries;
    ++t.tries;
    MemberState& st = *it.st;
    memcg::ReserveStatus status = memcg::ReserveStatus::kKilled;
    if (st.member && !st.killed) {
      t.trying = true;
      st.in_reserve_call = true;
      status = st.reservation->reserve_for(spec.bytes, std::chrono::nanoseconds(0));
      st.in_reserve_call = false;
      t.trying = false;
      if (st.reservation_stale) {
        st.reservation_stale = false;
        st.reservation->release();
        if (memcg::held(status)) status = memcg::ReserveStatus::kKilled;
      }
    }
    if (status == memcg::ReserveStatus::kTimedOut) {  // not admissible now
      const memcg::Group* level =
          blocking_level(*t.group, units_of(spec.bytes) - st.reservation->units());
      if (level == t.group.get()) {
        // Only its own items can make room: no hold-back, and the virtual time it did not use
        // is not credit (it moves up to the others' smallest).
        t.starved_at = nullptr;
        t.hold_since = 0;
        queue_catch_up(qs, pick, nullptr);
      } else if (level != t.starved_at) {
        t.starved_at = level;
        t.hold_since = 0;
      }
      continue;
    }
    t.starved_at = nullptr;
    t.hold_since = 0;
    t.pop();
    --qs.queued;
    if (!memcg::held(status)) {
      // Refused for good (never-fits, killed, ...): the group's next item may be tried.
      ++t.refused;
      queue_end_item(qs, h, status);
      tried_now[pick] = 0;
      continue;
    }
    it.status = status;
    it.admitted_ns = clock_.now_ns();
    it.order = ++qs.admissions;
    ++t.admitted;
    t.vtime += virtual_cost(units_of(spec.bytes), t.weight);
    return h;
  }
  if (qs.queued == 0) queue_wake(qs, /*all=*/true);  // idle lanes have nothing left to wait for
  return kNone;
}

// Moves tenant k's virtual time up to the smallest of the other backlogged tenants under
// `level` (all when null): time not used is not credit.
void Runner::queue_catch_up(QueueState& qs, size_t k, const memcg::Group* level) {
  uint64_t m = UINT64_MAX;
  for (size_t j = 0; j < qs.tenants.size(); ++j) {
    const QueueState::Tenant& o = qs.tenants[j];
    if (j != k && o.head() != kNone && (level == nullptr || under(*o.group, level)))
      m = std::min(m, o.vtime);
  }
  if (m != UINT64_MAX) qs.tenants[k].vtime = std::max(qs.tenants[k].vtime, m);
}

// Whether tenant x's head waits for a starved tenant: one starved at a level above x that x is
// ahead of by kHoldLagItems of its head item; a hold that lasted kHoldNs ends, and the starved
// tenant gives up its lag.
bool Runner::queue_held_back(const QueueStep& q, QueueState& qs, size_t x) {
  QueueState::Tenant& t = qs.tenants[x];
  const uint64_t lag = kHoldLagItems * virtual_cost(units_of(q.items[t.head()].bytes), t.weight);
  for (size_t k = 0; k < qs.tenants.size(); ++k) {
    QueueState::Tenant& s = qs.tenants[k];
    if (k == x || s.starved_at == nullptr) continue;
    if (s.head() == kNone) {
      s.starved_at = nullptr;
      continue;
    }
    if (t.vtime < s.vtime || t.vtime - s.vtime < lag || !under(*t.group, s.starved_at)) continue;
    const uint64_t now = clock_.now_ns() + 1;  // + 1: hold_since 0 means "not holding"
    if (s.hold_since == 0) {
      s.hold_since = now;
    } else if (now - s.hold_since >= kHoldNs) {
      queue_catch_up(qs, k, s.starved_at);
      s.starved_at = nullptr;
      s.hold_since = 0;
      continue;
    }
    return true;
  }
  return false;
}

bool Runner::queue_run_item(const QueueStep& q, QueueState& qs, size_t i, size_t lane,
                            StepResult* res, uint64_t* unwound) {
  QueueState::Item& it = qs.items[i];
  QueueState::Tenant& t = qs.tenants[it.tenant];
  MemberState& st = *it.st;
  it.lane = lane;
  ++qs.lane_items[lane];
  // The lane runs in the item's group for PSI, as a worker thread serving that tenant.
  const int attach_err = memcg::attach_current_thread(*t.group);
  tl_lane_name = &q.member;
  tl_lane_state = &st;
  st.lane_running = true;
  st.end_iteration = false;
  bool ok = true;
  const std::vector<Step>& steps = q.items[i].steps;
  for (size_t k = 0; k < steps.size() && !r_.malformed; ++k) {
    if (unwind(st)) ++*unwound;
    StepResult sr;
    sr.step = &steps[k];
    sr.index = res->index;
    sr.lane = it.name;
    sr.lane_step = k + 1;
    if (!perform(steps[k], &sr)) {
      ok = false;
      break;
    }
    finish_step(&sr);
    lane_results_.push_back(std::move(sr));
    sample(res->index, /*force=*/false);
    // What the step gave back may let a queued item in: an idle lane tries.
    if (qs.queued > 0) queue_wake(qs, /*all=*/false);
    if (!std::holds_alternative<TickStep>(steps[k].body)) clock_.yield_for(0);
    if (st.end_iteration) break;
  }
  if (unwind(st)) ++*unwound;
  st.lane_running = false;
  it.killed = st.killed;
  if (st.killed) ++t.killed;
  queue_end_item(qs, i, it.status);
  tl_lane_state = nullptr;
  tl_lane_name = nullptr;
  if (attach_err == 0) memcg::detach_current_thread();
  if (qs.queued > 0) queue_wake(qs, /*all=*/false);
  return ok && !r_.malformed;
}

bool Runner::perform_body(const Step&, const QueueStep& q, StepResult* res) {
  const uint64_t start = clock_.now_ns();
  QueueState qs;
  for (const QueueStep::Tenant& spec : q.tenants) {
    QueueState::Tenant t;
    t.group = ctl_.lookup(spec.group);
    t.weight = spec.weight;
    if (!t.group) {
      res->failed = true;
      res->message = "queue: group " + spec.group + " is not online";
      return true;
    }
    qs.tenants.push_back(std::move(t));
  }
  qs.items.resize(q.items.size());
  for (size_t i = 0; i < q.items.size(); ++i) {
    size_t k = 0;
    while (q.tenants[k].group != q.items[i].group) ++k;  // the loader listed every item's group
    qs.items[i].tenant = k;
    qs.items[i].name = q.member + "#" + std::to_string(i + 1);
    qs.tenants[k].queued[class_of(q.items[i].priority)].push_back(i);
    ++qs.tenants[k].items;
  }
  qs.queued = q.items.size();
  for (size_t l = 0; l < q.workers; ++l)
    qs.waiters.push_back(std::make_unique<memcg::ClockWaiter>());
  qs.idle.assign(q.workers, 0);
  qs.lane_items.assign(q.workers, 0);
  std::vector<uint64_t> unwound(q.workers, 0), lane_end(q.workers, 0);
  clock_.run_lanes(
      q.workers,
      [&](size_t lane) {
        while (!r_.malformed) {
          const size_t i = queue_take(q, qs);
          if (i != kNone) {
            if (qs.queued > 0) queue_wake(qs, /*all=*/false);  // room may remain for another
            if (!queue_run_item(q, qs, i, lane, res, &unwound[lane])) break;
            continue;
          }
          if (qs.queued == 0) break;
          // Nothing admissible: wait, in no group's admission, for a step of the block to end,
          // the first deadline of a head that was tried (a head in another lane's try is that
          // lane's to follow) or the end of a hold-back.
          uint64_t wake_at = memcg::Clock::kMaxNs;
          const uint64_t now = clock_.now_ns();
          for (const QueueState::Tenant& t : qs.tenants) {
            const size_t h = t.head();
            if (h != kNone && !t.trying && qs.items[h].tried)
              wake_at = std::min(wake_at, qs.items[h].deadline_at);
            // (A hold whose end has passed holds nobody now: waiting for it would spin.)
            if (t.starved_at != nullptr && t.hold_since != 0 && t.hold_since - 1 + kHoldNs > now)
              wake_at = std::min(wake_at, t.hold_since - 1 + kHoldNs);
          }
          std::unique_lock<std::mutex> l(qs.mu);
          qs.idle[lane] = 1;
          static_cast<void>(clock_.wait_until(*qs.waiters[lane], l, wake_at, std::stop_token{}));
          qs.idle[lane] = 0;
        }
        lane_end[lane] = clock_.now_ns();
      },
      [&] { on_tick(); });
  Json workers = Json::array();
  for (size_t l = 0; l < q.workers; ++l)
    workers.push_back(
        {{"items", qs.lane_items[l]}, {"end_ns", lane_end[l]}, {"unwound", unwound[l]}});
  Json tenants = Json::object();
  for (size_t k = 0; k < qs.tenants.size(); ++k) {
    const QueueState::Tenant& t = qs.tenants[k];
    tenants[q.tenants[k].group] = {{"admit_weight", t.weight}, {"items", t.items},
                                   {"admitted", t.admitted},   {"timed_out", t.timed_out},
                                   {"refused", t.refused},     {"killed", t.killed},
                                   {"tries", t.tries}};
    res->notes.push_back("queue " + q.tenants[k].group + ": admitted " +
                         std::to_string(t.admitted) + " of " + std::to_string(t.items) +
                         " items (timed out " + std::to_string(t.timed_out) + ", refused " +
                         std::to_string(t.refused) + ", killed " + std::to_string(t.killed) +
                         ") in " + std::to_string(t.tries) + " tries");
  }
  Json items = Json::array();
  for (size_t i = 0; i < qs.items.size(); ++i) {
    const QueueState::Item& it = qs.items[i];
    // From the first try to the admission, or to the end of an item never admitted.
    const uint64_t until = it.order != 0 ? it.admitted_ns : it.end_ns;
    Json j = {{"member", it.name},
              {"group", q.items[i].group},
              {"status", reserve_status_text(it.status)},
              {"tries", it.tries},
              {"waited_ns", it.tried && until > it.first_try_ns ? until - it.first_try_ns : 0}};
    if (it.order != 0) {
      j["order"] = it.order;
      j["worker"] = it.lane;
    }
    if (it.killed) j["killed"] = true;
    items.push_back(std::move(j));
  }
  res->detail["workers"] = std::move(workers);
  res->detail["tenants"] = std::move(tenants);
  res->detail["items"] = std::move(items);
  res->detail["elapsed_ns"] = clock_.now_ns() - start;
  return !r_.malformed;
}

}  // namespace memcgctl::detail
