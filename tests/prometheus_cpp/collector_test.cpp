// memcg::prometheus_cpp: the families collected by a program's own prometheus::Exposer, next to
// the program's own registry, scraped over HTTP; the samples must be render_prometheus()'s.
#include "../promtool.hpp"
#include "memcg/prometheus_cpp/collector.hpp"

#include <gtest/gtest.h>
#include <httplib.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/base/events.hpp"
#include "memcg/files/prometheus.hpp"

namespace memcg::prometheus_cpp {
namespace {

// "name{labels}" -> value text, for the sample lines of families whose name starts with
// `prefix` (the Exposer adds families of its own).
std::map<std::string, std::string> samples(const std::string& text, const std::string& prefix) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty() || line[0] == '#' || line.rfind(prefix, 0) != 0) continue;
    const size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = line.substr(sp + 1);
  }
  return out;
}

double number(const std::string& v) {
  return v == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(v);
}

struct Tree {
  Controller ctl;
  GroupRef a, b;
  Tree() {
    EXPECT_EQ(ctl.create("a", &a), 0);
    EXPECT_EQ(ctl.create("a/b", &b), 0);
    a->set_max(uint64_t{32} << 20);
    b->set_low(1 << 20);
    EXPECT_TRUE(charged(try_charge(*b, 100)));
    b->raise(Event::kHigh);
    ctl.flush_stats();
  }
  ~Tree() { uncharge(*b, 100); }
};

TEST(PrometheusCppTest, ExposerServesTheSameFamiliesAsTheRenderer) {
  Tree t;
  prometheus::Exposer exposer("127.0.0.1:0");
  // The program's own metrics, in its own registry on the same Exposer.
  auto registry = std::make_shared<prometheus::Registry>();
  auto& requests = prometheus::BuildCounter().Name("app_requests_total").Help("Requests.")
                       .Register(*registry).Add({});
  requests.Increment(3);
  exposer.RegisterCollectable(registry);
  std::shared_ptr<Collector> collector = expose(exposer, t.ctl);
  ASSERT_FALSE(exposer.GetListeningPorts().empty());
  const int port = exposer.GetListeningPorts().front();

  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  const std::string& body = res->body;
  EXPECT_NE(body.find("app_requests_total 3"), std::string::npos) << body.substr(0, 2000);

  // prometheus-cpp prints a bucket's bound in its shortest form (le="0.001" for 0.001000000):
  // keys compare with the bound as a number.
  const auto by_bound = [](const auto& in) {
    std::map<std::string, std::string> out;
    for (const auto& [key, value] : in) {
      std::string k = key;
      const size_t at = k.find("le=\"");
      if (at != std::string::npos) {
        const size_t end = k.find('"', at + 4);
        const std::string bound = k.substr(at + 4, end - at - 4);
        const std::string norm =
            bound == "+Inf" ? bound : std::to_string(std::strtod(bound.c_str(), nullptr));
        k = k.substr(0, at + 4) + norm + k.substr(end);
      }
      out.emplace(std::move(k), value);
    }
    return out;
  };
  const auto served = by_bound(samples(body, "memcg_"));
  const auto expected = by_bound(samples(render_prometheus(t.ctl), "memcg_"));
  ASSERT_EQ(served.size(), expected.size());
  for (const auto& [key, value] : expected) {
    auto it = served.find(key);
    ASSERT_NE(it, served.end()) << key;
    EXPECT_EQ(number(it->second), number(value)) << key;
  }
  EXPECT_NE(body.find("# TYPE memcg_memory_events_total counter"), std::string::npos);
  EXPECT_NE(body.find("# TYPE memcg_memory_current_bytes gauge"), std::string::npos);
  const auto high = served.find("memcg_memory_events_total{group=\"a/b\",event=\"high\"}");
  ASSERT_NE(high, served.end());
  EXPECT_EQ(high->second, "1");

  if (!std::string(MEMCG_PROMTOOL).empty()) {
    EXPECT_TRUE(testing::promtool_accepts(MEMCG_PROMTOOL, body));
  }

  // Once the collector is gone, the Exposer serves the program's metrics only.
  collector.reset();
  res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body.find("memcg_"), std::string::npos);
  EXPECT_NE(res->body.find("app_requests_total 3"), std::string::npos);
}

TEST(PrometheusCppTest, ParseKeepsNamesHelpTypesLabelsAndValues) {
  const auto fams = parse_exposition(
      "# HELP m_bytes Some \\\\ help\\nline.\n# TYPE m_bytes gauge\n"
      "m_bytes{group=\"a\\\"b\"} +Inf\nm_bytes{group=\"/\",item=\"x\"} 42\n"
      "# HELP m_total Count.\n# TYPE m_total counter\nm_total 7\n");
  ASSERT_EQ(fams.size(), 2u);
  EXPECT_EQ(fams[0].name, "m_bytes");
  EXPECT_EQ(fams[0].help, "Some \\ help\nline.");
  EXPECT_EQ(fams[0].type, prometheus::MetricType::Gauge);
  ASSERT_EQ(fams[0].metric.size(), 2u);
  EXPECT_EQ(fams[0].metric[0].label.at(0).value, "a\"b");
  EXPECT_TRUE(std::isinf(fams[0].metric[0].gauge.value));
  EXPECT_EQ(fams[0].metric[1].label.size(), 2u);
  EXPECT_EQ(fams[0].metric[1].gauge.value, 42);
  EXPECT_EQ(fams[1].type, prometheus::MetricType::Counter);
  EXPECT_EQ(fams[1].metric.at(0).counter.value, 7);
}

TEST(PrometheusCppTest, ParseRefusesWhatTheRendererNeverWrites) {
  for (const char* bad : {
           "m 1\n",                                            // no family
           "# HELP m x\nm 1\n",                                // no TYPE
           "# HELP m x\n# TYPE m summary\n",                   // another type
           "# HELP m x\n# TYPE m histogram\nm 1\n",            // histogram sample, no suffix
           "# HELP m x\n# TYPE m histogram\nm_bucket 1\n",     // bucket without le
           "# HELP m x\n# TYPE n gauge\n",                     // TYPE of another name
           "# HELP m x\n# TYPE m gauge\nn 1\n",                // sample of another family
           "# HELP m x\n# TYPE m gauge\nm{a=\"1} 1\n",         // unterminated label
           "# HELP m x\n# TYPE m gauge\nm 1.5\n",              // not an integer
           "# HELP m x\n# TYPE m gauge\nm 1",                  // no final line feed
           "# HELP m x\\q\n# TYPE m gauge\n",                  // unknown escape
       }) {
    EXPECT_THROW(parse_exposition(bad), std::invalid_argument) << bad;
  }
}

}  // namespace
}  // namespace memcg::prometheus_cpp
