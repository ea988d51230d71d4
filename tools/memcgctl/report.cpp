#include "report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <vector>

#include "memcg/base/errors.hpp"
#include "memcg/core/signal/pressure.hpp"
#include "memcg/files/parse.hpp"

namespace memcgctl {
namespace {

// The step's own fields, as the scenario gave them.
Json step_args(const Step& st) {
  Json a = Json::object();
  std::visit(
      [&](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, SetStep>) {
          for (const Knob& k : b.knobs) a[k.group][k.file] = k.value;
        } else if constexpr (std::is_same_v<T, WriteStep>) {
          a["group"] = b.group;
          a["file"] = b.file;
          a["value"] = b.value;
        } else if constexpr (std::is_same_v<T, CacheStep>) {
          a["name"] = b.name;
          if (!b.group.empty()) a["group"] = b.group;
          if (b.op == CacheStep::Op::kGrow) a["grow"] = b.bytes;
          if (b.op == CacheStep::Op::kShrink) a["shrink"] = b.bytes;
          if (b.op == CacheStep::Op::kDrop) a["drop"] = true;
          if (b.has_referenced) a["referenced"] = b.referenced_percent;
          if (b.has_capacity) a["capacity"] = b.capacity;
          if (b.never_oom) a["oom"] = "never";
        } else if constexpr (std::is_same_v<T, MemberStep>) {
          a["name"] = b.name;
          a["group"] = b.group;
          if (b.immune) a["immune"] = true;
          if (!b.release_on_preempt) a["on_preempt"] = "ignore";
          if (b.has_unwind) a["unwind_ns"] = b.unwind_ns;
        } else if constexpr (std::is_same_v<T, ChargeStep>) {
          a["member"] = b.member;
          a["size"] = b.bytes;
          if (b.bulk) a["bulk"] = true;
          if (b.wait) a["wait_ns"] = b.wait_ns;
          if (b.wait && b.priority != memcg::WaitPriority::kDefault)
            a["priority"] = memcg::wait_priority_name(b.priority);
        } else if constexpr (std::is_same_v<T, ReserveStep>) {
          static constexpr const char* kOom[] = {"kernel", "pieces", "never"};
          a["member"] = b.member;
          if (b.op == ReserveStep::Op::kReserve) a["size"] = b.bytes;
          if (b.op == ReserveStep::Op::kGrow) a["grow"] = b.bytes;
          if (b.op == ReserveStep::Op::kRelease) a["release"] = true;
          if (b.wait) a["wait_ns"] = b.wait_ns;
          if (b.grow_on_timeout) a["on_timeout"] = "grow";
          if (b.op != ReserveStep::Op::kRelease) {
            a["oom"] = kOom[static_cast<int>(b.oom)];
            if (b.priority != memcg::WaitPriority::kDefault)
              a["priority"] = memcg::wait_priority_name(b.priority);
          }
          if (b.ends_on != 0) {
            Json ends = Json::array();
            for (int i = 0; i < kReserveStatusCount; ++i)
              if (b.ends_on & (uint32_t{1} << i))
                ends.push_back(reserve_status_text(static_cast<memcg::ReserveStatus>(i)));
            a["ends_on"] = std::move(ends);
          }
        } else if constexpr (std::is_same_v<T, ReleaseStep>) {
          a["member"] = b.member;
          if (!b.all) a["size"] = b.bytes;
        } else if constexpr (std::is_same_v<T, ExitStep>) {
          a["member"] = b.member;
        } else if constexpr (std::is_same_v<T, ReclaimStep>) {
          a["group"] = b.group;
          a["size"] = b.size;
        } else if constexpr (std::is_same_v<T, RemoveStep>) {
          a["group"] = b.group;
        } else if constexpr (std::is_same_v<T, TickStep>) {
          a["ns"] = b.ns;
        } else if constexpr (std::is_same_v<T, ExpectStep>) {
          static constexpr const char* kSource[] = {"file", "listener", "trigger", "peak",
                                                    "watch"};
          if (b.source != ExpectStep::Source::kFile) {
            a[kSource[static_cast<int>(b.source)]] = b.handle;
            if (b.level >= 0)
              a["level"] = memcg::to_string(static_cast<memcg::PressureLevel>(b.level));
            if (b.removed) a["removed"] = true;
          } else {
            a["group"] = b.group;
            a["file"] = b.file;
          }
          if (!b.key.empty()) a["key"] = b.key;
          if (b.hundredths) {
            a[op_name(b.op)] = b.value_text;  // a percentage, as written
          } else {
            a[op_name(b.op)] = b.value;
          }
          if (b.op == ExpectStep::Op::kCloseTo) a["err"] = b.err;
        } else if constexpr (std::is_same_v<T, ListenStep>) {
          a["name"] = b.name;
          a["group"] = b.group;
          a["level"] = memcg::to_string(static_cast<memcg::PressureLevel>(b.level));
          a["mode"] = memcg::to_string(static_cast<memcg::PressureMode>(b.mode));
          if (!b.shrink_cache.empty())
            a["shrink"] = {{"cache", b.shrink_cache}, {"size", b.shrink_bytes}};
        } else if constexpr (std::is_same_v<T, TriggerStep>) {
          a["name"] = b.name;
          a["group"] = b.group;
          a["spec"] = b.spec;
        } else if constexpr (std::is_same_v<T, PeakStep>) {
          a["name"] = b.name;
          a["group"] = b.group;
          if (b.op == PeakStep::Op::kReset) a["reset"] = true;
          if (b.op == PeakStep::Op::kClose) a["close"] = true;
        } else if constexpr (std::is_same_v<T, WatchStep>) {
          a["name"] = b.name;
          a["group"] = b.group;
          a["file"] = b.local ? "memory.events.local" : "memory.events";
        } else if constexpr (std::is_same_v<T, ParallelStep>) {
          // Each lane's steps are reported on their own, after the block.
          for (const ParallelStep::Lane& l : b.lanes) {
            size_t n = l.steps.size();
            for (const auto& it : l.iterations) n += it.size();
            a["lanes"][l.member] = n;
            if (!l.iterations.empty())
              a["iterations"][l.member] = l.iterations.size();
            else if (l.repeat > 1)
              a["repeat"][l.member] = l.repeat;
            if (l.new_member) a["new_member"][l.member] = true;
          }
        } else if constexpr (std::is_same_v<T, QueueStep>) {
          // Each item's steps are reported on their own, after the step.
          a["member"] = b.member;
          a["workers"] = b.workers;
          a["oom"] = b.oom == memcg::OomPolicy::kPieces  ? "pieces"
                     : b.oom == memcg::OomPolicy::kNever ? "never"
                                                          : "kernel";
          for (const QueueStep::Tenant& t : b.tenants) a["admit_weight"][t.group] = t.weight;
          a["items"] = b.items.size();
        } else if constexpr (std::is_same_v<T, PrintStep>) {
          a["group"] = b.group;
          if (!b.file.empty()) a["file"] = b.file;
          if (!b.key.empty()) a["key"] = b.key;
        }
      },
      st.body);
  return a;
}

// One row of the group table: the values of a group's files at the end of the run, as text
// ("" where the group has no such file: the root has no limits).
struct TableRow {
  std::string group;
  std::map<std::string, std::string> values;  // column → the file's value
};

// The events and pressure fields of the table, in column order.
constexpr std::array<const char*, 6> kTableEvents = {"low",      "high", "max", "oom",
                                                     "oom_kill", "wait"};
constexpr std::array<const char*, 6> kTableSizes = {"current", "peak", "min", "low", "high", "max"};

// memory.pressure's `KIND avg10=A ...` field.
std::string pressure_avg10(const std::string& content, const std::string& kind) {
  const size_t line = content.find(kind + " ");
  if (line == std::string::npos) return "";
  const size_t p = content.find("avg10=", line);
  if (p == std::string::npos) return "";
  const size_t q = content.find_first_of(" \n", p);
  return content.substr(p + 6, q == std::string::npos ? std::string::npos : q - p - 6);
}

std::vector<TableRow> group_table(const RunResult& r) {
  std::vector<TableRow> rows;
  for (const FinalGroup& g : r.final_groups) {
    TableRow row;
    row.group = g.path;
    for (const FinalFile& f : g.files) {
      if (f.error) continue;
      const std::string& n = f.name;
      if (n.rfind("memory.", 0) != 0) continue;
      const std::string field = n.substr(7);
      if (std::find(kTableSizes.begin(), kTableSizes.end(), field) != kTableSizes.end()) {
        row.values[field] = trim(f.content);
      } else if (n == "memory.events") {
        for (const auto& [k, v] : keyed_lines(f.content)) row.values["events." + k] = v;
      } else if (n == "memory.pressure") {
        row.values["some.avg10"] = pressure_avg10(f.content, "some");
        row.values["full.avg10"] = pressure_avg10(f.content, "full");
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// A size for the table: bytes below 1K, else one decimal and a binary suffix ("29.9M").
std::string table_size(const std::string& text) {
  uint64_t v = 0;
  if (text.empty()) return "-";
  if (!read_number(text, &v) || text == "max") return text;
  if (v < 1024) return std::to_string(v);
  static constexpr char kSuffix[] = "KMGTPE";
  double d = static_cast<double>(v);
  int i = -1;
  while (d >= 1024 && i < 5) {
    d /= 1024;
    ++i;
  }
  return fmt::format("{:.1f}{}", d, kSuffix[i]);
}

std::string text_table(const RunResult& r) {
  std::string out = fmt::format(
      "{:<20} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7}\n",
      "GROUP", "CURRENT", "PEAK", "MIN", "LOW", "HIGH", "MAX", "E.LOW", "E.HIGH", "E.MAX", "E.OOM",
      "E.KILL", "E.WAIT", "SOME10", "FULL10");
  auto get = [](const TableRow& row, const std::string& k) {
    const auto it = row.values.find(k);
    return it == row.values.end() || it->second.empty() ? std::string("-") : it->second;
  };
  for (const TableRow& row : group_table(r)) {
    out += fmt::format("{:<20}", row.group);
    for (const char* c : kTableSizes) {
      const auto it = row.values.find(c);
      out += fmt::format(" {:>8}", table_size(it == row.values.end() ? "" : it->second));
    }
    for (const char* e : kTableEvents) out += fmt::format(" {:>6}", get(row, std::string("events.") + e));
    out += fmt::format(" {:>7} {:>7}\n", get(row, "some.avg10"), get(row, "full.avg10"));
  }
  return out;
}

}  // namespace

std::string text_report(const RunResult& r) {
  std::string out;
  for (const StepResult& s : r.steps) {
    for (const std::string& l : s.lines) out += l + "\n";
    for (const std::string& n : s.notes)
      out += fmt::format("line {}: note: {}\n", s.step->mark.line, n);
    if ((s.checked && !s.passed) || s.failed)
      out += fmt::format("line {}: FAIL {}\n", s.step->mark.line, s.message);
  }
  if (!out.empty()) out += "\n";
  out += text_table(r) + "\n";
  out += fmt::format("{} passed, {} failed\n", r.passed, r.failed);
  return out;
}

std::string json_report(const Scenario& sc, const RunResult& r) {
  Json doc = Json::object();
  doc["name"] = sc.name;
  doc["config"] = {{"unit", sc.config.unit},
                   {"cpus", sc.config.cpus},
                   {"batch", sc.config.batch},
                   {"recursive_protection", sc.config.recursive_protection},
                   {"local_events", sc.config.local_events}};
  if (sc.config.reclaim_cost_ns) doc["config"]["reclaim_cost_ns"] = sc.config.reclaim_cost_ns;
  Json steps = Json::array();
  for (const StepResult& s : r.steps) {
    Json j = Json::object();
    j["step"] = s.index;
    if (!s.lane.empty()) {
      j["lane"] = s.lane;
      j["lane_step"] = s.lane_step;
    }
    j["line"] = s.step->mark.line;
    j["kind"] = s.step->kind;
    j["args"] = step_args(*s.step);
    j["time_ns"] = s.time_ns;
    j["result"] = s.detail;
    if (s.checked) j["check"] = s.passed ? "passed" : "failed";
    if (s.failed) j["failed"] = true;
    if (!s.message.empty()) j["message"] = s.message;
    steps.push_back(std::move(j));
  }
  doc["steps"] = std::move(steps);
  doc["passed"] = r.passed;
  doc["failed"] = r.failed;
  Json groups = Json::object();
  for (const FinalGroup& g : r.final_groups) {
    Json files = Json::object();
    for (const FinalFile& f : g.files) {
      files[f.name] =
          f.error ? Json{{"error", memcg::errno_name(f.error)}} : file_json(f.name, f.content);
    }
    groups[g.path] = std::move(files);
  }
  doc["groups"] = std::move(groups);
  // The table of the text report: per group, the sizes (bytes, or "max"), the memory.events
  // counters and the 10 s pressure averages (percent, as memory.pressure prints them).
  Json table = Json::array();
  for (const TableRow& row : group_table(r)) {
    Json j = Json::object();
    j["group"] = row.group;
    for (const char* c : kTableSizes) {
      const auto it = row.values.find(c);
      if (it != row.values.end()) j[c] = value_json(it->second);
    }
    Json events = Json::object();
    for (const auto& [k, v] : row.values)
      if (k.rfind("events.", 0) == 0) events[k.substr(7)] = value_json(v);
    if (!events.empty()) j["events"] = std::move(events);
    for (const char* k : {"some.avg10", "full.avg10"}) {
      const auto it = row.values.find(k);
      if (it != row.values.end() && !it->second.empty()) j["pressure"][k] = it->second;
    }
    table.push_back(std::move(j));
  }
  doc["table"] = std::move(table);
  return doc.dump(2) + "\n";
}

}  // namespace memcgctl
