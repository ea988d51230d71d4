// On the machine itself, read-only: the discovered chain is what /proc/self/cgroup and the
// cgroup files say. Skipped where the process has no memory cgroup. Registers no trigger and
// writes nothing.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "memcg/host/discovery.hpp"

namespace memcg::host {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The path of the process's memory cgroup as /proc/self/cgroup says, read here independently.
std::string own_path(int version) {
  std::istringstream in(slurp("/proc/self/cgroup"));
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    const std::string ctl = line.substr(a + 1, b - a - 1);
    if (version == 2 && line.substr(0, a) == "0" && ctl.empty()) return line.substr(b + 1);
    if (version == 1 && ("," + ctl + ",").find(",memory,") != std::string::npos)
      return line.substr(b + 1);
  }
  return "";
}

TEST(HostMachine, DiscoveredChainMatchesProcAndTheFiles) {
  HostCgroup cg;
  std::string err;
  const int rc = discover({}, &cg, &err);
  if (rc == ENOENT) GTEST_SKIP() << "no memory cgroup on this machine: " << err;
  ASSERT_EQ(rc, 0) << err;
  ASSERT_FALSE(cg.chain.empty());
  EXPECT_EQ(cg.chain[0].path, own_path(cg.version));
  const std::string max_file = cg.version == 2 ? "/memory.max" : "/memory.limit_in_bytes";
  uint64_t smallest = kNoLimit;
  for (size_t i = 0; i < cg.chain.size(); ++i) {
    const HostLevel& l = cg.chain[i];
    if (i > 0) {  // each level is the parent of the one before it
      const std::string& child = cg.chain[i - 1].path;
      EXPECT_EQ(child.substr(0, child.rfind('/') == 0 ? 1 : child.rfind('/')), l.path);
    }
    if (!l.has_limits) continue;
    uint64_t max = 0;
    ASSERT_EQ(parse_limit_file(slurp(l.dir + max_file), &max), 0) << l.dir;
    EXPECT_EQ(l.max, max) << l.dir;
    smallest = std::min(smallest, max);
  }
  if (cg.version == 1) {
    uint64_t hier = 0;
    ASSERT_EQ(find_stat_value(slurp(cg.chain[0].dir + "/memory.stat"),
                              "hierarchical_memory_limit", &hier), 0);
    if (hier >= kV1Unlimited) hier = kNoLimit;
    smallest = std::min(smallest, hier);
  }
  EXPECT_EQ(cg.limit, smallest);
  EXPECT_GT(cg.rss, 0u);
  if (cg.bound().has_limits) {
    EXPECT_GT(cg.usage(), 0u);
  }
}

// This machine has a v1 memory controller with a v2 mount beside it: v2 alone must say why it
// found nothing, or find memory.max where the controller is enabled.
TEST(HostMachine, V2AloneEitherBindsOrSaysWhy) {
  HostCgroup cg;
  std::string err;
  DiscoverOptions o;
  o.version = 2;
  const int rc = discover(o, &cg, &err);
  if (rc == 0) {
    EXPECT_EQ(cg.version, 2);
    EXPECT_EQ(cg.chain[0].path, own_path(2));
  } else {
    EXPECT_EQ(rc, ENOENT);
    EXPECT_FALSE(err.empty());
    std::cout << "v2: " << err << "\n";
  }
}

}  // namespace
}  // namespace memcg::host
