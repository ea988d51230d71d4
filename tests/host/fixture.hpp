// A fixture file tree in a temp directory, in the kernel's formats: /proc/self/cgroup,
// /proc/self/mountinfo, /proc/self/status and cgroup directories with their memory files,
// for DiscoverOptions::root_prefix. Removed with the object.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace memcg::host::testing {

class FixtureTree {
 public:
  FixtureTree() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "memcg_host_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    root_ = tmpl;
    write("proc/self/status", "Name:\tt\nVmRSS:\t   10240 kB\nThreads:\t1\n");
  }
  ~FixtureTree() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  FixtureTree(const FixtureTree&) = delete;
  FixtureTree& operator=(const FixtureTree&) = delete;

  const std::string& root() const { return root_; }
  std::string path(const std::string& rel) const { return root_ + "/" + rel; }
  void write(const std::string& rel, const std::string& text) const {
    const std::filesystem::path p = path(rel);
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::trunc) << text;
  }
  void mkdir(const std::string& rel) const { std::filesystem::create_directories(path(rel)); }
  void remove(const std::string& rel) const { std::filesystem::remove_all(path(rel)); }

  // A v2 cgroup directory with its memory files ("max" unless given).
  void v2_cgroup(const std::string& rel, const std::string& max, const std::string& high,
                 uint64_t current) const {
    write(rel + "/memory.max", max + "\n");
    write(rel + "/memory.high", high + "\n");
    write(rel + "/memory.current", std::to_string(current) + "\n");
    write(rel + "/memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n");
    write(rel + "/memory.pressure",
          "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
          "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
    write(rel + "/cgroup.controllers", "cpu io memory pids\n");
  }
  // A v2 hierarchy root: no memory.max/high/current, as in the kernel.
  void v2_root(const std::string& rel) const {
    write(rel + "/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
    write(rel + "/memory.pressure",
          "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
          "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  }
  // A v1 memory cgroup directory.
  void v1_cgroup(const std::string& rel, uint64_t limit, uint64_t usage,
                 uint64_t hierarchical) const {
    write(rel + "/memory.limit_in_bytes", std::to_string(limit) + "\n");
    write(rel + "/memory.usage_in_bytes", std::to_string(usage) + "\n");
    write(rel + "/memory.pressure_level", "");
    write(rel + "/cgroup.event_control", "");
    write(rel + "/memory.stat", "cache 0\nrss " + std::to_string(usage) +
                                    "\nhierarchical_memory_limit " +
                                    std::to_string(hierarchical) +
                                    "\nhierarchical_memsw_limit 9223372036854771712\ntotal_rss " +
                                    std::to_string(usage) + "\n");
  }

 private:
  std::string root_;
};

// mountinfo lines as the kernel writes them.
inline std::string v2_mount(const std::string& root, const std::string& at, int id = 41) {
  return std::to_string(id) + " 31 0:38 " + root + " " + at +
         " rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n";
}
inline std::string v1_mount(const std::string& root, const std::string& at,
                            const std::string& ctl, int id = 35) {
  return std::to_string(id) + " 31 0:32 " + root + " " + at + " rw,relatime - cgroup cgroup rw," +
         ctl + "\n";
}
inline const char* kOtherMounts =
    "22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw\n"
    "23 22 0:5 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n";

}  // namespace memcg::host::testing
