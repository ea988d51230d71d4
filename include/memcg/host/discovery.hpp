// Discovery: which kernel memory cgroup holds this process, and which of its visible ancestors
// binds it. Reads /proc/self/cgroup and /proc/self/mountinfo, maps the process's cgroup path
// through the root of the mount that shows it (cgroup namespaces and bind mounts make that root
// something other than "/"), then walks from that cgroup up to the mount's top and reads each
// level's limits. The smallest limit binds, since the kernel refuses a charge at whichever level
// is full first (taking only the leaf's limit, or only the mount root's, is the classic mistake).
//
// cgroup v2 is used when the process's v2 cgroup has the memory controller (memory.max exists
// there); otherwise the v1 memory hierarchy. v1 also reads hierarchical_memory_limit from the
// leaf's memory.stat, which covers ancestors above the mount that are not visible.
//
// Never writes anything. Thread-safe (no shared state); cost: a few small file reads per level.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memcg/host/procfs.hpp"

namespace memcg::host {

struct DiscoverOptions {
  // Prefix of every path read ("" = the machine itself): /proc/self/... and the mount points are
  // read as root_prefix + path, so that tests run against a fixture tree in a temp directory.
  std::string root_prefix;
  // Which hierarchy: 0 = v2 if its cgroup has the memory controller, else v1; 1 or 2 = only it.
  int version = 0;
};

// One cgroup of the chain, from the process's own (index 0) up to the top of the mount.
struct HostLevel {
  std::string path;  // the cgroup path as /proc/self/cgroup names it ("/a/b")
  std::string dir;   // its directory, root_prefix included
  uint64_t max = kNoLimit;   // v2 memory.max; v1 memory.limit_in_bytes
  uint64_t high = kNoLimit;  // v2 memory.high; v1: none
  uint64_t current = 0;      // v2 memory.current; v1 memory.usage_in_bytes
  // Page cache the kernel can drop without writing anything back: memory.stat's inactive_file
  // (v1: total_inactive_file, hierarchical as usage_in_bytes is). 0 where memory.stat or the
  // key is missing (the working set is then the whole usage).
  uint64_t inactive_file = 0;
  bool has_limits = false;   // false at a hierarchy root, which has no limit files
};

struct HostCgroup {
  int version = 0;                // 1 or 2
  std::vector<HostLevel> chain;   // [0] = the process's cgroup, then its ancestors
  size_t binding = 0;             // the level whose limit binds (the deepest of equal ones)
  uint64_t limit = kNoLimit;      // the smallest max of the chain (v1: and hierarchical limit)
  uint64_t high = kNoLimit;       // the smallest high of the chain
  bool limit_above_mount = false; // v1: hierarchical_memory_limit was below every visible one
  uint64_t rss = 0;               // VmRSS of the process, bytes
  std::string pressure_file;      // v2: the binding's memory.pressure; else empty
  std::string pressure_level_file;  // v1: the binding's memory.pressure_level; else empty
  std::string events_file;        // v2: the binding's memory.events (inotify); else empty

  const HostLevel& bound() const { return chain[binding]; }
  // The kernel's usage of the binding cgroup.
  uint64_t usage() const { return chain[binding].current; }
  // Its working set: usage minus inactive_file, at least 0 (cAdvisor's and the kubelet's
  // definition). What the process and its neighbours need, without the page cache that the
  // kernel would drop before reclaiming anything else or OOM-killing anyone.
  uint64_t working_set() const {
    const HostLevel& b = chain[binding];
    return b.current > b.inactive_file ? b.current - b.inactive_file : 0;
  }
};

// Fills `out`, or returns an errno value and a sentence in `error` (out untouched):
// ENOENT when there is no memory cgroup (no line, no mount showing the path, a cgroup removed
// under us), EACCES when a file cannot be read, EINVAL when a file is malformed.
[[nodiscard]] int discover(const DiscoverOptions& options, HostCgroup* out, std::string* error);

// Reads a whole small file (at most 1 MiB). 0, or errno of open/read; EFBIG when larger.
[[nodiscard]] int read_small_file(const std::string& path, std::string* out);

}  // namespace memcg::host
