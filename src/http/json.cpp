#include "memcg/http/json.hpp"

#include <nlohmann/json.hpp>
#include <vector>

#include "memcg/controller.hpp"
#include "memcg/events.hpp"
#include "memcg/internal/hook_bypass.hpp"
#include "memcg/psi.hpp"

namespace memcg::http {
namespace {

// A fixed-point PSI average (11 fractional bits) as memory.pressure prints it: whole percent and
// two decimals, each truncated, so that the JSON and the file show the same figure.
double percent(uint64_t avg) {
  const uint64_t whole = avg >> 11;
  const uint64_t hundredths = ((avg & 2047) * 100) >> 11;
  return static_cast<double>(whole) + static_cast<double>(hundredths) / 100.0;
}

nlohmann::json bytes_or_null(uint64_t v) {
  return v == kUnlimited ? nlohmann::json(nullptr) : nlohmann::json(v);
}

nlohmann::json events_of(const EventCounters& c) {
  nlohmann::json out = nlohmann::json::object();
  for (int e = 0; e < kNumEvents; ++e)
    out[event_name(static_cast<Event>(e))] = c.get(static_cast<Event>(e));
  return out;
}

nlohmann::json pressure_of(const PsiStats& st) {
  nlohmann::json out = nlohmann::json::object();
  static const char* const kStates[2] = {"some", "full"};
  for (int s = 0; s < 2; ++s) {
    out[kStates[s]] = {{"avg10", percent(st.avg[s][0])},
                       {"avg60", percent(st.avg[s][1])},
                       {"avg300", percent(st.avg[s][2])},
                       {"total_us", st.total_us[s]}};
  }
  return out;
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
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < groups.size(); ++i) {
    Group& g = *groups[i];
    nlohmann::json j = {{"path", g.path()}, {"current", g.current()}, {"peak", g.peak()}};
    if (!g.is_root()) {
      j["limits"] = {{"high", bytes_or_null(g.high())}, {"max", bytes_or_null(g.max())}};
      j["protection"] = {{"min", g.min()}, {"low", g.low()}};
      j["events"] = events_of(g.events());
      j["events_local"] = events_of(g.events_local());
    }
    j["pressure"] = pressure_of(pressure[i]);
    list.push_back(std::move(j));
  }
  nlohmann::json doc = {{"version", 1}, {"unit_bytes", ctl.unit_size()}, {"groups", std::move(list)}};
  return doc.dump();
}

}  // namespace memcg::http
