// The ring of recent OOM and preemption reports (oom_log.hpp).
#include "memcg/core/oom/oom_log.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <unordered_map>

#include "memcg/base/internal/lock.hpp"
#include "memcg/base/internal/utf8.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/signal/event_bus.hpp"
#include "oom_batch.hpp"

namespace memcg {
namespace {

// The one cap of every string an entry keeps: kMaxName bytes, cut on a character boundary and
// made valid UTF-8 (the names are the user's text; /v1/oom and the page carry them as they are).
void cap(std::string& s) { internal::utf8_cap(s, OomLog::kMaxName); }

template <typename T>
void cap_list(std::vector<T>& v) {
  if (v.size() > OomLog::kMaxListed) v.resize(OomLog::kMaxListed);
}

// The system's wall clock, ns since the Unix epoch (0 if it reads before it).
uint64_t wall_now_ns() noexcept {
  const auto d = std::chrono::system_clock::now().time_since_epoch();
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  return ns > 0 ? static_cast<uint64_t>(ns) : 0;
}

// The largest members and groups of `domain`'s subtree at the decision. Runs under the OOM lock
// (members cannot be destroyed meanwhile: ~Member takes it), after the kills: a killed member
// listed among the report's candidates counts with what it held when chosen (`decided`), and its
// groups with that much more than they hold now.
void largest(Group& domain, OomLogEntry& e, const std::vector<OomCandidate>& decided) {
  Controller& ctl = domain.controller();
  const unsigned shift = ctl.unit_shift();
  auto bytes = [shift](int64_t units) {
    return units <= 0 ? uint64_t{0} : static_cast<uint64_t>(units) << shift;
  };
  const std::vector<Member*> members = internal::members_below(domain);
  std::vector<OomConsumer> ms;
  std::vector<std::pair<const Group*, uint64_t>> released;  // group, bytes since released
  ms.reserve(members.size());
  for (const Member* m : members) {
    int64_t units = m->charged();
    const std::string group = m->group().path();
    if (m->killed())
      for (const OomCandidate& c : decided)
        if (c.member == m->name() && c.group == group && c.charged > units) {
          released.emplace_back(&m->group(), bytes(c.charged) - bytes(units));
          units = c.charged;
          break;
        }
    ms.push_back({false, m->name(), group, bytes(units), bytes(m->admitted())});
  }
  auto by_size = [](const OomConsumer& a, const OomConsumer& b) { return a.bytes > b.bytes; };
  const size_t nm = std::min(ms.size(), OomLog::kTopConsumers);
  std::partial_sort(ms.begin(), ms.begin() + static_cast<ptrdiff_t>(nm), ms.end(), by_size);
  ms.resize(nm);

  // Groups: memory.current (plus what killed members released since), and the admitted sizes
  // of the members in their subtree. Each member's figures go up its ancestors to the domain:
  // O(members x depth), not O(groups x members) (a comparison of paths each, which took seconds
  // under the OOM lock at 10 000 groups, docs/BENCHMARKS.md).
  std::vector<OomConsumer> gs;
  std::unordered_map<const Group*, size_t> at;  // group -> its entry in gs
  ctl.walk(
      domain,
      [&](Group& g) {
        at.emplace(&g, gs.size());
        std::string path = g.path();
        gs.push_back({true, path, std::move(path), g.current(), 0});
      },
      /*include_dying=*/false);
  auto add_up = [&](const Group* g, uint64_t OomConsumer::*field, uint64_t b) {
    for (; g != nullptr; g = g->parent()) {
      const auto it = at.find(g);
      if (it != at.end()) gs[it->second].*field += b;
      if (g == &domain) break;
    }
  };
  for (const auto& [g, b] : released) add_up(g, &OomConsumer::bytes, b);
  for (const Member* m : members)
    if (const uint64_t b = bytes(m->admitted()); b != 0)
      add_up(&m->group(), &OomConsumer::admitted_bytes, b);
  const size_t ng = std::min(gs.size(), OomLog::kTopConsumers);
  std::partial_sort(gs.begin(), gs.begin() + static_cast<ptrdiff_t>(ng), gs.end(), by_size);
  gs.resize(ng);
  for (OomConsumer& c : ms) {
    cap(c.name);
    cap(c.group);
  }
  for (OomConsumer& c : gs) {
    cap(c.name);
    c.group = c.name;
  }
  e.members = std::move(ms);
  e.groups = std::move(gs);
}

}  // namespace

OomOutcome oom_outcome_of(OomDecider d) noexcept {
  switch (d) {
    case OomDecider::kKernelOrder:
    case OomDecider::kExcessOrder:
    case OomDecider::kPreempt:
    case OomDecider::kOperator: return OomOutcome::kKill;
    case OomDecider::kHandler: return OomOutcome::kHandled;
    case OomDecider::kSpill: return OomOutcome::kSpilled;
    case OomDecider::kNone: break;
  }
  return OomOutcome::kNone;
}

const char* oom_outcome_name(OomOutcome o) noexcept {
  switch (o) {
    case OomOutcome::kKill: return "kill";
    case OomOutcome::kHandled: return "handled";
    case OomOutcome::kSpilled: return "spilled";
    case OomOutcome::kNone: break;
  }
  return "none";
}

const char* oom_log_kind_name(OomLogKind k) noexcept {
  return k == OomLogKind::kPreempt ? "preempt" : "oom_kill";
}

int OomLog::set_capacity(size_t n) {
  if (n < 1 || n > kMaxCapacity) return EINVAL;
  internal::LockGuard lock(mu_);
  capacity_ = n;
  while (ring_.size() > capacity_) ring_.pop_front();
  return 0;
}

size_t OomLog::capacity() const {
  internal::LockGuard lock(mu_);
  return capacity_;
}

uint64_t OomLog::push(OomLogEntry&& e) noexcept {
  internal::LockGuard lock(mu_);
  e.seq = ++seq_;
  try {
    while (ring_.size() >= capacity_) ring_.pop_front();
    ring_.push_back(std::move(e));
    return seq_;
  } catch (...) {  // no memory for the entry: dropped, counted in the totals
    return 0;
  }
}

namespace {
// The report on the event stream (event_bus.hpp), when it records: its log sequence number (the
// /oom/<seq> page and /v1/oom's `seq`), the domain and the report's text.
void publish_report(Group& domain, BusEventType type, uint64_t seq, const std::string& text,
                    std::string_view extra) {
  EventBus& bus = domain.controller().events();
  if (!bus.recording()) return;
  std::string p = "{\"seq\":" + std::to_string(seq);
  p += extra;
  p += ",\"text\":\"";
  append_json_escaped(&p, text);
  p += "\"}";
  bus.publish(type, domain, p);
}
}  // namespace

void OomLog::append(Group& domain, const OomReport& r) noexcept {
  internal::HookBypass bypass;  // the copies are the library's memory
  {
    internal::LockGuard lock(mu_);
    ++totals_.reports;
    totals_.kills += r.killed.size();
    if (!r.oom_group.empty()) ++totals_.group_kills;
    totals_.kill_failures += r.failed.size();
    const auto d = static_cast<size_t>(r.decider);
    if (d < static_cast<size_t>(kNumOomDeciders)) ++totals_.by_decider[d];
    ++totals_.by_outcome[static_cast<size_t>(oom_outcome_of(r.decider))];
  }
  try {
    OomLogEntry e;
    e.time_ns = domain.controller().clock().now_ns();
    e.wall_ns = wall_now_ns();
    e.unit_shift = domain.controller().unit_shift();
    e.kind = OomLogKind::kOomKill;
    e.oom = r;
    OomReport& o = e.oom;
    for (std::string* s : {&o.domain, &o.victim, &o.oom_group, &o.handler}) cap(*s);
    cap_list(o.top);
    cap_list(o.killed);
    cap_list(o.failed);
    cap_list(o.handlers);
    cap_list(o.spilled);
    for (auto& c : o.top) cap(c.member), cap(c.group);
    for (auto& k : o.killed) cap(k);
    for (auto& f : o.failed) cap(f.member), cap(f.error);
    for (auto& h : o.handlers) cap(h.handler), cap(h.group), cap(h.outcome);
    for (auto& m : o.spilled) cap(m);
    largest(domain, e, r.top);
    const uint64_t seq = push(std::move(e));
    if (seq != 0 && domain.controller().events().recording()) [[unlikely]] {
      std::string extra = ",\"decider\":\"";
      extra += oom_decider_name(r.decider);
      extra += "\",\"victim\":\"";
      append_json_escaped(&extra, r.victim);
      extra += "\",\"killed\":" + std::to_string(r.killed.size());
      publish_report(domain, BusEventType::kOom, seq, r.format(), extra);
    }
  } catch (...) {
  }
}

void OomLog::append(Group& domain, const PreemptReport& r) noexcept {
  internal::HookBypass bypass;
  {
    internal::LockGuard lock(mu_);
    ++totals_.preemptions;
    totals_.preempt_asked += r.asked.size();
  }
  try {
    OomLogEntry e;
    e.time_ns = domain.controller().clock().now_ns();
    e.wall_ns = wall_now_ns();
    e.unit_shift = domain.controller().unit_shift();
    e.kind = OomLogKind::kPreempt;
    e.preempt = r;
    PreemptReport& p = e.preempt;
    cap(p.domain);
    cap(p.waiter_group);
    cap_list(p.asked);
    cap_list(p.failed);
    for (auto& a : p.asked) cap(a.member), cap(a.group);
    for (auto& f : p.failed) cap(f.member), cap(f.error);
    largest(domain, e, {});
    const uint64_t seq = push(std::move(e));
    if (seq != 0 && domain.controller().events().recording()) [[unlikely]]
      publish_report(domain, BusEventType::kPreempt, seq, r.format(),
                     ",\"asked\":" + std::to_string(r.asked.size()));
  } catch (...) {
  }
}

std::vector<OomLogEntry> OomLog::snapshot(uint64_t after) const {
  internal::LockGuard lock(mu_);
  std::vector<OomLogEntry> out;
  for (const OomLogEntry& e : ring_)
    if (e.seq > after) out.push_back(e);
  return out;
}

OomLogTotals OomLog::totals() const {
  internal::LockGuard lock(mu_);
  return totals_;
}

uint64_t OomLog::last_seq() const {
  internal::LockGuard lock(mu_);
  return seq_;
}

OomLog& oom_log(Controller& controller) noexcept { return controller.oom_log(); }

namespace {

void put_size(std::string& out, uint64_t b) {
  char buf[32];
  if (b >= (uint64_t{1} << 30) && b % (uint64_t{1} << 20) == 0)
    std::snprintf(buf, sizeof buf, "%.1fGiB", static_cast<double>(b) / (1 << 30));
  else if (b >= (uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1fMiB", static_cast<double>(b) / (1 << 20));
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.1fKiB", static_cast<double>(b) / 1024);
  else
    std::snprintf(buf, sizeof buf, "%lluB", static_cast<unsigned long long>(b));
  out += buf;
}

// A size in charge units as bytes; a count of units that is not positive as it is.
void put_units(std::string& out, int64_t units, unsigned shift) {
  if (units <= 0) {
    out += std::to_string(units) + "B";
    return;
  }
  put_size(out, static_cast<uint64_t>(units) << shift);
}

// A name on one line: control characters and spaces become '_'.
void put_name(std::string& out, const std::string& s) {
  if (s.empty()) {
    out += '-';
    return;
  }
  for (char c : s) out += static_cast<unsigned char>(c) <= ' ' || c == 0x7f ? '_' : c;
}

void put_consumers(std::string& out, const char* key, const std::vector<OomConsumer>& v) {
  out += ' ';
  out += key;
  out += '=';
  if (v.empty()) out += '-';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    put_name(out, v[i].name);
    out += ':';
    put_size(out, v[i].bytes);
    out += '/';
    put_size(out, v[i].admitted_bytes);
  }
}

}  // namespace

std::string format_utc(uint64_t unix_ns) {
  const auto secs = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  if (::gmtime_r(&secs, &tm) == nullptr) return "-";
  char buf[96];  // room for any int fields, so the compiler can tell nothing is cut
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<unsigned>(unix_ns / 1'000'000 % 1000));
  return buf;
}

std::string format_oom_log_line(const OomLogEntry& e) {
  std::string out = oom_log_kind_name(e.kind);
  char buf[64];
  std::snprintf(buf, sizeof buf, " seq=%llu t=%.3fs", static_cast<unsigned long long>(e.seq),
                static_cast<double>(e.time_ns) / 1e9);
  out += buf;
  out += " at=" + format_utc(e.wall_ns);
  if (e.kind == OomLogKind::kOomKill) {
    const OomReport& r = e.oom;
    out += " domain=";
    put_name(out, r.domain);
    out += " request=";
    put_units(out, r.request_units, e.unit_shift);
    out += std::string(" decider=") + oom_decider_name(r.decider);
    out += std::string(" order=") + oom_order_name(r.order);
    if (!r.handler.empty()) {
      out += " handler=";
      put_name(out, r.handler);
    }
    out += std::string(" reason=") + cancel_reason_name(r.reason);
    out += " victim=";
    put_name(out, r.victim);
    out += " oom_group=";
    put_name(out, r.oom_group);
    out += " killed=" + std::to_string(r.killed.size());
    out += " failed=" + std::to_string(r.failed.size());
  } else {
    const PreemptReport& r = e.preempt;
    out += " domain=";
    put_name(out, r.domain);
    out += r.by_operator ? " decider=operator" : " decider=waiter";
    out += " waiter=";
    put_name(out, r.waiter_group);
    out += " priority=" + std::to_string(static_cast<int>(r.priority));
    out += " shortage=";
    put_units(out, r.shortage_units, e.unit_shift);
    out += " asked=";
    if (r.asked.empty()) out += '-';
    for (size_t i = 0; i < r.asked.size(); ++i) {
      if (i) out += ',';
      put_name(out, r.asked[i].member);
    }
  }
  out += " (size/admitted)";
  put_consumers(out, "top_members", e.members);
  put_consumers(out, "top_groups", e.groups);
  return out;
}

}  // namespace memcg
