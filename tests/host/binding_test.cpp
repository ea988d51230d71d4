// HostBinding against fixture trees: the root's settings are exact, follow changes, survive bad
// input; pressure from a descriptor the test controls runs reclaim that respects min/low, rate
// limited; stop is bounded; memory allocated outside every group shows as unaccounted.
#include "memcg/host/binding.hpp"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "fixture.hpp"
#include "memcg/memcg.hpp"
#include "watchdog.hpp"

namespace memcg::host {
namespace {

using testing::FixtureTree;
using testing::kOtherMounts;
using testing::v2_mount;

constexpr uint64_t G = 1ull << 30;
constexpr uint64_t M = 1ull << 20;

// /svc (max 8G, high 6G, usage 1G) / app (max "max"): the process's cgroup is /svc/app.
void container(const FixtureTree& t, uint64_t max = 8 * G, uint64_t usage = G) {
  t.write("proc/self/cgroup", "0::/svc/app\n");
  t.write("proc/self/mountinfo", std::string(kOtherMounts) + v2_mount("/", "/sys/fs/cgroup"));
  t.v2_root("sys/fs/cgroup");
  t.v2_cgroup("sys/fs/cgroup/svc", std::to_string(max), std::to_string(6 * G), usage);
  t.v2_cgroup("sys/fs/cgroup/svc/app", "max", "max", usage);
}

BindOptions fixture_options(const FixtureTree& t) {
  BindOptions o;
  o.discover.root_prefix = t.root();
  o.pressure = PressureMode::kNone;
  return o;
}

template <class F>
bool wait_for(F&& f, std::chrono::seconds limit = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!f()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

uint64_t floor_unit(uint64_t b) { return b & ~uint64_t{4095}; }

// Page cache larger than what the library holds: /svc's memory.current is 3G, of which 2.5G is
// inactive file pages; the library holds 256M. The budget follows the working set (3G - 2.5G),
// not memory.current, so the cache does not shrink the tenants' room.
TEST(HostBinding, BudgetFollowsTheWorkingSetNotThePageCache) {
  FixtureTree t;
  container(t, 8 * G, 3 * G);
  const uint64_t inactive = 2 * G + 512 * M;
  t.write("sys/fs/cgroup/svc/memory.stat",
          "anon 402653184\nfile 2818572288\nkernel 0\nsock 0\nactive_anon 402653184\n"
          "inactive_anon 0\nactive_file 134217728\ninactive_file " +
              std::to_string(inactive) + "\n");
  Controller ctl;
  GroupRef a;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_EQ(try_charge(*a, static_cast<int64_t>(256 * M / 4096)), ChargeStatus::kOk);
  const uint64_t root_now = ctl.root().current();
  HostBinding b(ctl, fixture_options(t));
  std::string err;
  ASSERT_EQ(b.refresh(&err), 0) << err;
  const uint64_t headroom = 8 * G / 1000 * 50 + 8 * G % 1000 * 50 / 1000;
  const uint64_t working_set = 3 * G - inactive;  // 512M
  const HostStatus s = b.status();
  EXPECT_EQ(s.cgroup.usage(), 3 * G);
  EXPECT_EQ(s.cgroup.working_set(), working_set);
  EXPECT_EQ(s.applied.kernel_usage, 3 * G);
  EXPECT_EQ(s.applied.working_set, working_set);
  EXPECT_EQ(s.applied.unaccounted, working_set - root_now);
  EXPECT_EQ(s.applied.max, 8 * G - headroom - (working_set - root_now));
  EXPECT_EQ(s.unaccounted, static_cast<int64_t>(working_set - root_now));
  // Both figures in the file and the exposition.
  const std::string text = b.format_file();
  EXPECT_NE(text.find("usage 3221225472\n"), std::string::npos) << text;
  EXPECT_NE(text.find("working_set " + std::to_string(working_set) + "\n"), std::string::npos)
      << text;
  const std::string prom = b.render_prometheus();
  EXPECT_NE(prom.find("memcg_host_usage_bytes 3221225472\n"), std::string::npos) << prom;
  EXPECT_NE(prom.find("memcg_host_working_set_bytes " + std::to_string(working_set) + "\n"),
            std::string::npos)
      << prom;

  // More inactive file pages than usage (the counters are read at different instants): the
  // working set is 0, not a wrapped huge number.
  t.write("sys/fs/cgroup/svc/memory.stat", "inactive_file " + std::to_string(4 * G) + "\n");
  ASSERT_EQ(b.refresh(&err), 0) << err;
  EXPECT_EQ(b.status().applied.working_set, 0u);
  EXPECT_EQ(b.status().applied.unaccounted, 0u);
  EXPECT_EQ(b.status().applied.max, 8 * G - headroom);
  // A malformed value is an error that leaves the root as it was.
  t.write("sys/fs/cgroup/svc/memory.stat", "inactive_file lots\n");
  EXPECT_EQ(b.refresh(&err), EINVAL);
  EXPECT_EQ(b.status().applied.max, 8 * G - headroom);
  uncharge(*a, static_cast<int64_t>(256 * M / 4096));
}

TEST(HostBinding, RootSettingsAreExact) {
  FixtureTree t;
  container(t);
  Controller ctl;
  GroupRef a;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_EQ(try_charge(*a, static_cast<int64_t>(256 * M / 4096)), ChargeStatus::kOk);
  const uint64_t root_now = ctl.root().current();  // 256M plus at most a stock batch
  HostBinding b(ctl, fixture_options(t));
  std::string err;
  ASSERT_EQ(b.refresh(&err), 0) << err;
  // headroom = max(32M, 8G x 50 / 1000) = 429496729; unaccounted = 1G - root usage.
  const uint64_t headroom = 8 * G / 1000 * 50 + 8 * G % 1000 * 50 / 1000;
  EXPECT_EQ(headroom, 429496729u);
  const HostStatus s = b.status();
  EXPECT_TRUE(s.bound);
  EXPECT_EQ(s.applied.headroom, headroom);
  EXPECT_EQ(s.applied.unaccounted, G - root_now);
  EXPECT_EQ(s.applied.max, 8 * G - headroom - (G - root_now));
  EXPECT_EQ(s.applied.high, 6 * G - headroom - (G - root_now));
  EXPECT_EQ(ctl.root().max(), floor_unit(s.applied.max));
  EXPECT_EQ(ctl.root().high(), floor_unit(s.applied.high));
  EXPECT_EQ(s.unaccounted, static_cast<int64_t>(G - root_now));
  EXPECT_EQ(s.unaccounted_rss, static_cast<int64_t>(10240 * 1024) - static_cast<int64_t>(root_now));

  // The file and the exposition show the same numbers.
  std::unique_ptr<File> f = b.open_file();
  std::string text;
  ASSERT_EQ(f->read(&text), 0);
  EXPECT_NE(text.find("binding /svc\n"), std::string::npos) << text;
  EXPECT_NE(text.find("limit 8589934592\n"), std::string::npos) << text;
  EXPECT_NE(text.find("unaccounted " + std::to_string(G - root_now) + "\n"), std::string::npos);
  EXPECT_EQ(f->write("1", false), EACCES);
  const std::string prom = b.render_prometheus();
  EXPECT_NE(prom.find("memcg_host_unaccounted_bytes{source=\"cgroup\"} " +
                      std::to_string(G - root_now) + "\n"),
            std::string::npos) << prom;
  EXPECT_NE(prom.find("memcg_host_limit_bytes{knob=\"max\"} 8589934592\n"), std::string::npos);

  // A small limit: the headroom floor applies, and a limit below headroom + unaccounted is 0.
  container(t, 256 * M, 0);
  ASSERT_EQ(b.refresh(&err), 0) << err;
  EXPECT_EQ(b.status().applied.max, 256 * M - 32 * M);
  container(t, 16 * M, 0);
  BindOptions o = fixture_options(t);
  o.enforce = false;  // a store only: the charged 256M stays
  HostBinding b2(ctl, o);
  ASSERT_EQ(b2.refresh(&err), 0) << err;
  EXPECT_EQ(b2.status().applied.max, 0u);
  EXPECT_EQ(ctl.root().max(), 0u);
  // No limit anywhere: the root is unlimited again.
  container(t, 0, 0);
  t.write("sys/fs/cgroup/svc/memory.max", "max\n");
  t.write("sys/fs/cgroup/svc/memory.high", "max\n");
  ASSERT_EQ(b2.refresh(&err), 0) << err;
  EXPECT_EQ(ctl.root().max(), kUnlimited);
  EXPECT_EQ(ctl.root().high(), kUnlimited);
  uncharge_direct(*a, static_cast<int64_t>(256 * M / 4096));
}

TEST(HostBinding, BadInputLeavesTheBindingAsItWas) {
  FixtureTree t;
  container(t);
  Controller ctl;
  HostBinding b(ctl, fixture_options(t));
  std::string err;
  ASSERT_EQ(b.refresh(&err), 0) << err;
  const uint64_t max = ctl.root().max();
  const HostStatus before = b.status();
  t.write("sys/fs/cgroup/svc/memory.max", "8G\n");
  EXPECT_EQ(b.refresh(&err), EINVAL);
  EXPECT_NE(err.find("svc/memory.max: malformed value '8G"), std::string::npos) << err;
  EXPECT_EQ(ctl.root().max(), max);
  HostStatus s = b.status();
  EXPECT_EQ(s.errors, 1u);
  EXPECT_EQ(s.applied.max, before.applied.max);
  EXPECT_EQ(s.cgroup.limit, 8 * G);
  EXPECT_NE(b.format_file().find("error " + err), std::string::npos);
  t.remove("sys/fs/cgroup/svc");  // removed under us
  EXPECT_EQ(b.refresh(&err), ENOENT);
  EXPECT_EQ(ctl.root().max(), max);
  EXPECT_EQ(b.status().errors, 2u);
  // start() on a tree that does not exist fails and changes nothing.
  HostBinding b2(ctl, fixture_options(t));
  EXPECT_EQ(b2.start(&err), ENOENT);
  EXPECT_FALSE(b2.status().bound);
  EXPECT_EQ(ctl.root().max(), max);
  // Options out of range.
  BindOptions o = fixture_options(t);
  o.headroom_permille = 1001;
  EXPECT_THROW(HostBinding(ctl, o), std::invalid_argument);
  o = fixture_options(t);
  o.pressure = PressureMode::kFd;
  EXPECT_THROW(HostBinding(ctl, o), std::invalid_argument);
}

// The thread re-reads at its period: a lowered kernel limit reaches the root.
TEST(HostBinding, FollowsChangesOnItsPeriod) {
  memcg::testing::Watchdog dog("FollowsChangesOnItsPeriod", std::chrono::seconds(60));
  FixtureTree t;
  container(t);
  Controller ctl;
  BindOptions o = fixture_options(t);
  o.period_ms = 20;
  HostBinding b(ctl, o);
  std::string err;
  ASSERT_EQ(b.start(&err), 0) << err;
  EXPECT_EQ(b.start(&err), EBUSY);
  t.write("sys/fs/cgroup/svc/memory.max", std::to_string(4 * G) + "\n");
  EXPECT_TRUE(wait_for([&] { return b.status().cgroup.limit == 4 * G; }));
  EXPECT_TRUE(wait_for([&] { return ctl.root().max() < 4 * G; }));
  t.write("sys/fs/cgroup/svc/memory.max", "garbage\n");
  EXPECT_TRUE(wait_for([&] { return b.status().errors > 0; }));
  EXPECT_EQ(b.status().cgroup.limit, 4 * G);
  EXPECT_LT(ctl.root().max(), 4 * G);
  b.stop();
  b.stop();
}

// inotify on the binding's memory.events: a change there is followed at once, long before the
// period (an hour here).
TEST(HostBinding, FollowsMemoryEventsThroughInotify) {
  memcg::testing::Watchdog dog("FollowsMemoryEventsThroughInotify", std::chrono::seconds(60));
  FixtureTree t;
  container(t);
  Controller ctl;
  BindOptions o = fixture_options(t);
  o.period_ms = 3'600'000;
  HostBinding b(ctl, o);
  std::string err;
  ASSERT_EQ(b.start(&err), 0) << err;
  EXPECT_EQ(b.status().refreshes, 1u);
  t.write("sys/fs/cgroup/svc/memory.max", std::to_string(2 * G) + "\n");
  t.write("sys/fs/cgroup/svc/memory.events", "low 0\nhigh 3\nmax 1\noom 0\noom_kill 0\n");
  EXPECT_TRUE(wait_for([&] { return b.status().cgroup.limit == 2 * G; }))
      << "no refresh after memory.events changed";
  b.stop();
}

// The library does not throttle at the root, so the binding reclaims the root's excess over the
// high it derived from the kernel's.
TEST(HostBinding, RootOverItsHighIsReclaimed) {
  FixtureTree t;
  container(t, 0, 0);
  t.write("sys/fs/cgroup/svc/memory.max", "max\n");
  t.write("sys/fs/cgroup/svc/memory.high", std::to_string(96 * M) + "\n");
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  LruCache cache(*g, "c");
  ASSERT_EQ(cache.grow(80 * M / 4096), 80 * M / 4096);
  HostBinding b(ctl, fixture_options(t));
  std::string err;
  ASSERT_EQ(b.refresh(&err), 0) << err;
  const HostStatus s = b.status();
  EXPECT_EQ(s.applied.headroom, 32 * M);  // the floor: 5 % of 96M is less
  EXPECT_EQ(s.applied.high, 64 * M);
  EXPECT_EQ(s.applied.max, kNoLimit);
  EXPECT_EQ(s.high_reclaims, 1u);
  EXPECT_LE(ctl.root().current(), 64 * M);
  EXPECT_GE(s.reclaimed_bytes, 16 * M);
}

// A tenant's cache within its memory.min and another's unprotected cache: a pressure event from
// the test's eventfd reclaims from the unprotected one only; further events inside the interval
// are counted and skipped; stop is bounded.
TEST(HostBinding, PressureRunsRateLimitedReclaimThatRespectsMin) {
  memcg::testing::Watchdog dog("PressureRunsRateLimitedReclaim", std::chrono::seconds(60));
  FixtureTree t;
  container(t);
  ManualClock clock(1'000'000'000);
  Options co;
  co.clock = &clock;
  Controller ctl(co);
  GroupRef prot, free_;
  ASSERT_EQ(ctl.create("protected", &prot), 0);
  ASSERT_EQ(ctl.create("free", &free_), 0);
  prot->set_min(64 * M);
  LruCache pc(*prot, "pc"), fc(*free_, "fc");
  ASSERT_EQ(pc.grow(64 * M / 4096), 64 * M / 4096);
  ASSERT_EQ(fc.grow(64 * M / 4096), 64 * M / 4096);
  const int efd = ::eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(efd, 0);
  BindOptions o = fixture_options(t);
  o.pressure = PressureMode::kFd;
  o.pressure_fd = efd;
  o.reclaim_min_bytes = 16 * M;
  o.reclaim_permille = 0;
  o.reclaim_interval_ns = 1'000'000'000;
  o.period_ms = 3'600'000;
  auto b = std::make_unique<HostBinding>(ctl, o);
  std::string err;
  ASSERT_EQ(b->start(&err), 0) << err;
  EXPECT_EQ(b->status().pressure_source, "fd");
  auto event = [&] {
    const uint64_t one = 1;
    ASSERT_EQ(::write(efd, &one, sizeof one), 8);
  };
  event();
  ASSERT_TRUE(wait_for([&] { return b->status().reclaims == 1; }));
  EXPECT_EQ(pc.size(), 64 * M / 4096);  // within memory.min: untouched
  EXPECT_LE(fc.size(), 48 * M / 4096);  // at least the 16M asked for came from here
  const int64_t after_first = fc.size();
  // Inside the interval (the clock did not move): counted, not acted on.
  for (int i = 0; i < 3; ++i) {
    event();
    ASSERT_TRUE(wait_for([&] { return b->status().pressure_events == 2u + i; }));
  }
  HostStatus s = b->status();
  EXPECT_EQ(s.reclaims, 1u);
  EXPECT_EQ(s.reclaims_suppressed, 3u);
  EXPECT_EQ(fc.size(), after_first);
  clock.advance(1'000'000'000);
  event();
  ASSERT_TRUE(wait_for([&] { return b->status().reclaims == 2; }));
  EXPECT_LT(fc.size(), after_first);
  EXPECT_EQ(pc.size(), 64 * M / 4096);
  EXPECT_GE(b->status().reclaimed_bytes, 32 * M);
  // Stop is bounded: it returns promptly with the thread idle in poll.
  const auto t0 = std::chrono::steady_clock::now();
  b.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  ::close(efd);
}

// A reclaimer that takes its time: each call frees what it is asked for, after 100 ms.
class SlowReclaimer final : public Reclaimer {
 public:
  SlowReclaimer(Group& g, int64_t units, std::atomic<int>* calls)
      : g_(g), left_(units), calls_(calls) {}
  int64_t reclaimable() const noexcept override { return left_.load(); }
  ReclaimResult reclaim(int64_t n, int) override {
    calls_->fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const int64_t freed = std::min(n, left_.load());
    left_ -= freed;
    uncharge_direct(g_, freed);
    return {freed, freed};
  }

 private:
  Group& g_;
  std::atomic<int64_t> left_;
  std::atomic<int>* calls_;
};

TEST(HostBinding, StopDuringAReclaimIsBounded) {
  memcg::testing::Watchdog dog("StopDuringAReclaimIsBounded", std::chrono::seconds(120));
  FixtureTree t;
  container(t);
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  std::atomic<int> calls{0};
  constexpr int64_t kUnits = 64 * M / 4096;
  ASSERT_EQ(try_charge(*g, kUnits), ChargeStatus::kOk);
  SlowReclaimer slow(*g, kUnits, &calls);
  ReclaimerRegistration reg(*g, slow);
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  BindOptions o = fixture_options(t);
  o.pressure = PressureMode::kFd;
  o.pressure_fd = p[0];
  o.reclaim_min_bytes = 64 * M;  // 512 calls of 32 units, 100 ms each, if nothing stopped it
  HostBinding b(ctl, o);
  std::string err;
  ASSERT_EQ(b.start(&err), 0) << err;
  ASSERT_EQ(::write(p[1], "x", 1), 1);
  ASSERT_TRUE(wait_for([&] { return calls.load() > 0; }));
  const auto t0 = std::chrono::steady_clock::now();
  b.stop();
  const auto took = std::chrono::steady_clock::now() - t0;
  // One pass of the driver at most (1 MiB, a few dozen bites of 32 units at most); the whole
  // 64 MiB request would have taken at least 512 calls, 51 s.
  EXPECT_LT(took, std::chrono::seconds(10));
  EXPECT_LT(calls.load(), 100);
  std::cout << "stop during reclaim took "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms, "
            << calls.load() << " reclaimer calls\n";
  // A pipe's EOF stops the watching, not the binding.
  HostBinding b2(ctl, o);
  ASSERT_EQ(b2.start(&err), 0) << err;
  ::close(p[1]);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(b2.status().pressure_events, 0u);
  b2.stop();
  ::close(p[0]);
  reg.reset();
  uncharge_direct(*g, slow.reclaimable());
}

// Drift: the process's real RSS (the fixture's status file is the real one) grows with memory
// allocated outside every group, and the unaccounted gauge shows it; a charge without memory
// behind it lowers the gauge by its size.
TEST(HostBinding, MemoryOutsideEveryGroupShowsAsUnaccounted) {
  FixtureTree t;
  container(t);
  t.remove("proc/self/status");
  std::filesystem::create_symlink("/proc/self/status", t.path("proc/self/status"));
  Controller ctl;
  HostBinding b(ctl, fixture_options(t));
  std::string err;
  ASSERT_EQ(b.refresh(&err), 0) << err;
  const int64_t before = b.status().unaccounted_rss;
  constexpr size_t kSize = 64 * M;
  char* p = static_cast<char*>(std::malloc(kSize));
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x5a, kSize);  // resident now
  ASSERT_EQ(b.refresh(&err), 0) << err;
  const int64_t grown = b.status().unaccounted_rss - before;
  EXPECT_GE(grown, static_cast<int64_t>(kSize - 8 * M)) << grown;
#if !defined(__SANITIZE_THREAD__)  // ThreadSanitizer's shadow of the block is resident too
  EXPECT_LE(grown, static_cast<int64_t>(kSize + 16 * M)) << grown;
#endif
  // The same amount charged to a group is accounted: the gauge drops back.
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  ASSERT_EQ(try_charge(*g, kSize / 4096), ChargeStatus::kOk);
  ASSERT_EQ(b.refresh(&err), 0) << err;
  const int64_t accounted = b.status().unaccounted_rss - before;
  // The charge takes kSize (plus at most a stock batch) out of the gauge.
  EXPECT_GE(grown - accounted, static_cast<int64_t>(kSize - 4 * M)) << grown << " " << accounted;
  EXPECT_LE(grown - accounted, static_cast<int64_t>(kSize + 4 * M)) << grown << " " << accounted;
  EXPECT_NE(b.format_file().find("unaccounted_rss "), std::string::npos);
  uncharge_direct(*g, kSize / 4096);
  std::free(p);
}

}  // namespace
}  // namespace memcg::host
