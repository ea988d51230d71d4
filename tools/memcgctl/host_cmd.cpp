// `memcgctl host`: what memcg::host discovers on this machine (host_cmd.hpp).
#include <fmt/format.h>

#include <ostream>

#include "host_cmd.hpp"
#include "memcg/host/binding.hpp"

namespace memcgctl {
namespace {

std::string limit_text(uint64_t v) {
  return v == memcg::host::kNoLimit ? "max" : std::to_string(v);
}

// The first line of a pressure file ("some avg10=..."), or why there is none.
std::string pressure_line(const std::string& file) {
  if (file.empty()) return "-";
  std::string text;
  if (int err = memcg::host::read_small_file(file, &text)) return fmt::format("unreadable (errno {})", err);
  const size_t nl = text.find('\n');
  return text.substr(0, nl);
}

}  // namespace

int run_host(const std::string& root_prefix, int version, std::ostream& out, std::ostream& err) {
  memcg::host::DiscoverOptions o;
  o.root_prefix = root_prefix;
  o.version = version;
  memcg::host::HostCgroup cg;
  std::string why;
  if (int rc = memcg::host::discover(o, &cg, &why)) {
    err << "memcgctl host: " << why << " (" << rc << ")\n";
    return 1;
  }
  out << fmt::format("cgroup v{} {}\n", cg.version, cg.chain.front().path);
  out << fmt::format("{:<5} {:<40} {:>20} {:>20} {:>14}  {}\n", "level", "path", "max", "high",
                     "current", "dir");
  for (size_t i = 0; i < cg.chain.size(); ++i) {
    const memcg::host::HostLevel& l = cg.chain[i];
    out << fmt::format("{:<5} {:<40} {:>20} {:>20} {:>14}  {}{}\n", i, l.path,
                       l.has_limits ? limit_text(l.max) : "-",
                       l.has_limits && cg.version == 2 ? limit_text(l.high) : "-",
                       l.has_limits ? std::to_string(l.current) : "-", l.dir,
                       i == cg.binding ? "  <- binds" : "");
  }
  out << fmt::format("limit {}{}\nhigh {}\nusage {}\nworking_set {} (usage - inactive_file {})\n"
                     "rss {}\n",
                     limit_text(cg.limit),
                     cg.limit_above_mount ? " (hierarchical_memory_limit, above the mount)" : "",
                     limit_text(cg.high), cg.usage(), cg.working_set(),
                     cg.bound().inactive_file, cg.rss);
  out << fmt::format("pressure {} {}\n", cg.pressure_file.empty() ? "-" : cg.pressure_file,
                     pressure_line(cg.pressure_file));
  if (!cg.pressure_level_file.empty())
    out << fmt::format("pressure_level {}\n", cg.pressure_level_file);
  // A fresh controller's root (usage 0) with the default options.
  const memcg::host::BindOptions bo;
  const memcg::host::RootSettings s = memcg::host::compute_root_settings(cg, 0, bo);
  out << fmt::format("root memory.max {} memory.high {} (headroom {}, unaccounted {})\n",
                     limit_text(s.max), limit_text(s.high), s.headroom, s.unaccounted);
  return 0;
}

}  // namespace memcgctl
