// memcgctl: runs and validates memcg scenario files (the format: docs/scenarios.md).
//
//   memcgctl run FILE [--json] [--plot FILE.svg]
//   memcgctl validate FILE
//   memcgctl top [--url URL] [--interval 1s] [--sort current|peak|pressure|events] [--once]
//   memcgctl host [--root PREFIX] [--cgroup-version 1|2]
//   memcgctl snapshot DIR
//   memcgctl remote URL|unix:PATH [--token-file F] [--json] groups|get|set|members|kill|preempt|
//                   memory|budget|events|audit ...   (remote.hpp)
//
// `top` watches a running process that serves memcg::http (built when cpp-httplib is found);
// `remote` reads it and acts on it.
//
// Exit status: 0 every check passed (or the file is valid), 1 a check failed, 2 the scenario is
// malformed (messages `FILE:LINE:COL: what is wrong` on stderr), 3 an output file could not be
// written.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "load.hpp"
#include "memcg/base/version.hpp"
#include "report.hpp"
#include "run.hpp"
#ifdef MEMCGCTL_HAVE_TOP
#include "remote.hpp"
#include "top.hpp"
#endif
#ifdef MEMCGCTL_HAVE_HOST
#include "host_cmd.hpp"
#endif


namespace {

constexpr int kExitMalformed = 2;
constexpr int kExitOutput = 3;

bool load(const std::string& file, memcgctl::Scenario* s) {
  std::vector<memcgctl::Diagnostic> errors;
  if (memcgctl::load_scenario_file(file, s, &errors)) return true;
  for (const auto& d : errors) std::cerr << memcgctl::format_diagnostic(file, d) << "\n";
  return false;
}

int run(const std::string& file, bool json, const std::string& plot) {
  memcgctl::Scenario s;
  if (!load(file, &s)) return kExitMalformed;

  // Progress on stderr once a run has taken more than a second of wall time, then every second.
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto next = start + std::chrono::seconds(1);
  memcgctl::RunOptions opts;
  opts.sample = !plot.empty();  // the samples serve the plot only
  // Only for a person watching: never into a file or a pipe, where it would mix with logs.
  const bool tty = isatty(STDERR_FILENO) == 1;
  opts.on_step = [&](size_t i, size_t n, uint64_t now_ns) {
    if (!tty) return;
    const auto t = Clock::now();
    if (t < next) return;
    next = t + std::chrono::seconds(1);
    std::fprintf(stderr, "memcgctl: %s: step %zu of %zu, virtual time %.3f s\n", file.c_str(), i, n,
                 static_cast<double>(now_ns) / 1e9);
  };

  const memcgctl::RunResult r = memcgctl::run_scenario(s, opts);
  if (r.malformed) {
    std::cerr << memcgctl::format_diagnostic(file, r.error) << "\n";
    return kExitMalformed;
  }
  std::cout << (json ? memcgctl::json_report(s, r) : memcgctl::text_report(r));
  std::cout.flush();
  if (!plot.empty()) {
    std::ofstream out(plot, std::ios::binary | std::ios::trunc);
    out << memcgctl::svg_plot(s, r);
    out.close();
    if (!out) {
      std::cerr << plot << ": cannot write the plot\n";
      return kExitOutput;
    }
  }
  return r.failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"memcgctl: run memcg scenario files against the library on a virtual clock"};
  app.set_version_flag("--version", std::string("memcgctl ") + memcg::version().text);
  app.require_subcommand(1);

  std::string file, plot;
  bool json = false;
  CLI::App* run_cmd = app.add_subcommand("run", "run a scenario and report its checks");
  run_cmd->add_option("FILE", file, "scenario file (YAML)")->required();
  run_cmd->add_flag("--json", json, "print one JSON document instead of the text report");
  run_cmd->add_option("--plot", plot, "write an SVG plot of memory.current over virtual time");

  std::string vfile;
  CLI::App* validate_cmd = app.add_subcommand("validate", "check a scenario without running it");
  validate_cmd->add_option("FILE", vfile, "scenario file (YAML)")->required();

#ifdef MEMCGCTL_HAVE_TOP
  memcgctl::TopOptions top;
  std::string interval = "1s", sort = "current";
  CLI::App* top_cmd =
      app.add_subcommand("top", "watch the groups of a process serving memcg::http");
  top_cmd->add_option("--url", top.url, "the endpoint, http://HOST:PORT")
      ->capture_default_str();
  top_cmd->add_option("--interval", interval, "refresh period: 1s, 500ms, 2.5 (seconds)")
      ->capture_default_str();
  top_cmd->add_option("--sort", sort, "current, peak, pressure (some avg10) or events")
      ->capture_default_str();
  top_cmd->add_flag("--once", top.once, "print one snapshot and exit");
  memcgctl::RemoteOptions remote;
  CLI::App* remote_cmd = memcgctl::add_remote_command(app, &remote);
#endif

#ifdef MEMCGCTL_HAVE_HOST
  std::string host_root, snap_dir;
  int host_version = 0;
  CLI::App* host_cmd =
      app.add_subcommand("host", "print the process's kernel memory cgroup and its binding");
  host_cmd->add_option("--root", host_root, "read every file under this prefix (fixture trees)");
  host_cmd->add_option("--cgroup-version", host_version, "1 or 2 only (default: v2, else v1)")
      ->check(CLI::IsMember({0, 1, 2}));
  CLI::App* snap_cmd =
      app.add_subcommand("snapshot", "print a scenario of a cgroup v2 subtree's knobs and usage");
  snap_cmd->add_option("DIR", snap_dir, "a cgroup v2 directory with the memory controller")
      ->required();
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitMalformed;
  }
  if (*run_cmd) return run(file, json, plot);
#ifdef MEMCGCTL_HAVE_HOST
  if (*host_cmd) return memcgctl::run_host(host_root, host_version, std::cout, std::cerr);
  if (*snap_cmd) return memcgctl::run_snapshot(snap_dir, std::cout, std::cerr);
#endif
#ifdef MEMCGCTL_HAVE_TOP
  if (*remote_cmd) return memcgctl::run_remote(remote, std::cout, std::cerr);
  if (*top_cmd) {
    if (!memcgctl::parse_interval_ms(interval, &top.interval_ms)) {
      std::cerr << "memcgctl top: --interval '" << interval
                << "' is not a duration between 100ms and 3600s\n";
      return kExitMalformed;
    }
    if (!memcgctl::parse_top_sort(sort, &top.sort)) {
      std::cerr << "memcgctl top: --sort must be current, peak, pressure or events\n";
      return kExitMalformed;
    }
    return memcgctl::run_top(top);
  }
#endif
  memcgctl::Scenario s;
  return load(vfile, &s) ? 0 : kExitMalformed;
}
