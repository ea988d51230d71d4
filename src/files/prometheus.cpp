#include "memcg/files/prometheus.hpp"
#include "memcg/base/internal/hook_bypass.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "memcg/base/events.hpp"
#include "memcg/core/charge_wait.hpp"
#include "memcg/core/controller.hpp"

namespace memcg {

std::string prometheus_escape_label(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string prometheus_escape_help(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

// One group's values, read during the walk and printed family by family afterwards (a family's
// samples must be contiguous).
struct Snapshot {
  std::string label;  // group="..." already escaped
  bool root;
  uint64_t current, peak, min, low, high, max;
  uint64_t events[kNumEvents], events_local[kNumEvents];
  uint64_t waiters, queued_bytes;  // memory.wait (non-root groups)
  uint64_t wait_buckets[WaitStats::kBuckets], wait_ns_sum;  // how long charges waited there
  std::vector<int64_t> stats;  // registry order, then pgscan and pgsteal
};

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += prometheus_escape_help(help);
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

// name{group="...",key="value"} value
void sample(std::string& out, const char* name, const Snapshot& s, const char* key,
            std::string_view key_value, const std::string& value) {
  out += name;
  out += "{group=\"";
  out += s.label;
  out += '"';
  if (key != nullptr) {
    out += ',';
    out += key;
    out += "=\"";
    out += prometheus_escape_label(key_value);
    out += '"';
  }
  out += "} ";
  out += value;
  out += '\n';
}

// Nanoseconds as seconds with nine decimals ("0.001000000").
std::string seconds(uint64_t ns) {
  std::string frac = std::to_string(ns % 1'000'000'000);
  return std::to_string(ns / 1'000'000'000) + "." + std::string(9 - frac.size(), '0') + frac;
}

std::string number(uint64_t v) {
  return v == kUnlimited ? "+Inf" : std::to_string(v);
}

}  // namespace

std::string render_prometheus(Controller& ctl) {
  const StatRegistry& reg = ctl.stats();
  const int nr_items = static_cast<int>(reg.size());
  Rstat& rs = ctl.rstat();
  ctl.tick();  // may deliver notifications: before the bypass, so callbacks run as usual
  // The snapshots and the text are the library's memory (internal/lock.hpp).
  internal::HookBypass bypass;

  std::vector<Snapshot> groups;
  ctl.walk(
      ctl.root(),
      [&](Group& g) {
        rs.flush_if_needed(g.stat_node());
        Snapshot s;
        s.label = prometheus_escape_label(g.path());
        s.root = g.is_root();
        s.current = g.current();
        s.peak = g.peak();
        s.min = g.min();
        s.low = g.low();
        s.high = g.high();
        s.max = g.max();
        for (int e = 0; e < kNumEvents; ++e) {
          s.events[e] = g.events().get(static_cast<Event>(e));
          s.events_local[e] = g.events_local().get(static_cast<Event>(e));
        }
        const WaitStats w = s.root ? WaitStats{} : wait_stats(g);
        s.waiters = w.waiters;
        s.queued_bytes = w.queued_bytes;
        std::copy(std::begin(w.wait_buckets), std::end(w.wait_buckets), s.wait_buckets);
        s.wait_ns_sum = w.wait_ns_sum;
        s.stats.resize(static_cast<size_t>(nr_items) + 2);
        for (int i = 0; i < nr_items; ++i) s.stats[i] = g.stat(i);
        s.stats[nr_items] =
            g.stat(StatRegistry::kPgscanDirect) + g.stat(StatRegistry::kPgscanProactive);
        s.stats[nr_items + 1] =
            g.stat(StatRegistry::kPgstealDirect) + g.stat(StatRegistry::kPgstealProactive);
        groups.push_back(std::move(s));
      },
      /*include_dying=*/false);

  std::string out;
  out.reserve(groups.size() * (512 + 96 * static_cast<size_t>(nr_items)));

  auto gauge = [&](const char* name, const char* help, bool with_root, auto get) {
    family(out, name, "gauge", help);
    for (const Snapshot& s : groups)
      if (with_root || !s.root) sample(out, name, s, nullptr, {}, number(get(s)));
  };
  gauge("memcg_memory_current_bytes",
        "Memory charged to the group and its descendants (memory.current).", true,
        [](const Snapshot& s) { return s.current; });
  gauge("memcg_memory_peak_bytes", "Highest memory.current recorded for the group (memory.peak).",
        true, [](const Snapshot& s) { return s.peak; });
  gauge("memcg_memory_min_bytes", "Hard memory protection (memory.min).", false,
        [](const Snapshot& s) { return s.min; });
  gauge("memcg_memory_low_bytes", "Best-effort memory protection (memory.low).", false,
        [](const Snapshot& s) { return s.low; });
  gauge("memcg_memory_high_bytes", "Throttling limit (memory.high); +Inf when unset.", false,
        [](const Snapshot& s) { return s.high; });
  gauge("memcg_memory_max_bytes", "Hard limit (memory.max); +Inf when unset.", false,
        [](const Snapshot& s) { return s.max; });

  // Plain numbers: these never mean "max" (number() would print kUnlimited as +Inf).
  auto count_gauge = [&](const char* name, const char* help, auto get) {
    family(out, name, "gauge", help);
    for (const Snapshot& s : groups)
      if (!s.root) sample(out, name, s, nullptr, {}, std::to_string(get(s)));
  };
  count_gauge("memcg_memory_wait_waiters",
              "Charges waiting now on the group's memory.max (memory.wait waiters).",
              [](const Snapshot& s) { return s.waiters; });
  count_gauge("memcg_memory_wait_queued_bytes",
              "Bytes asked by the charges waiting on the group's memory.max (memory.wait "
              "queued_bytes).",
              [](const Snapshot& s) { return s.queued_bytes; });
  // How long the charges that queued on the group's memory.max waited (whatever their outcome),
  // on the controller's clock: memory.wait's last/max as a distribution.
  family(out, "memcg_memory_wait_seconds", "histogram",
         "Time charges waited on the group's memory.max before they were granted, timed out, "
         "cancelled or removed (memory.wait).");
  for (const Snapshot& s : groups) {
    if (s.root) continue;
    for (int i = 0; i < WaitStats::kBuckets; ++i) {
      const uint64_t le = kWaitBucketsNs[i];
      const std::string bound = le == UINT64_MAX ? "+Inf" : seconds(le);
      sample(out, "memcg_memory_wait_seconds_bucket", s, "le", bound,
             std::to_string(s.wait_buckets[i]));
    }
    sample(out, "memcg_memory_wait_seconds_sum", s, nullptr, {}, seconds(s.wait_ns_sum));
    sample(out, "memcg_memory_wait_seconds_count", s, nullptr, {},
           std::to_string(s.wait_buckets[WaitStats::kBuckets - 1]));
  }

  auto events = [&](const char* name, const char* help, bool local) {
    family(out, name, "counter", help);
    for (const Snapshot& s : groups) {
      if (s.root) continue;
      for (int e = 0; e < kNumEvents; ++e) {
        const uint64_t v = local ? s.events_local[e] : s.events[e];
        sample(out, name, s, "event", event_name(static_cast<Event>(e)), std::to_string(v));
      }
    }
  };
  events("memcg_memory_events_total", "Events of the group and its descendants (memory.events).",
         false);
  events("memcg_memory_events_local_total", "Events of the group itself (memory.events.local).",
         true);

  auto stats = [&](const char* name, const char* type, const char* help, StatKind kind) {
    family(out, name, type, help);
    for (const Snapshot& s : groups) {
      for (int i = 0; i < nr_items; ++i) {
        if (reg.item(i).kind != kind) continue;
        sample(out, name, s, "item", reg.item(i).name, std::to_string(s.stats[i]));
      }
      if (kind == StatKind::kEvent) {
        sample(out, name, s, "item", "pgscan", std::to_string(s.stats[nr_items]));
        sample(out, name, s, "item", "pgsteal", std::to_string(s.stats[nr_items + 1]));
      }
    }
  };
  stats("memcg_memory_stat_bytes", "gauge",
        "Memory of each kind in the group and its descendants (memory.stat), in bytes.",
        StatKind::kState);
  stats("memcg_memory_stat_events_total", "counter",
        "Event counts of the group and its descendants (memory.stat).", StatKind::kEvent);
  return out;
}

}  // namespace memcg
