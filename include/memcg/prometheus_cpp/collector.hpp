// memcg::prometheus_cpp: memcg's metric families in a program that already exposes metrics with
// prometheus-cpp (optional component, CMake target memcg::prometheus_cpp, built when
// prometheus-cpp is found: Debian prometheus-cpp-dev). No second server: the families are
// collected by the program's own Exposer.
//
//   prometheus::Exposer exposer("127.0.0.1:8080");
//   exposer.RegisterCollectable(registry);                       // the program's own metrics
//   auto memcg_metrics = memcg::prometheus_cpp::expose(exposer, ctl);   // keep it alive
//
// The families, names, labels, help texts and types are exactly render_prometheus()'s
// (include/memcg/prometheus.hpp); each Collect() renders them afresh. Values become doubles, as
// prometheus-cpp stores them: counts above 2^53 lose their lowest bits; "max" limits are +Inf.
//
// Thread safety: Collect() may run on any thread, concurrently with everything else (the
// Exposer's server threads call it). Cost: a render_prometheus() per scrape plus reading it back
// into prometheus-cpp's structures.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace prometheus {
class Exposer;
}

namespace memcg {
class Controller;
}

namespace memcg::prometheus_cpp {

class Collector final : public prometheus::Collectable {
 public:
  // REQUIRES: `controller` outlives the collector.
  explicit Collector(Controller& controller) noexcept : controller_(controller) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  Controller& controller_;
};

// Registers a new Collector of `controller` with `exposer` under `uri` and returns it. The
// Exposer keeps only a weak reference: the families are exposed while the returned pointer (or
// a copy) lives, and no longer after. REQUIRES: `controller` outlives the returned collector.
std::shared_ptr<Collector> expose(prometheus::Exposer& exposer, Controller& controller,
                                  const std::string& uri = "/metrics");

// The families of a text exposition in the format render_prometheus() writes (HELP and TYPE
// lines before each family's samples; gauge and counter only). Throws std::invalid_argument,
// naming the line, for anything else. Exposed for tests and for programs that render themselves.
std::vector<prometheus::MetricFamily> parse_exposition(const std::string& text);

}  // namespace memcg::prometheus_cpp
