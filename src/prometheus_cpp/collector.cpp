#include "memcg/prometheus_cpp/collector.hpp"

#include <prometheus/exposer.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <limits>
#include <stdexcept>
#include <string_view>

#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/files/prometheus.hpp"

namespace memcg::prometheus_cpp {
namespace {

[[noreturn]] void bad(size_t line_no, std::string_view why) {
  throw std::invalid_argument("exposition line " + std::to_string(line_no) + ": " +
                              std::string(why));
}

// Reverses prometheus_escape_help / prometheus_escape_label: \\ \n and (in labels) \".
std::string unescape(std::string_view s, size_t line_no) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i == s.size()) bad(line_no, "a backslash ends the text");
    switch (s[i]) {
      case '\\': out += '\\'; break;
      case 'n': out += '\n'; break;
      case '"': out += '"'; break;
      default: bad(line_no, "unknown escape");
    }
  }
  return out;
}

// Counts and bytes are integers; seconds (a histogram's sum and bucket bounds, *_seconds_total)
// and ratios are decimals,
// accepted only where `decimal` says so.
double value_of(std::string_view v, size_t line_no, bool decimal = false) {
  if (v == "+Inf") return std::numeric_limits<double>::infinity();
  if (v.empty() || v.size() > 64) bad(line_no, "not a number");
  for (char c : v)
    if (!((c >= '0' && c <= '9') || c == '-' || (decimal && c == '.')))
      bad(line_no, decimal ? "not a number" : "not an integer");
  const std::string copy(v);
  char* end = nullptr;
  const double out = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size()) bad(line_no, "not a number");
  return out;
}

// name{a="x",b="y"} value  ->  labels and value, for family `family`. A histogram's samples
// carry a suffix (_bucket, _sum, _count), returned in *suffix; other families' carry none.
prometheus::ClientMetric sample_of(std::string_view line, const prometheus::MetricFamily& family,
                                   size_t line_no, std::string_view* suffix = nullptr,
                                   double* value = nullptr) {
  prometheus::ClientMetric m;
  size_t pos = line.find_first_of("{ ");
  const std::string_view name = pos == std::string_view::npos ? line : line.substr(0, pos);
  if (pos == std::string_view::npos || name.substr(0, family.name.size()) != family.name)
    bad(line_no, "a sample outside its family");
  const std::string_view rest = name.substr(family.name.size());
  if (family.type == prometheus::MetricType::Histogram) {
    if (rest != "_bucket" && rest != "_sum" && rest != "_count")
      bad(line_no, "a histogram sample other than _bucket, _sum or _count");
    *suffix = rest;
  } else if (!rest.empty()) {
    bad(line_no, "a sample outside its family");
  }
  if (line[pos] == '{') {
    ++pos;
    while (pos < line.size() && line[pos] != '}') {
      const size_t eq = line.find("=\"", pos);
      if (eq == std::string_view::npos) bad(line_no, "malformed label");
      std::string name(line.substr(pos, eq - pos));
      size_t end = eq + 2;
      while (end < line.size() && line[end] != '"') end += line[end] == '\\' ? 2 : 1;
      if (end >= line.size()) bad(line_no, "unterminated label value");
      m.label.push_back({std::move(name), unescape(line.substr(eq + 2, end - eq - 2), line_no)});
      pos = end + 1;
      if (pos < line.size() && line[pos] == ',') ++pos;
    }
    if (pos >= line.size()) bad(line_no, "unterminated labels");
    ++pos;  // '}'
  }
  if (pos >= line.size() || line[pos] != ' ') bad(line_no, "no value");
  // Seconds and ratios are decimals: a histogram's, *_seconds_total and *_ratio families.
  auto ends_with = [&](std::string_view tail) {
    return family.name.size() >= tail.size() &&
           family.name.compare(family.name.size() - tail.size(), tail.size(), tail) == 0;
  };
  const bool decimal = family.type == prometheus::MetricType::Histogram ||
                       ends_with("_seconds_total") || ends_with("_ratio");
  const double v = value_of(line.substr(pos + 1), line_no, decimal);
  if (value != nullptr) *value = v;
  if (family.type == prometheus::MetricType::Counter) {
    m.counter.value = v;
  } else {
    m.gauge.value = v;
  }
  return m;
}

// One sample of a histogram family: its _bucket lines (with an `le` label), _sum and _count
// join the metric of the same other labels, which starts at its first sample.
void add_histogram_sample(prometheus::MetricFamily& f, std::string_view line, size_t line_no) {
  std::string_view suffix;
  double v = 0;
  prometheus::ClientMetric m = sample_of(line, f, line_no, &suffix, &v);
  double le = 0;
  bool has_le = false;
  for (auto it = m.label.begin(); it != m.label.end(); ++it) {
    if (it->name != "le") continue;
    le = value_of(it->value, line_no, true);
    has_le = true;
    m.label.erase(it);
    break;
  }
  if (has_le != (suffix == "_bucket")) bad(line_no, "a histogram bucket needs `le`, only it");
  if (f.metric.empty() || !(f.metric.back().label == m.label)) {
    m.histogram = {};
    f.metric.push_back(std::move(m));
  }
  prometheus::ClientMetric::Histogram& h = f.metric.back().histogram;
  if (v < 0) bad(line_no, "a negative histogram value");
  if (suffix == "_bucket") {
    if (!std::isinf(le)) h.bucket.push_back({static_cast<std::uint64_t>(v), le});
  } else if (suffix == "_sum") {
    h.sample_sum = v;
  } else {
    h.sample_count = static_cast<std::uint64_t>(v);
  }
}

}  // namespace

std::vector<prometheus::MetricFamily> parse_exposition(const std::string& text) {
  std::vector<prometheus::MetricFamily> families;
  std::string_view rest(text);
  size_t line_no = 0;
  bool typed = false;  // the last family has its TYPE line
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    if (nl == std::string_view::npos) bad(line_no + 1, "the last line has no line feed");
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl + 1);
    ++line_no;
    constexpr std::string_view kHelp = "# HELP ", kType = "# TYPE ";
    if (line.substr(0, kHelp.size()) == kHelp) {
      const std::string_view body = line.substr(kHelp.size());
      const size_t sp = body.find(' ');
      if (sp == std::string_view::npos) bad(line_no, "HELP without text");
      prometheus::MetricFamily f;
      f.name = std::string(body.substr(0, sp));
      f.help = unescape(body.substr(sp + 1), line_no);
      families.push_back(std::move(f));
      typed = false;
    } else if (line.substr(0, kType.size()) == kType) {
      const std::string_view body = line.substr(kType.size());
      const size_t sp = body.find(' ');
      if (families.empty() || typed || sp == std::string_view::npos ||
          body.substr(0, sp) != families.back().name)
        bad(line_no, "TYPE without its HELP");
      const std::string_view type = body.substr(sp + 1);
      if (type == "gauge") {
        families.back().type = prometheus::MetricType::Gauge;
      } else if (type == "counter") {
        families.back().type = prometheus::MetricType::Counter;
      } else if (type == "histogram") {
        families.back().type = prometheus::MetricType::Histogram;
      } else {
        bad(line_no, "a type other than gauge, counter or histogram");
      }
      typed = true;
    } else {
      if (families.empty() || !typed) bad(line_no, "a sample before its family's TYPE");
      prometheus::MetricFamily& f = families.back();
      if (f.type == prometheus::MetricType::Histogram) {
        add_histogram_sample(f, line, line_no);
      } else {
        f.metric.push_back(sample_of(line, f, line_no));
      }
    }
  }
  return families;
}

std::vector<prometheus::MetricFamily> Collector::Collect() const {
  const std::string text = render_prometheus(controller_);
  internal::HookBypass bypass;  // the families are the library's memory, as the text is
  return parse_exposition(text);
}

std::shared_ptr<Collector> expose(prometheus::Exposer& exposer, Controller& controller,
                                  const std::string& uri) {
  auto collector = std::make_shared<Collector>(controller);
  exposer.RegisterCollectable(collector, uri);
  return collector;
}

}  // namespace memcg::prometheus_cpp
