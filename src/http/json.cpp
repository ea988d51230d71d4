#include "memcg/http/json.hpp"

#include <charconv>
#include <cstdio>
#include <string_view>
#include <vector>

#include "memcg/core/tree/controller.hpp"
#include "json_put.hpp"
#include "memcg/base/events.hpp"
#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/signal/psi.hpp"

// Written by hand rather than through a JSON library's document tree: the document is flat and
// all numbers, and building a tree for 10 000 groups took 125 ms where the budget of a scrape is
// 50 ms (bench/http_bench.cpp, docs/http.md). Readers (tests, memcgctl top) parse it with
// nlohmann_json.

namespace memcg::http {
namespace {

using json_out::put_string;
using json_out::put_u64;

void put_bytes_or_null(std::string& out, uint64_t v) {
  if (v == kUnlimited) {
    out += "null";
  } else {
    put_u64(out, v);
  }
}

// A fixed-point PSI average (11 fractional bits) exactly as memory.pressure prints it: whole
// percent, then two decimals, each truncated ("12.34"), which is also a JSON number.
void put_percent(std::string& out, uint64_t avg) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llu.%02llu", static_cast<unsigned long long>(avg >> 11),
                static_cast<unsigned long long>(((avg & 2047) * 100) >> 11));
  out += buf;
}

void put_events(std::string& out, const EventCounters& c) {
  out += '{';
  for (int e = 0; e < kNumEvents; ++e) {
    if (e > 0) out += ',';
    put_string(out, event_name(static_cast<Event>(e)));
    out += ':';
    put_u64(out, c.get(static_cast<Event>(e)));
  }
  out += '}';
}

void put_pressure(std::string& out, const PsiStats& st) {
  static const char* const kStates[2] = {"some", "full"};
  static const char* const kWindows[3] = {"avg10", "avg60", "avg300"};
  out += '{';
  for (int s = 0; s < 2; ++s) {
    if (s > 0) out += ',';
    out += '"';
    out += kStates[s];
    out += "\":{";
    for (int w = 0; w < 3; ++w) {
      out += '"';
      out += kWindows[w];
      out += "\":";
      put_percent(out, st.avg[s][w]);
      out += ',';
    }
    out += "\"total_us\":";
    put_u64(out, st.total_us[s]);
    out += '}';
  }
  out += '}';
}

}  // namespace

std::string render_groups_json(Controller& ctl) {
  // The groups are collected under the tree lock and read after it: psi_stats() may deliver
  // pressure notifications, which never run under a library lock.
  std::vector<GroupRef> groups;
  {
    internal::HookBypass bypass;  // the library's own memory (internal/lock.hpp)
    groups.reserve(ctl.nr_groups());
    ctl.walk(
        ctl.root(),
        [&](Group& g) {
          GroupRef ref = GroupRef::try_acquire(&g);
          if (ref) groups.push_back(std::move(ref));
        },
        /*include_dying=*/false);
  }
  std::vector<PsiStats> pressure;
  pressure.reserve(groups.size());
  for (const GroupRef& g : groups) pressure.push_back(psi_stats(*g));

  internal::HookBypass bypass;
  std::string out;
  out.reserve(64 + groups.size() * 560);
  out += "{\"version\":1,\"unit_bytes\":";
  put_u64(out, ctl.unit_size());
  out += ",\"groups\":[";
  for (size_t i = 0; i < groups.size(); ++i) {
    Group& g = *groups[i];
    if (i > 0) out += ',';
    out += "{\"path\":";
    put_string(out, g.path());
    out += ",\"current\":";
    put_u64(out, g.current());
    out += ",\"peak\":";
    put_u64(out, g.peak());
    if (!g.is_root()) {
      out += ",\"limits\":{\"high\":";
      put_bytes_or_null(out, g.high());
      out += ",\"max\":";
      put_bytes_or_null(out, g.max());
      out += "},\"protection\":{\"min\":";
      put_u64(out, g.min());
      out += ",\"low\":";
      put_u64(out, g.low());
      out += "},\"events\":";
      put_events(out, g.events());
      out += ",\"events_local\":";
      put_events(out, g.events_local());
    }
    out += ",\"pressure\":";
    put_pressure(out, pressure[i]);
    out += '}';
  }
  out += "]}";
  return out;
}

}  // namespace memcg::http
