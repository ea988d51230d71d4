#include "load.hpp"

#include <algorithm>
#include <fstream>
#include <tuple>

#include "loader.hpp"

namespace memcgctl {

const char* outcome_name(ChargeStep::Outcome o) {
  switch (o) {
    case ChargeStep::Outcome::kOk:
      return "ok";
    case ChargeStep::Outcome::kKilled:
      return "killed";
    case ChargeStep::Outcome::kFailed:
      return "failed";
    case ChargeStep::Outcome::kTimedOut:
      return "timed_out";
  }
  return "?";
}

const char* op_name(ExpectStep::Op op) {
  switch (op) {
    case ExpectStep::Op::kEq:
      return "eq";
    case ExpectStep::Op::kLe:
      return "le";
    case ExpectStep::Op::kGe:
      return "ge";
    case ExpectStep::Op::kCloseTo:
      return "close_to";
  }
  return "?";
}

static_assert(static_cast<int>(memcg::ReserveStatus::kNeverFits) + 1 == kReserveStatusCount);

const char* reserve_status_text(memcg::ReserveStatus s) {
  static constexpr const char* kNames[kReserveStatusCount] = {
      "ok",        "forced", "nomem",   "nomem-costly", "timed-out",
      "cancelled", "killed", "removed", "invalid",      "never-fits"};
  const auto i = static_cast<size_t>(s);
  return i < std::size(kNames) ? kNames[i] : "?";
}

bool is_keyed_file(std::string_view file) {
  return file == "memory.events" || file == "memory.events.local" || file == "memory.stat" ||
         file == "memory.swap.events" || file == "memory.numa_stat" || file == "memory.wait" ||
         file == "memory.admit.queue";
}

bool parse_hundredths(std::string_view s, uint64_t* v) {
  const size_t dot = s.find('.');
  uint64_t whole = 0, frac = 0;
  if (!detail::parse_uint(s.substr(0, dot), &whole) || whole > 100) return false;
  if (dot != std::string_view::npos) {
    const std::string_view f = s.substr(dot + 1);
    if (f.empty() || f.size() > 2 || !detail::parse_uint(f, &frac)) return false;
    if (f.size() == 1) frac *= 10;
  }
  *v = whole * 100 + frac;
  return *v <= 10000;
}

namespace {

// Where text longer than kMaxScenarioBytes goes on past the limit: the line and column of its
// first byte beyond it.
Mark mark_past_limit(std::string_view text) {
  const std::string_view head = text.substr(0, kMaxScenarioBytes);
  const size_t last_nl = head.rfind('\n');
  const auto lines = std::count(head.begin(), head.end(), '\n');
  const size_t column = last_nl == std::string_view::npos ? head.size() : head.size() - last_nl - 1;
  return {static_cast<int>(lines) + 1, static_cast<int>(column) + 1};
}

Diagnostic too_large(std::string_view text) {
  return {mark_past_limit(text), "the scenario goes on past " + std::to_string(kMaxScenarioBytes) +
                                     " bytes (1 MiB), the most a scenario may be"};
}

}  // namespace

bool load_scenario(std::string_view text, Scenario* out, std::vector<Diagnostic>* errors) {
  if (text.size() > kMaxScenarioBytes) {
    errors->push_back(too_large(text));
    return false;
  }
  Scenario s;
  const size_t before = errors->size();
  std::vector<Diagnostic> found;
  detail::Loader(&found).load(text, &s);
  // File order; errors found at one place keep the order they were found in.
  std::vector<size_t> order(found.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tuple(found[a].mark.line, found[a].mark.column, a) <
           std::tuple(found[b].mark.line, found[b].mark.column, b);
  });
  for (size_t i : order) errors->push_back(found[i]);
  if (errors->size() != before) return false;
  *out = std::move(s);
  return true;
}

bool load_scenario_file(const std::string& path, Scenario* out, std::vector<Diagnostic>* errors) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    errors->push_back({{}, "cannot open the file"});
    return false;
  }
  // At most one byte past the limit is read: enough to know the file is too large, whatever
  // it is (a device or a pipe may never end).
  std::string text;
  char buf[64 * 1024];
  while (text.size() <= kMaxScenarioBytes && in) {
    const size_t want =
        std::min(sizeof buf, static_cast<size_t>(kMaxScenarioBytes + 1 - text.size()));
    in.read(buf, static_cast<std::streamsize>(want));
    text.append(buf, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) {
    errors->push_back({{}, "cannot read the file"});
    return false;
  }
  return load_scenario(text, out, errors);
}

std::string format_diagnostic(const std::string& file, const Diagnostic& d) {
  if (d.mark.line <= 0) return file + ": " + d.message;
  return file + ":" + std::to_string(d.mark.line) + ":" + std::to_string(d.mark.column) + ": " +
         d.message;
}

}  // namespace memcgctl
