#include "report.hpp"

#include <fmt/format.h>

#include "memcg/base/errors.hpp"

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
        } else if constexpr (std::is_same_v<T, MemberStep>) {
          a["name"] = b.name;
          a["group"] = b.group;
          if (b.immune) a["immune"] = true;
        } else if constexpr (std::is_same_v<T, ChargeStep>) {
          a["member"] = b.member;
          a["size"] = b.bytes;
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
          a["group"] = b.group;
          a["file"] = b.file;
          if (!b.key.empty()) a["key"] = b.key;
          a[op_name(b.op)] = b.value;
          if (b.op == ExpectStep::Op::kCloseTo) a["err"] = b.err;
        } else if constexpr (std::is_same_v<T, PrintStep>) {
          a["group"] = b.group;
          if (!b.file.empty()) a["file"] = b.file;
          if (!b.key.empty()) a["key"] = b.key;
        }
      },
      st.body);
  return a;
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
  Json steps = Json::array();
  for (const StepResult& s : r.steps) {
    Json j = Json::object();
    j["step"] = s.index;
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
  return doc.dump(2) + "\n";
}

}  // namespace memcgctl
