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

#include "runner.hpp"

namespace memcgctl {

namespace detail {

thread_local constinit int tl_in_handler = 0;
thread_local constinit uint64_t tl_owed_ns = 0;
thread_local constinit const std::string* tl_lane_name = nullptr;
thread_local constinit MemberState* tl_lane_state = nullptr;

std::string error_text(int err) {
  std::string s = memcg::errno_name(err);
  // Errors outside the interface files' set (EMFILE from an eventfd, ...): the system's words.
  if (s == "unknown") s = std::strerror(err);
  if (err == ENOENT) s += " (the library has no such file)";
  if (err == EACCES) s += " (the file is not writable)";
  return s;
}

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

namespace {

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

}  // namespace

RunResult Runner::run() {
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

bool Runner::preflight() {
  memcg::ManualClock clock;
  memcg::Controller scratch(controller_options(s_.config, &clock));
  for (const GroupSpec& g : s_.groups) {
    if (int err = scratch.create(g.path)) {
      malformed(g.mark, "cannot create group " + g.path + ": " + memcg::errno_name(err));
      return false;
    }
  }
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

bool Runner::create_groups() {
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

bool Runner::write_knob(const Knob& k) {
  memcg::GroupRef g = ctl_.lookup(k.group);
  const int err = g ? memcg::write_file(*g, k.file, k.value) : ENOENT;
  if (err) {
    malformed(k.mark, k.group + " " + k.file + ": writing `" + k.value + "` failed (" +
                          error_text(err) + ")");
    return false;
  }
  return true;
}

void Runner::finish_step(StepResult* res) {
  memcg::handle_pending_high();
  if (const uint64_t owed = std::exchange(tl_owed_ns, 0)) clock_.sleep_ns(owed);
  res->time_ns = clock_.now_ns();
  report_kills(res);
  if (res->checked) (res->passed ? r_.passed : r_.failed)++;
  if (res->failed) r_.failed++;
}

void Runner::sample(size_t step, bool force) {
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

void Runner::thin_samples() {
  sample_stride_ *= 2;
  std::vector<Sample>& v = r_.samples;
  size_t kept = 0;
  for (size_t i = 0; i < v.size(); i += 2) {
    if (kept != i) v[kept] = std::move(v[i]);  // never onto itself: that would empty it
    ++kept;
  }
  v.resize(kept);
}

void Runner::collect_final() {
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

}  // namespace detail

RunResult run_scenario(const Scenario& scenario, const RunOptions& options) {
  return detail::Runner(scenario, options).run();
}

}  // namespace memcgctl
