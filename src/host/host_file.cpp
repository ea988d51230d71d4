// memory.host and the memcg_host_* Prometheus families (include/memcg/host/binding.hpp).
#include <cerrno>
#include <string>

#include "memcg/core/tree/internal/file_node.hpp"
#include "memcg/host/binding.hpp"

namespace memcg::host {
namespace {

std::string limit_text(uint64_t v) { return v == kNoLimit ? "max" : std::to_string(v); }
std::string prom_value(uint64_t v) { return v == kNoLimit ? "+Inf" : std::to_string(v); }

// A read-only root-level file over a binding: the root's memory.host.
class HostFile final : public File {
 public:
  HostFile(std::shared_ptr<internal::FileNode> node, const HostBinding& b)
      : File(std::move(node), "memory.host"), b_(b) {}
  bool readable() const noexcept override { return true; }
  bool writable() const noexcept override { return false; }
  int read(std::string* out) override {
    *out = b_.format_file();
    return 0;
  }
  int write(std::string_view, bool) override { return EACCES; }

 private:
  const HostBinding& b_;
};

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

}  // namespace

std::string HostBinding::format_file() const {
  const HostStatus s = status();
  std::string out;
  auto line = [&](const char* key, const std::string& v) {
    out += key;
    out += ' ';
    out += v;
    out += '\n';
  };
  if (!s.bound) {
    line("bound", "0");
    line("error", s.last_error.empty() ? "-" : s.last_error);
    return out;
  }
  const HostCgroup& cg = s.cgroup;
  line("bound", "1");
  line("version", std::to_string(cg.version));
  line("cgroup", cg.chain.front().path);
  line("binding", cg.bound().path);
  line("limit", limit_text(cg.limit));
  line("high", limit_text(cg.high));
  line("usage", std::to_string(cg.usage()));
  line("working_set", std::to_string(cg.working_set()));
  line("rss", std::to_string(cg.rss));
  line("root_current", std::to_string(s.root_current));
  line("unaccounted", std::to_string(s.unaccounted));
  line("unaccounted_rss", std::to_string(s.unaccounted_rss));
  line("headroom", std::to_string(s.applied.headroom));
  line("root_max", limit_text(s.applied.max));
  line("root_high", limit_text(s.applied.high));
  line("pressure_source", s.pressure_source);
  line("pressure_events", std::to_string(s.pressure_events));
  line("reclaims", std::to_string(s.reclaims));
  line("reclaims_suppressed", std::to_string(s.reclaims_suppressed));
  line("high_reclaims", std::to_string(s.high_reclaims));
  line("reclaimed_bytes", std::to_string(s.reclaimed_bytes));
  line("refreshes", std::to_string(s.refreshes));
  line("errors", std::to_string(s.errors));
  line("error", s.last_error.empty() ? "-" : s.last_error);
  return out;
}

std::string HostBinding::render_prometheus() const {
  const HostStatus s = status();
  std::string out;
  auto sample = [&](const char* name, const std::string& labels, const std::string& v) {
    out += name;
    out += labels;
    out += ' ';
    out += v;
    out += '\n';
  };
  family(out, "memcg_host_bound", "gauge", "1 when the root follows a kernel cgroup");
  sample("memcg_host_bound", "", s.bound ? "1" : "0");
  if (s.bound) {
    const HostCgroup& cg = s.cgroup;
    family(out, "memcg_host_limit_bytes", "gauge", "The binding kernel cgroup's memory limit");
    sample("memcg_host_limit_bytes", "{knob=\"max\"}", prom_value(cg.limit));
    sample("memcg_host_limit_bytes", "{knob=\"high\"}", prom_value(cg.high));
    family(out, "memcg_host_usage_bytes", "gauge", "The kernel's usage of the binding cgroup");
    sample("memcg_host_usage_bytes", "", std::to_string(cg.usage()));
    family(out, "memcg_host_working_set_bytes", "gauge",
           "The binding cgroup's usage minus its inactive file pages (the budget's basis)");
    sample("memcg_host_working_set_bytes", "", std::to_string(cg.working_set()));
    family(out, "memcg_host_rss_bytes", "gauge", "The process's resident set size");
    sample("memcg_host_rss_bytes", "", std::to_string(cg.rss));
    family(out, "memcg_host_unaccounted_bytes", "gauge",
           "Kernel working set (source=cgroup) or RSS (source=rss) minus the root's "
           "memory.current");
    sample("memcg_host_unaccounted_bytes", "{source=\"cgroup\"}", std::to_string(s.unaccounted));
    sample("memcg_host_unaccounted_bytes", "{source=\"rss\"}", std::to_string(s.unaccounted_rss));
    family(out, "memcg_host_root_limit_bytes", "gauge", "What the root was set to");
    sample("memcg_host_root_limit_bytes", "{knob=\"max\"}", prom_value(s.applied.max));
    sample("memcg_host_root_limit_bytes", "{knob=\"high\"}", prom_value(s.applied.high));
  }
  family(out, "memcg_host_pressure_events_total", "counter", "Kernel pressure events received");
  sample("memcg_host_pressure_events_total", "", std::to_string(s.pressure_events));
  family(out, "memcg_host_reclaims_total", "counter",
         "Root reclaims run (reason=pressure|high) or skipped by the rate limit (suppressed)");
  sample("memcg_host_reclaims_total", "{reason=\"pressure\"}", std::to_string(s.reclaims));
  sample("memcg_host_reclaims_total", "{reason=\"high\"}", std::to_string(s.high_reclaims));
  sample("memcg_host_reclaims_total", "{reason=\"suppressed\"}",
         std::to_string(s.reclaims_suppressed));
  family(out, "memcg_host_reclaimed_bytes_total", "counter", "Bytes those reclaims freed");
  sample("memcg_host_reclaimed_bytes_total", "", std::to_string(s.reclaimed_bytes));
  family(out, "memcg_host_refresh_errors_total", "counter", "Re-reads that failed");
  sample("memcg_host_refresh_errors_total", "", std::to_string(s.errors));
  return out;
}

std::unique_ptr<File> HostBinding::open_file() {
  // The root is never removed: attaching cannot fail, and reads need no FileOp.
  auto node = std::make_shared<internal::FileNode>();
  (void)internal::attach_file_node(controller_.root(), node);  // 0: the root is online
  return std::make_unique<HostFile>(std::move(node), *this);
}

}  // namespace memcg::host
