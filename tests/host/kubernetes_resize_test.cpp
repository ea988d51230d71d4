// A Kubernetes in-place memory-limit decrease replayed against a cgroup fixture
// (docs/kubernetes.md). The kernel's side is simulated: the container's memory.current is the
// process's usage (the root's) plus a page-cache share the test controls. A simulated kubelet,
// every sync period, lowers memory.max to the pod's desired limit only when that usage is under
// it (what the kubelet does since 1.34; otherwise the resize stays in progress and is retried on
// the next sync). A watcher beside the process sets the process budget to the desired limit.
// Checked: the process reaches the target by dropping caches (nobody is killed, nobody is asked
// to give memory back), the protected tenant keeps its memory, the resize is applied within a
// few syncs, and memcg::host then follows the new memory.max, the shortfall counted once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "fixture.hpp"
#include "memcg/core/admission/budget.hpp"
#include "memcg/host/binding.hpp"
#include "memcg/memcg.hpp"
#include "watchdog.hpp"

namespace memcg::host {
namespace {

using testing::FixtureTree;
using testing::kOtherMounts;
using testing::v2_mount;

constexpr uint64_t M = 1ull << 20;
constexpr uint64_t kUnit = 4096;
constexpr uint64_t kHeadroom = 8 * M;
constexpr auto kSyncPeriod = std::chrono::milliseconds(100);  // the kubelet's (shortened)

uint64_t floor_unit(uint64_t b) { return b & ~(kUnit - 1); }

// A file replaced at once (write, then rename), so that the binding never reads half of it.
void put(const FixtureTree& t, const std::string& rel, const std::string& text) {
  const std::string tmp = rel + ".tmp";
  t.write(tmp, text);
  ASSERT_EQ(std::rename(t.path(tmp).c_str(), t.path(rel).c_str()), 0);
}

// A cache that gives back whatever reclaim asks (the process's own, above protection).
class Cache final : public Reclaimer {
 public:
  Cache(Group& g, int64_t units) : g_(g), left_(units) {
    EXPECT_EQ(try_charge(g, units), ChargeStatus::kOk);
    reg_ = ReclaimerRegistration(g, *this);
  }
  ~Cache() override {
    reg_.reset();
    uncharge_direct(g_, left_.load());
  }
  int64_t reclaimable() const noexcept override { return left_.load(); }
  ReclaimResult reclaim(int64_t n, int) override {
    const int64_t freed = std::min(n, left_.load());
    left_ -= freed;
    uncharge_direct(g_, freed);
    return {freed, freed};
  }
  int64_t left() const { return left_.load(); }

 private:
  Group& g_;
  std::atomic<int64_t> left_;
  ReclaimerRegistration reg_;
};

// The node: the kernel's counters of the pod's cgroup (/kubepods/pod) and the kubelet.
struct Node {
  explicit Node(const FixtureTree& tree, Controller& c, uint64_t limit, uint64_t page_cache)
      : t(tree), ctl(c), max(limit), cache(page_cache) {
    t.write("proc/self/cgroup", "0::/kubepods/pod/ctr\n");
    t.write("proc/self/mountinfo", std::string(kOtherMounts) + v2_mount("/", "/sys/fs/cgroup"));
    t.v2_root("sys/fs/cgroup");
    t.v2_cgroup("sys/fs/cgroup/kubepods", "max", "max", 0);
    t.v2_cgroup("sys/fs/cgroup/kubepods/pod", std::to_string(limit), "max", 0);
    t.v2_cgroup("sys/fs/cgroup/kubepods/pod/ctr", "max", "max", 0);
    update();
  }
  // What the kernel counts: the process's usage plus the page cache (inactive file pages).
  uint64_t usage() const { return ctl.root().current() + cache.load(); }
  void update() {
    const std::string u = std::to_string(usage()) + "\n";
    const std::string stat = "anon " + std::to_string(ctl.root().current()) + "\nfile " +
                             std::to_string(cache.load()) + "\ninactive_file " +
                             std::to_string(cache.load()) + "\n";
    for (const char* dir : {"sys/fs/cgroup/kubepods/pod", "sys/fs/cgroup/kubepods/pod/ctr"}) {
      put(t, std::string(dir) + "/memory.current", u);
      put(t, std::string(dir) + "/memory.stat", stat);
    }
  }
  // One kubelet sync: a pending decrease is applied only when usage is under it.
  void sync() {
    ++syncs;
    const uint64_t want = desired.load();
    if (want == max.load()) return;
    if (want < max.load() && usage() >= want) {
      ++deferred;  // PodResizeInProgress, reason Error: retried next sync
      return;
    }
    put(t, "sys/fs/cgroup/kubepods/pod/memory.max", std::to_string(want) + "\n");
    max.store(want);
    applied_at_sync = syncs.load();
  }
  const FixtureTree& t;
  Controller& ctl;
  std::atomic<uint64_t> max;
  std::atomic<uint64_t> desired{0};
  std::atomic<uint64_t> cache;
  std::atomic<int> syncs{0}, deferred{0}, applied_at_sync{0};
};

template <class F>
bool wait_for(F&& f, std::chrono::seconds limit = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!f()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

TEST(KubernetesResize, ADecreaseIsReachedByDroppingCachesAndApplied) {
  memcg::testing::Watchdog dog("KubernetesResize", std::chrono::seconds(60));
  FixtureTree t;
  Options o;
  o.nr_shards = 1;
  Controller ctl(o);
  GroupRef tenant, caches;
  ASSERT_EQ(ctl.create("tenant", &tenant), 0);
  ASSERT_EQ(ctl.create("caches", &caches), 0);
  // The protected tenant: 64 MiB under memory.min; a kill of it fails the test.
  tenant->set_min(64 * M);
  std::atomic<int> tenant_calls{0};
  Member query(*tenant, "query", [&](Member&) { tenant_calls.fetch_add(1); });
  ASSERT_EQ(query.charge(static_cast<int64_t>(64 * M / kUnit)), ChargeStatus::kOk);
  Cache cache(*caches, static_cast<int64_t>(128 * M / kUnit));
  ctl.drain_stocks();

  // The pod: limit 512 MiB, 32 MiB of page cache. Usage 64 + 128 + 32 = 224 MiB.
  Node node(t, ctl, 512 * M, 32 * M);
  node.desired.store(512 * M);
  ProcessBudget budget(ctl);
  BindOptions bo;
  bo.discover.root_prefix = t.root();
  bo.pressure = PressureMode::kNone;
  bo.watch_events = false;
  bo.period_ms = 20;
  bo.headroom_bytes = kHeadroom;
  bo.headroom_permille = 0;
  bo.budget = &budget;
  HostBinding binding(ctl, bo);
  std::string err;
  ASSERT_EQ(binding.start(&err), 0) << err;
  EXPECT_EQ(ctl.root().max(), floor_unit(512 * M - kHeadroom));  // working set = root's usage

  std::atomic<bool> stop{false};
  // The kernel's counters follow the process at once; the kubelet syncs every period.
  std::thread kernel([&] {
    while (!stop.load()) {
      node.update();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::thread kubelet([&] {
    while (!stop.load()) {
      std::this_thread::sleep_for(kSyncPeriod);
      node.sync();
    }
  });

  // The resize: the pod's spec says 160 MiB (usage 224 MiB: the kubelet defers it), and the
  // watcher sets the budget to it.
  const uint64_t target = 160 * M;
  const int syncs_before = node.syncs.load();
  node.desired.store(target);
  ASSERT_EQ(budget.set(target), 0);
  ASSERT_TRUE(wait_for([&] { return node.max.load() == target; }))
      << "resize never applied; budget " << budget_state_name(budget.status().state) << " "
      << budget.status().error;
  const int syncs_taken = node.applied_at_sync.load() - syncs_before;
  EXPECT_LE(syncs_taken, 3) << "applied after " << syncs_taken << " syncs";

  BudgetStatus s = budget.status();
  EXPECT_EQ(s.state, BudgetState::kReached) << s.error;
  // By dropping caches: reclaim did it, nobody was asked or killed.
  EXPECT_GT(s.reclaimed_bytes, 0u);
  EXPECT_EQ(s.preempted, 0u);
  EXPECT_EQ(s.killed, 0u);
  EXPECT_LT(static_cast<uint64_t>(cache.left()) * kUnit, 128 * M - 64 * M);
  // The protected tenant kept everything and was never called.
  EXPECT_EQ(tenant_calls.load(), 0);
  EXPECT_FALSE(query.killed());
  EXPECT_EQ(tenant->current(), 64 * M);

  // memcg::host follows the new memory.max; with the budget still set the root holds the
  // smaller of the two, neither taken off the other.
  ASSERT_TRUE(wait_for([&] { return binding.status().cgroup.limit == target; }));
  ASSERT_TRUE(wait_for([&] {
    const HostStatus h = binding.status();
    const BudgetStatus b = budget.status();
    return h.cgroup.limit == target &&
           ctl.root().max() == floor_unit(std::min(h.applied.max, b.limit_bytes));
  })) << ctl.root().max();
  EXPECT_GE(binding.status().applied.max + 2 * M, target - kHeadroom)
      << "the host's limit counts the page cache as the working set does (not at all)";
  // The watcher, seeing the resize applied, removes the budget: the host alone holds the root.
  ASSERT_EQ(budget.clear(), 0);
  ASSERT_TRUE(wait_for([&] {
    return ctl.root().max() == floor_unit(binding.status().applied.max);
  }));
  EXPECT_STREQ(budget.status().limited_by, "none");
  // An increase: the kernel limit rises first, the root follows it.
  node.desired.store(256 * M);
  ASSERT_TRUE(wait_for([&] { return node.max.load() == 256 * M; }));
  ASSERT_TRUE(wait_for([&] { return ctl.root().max() >= 256 * M - kHeadroom - 2 * M; }));

  stop.store(true);
  kubelet.join();
  kernel.join();
  binding.stop();
  EXPECT_EQ(tenant_calls.load(), 0);
  query.uncharge(query.charged());
}

// A decrease the process cannot reach without a kill (nothing reclaimable, nobody to ask): the
// budget fails, nobody is killed, the kubelet keeps deferring the resize.
TEST(KubernetesResize, AnUnreachableDecreaseStaysInProgressAndKillsNobody) {
  memcg::testing::Watchdog dog("KubernetesResizeUnreachable", std::chrono::seconds(60));
  FixtureTree t;
  Options o;
  o.nr_shards = 1;
  Controller ctl(o);
  GroupRef tenant;
  ASSERT_EQ(ctl.create("tenant", &tenant), 0);
  ASSERT_EQ(set_wait_priority(*tenant, WaitPriority::kHigh), 0);
  std::atomic<int> calls{0};
  Member query(*tenant, "query", [&](Member&) { calls.fetch_add(1); });
  ASSERT_EQ(query.charge(static_cast<int64_t>(128 * M / kUnit)), ChargeStatus::kOk);
  ctl.drain_stocks();
  Node node(t, ctl, 512 * M, 0);
  node.desired.store(512 * M);
  ProcessBudget budget(ctl);
  BindOptions bo;
  bo.discover.root_prefix = t.root();
  bo.pressure = PressureMode::kNone;
  bo.watch_events = false;
  bo.period_ms = 20;
  bo.headroom_bytes = kHeadroom;
  bo.headroom_permille = 0;
  bo.budget = &budget;
  HostBinding binding(ctl, bo);
  std::string err;
  ASSERT_EQ(binding.start(&err), 0) << err;
  node.desired.store(96 * M);
  ASSERT_EQ(budget.set(96 * M), 0);
  ASSERT_TRUE(wait_for([&] { return budget.status().state == BudgetState::kFailed; }));
  for (int i = 0; i < 3; ++i) node.sync();
  EXPECT_EQ(node.max.load(), 512 * M);
  EXPECT_GE(node.deferred.load(), 3);
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(budget.status().killed, 0u);
  binding.stop();
  query.uncharge(query.charged());
}

}  // namespace
}  // namespace memcg::host
