#include "status.hpp"

#include <algorithm>

namespace memcg::http::detail {

const StatusInfo kStatusInfo[kNumStatusFlags] = {
    {kStatusOomKill, "oom_kill", "OOM kills", "MemcgOomKills", "memcgoomkills"},
    {kStatusPsiFull, "psi_full", "PSI full", "MemcgPressureFull", "memcgpressurefull"},
    {kStatusTimeouts, "timeouts", "waits timing out", "MemcgWaitsTimingOut",
     "memcgwaitstimingout"},
    {kStatusMax, "max", "memory.max events", "MemcgUsageNearMax", "memcgusagenearmax"},
    {kStatusPsiSome, "psi_some", "PSI some", "MemcgPressureSome", "memcgpressuresome"},
    {kStatusHigh, "high", "memory.high events", "MemcgHighBreached", "memcghighbreached"},
};

namespace {

int bit_of(StatusFlag f) {
  int b = 0;
  for (uint32_t v = f; v > 1; v >>= 1) ++b;
  return b;
}

uint32_t ppm(uint64_t part, uint64_t whole) {
  if (whole == 0) return 0;
  return part >= whole ? 1'000'000 : static_cast<uint32_t>(part * 1'000'000 / whole);
}

uint64_t delta(uint64_t now, uint64_t before) { return now - std::min(now, before); }

// The parent's path of a group's path ("" for the root).
std::string parent_of(const std::string& path) {
  if (path == "/") return "";
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string("/") : path.substr(0, slash);
}

}  // namespace

void StatusTracker::update(const std::vector<StatusRead>& reads, uint64_t now_ns) {
  ++round_;
  // This sample's flags of each group (PSI before the leaf rule).
  std::map<std::string, uint32_t> fresh;
  for (const StatusRead& r : reads) {
    auto [it, added] = entries_.try_emplace(r.path);
    Entry& e = it->second;
    uint32_t f = 0;
    if (!added && e.round + 1 == round_) {  // primed by the previous sample
      const uint64_t dt = delta(now_ns, e.t_ns);
      if (ppm(delta(r.psi_ns[0], e.last.psi_ns[0]), dt) >= kStatusSomePpm) f |= kStatusPsiSome;
      if (ppm(delta(r.psi_ns[1], e.last.psi_ns[1]), dt) >= kStatusFullPpm) f |= kStatusPsiFull;
      if (delta(r.local[0], e.last.local[0]) > 0) f |= kStatusHigh;
      if (delta(r.local[1], e.last.local[1]) > 0) f |= kStatusMax;
      if (delta(r.local[2], e.last.local[2]) > 0) f |= kStatusOomKill;
      if (delta(r.timed_out, e.last.timed_out) > 0) f |= kStatusTimeouts;
    }
    e.last = r;
    e.t_ns = now_ns;
    e.round = round_;
    fresh[r.path] = f;
  }
  // The leaf rule: a PSI flag of a child takes it off its parent.
  std::map<std::string, uint32_t> child_psi;
  for (const auto& [path, f] : fresh)
    if (f & (kStatusPsiSome | kStatusPsiFull)) child_psi[parent_of(path)] |= f;
  for (auto& [path, f] : fresh) {
    auto c = child_psi.find(path);
    if (c != child_psi.end()) f &= ~(c->second & (kStatusPsiSome | kStatusPsiFull));
  }
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    if (e.round != round_) {  // gone
      it = entries_.erase(it);
      continue;
    }
    const uint32_t f = fresh[it->first];
    e.status = 0;
    for (const StatusInfo& s : kStatusInfo) {
      const int b = bit_of(s.flag);
      if (f & s.flag) e.seen_ns[b] = now_ns;
      if (e.seen_ns[b] != 0 && now_ns - std::min(now_ns, e.seen_ns[b]) <= kStatusWindowNs)
        e.status |= s.flag;
    }
    ++it;
  }
}

uint32_t StatusTracker::status(const std::string& path) const {
  auto it = entries_.find(path);
  return it == entries_.end() ? 0 : it->second.status;
}

size_t StatusTracker::bytes() const {
  size_t n = 0;
  for (const auto& [path, e] : entries_) n += sizeof(Entry) + 64 + 2 * path.capacity();
  return n;
}

std::string status_keys(uint32_t status) {
  if (status == 0) return "ok";
  std::string out;
  for (const StatusInfo& s : kStatusInfo) {
    if (!(status & s.flag)) continue;
    if (!out.empty()) out += ' ';
    out += s.key;
  }
  return out;
}

}  // namespace memcg::http::detail
