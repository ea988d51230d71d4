// PSI for memory: stall sections, per-group SOME/FULL time, triggers and the memory.pressure
// file (the running averages are in psi_averages.cpp).
#include "memcg/core/signal/psi.hpp"
#include "memcg/base/internal/lock.hpp"
#include "memcg/base/internal/defer_callbacks.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <system_error>
#include <vector>

#include "memcg/core/charge/attach.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/signal/event_bus.hpp"
#include "pressure_state.hpp"
#include "timer.hpp"

namespace memcg {

namespace {

using internal::PsiGroupState;
using internal::PsiTriggerEntry;
using FiredList = std::vector<std::shared_ptr<PsiTriggerEntry>>;

// A thread delivering trigger events opens no stall sections (a callback that charges would
// otherwise account its own stall and re-enter the trigger it is serving).
thread_local int tl_stall_depth = 0;
thread_local bool tl_delivering = false;

PsiGroupState& state_of(Group& g) noexcept {
  return g.pressure_state().psi;
}

// Cumulative SOME/FULL time at `t` (>= state_since_ns). REQUIRES: ps.mutex held.
void totals_at(const PsiGroupState& ps, uint64_t t, uint64_t out[2]) noexcept {
  const uint64_t d = t - ps.state_since_ns;
  out[0] = ps.total_ns[0] + (ps.some ? d : 0);
  out[1] = ps.total_ns[1] + (ps.full ? d : 0);
}

// The growth of the trigger's state within its window, the previous window's growth counted for
// the share of the window that lies before the current window's start.
uint64_t window_update(PsiTriggerEntry& t, uint64_t now, uint64_t total) noexcept {
  const uint64_t window = t.spec.window_us * 1000;
  const uint64_t elapsed = now - t.win_start_ns;
  uint64_t growth = total - t.win_start_total;
  if (elapsed > window) {
    t.win_prev_growth = growth;
    t.win_start_ns = now;
    t.win_start_total = total;
  } else {
    growth += t.win_prev_growth * (window - elapsed) / window;
  }
  return growth;
}

// One look at a trigger at `now` with the group's totals; appends it to `fired` when it fires.
// REQUIRES: the group's mutex held.
void evaluate(const std::shared_ptr<PsiTriggerEntry>& tp, uint64_t now, const uint64_t tot[2],
              FiredList* fired) {
  PsiTriggerEntry& t = *tp;
  const uint64_t total = tot[t.spec.state == PsiState::kSome ? 0 : 1];
  const uint64_t window = t.spec.window_us * 1000;
  const bool new_stall = total != t.last_seen_total;
  t.last_seen_total = total;
  if (!new_stall) {
    // No stall for longer than a window: activity that resumes starts a fresh window (the
    // kernel's poller restarts its windows when it wakes up), so old growth is not counted again.
    if (now - t.last_growth_ns > window) {
      t.win_start_ns = now;
      t.win_start_total = total;
      t.win_prev_growth = 0;
      t.last_growth_ns = now;
    }
    if (!t.pending) return;
  } else {
    t.last_growth_ns = now;
    const uint64_t growth = window_update(t, now, total);
    if (!t.pending) {
      if (growth < t.spec.threshold_us * 1000) return;
      t.pending = true;
    }
  }
  // One event per window; a breach inside the limit waits, it is not dropped.
  if (t.fired_once && now < t.last_event_ns + window) return;
  // A reader that must not run callbacks (defer_callbacks.hpp) leaves the event pending.
  if (internal::callbacks_deferred()) return;
  t.pending = false;
  t.fired_once = true;
  t.last_event_ns = now;
  fired->push_back(tp);
}

// Folds every grid point up to `now` into the averages (and evaluates unprivileged triggers
// there), using the state that held since the last change. REQUIRES: ps.mutex held.
// Bounded for any jump of the clock: an idle stretch is one step; a stalled one iterates until
// the averages reach its sample (a few thousand periods at most) and skips the rest.
void catch_up(PsiGroupState& ps, uint64_t now, FiredList* fired) {
  constexpr uint64_t kPeriodNs = internal::PsiAverages::kPeriodNs;
  internal::PsiAverages& avg = ps.averages;
  while (avg.next_update_ns() <= now) {
    uint64_t t = avg.next_update_ns();
    uint64_t tot[2];
    totals_at(ps, t, tot);
    const bool stalled[2] = {ps.some, ps.full};
    if (!ps.some && tot[0] == avg.reported(0) && tot[1] == avg.reported(1)) {
      // Idle from here to now: every remaining period reports zero, so one late run with
      // missed periods decays them all in one step.
      t += (now - t) / kPeriodNs * kPeriodNs;
    } else if (ps.state_since_ns <= t - kPeriodNs && avg.skip_steady(now, stalled, tot)) {
      // The state held through every period up to now and the averages have converged.
      t = avg.last_update_ns();
      totals_at(ps, t, tot);
      for (const auto& tr : ps.triggers)
        if (!tr->privileged) evaluate(tr, t, tot, fired);
      continue;
    }
    avg.update(t, tot);
    for (const auto& tr : ps.triggers)
      if (!tr->privileged) evaluate(tr, t, tot, fired);
  }
}

// The controller clock's time for the group's timeline, which never runs backwards. Readings
// past Clock::kMaxNs are taken as that time (clock.hpp): the grid arithmetic then cannot wrap.
// REQUIRES: ps.mutex held.
uint64_t timeline_now(Group& g, const PsiGroupState& ps) noexcept {
  return std::max(std::min(g.controller().clock().now_ns(), Clock::kMaxNs), ps.state_since_ns);
}

// Brings the group's timeline up to the controller clock (read under the lock, so that it never
// runs backwards): folds the grid points passed, then returns that time and the totals at it.
// REQUIRES: ps.mutex held.
uint64_t advance(Group& g, PsiGroupState& ps, uint64_t tot[2], FiredList* fired) {
  const uint64_t now = timeline_now(g, ps);
  catch_up(ps, now, fired);
  totals_at(ps, now, tot);
  return now;
}

// The triggers of `g` that fired, on the event stream (event_bus.hpp) when it records.
void publish_fired(Group& g, const FiredList& fired) noexcept {
  if (fired.empty() || !g.controller().events().recording()) return;
  internal::HookBypass bypass;
  try {
    for (const auto& t : fired) {
      std::string p = "{\"state\":\"";
      p += t->spec.state == PsiState::kSome ? "some" : "full";
      p += "\",\"threshold_us\":" + std::to_string(t->spec.threshold_us);
      p += ",\"window_us\":" + std::to_string(t->spec.window_us) + "}";
      g.controller().events().publish(BusEventType::kPsiTrigger, g, p);
    }
  } catch (...) {  // no memory for a payload: the events are lost, the triggers still fire
  }
}

void deliver(const FiredList& fired) noexcept {
  if (fired.empty()) return;
  const bool outer = tl_delivering;
  tl_delivering = true;
  for (const auto& t : fired) t->fire(0);
  tl_delivering = outer;
}

// ---- polls: triggers looked at on time with no activity ----------------------------------------
//
// While a trigger has an event pending (a breach inside its rate limit) or its state stalls, the
// answer can change with no state change of the group: the pending event becomes due when the
// limit ends, a stall in progress reaches the threshold. Such triggers are registered here with
// the time to look again; the timer thread (SystemClock, timer.hpp) or Controller::tick (any
// other clock) then evaluates their group as a read would. A registered trigger is armed, so its
// group is alive while the registry's lock is held; a poll opens a delivery on the trigger's
// gate there (delivery.hpp), which holds the group until the poll is done and which reset()
// waits for.

// The shortest interval between two polls of a trigger: a stall's breach is seen at most this
// late, and a tiny window cannot make the timer spin.
constexpr uint64_t kMinPollNs = 1'000'000;  // 1 ms

struct PollEntry {
  std::shared_ptr<PsiTriggerEntry> trigger;
  Group* group;
  Controller* controller;
  bool system_clock;
  uint64_t due_ns;
};

struct PollRegistry {
  std::mutex mu;
  std::vector<PollEntry> entries;  // guarded by mu
};

PollRegistry& polls() {
  static PollRegistry* const r = new PollRegistry;  // never destroyed: the timer may outlive statics
  return *r;
}

std::atomic<int64_t> g_nr_polls{0};                  // entries; lets tick() skip the registry
std::atomic<uint64_t> g_system_due{UINT64_MAX};      // earliest SystemClock entry

// REQUIRES: r.mu held.
void refresh_system_due(PollRegistry& r) noexcept {
  uint64_t due = UINT64_MAX;
  for (const auto& e : r.entries)
    if (e.system_clock) due = std::min(due, e.due_ns);
  g_system_due.store(due, std::memory_order_relaxed);
}

// Records that `tp` (a trigger of `g`) must be polled at `due_ns` (0: no longer).
// REQUIRES: the group's mutex held, and `tp` among its triggers.
void set_poll(Group& g, const std::shared_ptr<PsiTriggerEntry>& tp, uint64_t due_ns) {
  PsiTriggerEntry& t = *tp;
  if (t.poll_due_ns == due_ns) return;
  t.poll_due_ns = due_ns;
  PollRegistry& r = polls();
  bool wake = false;
  {
    internal::LockGuard lock(r.mu);
    auto it = std::find_if(r.entries.begin(), r.entries.end(),
                           [&](const PollEntry& e) { return e.trigger == tp; });
    if (due_ns == 0) {
      if (it != r.entries.end()) {
        *it = std::move(r.entries.back());
        r.entries.pop_back();
        g_nr_polls.fetch_sub(1, std::memory_order_relaxed);
      }
    } else if (it != r.entries.end()) {
      it->due_ns = due_ns;
    } else {
      Controller& ctl = g.controller();
      const bool system = dynamic_cast<const SystemClock*>(&ctl.clock()) != nullptr;
      r.entries.push_back(PollEntry{tp, &g, &ctl, system, due_ns});
      g_nr_polls.fetch_add(1, std::memory_order_relaxed);
    }
    const uint64_t before = g_system_due.load(std::memory_order_relaxed);
    refresh_system_due(r);
    wake = g_system_due.load(std::memory_order_relaxed) < before;
  }
  if (wake) internal::timer_wake();
}

// When `tp` must be looked at again after an evaluation at `now` (0: not before the group's
// state changes). REQUIRES: the group's mutex held.
uint64_t next_poll(const PsiGroupState& ps, const PsiTriggerEntry& t, uint64_t now,
                   const uint64_t tot[2]) noexcept {
  const bool stalled = t.spec.state == PsiState::kSome ? ps.some : ps.full;
  if (!t.pending && !stalled) return 0;  // nothing can change until the state does
  // Unprivileged triggers are evaluated on the averaging grid: its next point.
  if (!t.privileged) return ps.averages.next_update_ns();
  const uint64_t window = t.spec.window_us * 1000;
  if (t.pending) return std::max(t.last_event_ns + window, now + 1);
  // Stalled: the earliest time the growth could reach the threshold if the stall holds.
  const uint64_t total = tot[t.spec.state == PsiState::kSome ? 0 : 1];
  uint64_t growth = total - t.win_start_total;
  const uint64_t elapsed = now - t.win_start_ns;
  if (elapsed <= window) growth += t.win_prev_growth * (window - elapsed) / window;
  const uint64_t threshold = t.spec.threshold_us * 1000;
  const uint64_t remaining = growth < threshold ? threshold - growth : 0;
  uint64_t due = now + std::max(std::min(remaining, window), kMinPollNs);
  // Past the rate limit at the earliest.
  if (t.fired_once) due = std::max(due, t.last_event_ns + window);
  return due;
}

// Evaluates the group's privileged triggers at `now` and schedules every trigger's next poll.
// REQUIRES: ps.mutex held; advance() just ran (unprivileged triggers were evaluated by it).
void evaluate_and_schedule(Group& g, PsiGroupState& ps, uint64_t now, const uint64_t tot[2],
                           FiredList* fired) {
  for (const auto& tr : ps.triggers)
    if (tr->privileged) evaluate(tr, now, tot, fired);
  for (const auto& tr : ps.triggers) set_poll(g, tr, next_poll(ps, *tr, now, tot));
}

// One poll of a trigger's group: what a read does, without the read.
void poll_group(Group& g) noexcept {
  PsiGroupState& ps = state_of(g);
  FiredList fired;
  {
    internal::LockGuard lock(ps.mutex);
    uint64_t tot[2];
    const uint64_t now = advance(g, ps, tot, &fired);
    evaluate_and_schedule(g, ps, now, tot, &fired);
  }
  publish_fired(g, fired);
  deliver(fired);
}

// Polls the registered triggers that `select` picks and whose time came by `now`.
template <typename Select>
void poll_due(Select select, uint64_t now) noexcept {
  struct Due {
    std::shared_ptr<PsiTriggerEntry> trigger;
    Group* group;
  };
  std::vector<Due> due;
  {
    PollRegistry& r = polls();
    internal::LockGuard lock(r.mu);
    auto& v = r.entries;
    for (size_t i = 0; i < v.size();) {
      PollEntry& e = v[i];
      if (select(e) && e.due_ns <= now) {
        // Armed (registered), so the group is alive here: the delivery takes its own reference.
        if (e.trigger->gate.begin(e.group)) due.push_back(Due{e.trigger, e.group});
        // The trigger is taken off; the poll registers it again if it still needs one. Its
        // poll_due_ns (guarded by its group's mutex) is cleared by the poll below.
        v[i] = std::move(v.back());
        v.pop_back();
        g_nr_polls.fetch_sub(1, std::memory_order_relaxed);
      } else {
        ++i;
      }
    }
    refresh_system_due(r);
  }
  for (auto& d : due) {
    {
      PsiGroupState& ps = state_of(*d.group);
      internal::LockGuard lock(ps.mutex);
      d.trigger->poll_due_ns = 0;  // no longer registered
    }
    d.trigger->gate.finish(d.group, [&]() noexcept { poll_group(*d.group); });
  }
}

// Takes a trigger off the registry. REQUIRES: it is no longer among its group's triggers.
void unpoll(const std::shared_ptr<PsiTriggerEntry>& tp) noexcept {
  PollRegistry& r = polls();
  internal::LockGuard lock(r.mu);
  auto it = std::find_if(r.entries.begin(), r.entries.end(),
                         [&](const PollEntry& e) { return e.trigger == tp; });
  if (it == r.entries.end()) return;
  *it = std::move(r.entries.back());
  r.entries.pop_back();
  g_nr_polls.fetch_sub(1, std::memory_order_relaxed);
  refresh_system_due(r);
}

// Applies a change of the group's counts at the current time: time in the old state is
// accounted first, then privileged triggers look at the new totals.
void change(Group& g, int d_stalled, int d_extra, int d_tasks) noexcept {
  PsiGroupState& ps = state_of(g);
  FiredList fired;
  {
    internal::LockGuard lock(ps.mutex);
    uint64_t tot[2];
    const uint64_t now = advance(g, ps, tot, &fired);
    ps.total_ns[0] = tot[0];
    ps.total_ns[1] = tot[1];
    ps.state_since_ns = now;
    ps.nr_stalled += d_stalled;
    ps.nr_extra += d_extra;
    ps.nr_tasks += d_tasks;
    // Stalled threads attached below the group are among its tasks; the others add to them.
    ps.some = ps.nr_stalled > 0;
    ps.full = ps.some && ps.nr_stalled >= ps.nr_tasks + ps.nr_extra;
    if (!ps.triggers.empty()) evaluate_and_schedule(g, ps, now, tot, &fired);
  }
  publish_fired(g, fired);
  deliver(fired);
}

bool attached_below(const Group* attached, const Group& g) noexcept {
  return attached && attached->is_descendant_of(g);
}

}  // namespace

// ---- stall sections -----------------------------------------------------------------------------

MemStall::MemStall(Group& group) noexcept {
  if (tl_stall_depth++ > 0 || tl_delivering) return;
  group_ = &group;
  attached_ = attached_group();
  for (Group* g = group_; g; g = g->parent())
    change(*g, +1, attached_below(attached_, *g) ? 0 : 1, 0);
}

MemStall::~MemStall() {
  --tl_stall_depth;
  if (!group_) return;
  for (Group* g = group_; g; g = g->parent())
    change(*g, -1, attached_below(attached_, *g) ? 0 : -1, 0);
}

void internal::psi_task_moved(Group* from, Group* to) noexcept {
  for (Group* g = from; g; g = g->parent()) change(*g, 0, 0, -1);
  for (Group* g = to; g; g = g->parent()) change(*g, 0, 0, +1);
}

// ---- reading ------------------------------------------------------------------------------------

PsiStats psi_stats(Group& group) {
  PsiGroupState& ps = state_of(group);
  FiredList fired;
  PsiStats st{};
  {
    internal::LockGuard lock(ps.mutex);
    uint64_t tot[2];
    const uint64_t now = advance(group, ps, tot, &fired);
    evaluate_and_schedule(group, ps, now, tot, &fired);
    for (int s = 0; s < 2; ++s) {
      st.total_us[s] = tot[s] / 1000;
      for (int w = 0; w < 3; ++w) st.avg[s][w] = ps.averages.avg(s, w);
    }
  }
  publish_fired(group, fired);
  deliver(fired);
  return st;
}

void psi_stall_totals(Group& group, uint64_t out_ns[2]) noexcept {
  PsiGroupState& ps = state_of(group);
  internal::LockGuard lock(ps.mutex);
  totals_at(ps, timeline_now(group, ps), out_ns);
}

std::string format_psi(const PsiStats& st) {
  std::string out;
  static const char* const kNames[2] = {"some", "full"};
  for (int s = 0; s < 2; ++s) {
    char line[160];
    int n = std::snprintf(line, sizeof(line), "%s", kNames[s]);
    static const char* const kWin[3] = {"avg10", "avg60", "avg300"};
    for (int w = 0; w < 3; ++w) {
      const uint64_t a = st.avg[s][w];
      n += std::snprintf(line + n, sizeof(line) - n, " %s=%llu.%02llu", kWin[w],
                         static_cast<unsigned long long>(a >> 11),
                         static_cast<unsigned long long>(((a & 2047) * 100) >> 11));
    }
    std::snprintf(line + n, sizeof(line) - n, " total=%llu\n",
                  static_cast<unsigned long long>(st.total_us[s]));
    out += line;
  }
  return out;
}

// ---- triggers -----------------------------------------------------------------------------------

PsiTrigger::PsiTrigger(PsiTrigger&& o) noexcept : entry_(std::move(o.entry_)) {}

PsiTrigger& PsiTrigger::operator=(PsiTrigger&& o) noexcept {
  if (this != &o) {
    reset();
    entry_ = std::move(o.entry_);
  }
  return *this;
}

int PsiTrigger::arm(Group& group, const PsiTriggerSpec& spec, Callback callback, int eventfd,
                    bool privileged) {
  if (entry_) return EBUSY;
  if (spec.threshold_us == 0 || spec.window_us == 0 || spec.threshold_us > spec.window_us ||
      spec.window_us > kPsiWindowMaxUs)
    return EINVAL;
  if (!privileged && spec.window_us % kPsiUnprivilegedGrainUs != 0) return EINVAL;
  if (!callback && eventfd < 0) return EINVAL;
  if (!group.is_online()) return ENOENT;
  int efd = -1;
  if (eventfd >= 0 && (efd = internal::dup_eventfd(eventfd)) < 0) return EINVAL;
  std::function<void(int)> fn;
  if (callback) fn = [cb = std::move(callback)](int) { cb(); };
  if (dynamic_cast<const SystemClock*>(&group.controller().clock()) != nullptr) {
    try {
      internal::start_timer_once();  // polls on the SystemClock run there
    } catch (const std::system_error&) {
      if (efd >= 0) ::close(efd);
      return EAGAIN;
    }
  }
  auto e = std::make_shared<PsiTriggerEntry>(std::move(fn), efd, spec, privileged);
  PsiGroupState& ps = state_of(group);
  FiredList fired;
  {
    internal::LockGuard lock(ps.mutex);
    // Under the lock the removal takes after the group went offline: either this sees it
    // offline, or the removal finds the trigger.
    if (!group.is_online()) return ENOENT;  // `e` closes its duplicate
    e->gate.hold(group);
    uint64_t tot[2];
    const uint64_t now = advance(group, ps, tot, &fired);
    const uint64_t total = tot[spec.state == PsiState::kSome ? 0 : 1];
    e->win_start_ns = now;
    e->win_start_total = total;
    e->last_seen_total = total;
    e->last_growth_ns = now;
    ps.triggers.push_back(e);
    set_poll(group, e, next_poll(ps, *e, now, tot));  // a stall already in progress
  }
  publish_fired(group, fired);
  deliver(fired);
  entry_ = std::move(e);
  return 0;
}

int PsiTrigger::arm(Group& group, std::string_view text, Callback callback, int eventfd,
                    bool privileged) {
  if (entry_) return EBUSY;
  PsiTriggerSpec spec;
  if (int err = parse_psi_trigger(text, privileged, &spec)) return err;
  return arm(group, spec, std::move(callback), eventfd, privileged);
}

void PsiTrigger::reset() noexcept {
  if (!entry_) return;
  auto e = std::static_pointer_cast<PsiTriggerEntry>(entry_);
  // The trigger's reference: null when the group's removal took it (and unlinked `e`).
  Group* held = e->gate.release();
  if (held) {
    PsiGroupState& ps = state_of(*held);
    internal::LockGuard lock(ps.mutex);
    auto& v = ps.triggers;
    v.erase(std::remove(v.begin(), v.end(), e), v.end());
  }
  unpoll(e);     // no poll registers it again: it is no longer among the group's triggers
  e->retire();   // waits for a poll or call of it in flight (delivery.hpp)
  entry_.reset();
  if (held) held->put();
}

bool PsiTrigger::removed() const noexcept {
  return entry_ && static_cast<const PsiTriggerEntry*>(entry_.get())->gate.removed();
}

void internal::psi_group_removed(Group& g) noexcept {
  PsiGroupState& ps = state_of(g);
  FiredList told;
  {
    internal::LockGuard lock(ps.mutex);
    if (ps.triggers.empty()) return;
    told.swap(ps.triggers);
    for (const auto& t : told) t->gate.begin_removal(g);
  }
  // Off the poll registry before the group can go: a poll that took a trigger off it already
  // holds the group through its delivery and finds no trigger left to evaluate.
  for (const auto& t : told) unpoll(t);
  // The kernel's pressure file goes away: poll(2) on a trigger's descriptor gives
  // POLLERR|POLLPRI. Here: one final event on the eventfd and the callback, removed() true.
  const bool outer = tl_delivering;
  tl_delivering = true;  // as deliver(): a callback's stall sections are not accounted
  for (const auto& t : told) t->gate.finish_removal(g, [&]() noexcept { t->notify(0); });
  tl_delivering = outer;
}

uint64_t internal::psi_system_poll_due() noexcept {
  return g_system_due.load(std::memory_order_relaxed);
}

void internal::psi_poll_system(uint64_t now) noexcept {
  if (g_nr_polls.load(std::memory_order_relaxed) == 0) return;
  poll_due([](const PollEntry& e) { return e.system_clock; }, now);
}

void internal::psi_poll_controller(Controller& ctl) noexcept {
  if (g_nr_polls.load(std::memory_order_relaxed) == 0) return;
  Controller* const c = &ctl;
  poll_due([c](const PollEntry& e) { return e.controller == c; }, ctl.clock().now_ns());
}

uint64_t PsiTrigger::delivered() const noexcept {
  if (!entry_) return 0;
  return static_cast<const PsiTriggerEntry*>(entry_.get())
      ->delivered.load(std::memory_order_relaxed);
}

}  // namespace memcg
