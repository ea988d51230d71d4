// Discovery against fixture trees in the kernel's formats: v2 nested limits, "max", 0,
// namespaces, bind mounts; v1 hierarchy and its unlimited sentinel; bad input.
#include "memcg/host/discovery.hpp"

#include <gtest/gtest.h>

#include "fixture.hpp"

namespace memcg::host {
namespace {

using testing::FixtureTree;
using testing::kOtherMounts;
using testing::v1_mount;
using testing::v2_mount;

constexpr uint64_t G = 1ull << 30;
constexpr uint64_t M = 1ull << 20;

int discover_in(const FixtureTree& t, HostCgroup* cg, std::string* err, int version = 0) {
  DiscoverOptions o;
  o.root_prefix = t.root();
  o.version = version;
  return discover(o, cg, err);
}

// /a (max 8G) / b (max "max", high 6G) / c (max 10G): the middle of the chain binds.
TEST(HostDiscovery, V2NestedLimitsSmallestBinds) {
  FixtureTree t;
  t.write("proc/self/cgroup", "0::/a/b/c\n");
  t.write("proc/self/mountinfo", std::string(kOtherMounts) + v2_mount("/", "/sys/fs/cgroup"));
  t.v2_root("sys/fs/cgroup");
  t.v2_cgroup("sys/fs/cgroup/a", std::to_string(8 * G), "max", 5 * G);
  t.v2_cgroup("sys/fs/cgroup/a/b", "max", std::to_string(6 * G), 3 * G);
  t.v2_cgroup("sys/fs/cgroup/a/b/c", std::to_string(10 * G), "max", 2 * G);
  HostCgroup cg;
  std::string err;
  ASSERT_EQ(discover_in(t, &cg, &err), 0) << err;
  EXPECT_EQ(cg.version, 2);
  ASSERT_EQ(cg.chain.size(), 4u);
  EXPECT_EQ(cg.chain[0].path, "/a/b/c");
  EXPECT_EQ(cg.chain[0].dir, t.path("sys/fs/cgroup/a/b/c"));
  EXPECT_EQ(cg.chain[1].path, "/a/b");
  EXPECT_EQ(cg.chain[2].path, "/a");
  EXPECT_EQ(cg.chain[3].path, "/");
  EXPECT_FALSE(cg.chain[3].has_limits);  // the hierarchy root has no memory.max
  EXPECT_EQ(cg.chain[1].max, kNoLimit);
  EXPECT_EQ(cg.limit, 8 * G);
  EXPECT_EQ(cg.binding, 2u);
  EXPECT_EQ(cg.high, 6 * G);  // high is the smallest high of the chain, wherever it is
  EXPECT_EQ(cg.usage(), 5 * G);
  EXPECT_EQ(cg.rss, 10240u * 1024);
  EXPECT_EQ(cg.pressure_file, t.path("sys/fs/cgroup/a/memory.pressure"));
  EXPECT_EQ(cg.events_file, t.path("sys/fs/cgroup/a/memory.events"));
}

// The leaf's limit is larger than an ancestor's: the JDK-8322420 mistake reads only the leaf.
TEST(HostDiscovery, V2AncestorBelowLeafBindsAndZeroIsZero) {
  FixtureTree t;
  t.write("proc/self/cgroup", "0::/x/y\n");
  t.write("proc/self/mountinfo", std::string(kOtherMounts) + v2_mount("/", "/sys/fs/cgroup"));
  t.v2_root("sys/fs/cgroup");
  t.v2_cgroup("sys/fs/cgroup/x", "0", "max", 0);
  t.v2_cgroup("sys/fs/cgroup/x/y", std::to_string(G), "max", 0);
  HostCgroup cg;
  std::string err;
  ASSERT_EQ(discover_in(t, &cg, &err), 0) << err;
  EXPECT_EQ(cg.limit, 0u);  // 0 is a limit of zero bytes, not "none"
  EXPECT_EQ(cg.binding, 1u);
}

TEST(HostDiscovery, V2MaxEverywhereIsNoLimitAndBindsTheLeaf) {
  FixtureTree t;
  t.write("proc/self/cgroup", "0::/s\n");
  t.write("proc/self/mountinfo", std::string(kOtherMounts) + v2_mount("/", "/sys/fs/cgroup"));
  t.v2_root("sys/fs/cgroup");
  t.v2_cgroup("sys/fs/cgroup/s", "max", "max", 7 * M);
  HostCgroup cg;
  std::string err;
  ASSERT_EQ(discover_in(t, &cg, &err), 0) << err;
  EXPECT_EQ(cg.limit, kNoLimit);
  EXPECT_EQ(cg.high, kNoLimit);
  EXPECT_EQ(cg.binding, 0u);
  EXPECT_EQ(cg.usage(), 7 * M);
}

// A container with its own cgroup namespace: /proc/self/cgroup says "/", the mount's root is
// "/" too, but the top of that mount is the container's cgroup, which has limits.
TEST(HostDiscovery, V2CgroupNamespaceRootHasLimits) {
  FixtureTree t;
  t.write("proc/self/cgroup", "0::/\n");
  t.write("proc/self/mountinfo", std::string(kOtherMounts) + v2_mount("/", "/sys/fs/cgroup"));
  t.v2_cgroup("sys/fs/cgroup", std::to_string(2 * G), std::to_string(G + G / 2), 100 * M);
  HostCgroup cg;
  std::string err;
  ASSERT_EQ(discover_in(t, &cg, &err), 0) << err;
  ASSERT_EQ(cg.chain.size(), 1u);
  EXPECT_TRUE(cg.chain[0].has_limits);
  EXPECT_EQ(cg.limit, 2 * G);
  EXPECT_EQ(cg.high, G + G / 2);
  EXPECT_EQ(cg.usage(), 100 * M);
}

// No cgroup namespace, the host's hierarchy bind-mounted from the container's cgroup: the path
// is mapped through the mount's root, and ancestors above it are not visible.
TEST(HostDiscovery, V2BindMountMapsThroughTheMountRoot) {
  FixtureTree t;
  t.write("proc/self/cgroup", "0::/kubepods/pod1/ctr/app\n");
  t.write("proc/self/mountinfo",
          std::string(kOtherMounts) + v2_mount("/kubepods/pod1/ctr", "/sys/fs/cgroup"));
  t.v2_cgroup("sys/fs/cgroup", std::to_string(3 * G), "max", 2 * G);
  t.v2_cgroup("sys/fs/cgroup/app", std::to_string(4 * G), "max", G);
  HostCgroup cg;
  std::string err;
  ASSERT_EQ(discover_in(t, &cg, &err), 0) << err;
  ASSERT_EQ(cg.chain.size(), 2u);
  EXPECT_EQ(cg.chain[0].dir, t.path("sys/fs/cgroup/app"));
  EXPECT_EQ(cg.chain[1].dir, t.path("sys/fs/cgroup"));
  EXPECT_EQ(cg.chain[1].path, "/kubepods/pod1/ctr");
  EXPECT_EQ(cg.limit, 3 * G);
  EXPECT_EQ(cg.binding, 1u);
  EXPECT_EQ(cg.usage(), 2 * G);
}

// Two mounts show the cgroup: the one showing more ancestors wins; a sibling prefix
// ("/a/bc" vs "/a/b") and a root outside the namespace ("/..") show nothing.
TEST(HostDiscovery, V2PrefersTheMountWithMoreAncestorsAndMatchesWholeComponents) {
  FixtureTree t;
  t.write("proc/self/cgroup", "0::/a/b/c\n");
  t.write("proc/self/mountinfo", std::string(kOtherMounts) + v2_mount("/a/bc", "/mnt/x", 50) +
                                     v2_mount("/a/b", "/mnt/b", 51) +
                                     v2_mount("/", "/sys/fs/cgroup", 52) +
                                     v2_mount("/..", "/mnt/outside", 53));
  t.v2_root("sys/fs/cgroup");
  t.v2_cgroup("sys/fs/cgroup/a", std::to_string(G), "max", 10 * M);
  t.v2_cgroup("sys/fs/cgroup/a/b", "max", "max", 5 * M);
  t.v2_cgroup("sys/fs/cgroup/a/b/c", "max", "max", 4 * M);
  HostCgroup cg;
  std::string err;
  ASSERT_EQ(discover_in(t, &cg, &err), 0) << err;
  EXPECT_EQ(cg.chain.size(), 4u);
  EXPECT_EQ(cg.limit, G);
  EXPECT_EQ(cg.bound().dir, t.path("sys/fs/cgroup/a"));

  // Only the mount of a sibling and one outside the namespace: nothing shows the cgroup.
  t.write("proc/self/mountinfo",
          std::string(kOtherMounts) + v2_mount("/a/bc", "/mnt/x") + v2_mount("/..", "/mnt/o"));
  EXPECT_EQ(discover_in(t, &cg, &err, 2), ENOENT);
  EXPECT_NE(err.find("under no visible mount"), std::string::npos) << err;
}

TEST(HostDiscovery, MountPointsWithEscapedSpaces) {
  FixtureTree t;
  t.write("proc/self/cgroup", "0::/s\n");
  t.write("proc/self/mountinfo", std::string(kOtherMounts) + v2_mount("/", "/my\\040cgroups"));
  t.v2_root("my cgroups");
  t.v2_cgroup("my cgroups/s", "123456789", "max", 1);
  HostCgroup cg;
  std::string err;
  ASSERT_EQ(discover_in(t, &cg, &err), 0) << err;
  EXPECT_EQ(cg.limit, 123456789u);
}

// This machine's layout: memory is a v1 controller, the v2 mount beside it has no memory.
TEST(HostDiscovery, V1HierarchyWithTheUnlimitedSentinel) {
  FixtureTree t;
  t.write("proc/self/cgroup",
          "9:name=systemd:/\n4:memory:/process_api/job/step\n3:cpuset:/\n0::/\n");
  t.write("proc/self/mountinfo",
          std::string(kOtherMounts) + v1_mount("/", "/sys/fs/cgroup/memory", "memory") +
              v1_mount("/", "/sys/fs/cgroup/cpuset", "cpuset", 34) +
              v2_mount("/", "/sys/fs/cgroup/unified"));
  t.write("sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n");
  t.v1_cgroup("sys/fs/cgroup/memory", kV1Unlimited, 9 * G, kV1Unlimited);
  t.v1_cgroup("sys/fs/cgroup/memory/process_api", kV1Unlimited, 8 * G, kV1Unlimited);
  t.v1_cgroup("sys/fs/cgroup/memory/process_api/job", 4 * G, 3 * G, 4 * G);
  t.v1_cgroup("sys/fs/cgroup/memory/process_api/job/step", kV1Unlimited, 2 * G, 4 * G);
  HostCgroup cg;
  std::string err;
  ASSERT_EQ(discover_in(t, &cg, &err), 0) << err;
  EXPECT_EQ(cg.version, 1);
  ASSERT_EQ(cg.chain.size(), 4u);
  EXPECT_EQ(cg.chain[0].max, kNoLimit);  // the sentinel means none
  EXPECT_EQ(cg.chain[3].max, kNoLimit);
  EXPECT_EQ(cg.limit, 4 * G);
  EXPECT_EQ(cg.binding, 1u);  // [0] step, [1] job, [2] process_api, [3] the root
  EXPECT_FALSE(cg.limit_above_mount);
  EXPECT_EQ(cg.usage(), 3 * G);
  EXPECT_EQ(cg.high, kNoLimit);
  EXPECT_EQ(cg.pressure_level_file,
            t.path("sys/fs/cgroup/memory/process_api/job/memory.pressure_level"));

  // Asking for v2 explicitly: the v2 cgroup has no memory controller.
  EXPECT_EQ(discover_in(t, &cg, &err, 2), ENOENT);
  EXPECT_NE(err.find("no memory controller"), std::string::npos) << err;
}

// A v1 bind mount of the container's cgroup: a limit above the mount is seen only in the leaf's
// hierarchical_memory_limit.
TEST(HostDiscovery, V1HierarchicalLimitAboveTheMount) {
  FixtureTree t;
  t.write("proc/self/cgroup", "4:memory:/docker/abc\n");
  t.write("proc/self/mountinfo",
          std::string(kOtherMounts) + v1_mount("/docker/abc", "/sys/fs/cgroup/memory", "memory"));
  t.v1_cgroup("sys/fs/cgroup/memory", kV1Unlimited, 300 * M, 512 * M);
  HostCgroup cg;
  std::string err;
  ASSERT_EQ(discover_in(t, &cg, &err), 0) << err;
  ASSERT_EQ(cg.chain.size(), 1u);
  EXPECT_EQ(cg.limit, 512 * M);
  EXPECT_TRUE(cg.limit_above_mount);
  EXPECT_EQ(cg.usage(), 300 * M);
}

TEST(HostDiscovery, BadInputIsAClearErrorAndLeavesTheOutputAlone) {
  FixtureTree t;
  t.write("proc/self/cgroup", "0::/a/b\n");
  t.write("proc/self/mountinfo", std::string(kOtherMounts) + v2_mount("/", "/sys/fs/cgroup"));
  t.v2_root("sys/fs/cgroup");
  t.v2_cgroup("sys/fs/cgroup/a", std::to_string(G), "max", 1);
  t.v2_cgroup("sys/fs/cgroup/a/b", "max", "max", 1);
  HostCgroup cg;
  cg.version = 42;
  std::string err;
  // Malformed values.
  for (const char* bad : {"12abc", "-1", "", "max max", "1G", "99999999999999999999999"}) {
    t.write("sys/fs/cgroup/a/memory.max", std::string(bad) + "\n");
    EXPECT_EQ(discover_in(t, &cg, &err), EINVAL) << bad;
    EXPECT_NE(err.find("a/memory.max: malformed"), std::string::npos) << err;
    EXPECT_EQ(cg.version, 42);
  }
  t.write("sys/fs/cgroup/a/memory.max", "1073741824\n");
  // Unreadable (a directory where the file should be: root reads every mode).
  t.remove("sys/fs/cgroup/a/b/memory.current");
  t.mkdir("sys/fs/cgroup/a/b/memory.current");
  EXPECT_EQ(discover_in(t, &cg, &err), EISDIR);
  EXPECT_NE(err.find("memory.current: cannot read"), std::string::npos) << err;
  // A file gone, the cgroup removed under us.
  t.remove("sys/fs/cgroup/a/b/memory.current");
  EXPECT_EQ(discover_in(t, &cg, &err), ENOENT);
  EXPECT_NE(err.find("cgroup removed"), std::string::npos) << err;
  t.remove("sys/fs/cgroup/a/b");
  EXPECT_EQ(discover_in(t, &cg, &err), ENOENT);
  EXPECT_NE(err.find("removed under us"), std::string::npos) << err;
  // Malformed procfs.
  t.write("proc/self/cgroup", "garbage\n");
  EXPECT_EQ(discover_in(t, &cg, &err), EINVAL);
  t.write("proc/self/cgroup", "0::/a\n");
  t.write("proc/self/mountinfo", "41 31 0:38 /\n");
  EXPECT_EQ(discover_in(t, &cg, &err), EINVAL);
  t.remove("proc/self/mountinfo");
  EXPECT_EQ(discover_in(t, &cg, &err), ENOENT);
  EXPECT_NE(err.find("mountinfo: cannot read"), std::string::npos) << err;
  // No memory cgroup at all.
  t.write("proc/self/mountinfo", std::string(kOtherMounts));
  t.write("proc/self/cgroup", "3:cpuset:/\n");
  EXPECT_EQ(discover_in(t, &cg, &err), ENOENT);
  EXPECT_NE(err.find("no memory cgroup"), std::string::npos) << err;
  EXPECT_EQ(cg.version, 42);
  // A bad option.
  DiscoverOptions o;
  o.version = 3;
  EXPECT_EQ(discover(o, &cg, &err), EINVAL);
}

TEST(HostProcfs, Parsers) {
  std::vector<CgroupLine> lines;
  ASSERT_EQ(parse_proc_cgroup("12:cpu,cpuacct:/a:b\n0::/\n", &lines), 0);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].controllers, (std::vector<std::string>{"cpu", "cpuacct"}));
  EXPECT_EQ(lines[0].path, "/a:b");
  EXPECT_TRUE(lines[1].controllers.empty());
  EXPECT_EQ(parse_proc_cgroup("x::/\n", &lines), EINVAL);
  EXPECT_EQ(parse_proc_cgroup("0::relative\n", &lines), EINVAL);
  EXPECT_EQ(lines.size(), 2u);  // untouched on error

  std::vector<CgroupMount> mounts;
  ASSERT_EQ(parse_mountinfo(std::string(kOtherMounts) +
                                "41 31 0:38 /a\\134b /m\\011t rw shared:9 master:2 - cgroup2 "
                                "cgroup2 rw\n",
                            &mounts),
            0);
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_EQ(mounts[0].root, "/a\\b");
  EXPECT_EQ(mounts[0].mount_point, "/m\tt");
  EXPECT_EQ(parse_mountinfo("41 31 0:38 /\\04 /m rw - cgroup2 c rw\n", &mounts), EINVAL);

  uint64_t v = 0;
  EXPECT_EQ(parse_limit_file("max\n", &v), 0);
  EXPECT_EQ(v, kNoLimit);
  EXPECT_EQ(parse_limit_file("9223372036854771712\n", &v), 0);
  EXPECT_EQ(v, kNoLimit);
  EXPECT_EQ(parse_limit_file("9223372036854767616\n", &v), 0);  // one page below: a limit
  EXPECT_EQ(v, 9223372036854767616ull);
  EXPECT_EQ(parse_limit_file("0\n", &v), 0);
  EXPECT_EQ(v, 0u);
  EXPECT_EQ(parse_limit_file("Max\n", &v), EINVAL);
  EXPECT_EQ(find_status_kb("VmRSS:\t  12 kB\n", "VmRSS", &v), 0);
  EXPECT_EQ(v, 12u * 1024);
  EXPECT_EQ(find_status_kb("VmRSS:\t  12\n", "VmRSS", &v), EINVAL);
  EXPECT_EQ(find_stat_value("a 1\nb 2\n", "b", &v), 0);
  EXPECT_EQ(v, 2u);
  EXPECT_EQ(find_stat_value("a 1\n", "b", &v), ENOENT);

  std::string dir;
  EXPECT_TRUE(map_cgroup_path("/a/b", "/a", "/m", &dir));
  EXPECT_EQ(dir, "/m/b");
  EXPECT_TRUE(map_cgroup_path("/a", "/a", "/m/", &dir));
  EXPECT_EQ(dir, "/m");
  EXPECT_FALSE(map_cgroup_path("/ab", "/a", "/m", &dir));
  EXPECT_FALSE(map_cgroup_path("/a/../b", "/a", "/m", &dir));
}

}  // namespace
}  // namespace memcg::host
