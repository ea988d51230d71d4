#include "history.hpp"

#include <algorithm>

#include "memcg/base/events.hpp"
#include "memcg/base/internal/lock.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/wait/charge_wait.hpp"

namespace memcg::http::detail {
namespace {

struct Read {
  std::string path;
  uint64_t current, high, max;
  uint64_t psi_ns[2];
  uint64_t events[3];
  uint64_t local[3];  // own high, max, oom_kill events (the status)
  uint64_t timed_out;
};

uint32_t ppm(uint64_t part, uint64_t whole) {
  if (whole == 0) return 0;
  const uint64_t v = part >= whole ? 1'000'000 : part * 1'000'000 / whole;
  return static_cast<uint32_t>(v);
}

}  // namespace

void History::sample(Controller& ctl) {
  internal::HookBypass bypass;  // the samples are the library's memory
  std::vector<Read> reads;
  reads.reserve(ctl.nr_groups() + 16);
  ctl.walk(
      ctl.root(),
      [&](Group& g) {
        Read r;
        r.path = g.path();
        r.current = g.current();
        r.high = g.is_root() ? kUnlimited : g.high();
        r.max = g.is_root() ? kUnlimited : g.max();
        psi_stall_totals(g, r.psi_ns);
        r.events[0] = g.events().get(Event::kHigh);
        r.events[1] = g.events().get(Event::kMax);
        r.events[2] = g.events().get(Event::kOomKill);
        r.local[0] = g.events_local().get(Event::kHigh);
        r.local[1] = g.events_local().get(Event::kMax);
        r.local[2] = g.events_local().get(Event::kOomKill);
        r.timed_out = g.is_root() ? 0 : wait_stats(g).timed_out;
        reads.push_back(std::move(r));
      },
      /*include_dying=*/false);
  const uint64_t now = ctl.clock().now_ns();
  std::vector<StatusRead> status_reads(reads.size());
  for (size_t i = 0; i < reads.size(); ++i) {
    StatusRead& sr = status_reads[i];
    sr.path = reads[i].path;
    std::copy(std::begin(reads[i].psi_ns), std::end(reads[i].psi_ns), sr.psi_ns);
    std::copy(std::begin(reads[i].local), std::end(reads[i].local), sr.local);
    sr.timed_out = reads[i].timed_out;
  }
  const size_t keep = std::min(groups_, reads.size());
  std::partial_sort(reads.begin(), reads.begin() + static_cast<ptrdiff_t>(keep), reads.end(),
                    [](const Read& a, const Read& b) {
                      return a.current != b.current ? a.current > b.current : a.path < b.path;
                    });
  internal::LockGuard lock(mu_);
  ++round_;
  last_t_ns_ = now;
  status_.update(status_reads, now);
  for (size_t i = 0; i < keep; ++i) {
    const Read& r = reads[i];
    Series& s = series_[r.path];
    if (s.path.empty()) s.path = r.path;
    Sample x;
    x.t_ns = now;
    x.current = r.current;
    x.high = r.high;
    x.max = r.max;
    if (s.primed) {
      const uint64_t dt = now - std::min(now, s.prev_t_ns);
      x.some_ppm = ppm(r.psi_ns[0] - std::min(r.psi_ns[0], s.psi_ns[0]), dt);
      x.full_ppm = ppm(r.psi_ns[1] - std::min(r.psi_ns[1], s.psi_ns[1]), dt);
      x.ev_high = static_cast<uint32_t>(r.events[0] - std::min(r.events[0], s.events[0]));
      x.ev_max = static_cast<uint32_t>(r.events[1] - std::min(r.events[1], s.events[1]));
      x.ev_kill = static_cast<uint32_t>(r.events[2] - std::min(r.events[2], s.events[2]));
    }
    s.primed = true;
    s.prev_t_ns = now;
    std::copy(std::begin(r.psi_ns), std::end(r.psi_ns), s.psi_ns);
    std::copy(std::begin(r.events), std::end(r.events), s.events);
    s.last_seen = round_;
    if (s.ring.size() < samples_) {
      s.ring.push_back(x);
    } else {
      s.ring[s.next] = x;
      s.next = (s.next + 1) % samples_;
    }
  }
  // Series not fed for a whole ring go; beyond 2 x groups, the least recently fed go first.
  for (auto it = series_.begin(); it != series_.end();)
    it = round_ - it->second.last_seen >= samples_ ? series_.erase(it) : std::next(it);
  while (series_.size() > 2 * groups_) {
    auto oldest = series_.begin();
    for (auto it = series_.begin(); it != series_.end(); ++it)
      if (it->second.last_seen < oldest->second.last_seen) oldest = it;
    series_.erase(oldest);
  }
}

void History::sample_if_older(Controller& ctl, uint64_t min_gap_ns) {
  {
    internal::LockGuard lock(mu_);
    const uint64_t now = ctl.clock().now_ns();
    if (round_ != 0 && now - std::min(now, last_t_ns_) < min_gap_ns) return;
  }
  sample(ctl);
}

std::vector<Series> History::view() const {
  internal::HookBypass bypass;
  std::vector<Series> out;
  {
    internal::LockGuard lock(mu_);
    out.reserve(series_.size());
    for (const auto& [path, s] : series_) {
      Series c;
      c.path = s.path;
      c.last_seen = s.last_seen;
      c.ring.reserve(s.ring.size());
      for (size_t i = 0; i < s.ring.size(); ++i) c.ring.push_back(s.ring[(s.next + i) % s.ring.size()]);
      out.push_back(std::move(c));
    }
  }
  std::sort(out.begin(), out.end(), [](const Series& a, const Series& b) {
    const uint64_t ca = a.ring.empty() ? 0 : a.ring.back().current;
    const uint64_t cb = b.ring.empty() ? 0 : b.ring.back().current;
    if (a.last_seen != b.last_seen) return a.last_seen > b.last_seen;
    return ca != cb ? ca > cb : a.path < b.path;
  });
  return out;
}

uint64_t History::rounds() const {
  internal::LockGuard lock(mu_);
  return round_;
}

uint32_t History::status(const std::string& path) const {
  internal::LockGuard lock(mu_);
  return status_.status(path);
}

size_t History::bytes() const {
  internal::LockGuard lock(mu_);
  size_t n = 0;
  for (const auto& [path, s] : series_)
    n += sizeof(Series) + 2 * path.capacity() + s.ring.capacity() * sizeof(Sample);
  return n;
}

}  // namespace memcg::http::detail
