// The cgroup-v2 file interface: which files exist where, read formats, the write grammar through
// the files, errors, and that a rejected write changes nothing (interface.md).
#include "memcg/files/files.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/percpu/internal/stock.hpp"

namespace memcg {
namespace {

struct Files : ::testing::Test {
  Files() {
    Options o;
    o.nr_shards = 1;
    ctl = std::make_unique<Controller>(o);
    EXPECT_EQ(ctl->create("a", &a), 0);
    EXPECT_EQ(ctl->create("a/b", &b), 0);
  }
  std::string read(Group& g, const char* name) {
    std::string out;
    EXPECT_EQ(read_file(g, name, &out), 0) << name;
    return out;
  }
  std::unique_ptr<Controller> ctl;
  GroupRef a, b;
};

TEST_F(Files, RootHasOnlyTheFilesTheKernelGivesIt) {
  std::string out;
  for (const char* name :
       {"memory.current", "memory.min", "memory.low", "memory.high", "memory.max", "memory.peak",
        "memory.events", "memory.events.local", "memory.oom.group", "memory.wait"}) {
    EXPECT_EQ(read_file(ctl->root(), name, &out), ENOENT) << name;
    EXPECT_EQ(write_file(ctl->root(), name, "0"), ENOENT) << name;
  }
  EXPECT_EQ(read_file(ctl->root(), "memory.stat", &out), 0);
  EXPECT_EQ(write_file(ctl->root(), "memory.reclaim", "0"), 0);
  const auto names = file_names(ctl->root());
  EXPECT_EQ(std::count(names.begin(), names.end(), "memory.max"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "memory.stat"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "memory.wait"), 0);
  const auto child = file_names(*a);
  EXPECT_EQ(std::count(child.begin(), child.end(), "memory.wait"), 1);
}

TEST_F(Files, UnimplementedFilesDoNotExist) {
  std::string out;
  for (const char* name : {"memory.swap.current", "memory.swap.max", "memory.numa_stat",
                           "cgroup.procs", "memory.nonsense"})
    EXPECT_EQ(read_file(*a, name, &out), ENOENT) << name;
}

TEST_F(Files, LimitRoundTrips) {
  const std::pair<const char*, const char*> cases[] = {
      {"1G", "1073741824\n"}, {"4097", "4096\n"},
      {"4095", "0\n"},        {"0x1000", "4096\n"},
      {"010", "0\n"},         {"max", "max\n"},
      {" 2M\n", "2097152\n"}, {"9223372036854775807", "max\n"}};
  for (const char* file : {"memory.min", "memory.low", "memory.high", "memory.max"})
    for (auto [in, out] : cases) {
      ASSERT_EQ(write_file(*a, file, in, /*nonblocking=*/true), 0) << file << " " << in;
      EXPECT_EQ(read(*a, file), out) << file << " " << in;
    }
}

TEST_F(Files, RejectedWritesChangeNothing) {
  ASSERT_EQ(write_file(*a, "memory.max", "8M"), 0);
  ASSERT_EQ(write_file(*a, "memory.min", "1M"), 0);
  for (const char* bad : {"1 G", "1KB", "-1", "+1", "1.5G", "Max", "MAX", "", "\n", "08", "0x"}) {
    EXPECT_EQ(write_file(*a, "memory.max", bad), EINVAL) << "'" << bad << "'";
    EXPECT_EQ(write_file(*a, "memory.min", bad), EINVAL) << "'" << bad << "'";
  }
  EXPECT_EQ(read(*a, "memory.max"), "8388608\n");
  EXPECT_EQ(read(*a, "memory.min"), "1048576\n");
  EXPECT_EQ(b->memory().children_min_usage(), 0);
}

TEST_F(Files, ReadOnlyAndWriteOnlyFiles) {
  std::string out = "untouched";
  EXPECT_EQ(write_file(*a, "memory.current", "0"), EACCES);
  EXPECT_EQ(write_file(*a, "memory.events", "0"), EACCES);
  EXPECT_EQ(write_file(*a, "memory.stat", "0"), EACCES);
  EXPECT_EQ(write_file(*a, "memory.wait", "0"), EACCES);
  EXPECT_EQ(read_file(*a, "memory.reclaim", &out), EACCES);
  EXPECT_EQ(out, "untouched");
}

TEST_F(Files, OomGroupGrammar) {
  for (const char* ok : {"1", "0x1", "+0", "0", " 1\n"})
    EXPECT_EQ(write_file(*a, "memory.oom.group", ok), 0) << ok;
  ASSERT_EQ(write_file(*a, "memory.oom.group", "1"), 0);
  for (const char* bad : {"2", "yes", "-1", ""})
    EXPECT_EQ(write_file(*a, "memory.oom.group", bad), EINVAL) << bad;
  EXPECT_EQ(write_file(*a, "memory.oom.group", "99999999999"), ERANGE);
  EXPECT_EQ(read(*a, "memory.oom.group"), "1\n");
}

// The kernel's six keys in its order, then the library's `wait`, `preempt`, `oom_handled` and
// `oom_spill`.
TEST_F(Files, EventsPrintTenLinesInOrderAndLocalDiffers) {
  b->raise(Event::kMax);
  b->raise(Event::kMax);
  b->raise(Event::kWait);
  b->raise(Event::kPreempt);
  b->raise(Event::kOomSpill);
  const std::string ten =
      "low 0\nhigh 0\nmax 2\noom 0\noom_kill 0\noom_group_kill 0\nwait 1\npreempt 1\n"
      "oom_handled 0\noom_spill 1\n";
  EXPECT_EQ(read(*b, "memory.events"), ten);
  EXPECT_EQ(read(*b, "memory.events.local"), ten);
  EXPECT_EQ(read(*a, "memory.events"), ten);  // hierarchical
  EXPECT_EQ(read(*a, "memory.events.local"),
            "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\nwait 0\npreempt 0\n"
            "oom_handled 0\noom_spill 0\n");
}

// memory.wait: eight keyed lines, then the wait times and seven lines per class, never_fits,
// then admission and growth (admission.hpp), all 0 (or the defaults) where no charge ever waited (values while one waits: charge_wait_*_test).
TEST_F(Files, WaitFileWithoutWaiters) {
  std::string per_class;
  for (const char* c : {"high", "normal", "low"})
    for (const char* k : {"waiters", "queued_bytes", "waits", "granted", "timed_out", "cancelled",
                          "removed"})
      per_class += std::string(c) + "_" + k + " 0\n";
  EXPECT_EQ(read(*b, "memory.wait"),
            "waiters 0\nqueued_bytes 0\nreserved_bytes 0\nwaits 0\ngranted 0\ntimed_out 0\n"
            "cancelled 0\nremoved 0\nlast_wait_usec 0\nmax_wait_usec 0\n" + per_class +
                "never_fits 0\n"
                "admit_growth_permille 1000\nadmit_samples 0\nadmit_promised_bytes 0\nadmit_waits 0\n"
                "growth_waits 0\ngrowth_granted 0\ngrowth_bound_usec 20000\n"
                "admit_tolerance_permille 4000\nadmit_skipped 0\nadmit_reclaims 0\n"
                "admit_reclaimed_bytes 0\n");
  std::unique_ptr<File> f;
  ASSERT_EQ(open_file(*a, "memory.wait", &f), 0);
  EXPECT_TRUE(f->readable());
  EXPECT_FALSE(f->writable());
}

TEST_F(Files, CurrentAndPeakHandles) {
  ASSERT_EQ(try_charge(*b, 100, kMayBlock | kNoSpin), ChargeStatus::kOk);
  EXPECT_EQ(read(*b, "memory.current"), "409600\n");
  std::unique_ptr<File> h1, h2;
  ASSERT_EQ(open_file(*b, "memory.peak", &h1), 0);
  ASSERT_EQ(open_file(*b, "memory.peak", &h2), 0);
  uncharge_direct(*b, 60);
  std::string v;
  ASSERT_EQ(h1->read(&v), 0);
  EXPECT_EQ(v, "409600\n");          // never written: the all-time peak
  ASSERT_EQ(h1->write("reset"), 0);  // content ignored
  ASSERT_EQ(h1->read(&v), 0);
  EXPECT_EQ(v, "163840\n");  // peak since its reset = current usage
  ASSERT_EQ(h2->read(&v), 0);
  EXPECT_EQ(v, "409600\n");  // the other handle is unaffected
  uncharge_direct(*b, 40);
}

TEST_F(Files, StatAddsUpToCurrentMinusTheStock) {
  ASSERT_EQ(try_charge(*b, 10), ChargeStatus::kOk);
  ASSERT_EQ(try_charge(*b, 5, kDefaultCharge, StatRegistry::kFile), ChargeStatus::kOk);
  ctl->flush_stats();
  const std::string stat = read(*a, "memory.stat");
  EXPECT_NE(stat.find("anon 40960\n"), std::string::npos) << stat;
  EXPECT_NE(stat.find("file 20480\n"), std::string::npos) << stat;
  EXPECT_EQ(stat.rfind("anon ", 0), 0u);  // the kernel's first key
  ctl->stock().drain_all(&ctl->root());
  EXPECT_EQ(read(*a, "memory.current"), std::to_string(15 * 4096) + "\n");
  uncharge(*b, 10);
  uncharge(*b, 5, StatRegistry::kFile);
}

TEST_F(Files, MemoryMaxWriteBelowUsageSucceedsNonblockingOnlyStores) {
  ASSERT_EQ(try_charge(*b, 100, kMayBlock | kNoSpin), ChargeStatus::kOk);
  EXPECT_EQ(write_file(*a, "memory.max", "4096", /*nonblocking=*/true), 0);
  EXPECT_EQ(read(*a, "memory.max"), "4096\n");
  EXPECT_EQ(a->memory().usage(), 100);  // no reclaim, no OOM for a nonblocking write
  EXPECT_EQ(a->events_local().get(Event::kOom), 0u);
  EXPECT_EQ(write_file(*a, "memory.max", "4096"), 0);  // blocking: nothing to reclaim or kill
  EXPECT_EQ(a->events_local().get(Event::kOom), 1u);
  uncharge_direct(*b, 100);
}

}  // namespace
}  // namespace memcg
