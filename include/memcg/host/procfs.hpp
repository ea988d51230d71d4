// The kernel's text formats that memcg::host reads to find the process's cgroup: the lines of
// /proc/self/cgroup, /proc/self/mountinfo, a memory limit file and a flat keyed file
// (memory.stat, /proc/self/status). Pure functions, thread-safe; they never touch the file
// system, so tests feed them the kernel's exact bytes.
//
// Every parser returns 0 or EINVAL for text that is not in the kernel's format, and leaves its
// outputs untouched on error.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace memcg::host {

// "No limit" in this component's byte values (the same value as memcg::kUnlimited).
inline constexpr uint64_t kNoLimit = UINT64_MAX;
// cgroup v1's "unlimited": PAGE_COUNTER_MAX pages in bytes, LONG_MAX rounded down to a 4 KiB page
// (what memory.limit_in_bytes and hierarchical_memory_limit show when no limit is set).
inline constexpr uint64_t kV1Unlimited = 0x7FFFFFFFFFFFF000ULL;

// One line of /proc/<pid>/cgroup: "ID:CONTROLLERS:PATH". v2's line is "0::PATH".
struct CgroupLine {
  unsigned hierarchy = 0;
  std::vector<std::string> controllers;  // split at ','; empty for v2; "name=systemd" kept as is
  std::string path;                      // relative to the reader's cgroup namespace root
};
[[nodiscard]] int parse_proc_cgroup(std::string_view text, std::vector<CgroupLine>* out);

// One line of /proc/<pid>/mountinfo, cgroup mounts only (other lines are skipped):
// "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS".
// ROOT and MOUNTPOINT are unescaped (the kernel writes space, tab, newline and backslash as
// \040 \011 \012 \134).
struct CgroupMount {
  bool v2 = false;                   // fstype cgroup2 (else cgroup, v1)
  std::string root;                  // the directory of the hierarchy mounted there
  std::string mount_point;
  std::vector<std::string> options;  // super options (v1: the controllers, "memory")
};
[[nodiscard]] int parse_mountinfo(std::string_view text, std::vector<CgroupMount>* out);

// A memory limit file: v2 memory.max/memory.high ("max" or a decimal byte count, one line) or
// v1 memory.limit_in_bytes (a decimal count; kV1Unlimited and above mean none). `*bytes` becomes
// kNoLimit for "no limit"; 0 stays 0 (a limit of zero bytes, not "none").
[[nodiscard]] int parse_limit_file(std::string_view text, uint64_t* bytes);
// A file holding one unsigned decimal number and a newline (memory.current, usage_in_bytes).
[[nodiscard]] int parse_u64_file(std::string_view text, uint64_t* value);

// The value of `key` in a file of "key value" lines (memory.stat; v1 hierarchical_memory_limit)
// or "Key:   value kB" lines (/proc/self/status, VmRSS: the result is in bytes). ENOENT when the
// key is absent, EINVAL when its value is malformed.
[[nodiscard]] int find_stat_value(std::string_view text, std::string_view key, uint64_t* value);
[[nodiscard]] int find_status_kb(std::string_view text, std::string_view key, uint64_t* bytes);

// Where the cgroup `path` (from /proc/self/cgroup) lives under a mount whose root is `root`:
// the mount point followed by what `path` has beyond `root`, or false when `path` is not at or
// below `root` (component-wise: "/a/bc" is not below "/a/b"). A bind mount of a subdirectory
// and a cgroup namespace both show here as a root other than "/".
bool map_cgroup_path(std::string_view path, std::string_view root, std::string_view mount_point,
                     std::string* dir);

}  // namespace memcg::host
