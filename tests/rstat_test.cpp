#include "memcg/percpu/internal/rstat.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memcg/base/internal/cpu.hpp"
#include "memcg/percpu/stat_registry.hpp"

namespace memcg {
namespace {

constexpr int kItems = 3;

Rstat::Options options_with(int shards) {
  Rstat::Options o;
  o.nr_shards = shards;
  return o;
}

// A tree of nodes that tears itself down in the required order: every non-root node is
// detached, children before parents, before any is destroyed.
class Tree {
 public:
  explicit Tree(Rstat::Options o, size_t items = kItems) : rs(items, o) {
    nodes_.push_back(std::make_unique<RstatNode>(rs, nullptr));
  }
  ~Tree() {
    for (size_t i = nodes_.size(); i-- > 1;) {
      if (!detached_[i]) rs.detach(*nodes_[i]);
    }
    while (!nodes_.empty()) nodes_.pop_back();
  }
  RstatNode& root() { return *nodes_[0]; }
  RstatNode& add(RstatNode& parent) {
    nodes_.push_back(std::make_unique<RstatNode>(rs, &parent));
    detached_.resize(nodes_.size());
    return *nodes_.back();
  }
  void detach(size_t index) {
    rs.detach(*nodes_[index]);
    detached_[index] = true;
  }
  RstatNode& node(size_t i) { return *nodes_[i]; }
  size_t size() const { return nodes_.size(); }

  Rstat rs;

 private:
  std::vector<std::unique_ptr<RstatNode>> nodes_;
  std::vector<bool> detached_ = std::vector<bool>(1);
};

TEST(RstatTest, LeafUpdateOnShard3ReachesEveryAncestorOnRootFlush) {
  Tree t(options_with(4));
  RstatNode& a = t.add(t.root());
  RstatNode& b = t.add(a);
  RstatNode& leaf = t.add(b);
  t.rs.update_on(3, leaf, 1, 4096, 1);
  for (RstatNode* n : {&t.root(), &a, &b, &leaf}) EXPECT_EQ(t.rs.total(*n, 1), 0);

  t.rs.flush(t.root());
  for (RstatNode* n : {&t.root(), &a, &b, &leaf}) {
    EXPECT_EQ(t.rs.total(*n, 1), 4096);
    EXPECT_EQ(t.rs.total(*n, 0), 0);
  }
  EXPECT_EQ(t.rs.local(leaf, 1), 4096);
  for (RstatNode* n : {&t.root(), &a, &b}) EXPECT_EQ(t.rs.local(*n, 1), 0);
  EXPECT_EQ(t.rs.raw(leaf, 3, 1), 4096);
  EXPECT_EQ(t.rs.raw(leaf, 2, 1), 0);
}

TEST(RstatTest, MidLevelFlushReachesParentOnlyAtItsOwnFlush) {
  Tree t(options_with(2));
  RstatNode& mid = t.add(t.root());
  RstatNode& leaf = t.add(mid);
  RstatNode& other = t.add(t.root());
  t.rs.update_on(1, leaf, 0, 100, 1);
  t.rs.update_on(0, other, 0, 7, 1);

  t.rs.flush(mid);
  EXPECT_EQ(t.rs.total(leaf, 0), 100);
  EXPECT_EQ(t.rs.total(mid, 0), 100);
  EXPECT_EQ(t.rs.local(mid, 0), 0);
  EXPECT_EQ(t.rs.total(t.root(), 0), 0);
  EXPECT_EQ(t.rs.total(other, 0), 0);

  t.rs.flush(t.root());
  EXPECT_EQ(t.rs.total(t.root(), 0), 107);
  EXPECT_EQ(t.rs.total(other, 0), 7);
  EXPECT_EQ(t.rs.total(mid, 0), 100);  // not counted twice
}

TEST(RstatTest, ThreeLevelChainNeedsOneFlush) {
  Tree t(options_with(4));
  RstatNode& a = t.add(t.root());
  RstatNode& b = t.add(a);
  RstatNode& c = t.add(b);
  t.rs.update_on(2, c, 0, 1, 1);
  t.rs.update_on(2, b, 0, 10, 1);
  t.rs.update_on(2, a, 0, 100, 1);
  const auto before = t.rs.counters();
  t.rs.flush(t.root());
  const auto after = t.rs.counters();
  EXPECT_EQ(after.nodes_flushed - before.nodes_flushed, 4u);
  EXPECT_EQ(after.shard_lock_acquisitions - before.shard_lock_acquisitions, 1u);
  EXPECT_EQ(t.rs.total(c, 0), 1);
  EXPECT_EQ(t.rs.total(b, 0), 11);
  EXPECT_EQ(t.rs.total(a, 0), 111);
  EXPECT_EQ(t.rs.total(t.root(), 0), 111);
  EXPECT_EQ(t.rs.local(b, 0), 10);
}

TEST(RstatTest, ReaderFlushGatedByThresholdAndPeriodicFlushOnVirtualClock) {
  Tree t(options_with(4));  // threshold 64 × 4 = 256 units
  RstatNode& g = t.add(t.root());
  ASSERT_EQ(t.rs.flush_threshold(), 256);
  for (int i = 0; i < 256; ++i) t.rs.update_on(i % 4, g, 0, 4096, 1);
  EXPECT_EQ(t.rs.recorded_magnitude(g), 256);
  EXPECT_FALSE(t.rs.needs_flush(g));
  t.rs.flush_if_needed(g);
  EXPECT_EQ(t.rs.total(g, 0), 0);  // below the threshold: stale

  EXPECT_FALSE(t.rs.periodic(1'999'999'999));
  EXPECT_EQ(t.rs.total(g, 0), 0);
  EXPECT_TRUE(t.rs.periodic(2'000'000'000));
  EXPECT_EQ(t.rs.total(g, 0), 256 * 4096);
  EXPECT_EQ(t.rs.total(t.root(), 0), 256 * 4096);
  EXPECT_EQ(t.rs.recorded_magnitude(g), 0);
  EXPECT_FALSE(t.rs.periodic(3'999'999'999));  // one flush per period
  EXPECT_TRUE(t.rs.periodic(4'000'000'000));

  // Above the threshold the reader's flush makes updates visible at once.
  for (int i = 0; i < 320; ++i) t.rs.update_on(1, g, 0, 4096, 1);
  EXPECT_TRUE(t.rs.needs_flush(g));
  EXPECT_TRUE(t.rs.needs_flush(t.root()));
  t.rs.flush_if_needed(g);
  EXPECT_EQ(t.rs.total(g, 0), 576 * 4096);
  EXPECT_FALSE(t.rs.needs_flush(g));
  // The root still has to fold g's contribution.
  EXPECT_EQ(t.rs.total(t.root(), 0), 256 * 4096);
  t.rs.flush_if_needed(t.root());
  EXPECT_EQ(t.rs.total(t.root(), 0), 576 * 4096);
}

TEST(RstatTest, UpdateMagnitudeCountsSubUnitUpdatesAsOne) {
  Tree t(options_with(4));
  RstatNode& g = t.add(t.root());
  for (int i = 0; i < 100; ++i) t.rs.update_on(0, g, 0, 1, 1);  // +1 byte: magnitude 1
  EXPECT_EQ(t.rs.recorded_magnitude(g), 100);
  EXPECT_EQ(t.rs.recorded_magnitude(t.root()), 100);
  t.rs.update_on(0, g, 0, 1, 0);  // a magnitude below 1 is taken as 1
  EXPECT_EQ(t.rs.recorded_magnitude(g), 101);
  t.rs.update_on(0, g, 0, 0, 5);  // a zero delta is ignored entirely
  EXPECT_EQ(t.rs.recorded_magnitude(g), 101);
  t.rs.update_on(2, g, 0, -1000 * 4096, 1000);  // large swings count by magnitude
  EXPECT_TRUE(t.rs.needs_flush(g));
}

TEST(RstatTest, IdleFlushTakesNoShardLock) {
  struct Case {
    bool spec, mask;
  };
  for (Case c : {Case{true, true}, Case{true, false}, Case{false, true}, Case{false, false}}) {
    Rstat::Options o = options_with(8);
    o.speculative_check = c.spec;
    o.nonempty_mask = c.mask;
    Tree t(o);
    RstatNode& a = t.add(t.root());
    RstatNode& b = t.add(a);
    t.rs.update_on(5, b, 0, 1, 1);
    t.rs.flush(t.root());
    ASSERT_EQ(t.rs.total(t.root(), 0), 1);

    const auto before = t.rs.counters();
    t.rs.flush(t.root());
    t.rs.flush(a);
    const auto after = t.rs.counters();
    const uint64_t locks = after.shard_lock_acquisitions - before.shard_lock_acquisitions;
    if (c.spec || c.mask) {
      EXPECT_EQ(locks, 0u) << c.spec << c.mask;
    } else {
      EXPECT_EQ(locks, 16u);
    }
    EXPECT_EQ(after.shards_skipped_by_mask - before.shards_skipped_by_mask, c.mask ? 16u : 0u);
    EXPECT_EQ(
        after.shards_skipped_by_speculative_check - before.shards_skipped_by_speculative_check,
        c.spec && !c.mask ? 16u : 0u);
    EXPECT_EQ(after.nodes_flushed, before.nodes_flushed);
  }
}

TEST(RstatTest, SubtreeFlushSkipsShardsDirtyElsewhereWithoutTheirLock) {
  Tree t(options_with(8));
  RstatNode& a = t.add(t.root());
  RstatNode& b = t.add(t.root());
  for (int s = 0; s < 8; ++s) t.rs.update_on(s, b, 0, 1, 1);
  const auto before = t.rs.counters();
  t.rs.flush(a);  // every shard is non-empty, none holds a
  const auto after = t.rs.counters();
  EXPECT_EQ(after.shard_lock_acquisitions - before.shard_lock_acquisitions, 0u);
  EXPECT_EQ(after.shards_skipped_by_speculative_check - before.shards_skipped_by_speculative_check,
            8u);
  t.rs.flush(t.root());
  EXPECT_EQ(t.rs.total(t.root(), 0), 8);
}

TEST(RstatTest, MaskCoversMoreThan64Shards) {
  Tree t(options_with(130));
  RstatNode& g = t.add(t.root());
  for (int s : {0, 63, 64, 129}) t.rs.update_on(s, g, 2, s + 1, 1);
  const auto before = t.rs.counters();
  t.rs.flush(t.root());
  const auto after = t.rs.counters();
  EXPECT_EQ(after.shard_lock_acquisitions - before.shard_lock_acquisitions, 4u);
  EXPECT_EQ(after.shards_skipped_by_mask - before.shards_skipped_by_mask, 126u);
  EXPECT_EQ(t.rs.total(t.root(), 2), 1 + 64 + 65 + 130);
  t.rs.flush(t.root());
  EXPECT_EQ(t.rs.counters().shard_lock_acquisitions, after.shard_lock_acquisitions);
}

TEST(RstatTest, NegativeTransientTotalsReadAsZero) {
  Tree t(options_with(2));
  RstatNode& g = t.add(t.root());
  t.rs.update_on(1, g, 0, -5, 1);  // the uncharge folded before its charge
  t.rs.flush(t.root());
  EXPECT_EQ(t.rs.total(g, 0), 0);
  EXPECT_EQ(t.rs.local(g, 0), 0);
  EXPECT_EQ(t.rs.total(t.root(), 0), 0);
  t.rs.update_on(0, g, 0, 5, 1);
  t.rs.flush(t.root());
  EXPECT_EQ(t.rs.total(g, 0), 0);
  t.rs.update_on(0, g, 0, 3, 1);
  t.rs.flush(t.root());
  EXPECT_EQ(t.rs.total(g, 0), 3);  // the negative part was kept, not clamped away
  EXPECT_EQ(t.rs.total(t.root(), 0), 3);
}

TEST(RstatTest, UpdateOnCallingThreadsShard) {
  Tree t(options_with(3));
  RstatNode& g = t.add(t.root());
  t.rs.update(g, 0, 42, 1);
  int64_t sum = 0;
  for (int s = 0; s < 3; ++s) sum += t.rs.raw(g, s, 0);
  EXPECT_EQ(sum, 42);
  t.rs.flush(t.root());
  EXPECT_EQ(t.rs.total(t.root(), 0), 42);
}

TEST(RstatTest, DetachKeepsEverythingInParent) {
  Tree t(options_with(4));
  RstatNode& parent = t.add(t.root());
  RstatNode& leaf = t.add(parent);
  const size_t leaf_index = t.size() - 1;
  t.rs.update_on(0, leaf, 0, 10, 1);
  t.rs.flush(leaf);  // part folded into the parent's pending input
  t.rs.update_on(3, leaf, 0, 20, 1);
  t.rs.update_on(1, leaf, 1, 5, 1);
  t.detach(leaf_index);
  t.rs.flush(t.root());
  EXPECT_EQ(t.rs.total(parent, 0), 30);
  EXPECT_EQ(t.rs.total(parent, 1), 5);
  EXPECT_EQ(t.rs.local(parent, 0), 0);
  EXPECT_EQ(t.rs.total(t.root(), 0), 30);
  // The retired leaf is on no tree: flushing again takes no shard lock.
  const auto before = t.rs.counters();
  t.rs.flush(t.root());
  EXPECT_EQ(t.rs.counters().shard_lock_acquisitions, before.shard_lock_acquisitions);
}

// 1 + 10 + 100 + 1000 nodes; random updates on random shards and levels, random subtree flushes
// in between: after a root flush every total is its local plus its children's totals.
TEST(RstatTest, FourLevelTreeTotalsAreLocalPlusChildren) {
  Tree t(options_with(8));
  std::vector<RstatNode*> nodes = {&t.root()};
  std::vector<int> parent_of = {-1};
  for (int level = 1, first = 0, count = 1; level < 4; ++level) {
    const int next_first = static_cast<int>(nodes.size());
    for (int p = first; p < first + count; ++p) {
      for (int k = 0; k < 10; ++k) {
        nodes.push_back(&t.add(*nodes[p]));
        parent_of.push_back(p);
      }
    }
    first = next_first;
    count *= 10;
  }
  ASSERT_EQ(nodes.size(), 1111u);

  std::mt19937_64 rng(7);
  std::vector<int64_t> expect_local(nodes.size() * kItems);
  for (int op = 0; op < 20000; ++op) {
    const size_t n = rng() % nodes.size();
    const int item = static_cast<int>(rng() % kItems);
    const int64_t delta = static_cast<int64_t>(rng() % 5000);
    t.rs.update_on(static_cast<int>(rng() % 8), *nodes[n], item, delta, delta / 4096 + 1);
    expect_local[n * kItems + item] += delta;
    if (op % 500 == 0) t.rs.flush(*nodes[rng() % nodes.size()]);
  }
  t.rs.flush(t.root());

  std::vector<int64_t> child_sum(nodes.size() * kItems);
  for (size_t n = 1; n < nodes.size(); ++n) {
    for (int i = 0; i < kItems; ++i)
      child_sum[parent_of[n] * kItems + i] += t.rs.total(*nodes[n], i);
  }
  for (size_t n = 0; n < nodes.size(); ++n) {
    for (int i = 0; i < kItems; ++i) {
      ASSERT_EQ(t.rs.local(*nodes[n], i), expect_local[n * kItems + i]) << n;
      ASSERT_EQ(t.rs.total(*nodes[n], i), t.rs.local(*nodes[n], i) + child_sum[n * kItems + i])
          << n;
    }
  }

  // Detach every leaf of the first level-2 node: its totals stay as they were.
  const int64_t kept = t.rs.total(*nodes[11], 0);
  for (size_t n = 111; n < 121; ++n) {
    t.rs.update_on(static_cast<int>(n % 8), *nodes[n], 0, 1, 1);
    t.detach(n);
  }
  t.rs.flush(t.root());
  EXPECT_EQ(t.rs.total(*nodes[11], 0), kept + 10);
  EXPECT_EQ(t.rs.local(*nodes[11], 0), expect_local[11 * kItems]);
}

// Updaters on several threads (on their CPUs' shards, and sharing the explicit shards, so that
// the locked add matters), concurrent subtree
// and periodic flushes, short-lived leaves created, updated and detached concurrently: after the
// final flush every total is the exact sum of what was added.
TEST(RstatTest, ConcurrentUpdatesFlushesAndDetachesSumExactly) {
  constexpr int kThreads = 4;
  constexpr int kOps = 20000;
  // update() writes its CPU's shard (with plain stores in a restartable sequence where rseq is
  // on), so update_on() may not write a CPU's shard meanwhile (its REQUIRES): the explicit
  // updates go to the two shards past the CPUs, which only update_on() writes.
  const int cpus = internal::nr_cpu_ids();
  const int shards = cpus + 2;
  Tree t(options_with(shards));
  std::vector<RstatNode*> mids;
  std::vector<RstatNode*> leaves;
  std::vector<int> leaf_mid;
  for (int m = 0; m < 4; ++m) {
    mids.push_back(&t.add(t.root()));
    for (int l = 0; l < 6; ++l) {
      leaves.push_back(&t.add(*mids.back()));
      leaf_mid.push_back(m);
    }
  }

  std::vector<int64_t> leaf_expect(leaves.size() * kItems);
  std::vector<int64_t> mid_expect_local(mids.size() * kItems);
  std::vector<int64_t> mid_ephemeral(mids.size() * kItems);  // from detached leaves
  int64_t root_expect_local = 0;
  std::mutex expect_mu;
  std::atomic<bool> stop{false};

  auto worker = [&](int id) {
    std::mt19937_64 rng(100 + id);
    std::vector<int64_t> leaf_sum(leaves.size() * kItems), mid_sum(mids.size() * kItems),
        eph_sum(mids.size() * kItems);
    int64_t root_sum = 0;
    for (int op = 0; op < kOps; ++op) {
      const int item = static_cast<int>(rng() % kItems);
      const int64_t delta = static_cast<int64_t>(rng() % 200) - 50;
      const int64_t mag = delta < 0 ? -delta : delta;
      const unsigned what = rng() % 100;
      const int shard = cpus + static_cast<int>(rng() % 2);
      if (what < 80) {
        const size_t l = rng() % leaves.size();
        if (op & 1) {
          t.rs.update(*leaves[l], item, delta, mag);
        } else {
          t.rs.update_on(shard, *leaves[l], item, delta, mag);
        }
        leaf_sum[l * kItems + item] += delta;
      } else if (what < 90) {
        const size_t m = rng() % mids.size();
        t.rs.update_on(shard, *mids[m], item, delta, mag);
        mid_sum[m * kItems + item] += delta;
      } else if (what < 92) {
        t.rs.update_on(shard, t.root(), 0, delta, mag);
        root_sum += delta;
      } else if (what < 97) {
        const size_t m = rng() % mids.size();
        RstatNode eph(t.rs, mids[m]);
        for (int k = 0; k < 8; ++k) {
          t.rs.update_on(cpus + static_cast<int>(rng() % 2), eph, k % kItems, k + 1, 1);
          eph_sum[m * kItems + k % kItems] += k + 1;
        }
        if (rng() & 1) t.rs.flush(eph);
        t.rs.detach(eph);
      } else if (what < 99) {
        t.rs.flush(*mids[rng() % mids.size()]);
      } else {
        t.rs.flush_if_needed(t.root());
      }
    }
    std::lock_guard<std::mutex> lock(expect_mu);
    for (size_t i = 0; i < leaf_sum.size(); ++i) leaf_expect[i] += leaf_sum[i];
    for (size_t i = 0; i < mid_sum.size(); ++i) mid_expect_local[i] += mid_sum[i];
    for (size_t i = 0; i < eph_sum.size(); ++i) mid_ephemeral[i] += eph_sum[i];
    root_expect_local += root_sum;
  };
  std::thread ticker([&] {
    uint64_t now = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      now += 500'000'000;
      t.rs.periodic(now);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker, i);
  for (auto& th : threads) th.join();
  stop.store(true);
  ticker.join();

  t.rs.flush(t.root());
  // Values may dip below zero on the way, never at the end with these sums; check that first.
  int64_t root_expect = 0;
  for (size_t m = 0; m < mids.size(); ++m) {
    for (int i = 0; i < kItems; ++i) {
      int64_t mid_total = mid_expect_local[m * kItems + i] + mid_ephemeral[m * kItems + i];
      for (size_t l = 0; l < leaves.size(); ++l) {
        if (leaf_mid[l] != static_cast<int>(m)) continue;
        ASSERT_GT(leaf_expect[l * kItems + i], 0);
        EXPECT_EQ(t.rs.total(*leaves[l], i), leaf_expect[l * kItems + i]);
        EXPECT_EQ(t.rs.local(*leaves[l], i), leaf_expect[l * kItems + i]);
        mid_total += leaf_expect[l * kItems + i];
      }
      ASSERT_GT(mid_expect_local[m * kItems + i], 0);
      EXPECT_EQ(t.rs.local(*mids[m], i), mid_expect_local[m * kItems + i]);
      EXPECT_EQ(t.rs.total(*mids[m], i), mid_total);
      root_expect += mid_total;
    }
  }
  ASSERT_GT(root_expect_local, 0);
  int64_t root_total = 0;
  for (int i = 0; i < kItems; ++i) root_total += t.rs.total(t.root(), i);
  EXPECT_EQ(t.rs.local(t.root(), 0), root_expect_local);
  EXPECT_EQ(root_total, root_expect + root_expect_local);
}

TEST(RstatTest, OptionsAndStalenessBound) {
  EXPECT_EQ(Rstat::staleness_bound_units(64, 8), 64u * 8 + 63u * 8);
  Rstat rs(4, options_with(5));
  EXPECT_EQ(rs.nr_shards(), 5);
  EXPECT_EQ(rs.flush_threshold(), 320);
  Rstat::Options bad;
  bad.batch = 0;
  EXPECT_THROW(Rstat(4, bad), std::invalid_argument);
  EXPECT_THROW(Rstat(4, options_with(-1)), std::invalid_argument);
  Rstat cpus(4, Rstat::Options{});
  EXPECT_GE(cpus.nr_shards(), 1);
  EXPECT_FALSE(cpus.periodic(10'000'000'000));  // no root yet
}

TEST(StatRegistryTest, BuiltinItemsInMemoryStatOrder) {
  StatRegistry r;
  const char* names[] = {"anon",
                         "file",
                         "kernel",
                         "sock",
                         "shmem",
                         "pgscan_direct",
                         "pgscan_proactive",
                         "pgsteal_direct",
                         "pgsteal_proactive",
                         "pgfault"};
  ASSERT_EQ(r.size(), static_cast<size_t>(StatRegistry::kNrBuiltin));
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r.item(i).name, names[i]);
    EXPECT_EQ(r.item(i).kind, i < 5 ? StatKind::kState : StatKind::kEvent);
    EXPECT_EQ(r.find(names[i]), static_cast<int>(i));
  }
  EXPECT_EQ(r.find("sock"), StatRegistry::kSock);
  EXPECT_EQ(r.find("pgfault"), StatRegistry::kPgfault);
  EXPECT_EQ(r.find("slab"), -1);
}

TEST(StatRegistryTest, AddAppendsValidatesAndFreezes) {
  StatRegistry r;
  EXPECT_EQ(r.add("hash_tables", StatKind::kState), 10);
  EXPECT_EQ(r.add("cache_misses2", StatKind::kEvent), 11);
  EXPECT_EQ(r.find("hash_tables"), 10);
  EXPECT_EQ(r.item(11).kind, StatKind::kEvent);
  EXPECT_EQ(r.add("hash_tables", StatKind::kState), -1);  // duplicate
  EXPECT_EQ(r.add("anon", StatKind::kState), -1);         // duplicate of a built-in
  for (const char* bad : {"", "Hash", "a-b", "a b", "x.y"})
    EXPECT_EQ(r.add(bad, StatKind::kState), -1);
  EXPECT_EQ(r.add(std::string(65, 'a'), StatKind::kState), -1);
  EXPECT_EQ(r.add(std::string(64, 'a'), StatKind::kState), 12);
  r.freeze();
  EXPECT_TRUE(r.frozen());
  EXPECT_EQ(r.add("late", StatKind::kEvent), -1);
  EXPECT_EQ(r.size(), 13u);
}

}  // namespace
}  // namespace memcg
