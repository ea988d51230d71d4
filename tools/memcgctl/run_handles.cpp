// The scenario runner: the steps that open and use handles (runner.hpp).
#include "runner.hpp"

namespace memcgctl::detail {

bool Runner::perform_body(const Step&, const ListenStep& l, StepResult* res) {
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
  const int err = st->listener.listen(*g, static_cast<memcg::PressureLevel>(l.level),
                                      static_cast<memcg::PressureMode>(l.mode),
                                      [sp, cache, shrink_units](memcg::PressureLevel lv) {
                                        sp->by_level[static_cast<size_t>(lv)]++;
                                        if (sp->listener.removed()) {
                                          sp->removed++;  // the final notification
                                          return;
                                        }
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

bool Runner::perform_body(const Step&, const TriggerStep& t, StepResult* res) {
  memcg::GroupRef g = group(t.group, res);
  if (!g) return true;
  auto st = std::make_unique<TriggerState>();
  TriggerState* sp = st.get();
  const int err = st->trigger.arm(*g, t.spec, [sp] {
    sp->fired++;
    if (sp->trigger.removed()) sp->removed++;  // the final notification
  });
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

bool Runner::perform_body(const Step&, const PeakStep& p, StepResult* res) {
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

bool Runner::perform_body(const Step&, const WatchStep& w, StepResult* res) {
  memcg::GroupRef g = group(w.group, res);
  if (!g) return true;
  auto st = std::make_unique<WatchState>();
  WatchState* sp = st.get();
  const int err = memcg::EventListener::open(
      *g, w.local ? memcg::EventsFile::kEventsLocal : memcg::EventsFile::kEvents,
      [sp](memcg::Group& g, memcg::EventsFile) {
        sp->notified++;
        if (!g.is_online()) sp->removed++;  // the final notification: the group was removed
      },
      &st->listener);
  res->detail["result"] = memcg::errno_name(err);
  if (err) {
    res->failed = true;
    res->message = "watch " + w.name + " on " + w.group + ": " + error_text(err);
    return true;
  }
  watches_[w.name] = std::move(st);
  return true;
}

}  // namespace memcgctl::detail
