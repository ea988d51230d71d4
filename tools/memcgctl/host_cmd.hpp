// `memcgctl host` and `memcgctl snapshot`: the kernel side of memcg::host, from the command line.
// Both only read the machine's files.
#pragma once

#include <iosfwd>
#include <string>

namespace memcgctl {

// Prints the process's discovered memory cgroup chain (paths, limits, usage), its pressure and
// what HostBinding would set the root to. `root_prefix` as DiscoverOptions::root_prefix,
// `version` 0, 1 or 2. Exit status 0, or 1 (the reason on stderr) when nothing was found.
int run_host(const std::string& root_prefix, int version, std::ostream& out, std::ostream& err);

// Writes a scenario (docs/scenarios.md) of the cgroup v2 subtree at `dir`: one group per cgroup
// with the memory controller (`dir` itself is the top group, named after its last component),
// its memory.min/low first, then each group's own usage (memory.current minus its children's)
// as a bulk charge of one member, then memory.high/max and memory.oom.group as a `set` step, so
// that the run applies the limits to the usage as the kernel holds it. Exit status 0; 1 when
// `dir` is not a v2 memory cgroup or a file is malformed; 2 when the subtree exceeds what a
// scenario may hold (groups, size).
int run_snapshot(const std::string& dir, std::ostream& out, std::ostream& err);

}  // namespace memcgctl
