// The page's history (memcg::http::Server, GET /): memory.current, PSI some/full and event
// counts of the largest groups, sampled on the controller's clock by the server. Not installed.
//
// Every sample also updates every group's status (status.hpp).
//
// Bounds: at most `groups` series (the largest groups by memory.current at each sample; a group
// that falls out keeps its series until `samples` samples have passed without it), each a ring of
// `samples` samples of kSampleBytes: at most 2 x groups x samples x kSampleBytes bytes plus the
// paths (ServerOptions caps groups x samples, docs/http.md states the figure).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "status.hpp"

namespace memcg {
class Controller;
}

namespace memcg::http::detail {

struct Sample {
  uint64_t t_ns = 0;             // the controller's clock
  uint64_t current = 0;          // bytes
  uint64_t high = 0, max = 0;    // the limits then (kUnlimited when none)
  uint32_t some_ppm = 0, full_ppm = 0;  // stalled share of the time since the previous sample
  uint32_t ev_high = 0, ev_max = 0, ev_kill = 0;  // events since the previous sample
};
inline constexpr size_t kSampleBytes = sizeof(Sample);

struct Series {
  std::string path;
  std::vector<Sample> ring;  // `samples` at most, oldest first once rotated (see History::view)
  size_t next = 0;           // where the next sample goes once full
  uint64_t last_seen = 0;    // the sample round that last added to it
  // Cumulative values of the previous sample, for the deltas.
  uint64_t psi_ns[2] = {0, 0};
  uint64_t events[3] = {0, 0, 0};
  uint64_t prev_t_ns = 0;
  bool primed = false;
};

class History {
 public:
  History(size_t groups, size_t samples) : groups_(groups), samples_(samples) {}

  // Reads the groups and adds one sample to the series of the largest. Takes the tree lock
  // (shared) to walk; runs no callback (PSI totals only: no trigger is evaluated).
  void sample(Controller& ctl);
  // Samples unless the last sample is younger than `min_gap_ns` on the controller's clock.
  void sample_if_older(Controller& ctl, uint64_t min_gap_ns);

  // The series with their samples oldest first, largest last current first.
  std::vector<Series> view() const;
  uint64_t rounds() const;
  // Bytes held now (samples and paths).
  size_t bytes() const;
  // Every group's status at the last sample (status.hpp); 0 for a group not sampled twice yet.
  uint32_t status(const std::string& path) const;

 private:
  const size_t groups_, samples_;
  mutable std::mutex mu_;
  std::map<std::string, Series> series_;  // guarded by mu_
  uint64_t round_ = 0;                    // guarded by mu_
  uint64_t last_t_ns_ = 0;                // guarded by mu_
  StatusTracker status_;                  // guarded by mu_
};

}  // namespace memcg::http::detail
