// Uses the installed memcg::prometheus_cpp: collects the families without an Exposer.
#include <memcg/memcg.hpp>
#include <memcg/prometheus_cpp/collector.hpp>

#include <cstdio>

int main() {
  memcg::Controller ctl;
  memcg::prometheus_cpp::Collector collector(ctl);
  const auto families = collector.Collect();
  std::printf("memcg families: %zu\n", families.size());
  return families.empty() ? 1 : 0;
}
