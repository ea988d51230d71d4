#include "memcg/prometheus_cpp/collector.hpp"

#include <prometheus/exposer.h>

#include <cmath>
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

double value_of(std::string_view v, size_t line_no) {
  if (v == "+Inf") return std::numeric_limits<double>::infinity();
  if (v.empty()) bad(line_no, "no value");
  // Integers only: the renderer prints counts and bytes.
  double out = 0;
  size_t i = 0;
  const bool negative = v[0] == '-';
  if (negative) i = 1;
  if (i == v.size()) bad(line_no, "not a number");
  for (; i < v.size(); ++i) {
    if (v[i] < '0' || v[i] > '9') bad(line_no, "not a number");
    out = out * 10 + (v[i] - '0');
  }
  return negative ? -out : out;
}

// name{a="x",b="y"} value  ->  labels and value, for family `family`.
prometheus::ClientMetric sample_of(std::string_view line, const prometheus::MetricFamily& family,
                                   size_t line_no) {
  prometheus::ClientMetric m;
  size_t pos = line.find_first_of("{ ");
  if (pos == std::string_view::npos || line.substr(0, pos) != family.name)
    bad(line_no, "a sample outside its family");
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
  const double v = value_of(line.substr(pos + 1), line_no);
  if (family.type == prometheus::MetricType::Counter) {
    m.counter.value = v;
  } else {
    m.gauge.value = v;
  }
  return m;
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
      } else {
        bad(line_no, "a type other than gauge or counter");
      }
      typed = true;
    } else {
      if (families.empty() || !typed) bad(line_no, "a sample before its family's TYPE");
      families.back().metric.push_back(sample_of(line, families.back(), line_no));
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
