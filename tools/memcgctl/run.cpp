#include "run.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "memcg/alloc/lru_cache.hpp"
#include "memcg/base/clock.hpp"
#include "memcg/base/errors.hpp"
#include "memcg/core/attach.hpp"
#include "memcg/core/charge.hpp"
#include "memcg/core/charge_wait.hpp"
#include "memcg/core/controller.hpp"
#include "memcg/core/notify.hpp"
#include "memcg/core/oom.hpp"
#include "memcg/core/pressure.hpp"
#include "memcg/core/psi.hpp"
#include "memcg/core/reclaim.hpp"
#include "memcg/core/vmpressure.hpp"
#include "memcg/files/files.hpp"
#include "memcg/files/parse.hpp"
#include "sim_clock.hpp"
#include "values.hpp"

namespace memcgctl {

namespace {

std::string error_text(int err) {
  std::string s = memcg::errno_name(err);
  // Errors outside the interface files' set (EMFILE from an eventfd, ...): the system's words.
  if (s == "unknown") s = std::strerror(err);
  if (err == ENOENT) s += " (the library has no such file)";
  if (err == EACCES) s += " (the file is not writable)";
  return s;
}

// Pins the calling thread to the first CPU it may run on, for the scope: the per-CPU stock then
// uses the same shard throughout the run, whatever the scheduler would have done.
class PinToOneCpu {
 public:
  PinToOneCpu() {
    if (pthread_getaffinity_np(pthread_self(), sizeof(old_), &old_) != 0) return;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &old_)) continue;
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      pinned_ = pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0;
      return;
    }
  }
  ~PinToOneCpu() {
    if (pinned_) pthread_setaffinity_np(pthread_self(), sizeof(old_), &old_);
  }
  PinToOneCpu(const PinToOneCpu&) = delete;
  PinToOneCpu& operator=(const PinToOneCpu&) = delete;

 private:
  cpu_set_t old_;
  bool pinned_ = false;
};

memcg::Options controller_options(const Config& c, memcg::Clock* clock) {
  memcg::Options o;
  o.unit_shift = static_cast<unsigned>(__builtin_ctzll(c.unit));
  o.batch = c.batch;
  o.nr_shards = c.cpus;
  o.recursive_protection = c.recursive_protection;
  o.local_events = c.local_events;
  o.clock = clock;
  return o;
}

// Inside an application handler the library calls (a listener's `shrink` policy): the library
// may hold that registration's call lock there, so the handler must not park its lane on the
// clock (another lane notified by the same listener would block on the lock while the parked
// one holds it). Time a handler spends is owed instead and paid at the end of the step.
thread_local int tl_in_handler = 0;
thread_local uint64_t tl_owed_ns = 0;

// A member of the scenario: the library's Member plus what the kill callback did to it.
struct MemberState {
  std::unique_ptr<memcg::Member> member;
  bool killed = false;
};

// The handles of `listen`, `trigger`, `peak` and `watch` steps, with what they counted.
struct ListenerState {
  memcg::PressureListener listener;
  std::array<uint64_t, 3> by_level{};  // notifications received, by memcg::PressureLevel
  int64_t shrunk = 0;                   // units its `shrink` policy freed
};
struct TriggerState {
  memcg::PsiTrigger trigger;
  uint64_t fired = 0;
};
struct WatchState {
  std::unique_ptr<memcg::EventListener> listener;
  uint64_t notified = 0;
};

class Runner {
 public:
  Runner(const Scenario& s, const RunOptions& o)
      : s_(s), opts_(o), ctl_(controller_options(s.config, &clock_)), unit_(s.config.unit) {}

  ~Runner() {
    // Members, caches and handles hold charges and group references: gone before the controller.
    listeners_.clear();
    triggers_.clear();
    peaks_.clear();
    watches_.clear();
    members_.clear();
    caches_.clear();
  }

  RunResult run() {
    PinToOneCpu pin;
    for (const GroupSpec& g : s_.groups) r_.groups.push_back(g.path);
    if (!preflight()) return std::move(r_);
    if (!create_groups()) return std::move(r_);
    // A thread about to sleep or wait on the clock inside the library (a throttled charge): the
    // plot shows what the step did so far at the time it did it, before the stall.
    if (opts_.sample) clock_.set_on_block([this] { sample(current_index_, /*force=*/false); });
    // Enough rows of samples for kMaxPlotValues, and never fewer than the first, one in the
    // middle and the last.
    max_sample_rows_ = std::max<size_t>(3, kMaxPlotValues / std::max<size_t>(1, r_.groups.size()));
    sample(0, /*force=*/true);
    for (size_t i = 0; i < s_.steps.size(); ++i) {
      StepResult res;
      res.step = &s_.steps[i];
      res.index = i + 1;
      current_index_ = i + 1;
      if (!perform(s_.steps[i], &res)) return std::move(r_);
      finish_step(&res);
      r_.steps.push_back(std::move(res));
      // The steps of a `parallel` block's lanes, in the order they ran.
      for (StepResult& l : lane_results_) r_.steps.push_back(std::move(l));
      lane_results_.clear();
      if (r_.malformed) return std::move(r_);
      sample(i + 1, /*force=*/i + 1 == s_.steps.size());
      if (opts_.on_step) opts_.on_step(i + 1, s_.steps.size(), clock_.now_ns());
    }
    collect_final();
    return std::move(r_);
  }

 private:
  // ---- set-up -----------------------------------------------------------------------------------
  void malformed(Mark m, std::string message) {
    r_.malformed = true;
    r_.error = {m, std::move(message)};
  }

  // Every knob write of the scenario, tried through the file interface on a scratch controller
  // (non-blocking, so that nothing is reclaimed): a file the library lacks or a value it rejects
  // is reported before anything runs.
  bool preflight() {
    memcg::ManualClock clock;
    memcg::Controller scratch(controller_options(s_.config, &clock));
    for (const GroupSpec& g : s_.groups) scratch.create(g.path);
    auto check = [&](const Knob& k) {
      memcg::GroupRef g = scratch.lookup(k.group);
      std::unique_ptr<memcg::File> f;
      int err = g ? memcg::open_file(*g, k.file, &f) : ENOENT;
      if (err) {
        malformed(k.mark, k.group + " " + k.file + ": no such file in this library (" +
                              memcg::errno_name(err) + ")");
        return false;
      }
      if (!f->writable()) {
        malformed(k.mark, k.group + " " + k.file + ": the file is read-only");
        return false;
      }
      err = f->write(k.value, /*nonblocking=*/true);
      if (err) {
        malformed(k.mark, k.group + " " + k.file + ": `" + k.value + "` is rejected (" +
                              memcg::errno_name(err) + ")");
        return false;
      }
      return true;
    };
    for (const GroupSpec& g : s_.groups)
      for (const Knob& k : g.knobs)
        if (!check(k)) return false;
    for (const Step& st : s_.steps)
      if (const auto* set = std::get_if<SetStep>(&st.body))
        for (const Knob& k : set->knobs)
          if (!check(k)) return false;
    return true;
  }

  bool create_groups() {
    for (const GroupSpec& g : s_.groups) {
      if (int err = ctl_.create(g.path)) {
        malformed(g.mark, "cannot create group " + g.path + ": " + memcg::errno_name(err));
        return false;
      }
      for (const Knob& k : g.knobs)
        if (!write_knob(k)) return false;
    }
    return true;
  }

  bool write_knob(const Knob& k) {
    memcg::GroupRef g = ctl_.lookup(k.group);
    const int err = g ? memcg::write_file(*g, k.file, k.value) : ENOENT;
    if (err) {
      malformed(k.mark, k.group + " " + k.file + ": writing `" + k.value + "` failed (" +
                            error_text(err) + ")");
      return false;
    }
    return true;
  }

  // The end of a step (on the thread that ran it): the simulation's return to user space.
  // memory.high work that a charge deferred on this thread runs now, never in a later step or a
  // later run (a throttling sleep in a lane lets the other lanes run meanwhile).
  void finish_step(StepResult* res) {
    memcg::handle_pending_high();
    if (const uint64_t owed = std::exchange(tl_owed_ns, 0)) clock_.sleep_ns(owed);
    res->time_ns = clock_.now_ns();
    report_kills(res);
    if (res->checked) (res->passed ? r_.passed : r_.failed)++;
    if (res->failed) r_.failed++;
  }

  // ---- sampling ---------------------------------------------------------------------------------
  // Samples at every `sample_stride_`-th sampling point (the end of a step, top-level or in a
  // lane), and whenever `force`d.
  void sample(size_t step, bool force) {
    if (!opts_.sample) return;
    const bool due = points_++ % sample_stride_ == 0;
    if (!due && !force) return;
    if (r_.samples.size() >= max_sample_rows_) thin_samples();
    Sample smp;
    smp.step = step;
    smp.time_ns = clock_.now_ns();
    for (const SignalRef& sig : signal_refs_) smp.signals.push_back(sig.count());
    for (const std::string& path : r_.groups) {
      GroupSample gs;
      if (memcg::GroupRef g = ctl_.lookup(path)) {
        gs.online = true;
        gs.current = g->current();
        gs.high = g->high();
        gs.max = g->max();
        for (size_t e = 0; e < kEventNames.size(); ++e)
          gs.events[e] = g->events_local().get(static_cast<memcg::Event>(e));
        memcg::psi_stall_totals(*g, gs.stall_ns);
      }
      smp.groups.push_back(gs);
    }
    r_.samples.push_back(std::move(smp));
  }

  // Halves the samples kept (every other one stays, the first always) and the sampling rate from
  // now on, so that memory stays within kMaxPlotValues however many steps there are. Event
  // counters only grow, so a marker still shows at the next sample kept.
  void thin_samples() {
    sample_stride_ *= 2;
    std::vector<Sample>& v = r_.samples;
    size_t kept = 0;
    for (size_t i = 0; i < v.size(); i += 2) {
      if (kept != i) v[kept] = std::move(v[i]);  // never onto itself: that would empty it
      ++kept;
    }
    v.resize(kept);
  }

  // The final files show the end state exactly: statistics still pending in per-CPU counters
  // and stock slots are folded first (a memory.stat read alone may lag by the published bound).
  void collect_final() {
    ctl_.flush_stats();
    std::vector<std::string> paths = {"/"};
    for (const std::string& p : r_.groups)
      if (ctl_.lookup(p)) paths.push_back(p);
    for (const std::string& p : paths) {
      memcg::GroupRef g = ctl_.lookup(p);
      FinalGroup fg;
      fg.path = p;
      for (const std::string& name : memcg::file_names(*g)) {
        std::unique_ptr<memcg::File> f;
        if (memcg::open_file(*g, name, &f) != 0 || !f->readable()) continue;
        FinalFile ff;
        ff.name = name;
        ff.error = f->read(&ff.content);
        fg.files.push_back(std::move(ff));
      }
      r_.final_groups.push_back(std::move(fg));
    }
  }

  // The periodic work of the library that time drives. Called after every advance of the
  // virtual clock, with the new time.
  // The library's periodic work (the 2 s statistics fold) on the virtual clock.
  void on_tick() { ctl_.tick(); }

  // ---- steps ------------------------------------------------------------------------------------
  int64_t units_of(uint64_t bytes) const {
    if (bytes == UINT64_MAX) return ctl_.max_units();
    return static_cast<int64_t>(bytes / unit_ + (bytes % unit_ != 0));
  }

  memcg::GroupRef group(const std::string& path, StepResult* res) {
    memcg::GroupRef g = ctl_.lookup(path);
    if (!g) {
      res->failed = true;
      res->message = "no group " + path;
    }
    return g;
  }

  bool perform(const Step& st, StepResult* res) {
    return std::visit([&](const auto& body) { return perform_body(st, body, res); }, st.body);
  }

  bool perform_body(const Step&, const SetStep& set, StepResult* res) {
    for (const Knob& k : set.knobs)
      if (!write_knob(k)) return false;
    Json written = Json::object();
    for (const Knob& k : set.knobs) written[k.group][k.file] = k.value;
    res->detail["written"] = std::move(written);
    return true;
  }

  bool perform_body(const Step&, const WriteStep& w, StepResult* res) {
    memcg::GroupRef g = group(w.group, res);
    if (!g) return true;
    const int err = memcg::write_file(*g, w.file, w.value);
    res->detail["result"] = memcg::errno_name(err);
    if (w.has_expect) {
      res->checked = true;
      res->passed = err == w.expect;
      res->detail["expect"] = memcg::errno_name(w.expect);
      if (!res->passed)
        res->message = "write " + w.group + " " + w.file + " \"" + w.value + "\": expected " +
                       memcg::errno_name(w.expect) + ", got " + error_text(err);
    }
    return true;
  }

  bool perform_body(const Step&, const CacheStep& c, StepResult* res) {
    auto it = caches_.find(c.name);
    if (it == caches_.end()) {
      memcg::GroupRef g = group(c.group, res);
      if (!g) return true;
      it = caches_
               .emplace(c.name, std::make_unique<memcg::LruCache>(*g, c.name, c.referenced_percent))
               .first;
      if (const uint64_t cost = s_.config.reclaim_cost_ns) {
        // Freeing takes time on the freeing thread: inside a charge's reclaim that is a stall.
        it->second->set_evict_callback([this, cost](uint64_t, int64_t count) {
          const uint64_t n = static_cast<uint64_t>(count);
          const uint64_t ns = n > memcg::Clock::kMaxNs / cost ? memcg::Clock::kMaxNs : n * cost;
          if (tl_in_handler > 0) {
            tl_owed_ns = memcg::Clock::after(tl_owed_ns, ns);
          } else {
            clock_.sleep_ns(ns);
          }
        });
      }
    }
    memcg::LruCache& cache = *it->second;
    const int64_t units = units_of(c.bytes);
    switch (c.op) {
      case CacheStep::Op::kGrow: {
        int64_t grown = 0;
        // One unit per call: the first charge that fails stops the growth.
        while (grown < units && cache.grow(1) == 1) ++grown;
        res->detail["grown"] = grown * unit_;
        res->detail["requested"] = units * unit_;
        if (grown < units) {
          res->detail["stopped"] = "a charge failed";
          res->notes.push_back("cache " + c.name + " grew " + human_size(grown * unit_) + " of " +
                               human_size(units * unit_) + ": a charge failed");
        }
        break;
      }
      case CacheStep::Op::kShrink:
        res->detail["freed"] = cache.shrink(units) * unit_;
        break;
      case CacheStep::Op::kDrop:
        res->detail["freed"] = cache.size() * unit_;
        cache.drop();
        break;
    }
    res->detail["size"] = cache.size() * unit_;
    res->detail["evicted"] = cache.evicted() * unit_;
    return true;
  }

  bool perform_body(const Step&, const MemberStep& m, StepResult* res) {
    memcg::GroupRef g = group(m.group, res);
    if (!g) return true;
    auto state = std::make_unique<MemberState>();
    MemberState* sp = state.get();
    // Killing a member releases its pinned memory, like the exit of a killed process.
    auto on_kill = [sp](memcg::Member& victim) {
      sp->killed = true;
      victim.uncharge(victim.charged());
    };
    state->member =
        std::make_unique<memcg::Member>(*g, m.name, on_kill, m.immune ? memcg::Member::kImmune : 0);
    members_[m.name] = std::move(state);
    return true;
  }

  void report_kills(StepResult* res) {
    Json killed = Json::array();
    for (auto& [name, st] : members_) {
      if (st->killed && !reported_kills_.count(name)) {
        reported_kills_.insert(name);
        killed.push_back(name);
      }
    }
    if (killed.empty()) return;
    std::string note = "killed by the OOM killer:";
    for (const auto& name : killed) note += " " + name.get<std::string>();
    res->notes.push_back(std::move(note));
    res->detail["killed"] = std::move(killed);
  }

  bool perform_body(const Step&, const ChargeStep& c, StepResult* res) {
    MemberState& st = *members_.at(c.member);
    const int64_t units = units_of(c.bytes);
    int64_t done = 0;
    ChargeStep::Outcome outcome = ChargeStep::Outcome::kOk;
    if (c.wait && units > 0 && !st.killed) {
      // One call that may wait on the virtual clock; in a lane, the others run meanwhile.
      const uint64_t start = clock_.now_ns();
      const memcg::WaitStatus ws =
          st.member->charge_wait(units, std::chrono::nanoseconds(c.wait_ns));
      res->detail["waited_ns"] = clock_.now_ns() - start;
      res->detail["wait_status"] = memcg::wait_status_name(ws);
      if (ws == memcg::WaitStatus::kOk) {
        done = units;
      } else {
        outcome = ws == memcg::WaitStatus::kTimedOut ? ChargeStep::Outcome::kTimedOut
                                                     : ChargeStep::Outcome::kFailed;
      }
    } else if (c.bulk && units > 0 && !st.killed) {
      // One call for the whole size: the library's memory.high and memory.max handling sees
      // one large charge.
      if (memcg::charged(st.member->charge(units))) {
        done = units;
      } else {
        outcome = st.killed ? ChargeStep::Outcome::kKilled : ChargeStep::Outcome::kFailed;
      }
    }
    while (!c.bulk && done < units) {
      if (st.killed) {
        outcome = ChargeStep::Outcome::kKilled;
        break;
      }
      if (!memcg::charged(st.member->charge(1))) {
        outcome = st.killed ? ChargeStep::Outcome::kKilled : ChargeStep::Outcome::kFailed;
        break;
      }
      ++done;
    }
    if (st.killed) {
      outcome = ChargeStep::Outcome::kKilled;
      // A charge retried after the kill may have landed: a killed member holds nothing.
      st.member->uncharge(st.member->charged());
    }
    res->detail["charged"] = done * unit_;
    res->detail["outcome"] = outcome_name(outcome);
    if (c.has_expect) {
      res->checked = true;
      res->passed = outcome == c.expect;
      res->detail["expect"] = outcome_name(c.expect);
      if (!res->passed)
        res->message = "charge " + c.member + " " + human_size(c.bytes) + ": expected " +
                       outcome_name(c.expect) + ", got " + outcome_name(outcome) + " after " +
                       human_size(done * unit_);
    }
    return true;
  }

  bool perform_body(const Step&, const ReleaseStep& r, StepResult* res) {
    memcg::Member& m = *members_.at(r.member)->member;
    const int64_t units = r.all ? m.charged() : units_of(r.bytes);
    res->detail["released"] = m.uncharge(units) * unit_;
    return true;
  }

  bool perform_body(const Step&, const ExitStep& x, StepResult* res) {
    auto it = members_.find(x.member);
    res->detail["released"] = it->second->member->charged() * unit_;
    members_.erase(it);
    return true;
  }

  bool perform_body(const Step&, const ReclaimStep& r, StepResult* res) {
    memcg::GroupRef g = group(r.group, res);
    if (!g) return true;
    const uint64_t before = g->current();
    const int err = memcg::write_file(*g, "memory.reclaim", r.size);
    res->detail["result"] = memcg::errno_name(err);
    res->detail["reclaimed"] = before > g->current() ? before - g->current() : 0;
    if (r.has_expect) {
      res->checked = true;
      res->passed = err == r.expect;
      res->detail["expect"] = memcg::errno_name(r.expect);
      if (!res->passed)
        res->message = "reclaim " + r.group + " " + r.size + ": expected " +
                       memcg::errno_name(r.expect) + ", got " + error_text(err);
    } else if (err == ENOENT) {
      res->failed = true;
      res->message = "reclaim " + r.group + " " + r.size + ": " + error_text(err);
    }
    return true;
  }

  bool perform_body(const Step&, const RemoveStep& r, StepResult* res) {
    const int err = ctl_.remove(r.group);
    res->detail["result"] = memcg::errno_name(err);
    if (err) {
      res->failed = true;
      res->message = "remove " + r.group + ": " + memcg::errno_name(err);
    }
    return true;
  }

  bool perform_body(const Step&, const TickStep& t, StepResult*) {
    if (SimClock::in_lane()) {
      clock_.yield_for(t.ns);  // the lane runs for t.ns while the others go on
      return true;
    }
    clock_.advance(t.ns);
    on_tick();
    return true;
  }

  // ---- parallel ---------------------------------------------------------------------------------
  bool perform_body(const Step&, const ParallelStep& p, StepResult* res) {
    const uint64_t start = clock_.now_ns();
    Json lanes = Json::object();
    clock_.run_lanes(
        p.lanes.size(),
        [&](size_t i) {
          const ParallelStep::Lane& lane = p.lanes[i];
          // The lane is a task of its member's group for PSI: it runs there, or stalls there.
          memcg::attach_current_thread(members_.at(lane.member)->member->group());
          size_t done = 0;
          for (size_t k = 0; k < lane.steps.size() && !r_.malformed; ++k) {
            StepResult sr;
            sr.step = &lane.steps[k];
            sr.index = res->index;
            sr.lane = lane.member;
            sr.lane_step = k + 1;
            if (!perform(lane.steps[k], &sr)) break;  // malformed: every lane stops
            finish_step(&sr);
            lane_results_.push_back(std::move(sr));
            ++done;
            sample(res->index, /*force=*/false);
            // Lanes due at the same time take turns step by step (a tick has yielded already).
            if (!std::holds_alternative<TickStep>(lane.steps[k].body)) clock_.yield_for(0);
          }
          memcg::detach_current_thread();
          lanes[lane.member] = {{"steps", done}, {"end_ns", clock_.now_ns()}};
        },
        [&] { on_tick(); });
    res->detail["lanes"] = std::move(lanes);
    res->detail["elapsed_ns"] = clock_.now_ns() - start;
    return !r_.malformed;
  }

  // Reads GROUP FILE[.KEY]: 0 and the value text, or an error with `why` set.
  int read_value(memcg::Group& g, const std::string& file, const std::string& key,
                 std::string* value, std::string* why) {
    std::string content;
    const int err = memcg::read_file(g, file, &content);
    if (err) {
      *why = "cannot read: " + error_text(err);
      return err;
    }
    if (key.empty()) {
      *value = trim(content);
      return 0;
    }
    for (const auto& [k, v] : keyed_lines(content)) {
      if (k == key) {
        *value = v;
        return 0;
      }
    }
    *why = "no key `" + key + "` in " + file;
    return ENOENT;
  }

  // The value an `expect` on a handle reads.
  bool handle_value(const ExpectStep& x, uint64_t* v, std::string* text, std::string* why) {
    // A handle whose opening failed (an eventfd beyond the descriptor limit, ...) has no value;
    // its own step reported why.
    const bool open = x.source == ExpectStep::Source::kListener ? listeners_.count(x.handle) != 0
                      : x.source == ExpectStep::Source::kTrigger ? triggers_.count(x.handle) != 0
                      : x.source == ExpectStep::Source::kPeak    ? peaks_.count(x.handle) != 0
                      : x.source == ExpectStep::Source::kWatch   ? watches_.count(x.handle) != 0
                                                                 : false;
    if (!open) {
      *why = "the handle is not open: opening it failed";
      return false;
    }
    switch (x.source) {
      case ExpectStep::Source::kListener: {
        const ListenerState& l = *listeners_.at(x.handle);
        *v = 0;
        for (int lv = 0; lv < 3; ++lv)
          if (x.level < 0 || x.level == lv) *v += l.by_level[static_cast<size_t>(lv)];
        break;
      }
      case ExpectStep::Source::kTrigger:
        *v = triggers_.at(x.handle)->fired;
        break;
      case ExpectStep::Source::kWatch:
        *v = watches_.at(x.handle)->notified;
        break;
      case ExpectStep::Source::kPeak: {
        const int err = peaks_.at(x.handle)->read(text);
        if (err) {
          *why = "cannot read: " + error_text(err);
          return false;
        }
        *text = trim(*text);
        if (!read_number(*text, v)) {
          *why = "read `" + *text + "`, not a number";
          return false;
        }
        return true;
      }
      case ExpectStep::Source::kFile:
        break;
    }
    *text = std::to_string(*v);
    return true;
  }

  static std::string source_text(const ExpectStep& x) {
    switch (x.source) {
      case ExpectStep::Source::kListener:
        return "listener " + x.handle +
               (x.level < 0 ? "" : std::string(" level ") +
                                       memcg::to_string(static_cast<memcg::PressureLevel>(x.level)));
      case ExpectStep::Source::kTrigger:
        return "trigger " + x.handle;
      case ExpectStep::Source::kPeak:
        return "peak " + x.handle;
      case ExpectStep::Source::kWatch:
        return "watch " + x.handle;
      case ExpectStep::Source::kFile:
        break;
    }
    return x.group + " " + x.file + (x.key.empty() ? "" : "." + x.key);
  }

  // memory.pressure's KIND.FIELD ("some.avg10", "full.total"): the field of the KIND line.
  static bool pressure_field(const std::string& content, const std::string& key,
                             std::string* value) {
    const size_t dot = key.find('.');
    const std::string kind = key.substr(0, dot), field = key.substr(dot + 1) + "=";
    size_t start = 0;
    while (start < content.size()) {
      size_t end = content.find('\n', start);
      if (end == std::string::npos) end = content.size();
      const std::string line = content.substr(start, end - start);
      if (line.compare(0, kind.size() + 1, kind + " ") == 0) {
        size_t p = line.find(" " + field);
        if (p == std::string::npos) return false;
        p += field.size() + 1;
        const size_t q = line.find(' ', p);
        *value = line.substr(p, q == std::string::npos ? std::string::npos : q - p);
        return true;
      }
      start = end + 1;
    }
    return false;
  }

  bool perform_body(const Step&, const ExpectStep& x, StepResult* res) {
    res->checked = true;
    const std::string what = source_text(x);
    std::string expected = std::string(op_name(x.op)) + " " + x.value_text;
    if (x.op == ExpectStep::Op::kCloseTo) expected += " err " + std::to_string(x.err);
    res->detail["expected"] = expected;
    memcg::GroupRef g = group(x.group, res);
    if (!g) {
      res->failed = false;
      res->passed = false;
      res->message = "expect " + what + " " + expected + ": no group " + x.group;
      return true;
    }
    std::string text, why;
    uint64_t v = 0;
    if (x.source != ExpectStep::Source::kFile) {
      handle_value(x, &v, &text, &why);
    } else if (x.file == "memory.pressure") {
      std::string content;
      const int err = memcg::read_file(*g, x.file, &content);
      if (err) {
        why = "cannot read: " + error_text(err);
      } else if (!pressure_field(content, x.key, &text)) {
        why = "no key `" + x.key + "` in memory.pressure";
      } else if (!(x.hundredths ? parse_hundredths(text, &v) : read_number(text, &v))) {
        why = "read `" + text + "`, not a number";
      }
    } else if (read_value(*g, x.file, x.key, &text, &why) == 0 && !read_number(text, &v)) {
      why = "read `" + text + "`, not a number";
    }
    if (!why.empty()) {
      res->passed = false;
      res->detail["error"] = why;
      res->message = "expect " + what + " " + expected + ": " + why;
      return true;
    }
    res->detail["read"] = value_json(text);
    switch (x.op) {
      case ExpectStep::Op::kEq:
        res->passed = v == x.value;
        break;
      case ExpectStep::Op::kLe:
        res->passed = v <= x.value;
        break;
      case ExpectStep::Op::kGe:
        res->passed = v >= x.value;
        break;
      case ExpectStep::Op::kCloseTo:
        res->passed = close_to(v, x.value, x.err);
        break;
    }
    if (!res->passed) {
      std::string read = text;
      if (x.source == ExpectStep::Source::kFile && !x.hundredths && human_size(v) != text)
        read += " (" + human_size(v) + ")";
      res->message = "expect " + what + " " + expected + ": read " + read;
    }
    return true;
  }

  bool perform_body(const Step&, const PrintStep& p, StepResult* res) {
    std::vector<std::string> groups;
    if (p.group == "all") {
      for (const std::string& path : r_.groups)
        if (ctl_.lookup(path)) groups.push_back(path);
    } else {
      groups.push_back(p.group);
    }
    const std::string file = p.file.empty() ? "memory.current" : p.file;
    Json values = Json::object();
    for (const std::string& path : groups) {
      memcg::GroupRef g = group(path, res);
      if (!g) return true;
      std::string content;
      const int err = memcg::read_file(*g, file, &content);
      if (err) {
        res->failed = true;
        res->message = "print " + path + " " + file + ": cannot read: " + error_text(err);
        return true;
      }
      if (is_keyed_file(file)) {
        bool found = p.key.empty();
        for (const auto& [k, v] : keyed_lines(content)) {
          if (!p.key.empty() && k != p.key) continue;
          found = true;
          res->lines.push_back(path + " " + file + "." + k + " " + v);
          values[path][k] = value_json(v);
        }
        if (!found) {
          res->failed = true;
          res->message = "print " + path + " " + file + ": no key `" + p.key + "`";
          return true;
        }
      } else {
        const std::string v = trim(content);
        res->lines.push_back(path + " " + file + " " + v);
        values[path] = value_json(v);
      }
    }
    res->detail["values"] = std::move(values);
    return true;
  }

  bool perform_body(const Step&, const ListenStep& l, StepResult* res) {
    memcg::GroupRef g = group(l.group, res);
    if (!g) return true;
    auto st = std::make_unique<ListenerState>();
    ListenerState* sp = st.get();
    // The cache outlives the listener (the handles go first); the shrink runs in the
    // notification, as an application's handler would: no library lock is held there.
    memcg::LruCache* cache = nullptr;
    if (!l.shrink_cache.empty()) {
      auto it = caches_.find(l.shrink_cache);
      if (it == caches_.end()) {  // its creation failed (reported there)
        res->failed = true;
        res->message = "listen " + l.name + ": no cache " + l.shrink_cache;
        return true;
      }
      cache = it->second.get();
    }
    const int64_t shrink_units = units_of(l.shrink_bytes);
    const int err = st->listener.listen(
        *g, static_cast<memcg::PressureLevel>(l.level), static_cast<memcg::PressureMode>(l.mode),
        [sp, cache, shrink_units](memcg::PressureLevel lv) {
          sp->by_level[static_cast<size_t>(lv)]++;
          if (cache) {
            ++tl_in_handler;
            sp->shrunk += cache->shrink(shrink_units);
            --tl_in_handler;
          }
        });
    res->detail["result"] = memcg::errno_name(err);
    if (err) {
      res->failed = true;
      res->message = "listen " + l.name + " on " + l.group + ": " + error_text(err);
      return true;
    }
    signal_refs_.push_back({&st->by_level, nullptr});
    r_.signals.push_back({l.name, l.group, false});
    listeners_[l.name] = std::move(st);
    return true;
  }

  bool perform_body(const Step&, const TriggerStep& t, StepResult* res) {
    memcg::GroupRef g = group(t.group, res);
    if (!g) return true;
    auto st = std::make_unique<TriggerState>();
    TriggerState* sp = st.get();
    const int err = st->trigger.arm(*g, t.spec, [sp] { sp->fired++; });
    res->detail["result"] = memcg::errno_name(err);
    if (err) {
      res->failed = true;
      res->message = "trigger " + t.name + " on " + t.group + ": " + error_text(err);
      return true;
    }
    signal_refs_.push_back({nullptr, &st->fired});
    r_.signals.push_back({t.name, t.group, true});
    triggers_[t.name] = std::move(st);
    return true;
  }

  bool perform_body(const Step&, const PeakStep& p, StepResult* res) {
    if (p.op == PeakStep::Op::kOpen) {
      memcg::GroupRef g = group(p.group, res);
      if (!g) return true;
      std::unique_ptr<memcg::File> f;
      const int err = memcg::open_file(*g, "memory.peak", &f);
      res->detail["result"] = memcg::errno_name(err);
      if (err) {
        res->failed = true;
        res->message = "peak " + p.name + " on " + p.group + ": " + error_text(err);
        return true;
      }
      peaks_[p.name] = std::move(f);
      return true;
    }
    auto it = peaks_.find(p.name);
    if (it == peaks_.end()) {  // its open failed (reported there)
      res->failed = true;
      res->message = "peak " + p.name + ": not open";
      return true;
    }
    if (p.op == PeakStep::Op::kClose) {
      peaks_.erase(it);
      return true;
    }
    const int err = it->second->write("reset");
    res->detail["result"] = memcg::errno_name(err);
    if (err) {
      res->failed = true;
      res->message = "peak " + p.name + " reset: " + error_text(err);
    }
    return true;
  }

  bool perform_body(const Step&, const WatchStep& w, StepResult* res) {
    memcg::GroupRef g = group(w.group, res);
    if (!g) return true;
    auto st = std::make_unique<WatchState>();
    WatchState* sp = st.get();
    const int err = memcg::EventListener::open(
        *g, w.local ? memcg::EventsFile::kEventsLocal : memcg::EventsFile::kEvents,
        [sp](memcg::Group&, memcg::EventsFile) { sp->notified++; }, &st->listener);
    res->detail["result"] = memcg::errno_name(err);
    if (err) {
      res->failed = true;
      res->message = "watch " + w.name + " on " + w.group + ": " + error_text(err);
      return true;
    }
    watches_[w.name] = std::move(st);
    return true;
  }

  // A listener's or trigger's count, for the plot (handles stay open to the end of the run).
  struct SignalRef {
    const std::array<uint64_t, 3>* by_level;
    const uint64_t* fired;
    uint64_t count() const {
      return fired ? *fired : (*by_level)[0] + (*by_level)[1] + (*by_level)[2];
    }
  };

  const Scenario& s_;
  const RunOptions& opts_;
  SimClock clock_;
  memcg::Controller ctl_;
  const uint64_t unit_;
  std::map<std::string, std::unique_ptr<memcg::LruCache>> caches_;
  std::map<std::string, std::unique_ptr<MemberState>> members_;
  std::map<std::string, std::unique_ptr<ListenerState>> listeners_;
  std::map<std::string, std::unique_ptr<TriggerState>> triggers_;
  std::map<std::string, std::unique_ptr<memcg::File>> peaks_;
  std::map<std::string, std::unique_ptr<WatchState>> watches_;
  std::set<std::string> reported_kills_;
  RunResult r_;
  size_t max_sample_rows_ = 3;  // samples kept at most (kMaxPlotValues over the groups)
  size_t sample_stride_ = 1;    // sampling points sampled: every sample_stride_-th, and the last
  uint64_t points_ = 0;         // sampling points so far
  size_t current_index_ = 0;    // the top-level step running (1-based)
  std::vector<SignalRef> signal_refs_;        // in RunResult::signals order
  std::vector<StepResult> lane_results_;      // of the running `parallel` block
};

}  // namespace

RunResult run_scenario(const Scenario& scenario, const RunOptions& options) {
  return Runner(scenario, options).run();
}

}  // namespace memcgctl
