// Model-based test of the charge path with its per-CPU stock. Random sequences (fixed seeds) of
// try_charge / uncharge / uncharge_direct of many sizes, with the flags kMayBlock, none and
// kNoFail, on a three-level tree whose limits are small against the stock's slack, while groups
// are created and removed and the thread moves between CPUs. The reference model holds only the
// real charges (what callers charged and did not yet uncharge), per group and per subtree.
//
// Checked after every operation:
//  - usage(g) - model(g) equals the units stocked for g's subtree (every shard), which is at most
//    stock().slack_bound(); the units stocked in the whole controller are at most that bound.
// Checked on every try_charge, against the state just before it:
//  - a kMayBlock charge never fails while model + n <= max at every level (the ladder drains the
//    stocks before it fails); a kMayBlock | kNoFail charge is not forced in that case either;
//  - a charge for which the counters themselves have room (usage + n <= max at every level)
//    succeeds without force, whatever its flags;
//  - a charge that fails or is forced without kMayBlock found some level with usage + n > max;
//  - a successful charge leaves model <= max at every level whose usage was not already past max
//    (only forced charges take usage past max).
// At the end of a sequence, after stock().drain_all(&root), every counter equals the model, and
// after uncharging everything every counter is 0.
//
// Reclaim and OOM are hooks that free nothing, so the outcome of each charge depends only on the
// counters and the stock. The same sequences run in a child process with MEMCG_NO_RSEQ=1.

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"
#include "memcg/base/internal/cpu.hpp"
#include "memcg/percpu/stat_registry.hpp"
#include "memcg/percpu/internal/stock.hpp"
#include "no_rseq_rerun.hpp"

namespace memcg {
namespace {

constexpr uint64_t kUnit = 4096;
constexpr int64_t kUnlimitedUnits = INT64_MAX;
constexpr int kOpsPerSeed = 4000;
constexpr int kPinEvery = 150;  // operations between two moves to another CPU
constexpr int kMaxDynamic = 4;  // dynamic leaves online at once

struct Config {
  const char* name;
  int nr_shards;  // 0: one per CPU
  int64_t batch;
};

// One group as the model sees it.
struct ModelGroup {
  GroupRef ref;
  int parent;    // index into the model, -1 for the top group (whose parent is the root)
  int64_t max;   // units
  int64_t real;  // charged to this group itself and not yet uncharged
  int64_t hier;  // real of this group and of every descendant, dying ones included
  bool online;
  bool dynamic;   // created during the run; may be removed
  bool released;  // removed and its last model reference dropped: no longer checked
};

class ModelRun {
 public:
  ModelRun(const Config& cfg, uint64_t seed) : ctl_(options(cfg)), rng_(seed), seed_(seed) {
    ctl_.set_reclaim_hook([](Group&, int64_t) { return int64_t{0}; });
    ctl_.set_oom_hook([](Group&, int64_t) { return false; });
    add_static("t", -1, 700);
    add_static("t/a", 0, 380);
    add_static("t/b", 0, 300);
    add_static("t/a/x", 1, 200);
    add_static("t/a/y", 1, 150);
    add_static("t/b/z", 2, kUnlimitedUnits);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &saved_) == 0) {
      set = saved_;
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) cpus_.push_back(c);
    }
  }
  ~ModelRun() { pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_); }

  Controller& ctl() { return ctl_; }

  // Runs `ops` random operations; stops at the first violated property.
  void random_ops(int ops) {
    for (op_ = 0; op_ < ops && ok_; ++op_) {
      if (op_ % kPinEvery == 0 && cpus_.size() > 1) pin(cpus_[pick(cpus_.size())]);
      const int r = static_cast<int>(pick(100));
      if (r < 50) {
        charge_one();
      } else if (r < 85) {
        uncharge_one();
      } else if (r < 89) {
        create_one();
      } else if (r < 92) {
        remove_one();
      } else if (r < 95) {
        release_one();
      } else if (r < 98) {
        drain_one();
      } else {
        ctl_.stock().drain_cpu_local();
      }
      check_counters();
    }
  }

  // Drains every stock: each counter must then equal the model. Then uncharges everything
  // (through the stock, so the drain has work again) and checks that every counter is 0.
  void finish() {
    if (!ok_) return;
    ctl_.stock().drain_all(&ctl_.root());
    for (size_t i = 0; i < g_.size(); ++i) {
      if (g_[i].released) continue;
      EXPECT_EQ(ctl_.stock().stocked(g_[i].ref.get()), 0) << where(i);
      EXPECT_EQ(g_[i].ref->memory().usage(), g_[i].hier) << where(i);
    }
    EXPECT_EQ(ctl_.root().memory().usage(), total_real());
    // Per-kind statistics: every charge here is kDefaultKind, so after a fold the hierarchical
    // total of the top group is its real usage in bytes.
    ctl_.flush_stats();
    EXPECT_EQ(g_[0].ref->stat(kDefaultKind), g_[0].hier * static_cast<int64_t>(kUnit));

    for (size_t i = 0; i < g_.size(); ++i) {
      if (g_[i].real > 0) do_uncharge(i, g_[i].real, /*direct=*/false);
    }
    check_counters();
    ctl_.stock().drain_all(&ctl_.root());
    for (size_t i = 0; i < g_.size(); ++i) {
      if (!g_[i].released) {
        EXPECT_EQ(g_[i].ref->memory().usage(), 0) << where(i);
      }
    }
    EXPECT_EQ(ctl_.root().memory().usage(), 0);
    ctl_.flush_stats();
    EXPECT_EQ(g_[0].ref->stat(kDefaultKind), 0);
  }

  int charges() const { return charges_; }
  int failures() const { return failures_; }
  int forced() const { return forced_; }

 private:
  static Options options(const Config& cfg) {
    Options o;
    o.nr_shards = cfg.nr_shards;
    o.batch = cfg.batch;
    return o;
  }

  uint64_t pick(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }

  // Mostly small charges (the stock's domain), some up to a batch, some above it.
  int64_t pick_size() {
    const int r = static_cast<int>(pick(100));
    if (r < 60) return 1 + static_cast<int64_t>(pick(8));
    if (r < 85) return 9 + static_cast<int64_t>(pick(56));
    return 65 + static_cast<int64_t>(pick(136));
  }

  uint32_t pick_flags() {
    const int r = static_cast<int>(pick(100));
    if (r < 55) return kMayBlock;
    if (r < 80) return 0;
    if (r < 92) return kNoFail;
    return kMayBlock | kNoFail;
  }

  void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }

  void add_static(const char* path, int parent, int64_t max) {
    GroupRef ref;
    ASSERT_EQ(ctl_.create(path, &ref), 0) << path;
    add(std::move(ref), parent, max, false);
  }

  void add(GroupRef ref, int parent, int64_t max, bool dynamic) {
    if (max != kUnlimitedUnits) ref->set_max(static_cast<uint64_t>(max) * kUnit);
    g_.push_back(ModelGroup{std::move(ref), parent, max, 0, 0, true, dynamic, false});
  }

  std::vector<int> path_of(size_t i) const {
    std::vector<int> path;
    for (int j = static_cast<int>(i); j >= 0; j = g_[static_cast<size_t>(j)].parent)
      path.push_back(j);
    return path;
  }

  void add_real(size_t i, int64_t n) {
    g_[i].real += n;
    for (int j : path_of(i)) g_[static_cast<size_t>(j)].hier += n;
  }

  int64_t total_real() const { return g_[0].hier; }

  std::string where(size_t i) const {
    std::ostringstream os;
    os << "seed " << seed_ << " op " << op_ << " group " << g_[i].ref->path();
    return os.str();
  }

  void charge_one() {
    std::vector<size_t> online;
    for (size_t i = 0; i < g_.size(); ++i)
      if (g_[i].online) online.push_back(i);
    const size_t i = online[pick(online.size())];
    const int64_t n = pick_size();
    const uint32_t flags = pick_flags();
    const std::vector<int> path = path_of(i);

    struct Level {
      int64_t model, usage, max;
    };
    std::vector<Level> before;
    bool fits_model = true, fits_counters = true;
    for (int j : path) {
      const ModelGroup& m = g_[static_cast<size_t>(j)];
      const Level l{m.hier, m.ref->memory().usage(), m.max};
      fits_model &= l.model + n <= l.max;
      fits_counters &= l.usage + n <= l.max;
      before.push_back(l);
    }

    const ChargeStatus st = try_charge(*g_[i].ref, n, flags);
    ++charges_;
    if (charged(st)) add_real(i, n);
    failures_ += st == ChargeStatus::kNoMem;
    forced_ += st == ChargeStatus::kForced;

    std::ostringstream ctx;
    ctx << where(i) << " n " << n << " flags " << flags << " status " << static_cast<int>(st)
        << " levels (model/usage/max):";
    for (size_t k = 0; k < path.size(); ++k)
      ctx << " " << g_[static_cast<size_t>(path[k])].ref->name() << "=" << before[k].model << "/"
          << before[k].usage << "/" << before[k].max;
    const std::string c = ctx.str();

    if (fits_counters) expect(st == ChargeStatus::kOk, "room in the counters, not kOk", c);
    if ((flags & kMayBlock) && fits_model)
      expect(st == ChargeStatus::kOk, "false failure: the model had room at every level", c);
    if (!(flags & kMayBlock) && st != ChargeStatus::kOk)
      expect(!fits_counters, "failed or forced without a full level", c);
    if (st == ChargeStatus::kForced) expect(flags & kNoFail, "forced without kNoFail", c);
    if (st == ChargeStatus::kOk) {
      for (size_t k = 0; k < path.size(); ++k) {
        const ModelGroup& m = g_[static_cast<size_t>(path[k])];
        expect(m.hier <= m.max || before[k].usage > before[k].max, "kOk took the model past max",
               c);
      }
    }
  }

  void do_uncharge(size_t i, int64_t n, bool direct) {
    if (direct) {
      uncharge_direct(*g_[i].ref, n);
    } else {
      uncharge(*g_[i].ref, n);
    }
    add_real(i, -n);
  }

  void uncharge_one() {
    std::vector<size_t> holders;
    for (size_t i = 0; i < g_.size(); ++i)
      if (g_[i].real > 0) holders.push_back(i);
    if (holders.empty()) return;
    const size_t i = holders[pick(holders.size())];
    do_uncharge(i, std::min(g_[i].real, pick_size()), pick(4) == 0);
  }

  void create_one() {
    int dynamic_online = 0;
    for (const ModelGroup& m : g_) dynamic_online += m.dynamic && m.online;
    if (dynamic_online >= kMaxDynamic) return;
    const int parent = 1 + static_cast<int>(pick(2));  // under t/a or t/b
    GroupRef ref;
    const std::string name = "d" + std::to_string(next_dynamic_++);
    ASSERT_EQ(ctl_.create(*g_[static_cast<size_t>(parent)].ref, name, &ref), 0);
    const int64_t max = pick(3) == 0 ? kUnlimitedUnits : 40 + static_cast<int64_t>(pick(120));
    add(std::move(ref), parent, max, true);
  }

  void remove_one() {
    std::vector<size_t> cands;
    for (size_t i = 0; i < g_.size(); ++i)
      if (g_[i].dynamic && g_[i].online) cands.push_back(i);
    if (cands.empty()) return;
    const size_t i = cands[pick(cands.size())];
    ASSERT_EQ(ctl_.remove(*g_[i].ref), 0);
    g_[i].online = false;
    // Removal drains the group's slots; its charges stay counted (and may be uncharged later).
    EXPECT_EQ(ctl_.stock().stocked(g_[i].ref.get()), 0) << where(i);
  }

  // Drops the model's reference to a dying group that holds nothing, so that it is freed.
  void release_one() {
    for (ModelGroup& m : g_) {
      if (!m.online && !m.released && m.real == 0 && ctl_.stock().stocked(m.ref.get()) == 0) {
        m.ref.reset();
        m.released = true;
        return;
      }
    }
  }

  void drain_one() {
    const uint64_t k = pick(g_.size() + 1);
    if (k == g_.size()) {
      ctl_.stock().drain_all(&ctl_.root());
      return;
    }
    ModelGroup& target = g_[k];
    if (target.released) return;
    ctl_.stock().drain_all(target.ref.get());
    for (size_t i = 0; i < g_.size(); ++i) {
      if (!g_[i].released && g_[i].ref->is_descendant_of(*target.ref)) {
        EXPECT_EQ(g_[i].ref->memory().usage(), g_[i].hier) << where(i) << " after drain_all";
      }
    }
  }

  // usage - model == units stocked for the subtree <= slack bound, for every tracked group.
  void check_counters() {
    const Stock& stock = ctl_.stock();
    std::vector<int64_t> subtree(g_.size(), 0);
    int64_t total = 0;
    for (size_t i = 0; i < g_.size(); ++i) {
      if (g_[i].released) continue;
      const int64_t s = stock.stocked(g_[i].ref.get());
      expect(s >= 0 && s <= int64_t{stock.nr_shards()} * stock.batch(),
             "a group holds more than a batch per shard", where(i));
      total += s;
      for (int j : path_of(i)) subtree[static_cast<size_t>(j)] += s;
    }
    expect(total <= stock.slack_bound(), "stock holds more than slack_bound()", where(0));
    for (size_t i = 0; i < g_.size(); ++i) {
      if (g_[i].released) continue;
      const int64_t diff = g_[i].ref->memory().usage() - g_[i].hier;
      if (diff != subtree[i] || diff > stock.slack_bound()) {
        std::ostringstream os;
        os << where(i) << ": usage - model = " << diff << ", stocked in subtree " << subtree[i]
           << ", bound " << stock.slack_bound();
        expect(false, "usage differs from the model by other than the stocked units", os.str());
      }
    }
    expect(ctl_.root().memory().usage() == total_real() + total, "root usage is not real + stocked",
           where(0));
  }

  void expect(bool cond, const char* what, const std::string& ctx) {
    if (cond || !ok_) return;
    ok_ = false;  // one report per run: later checks would only repeat it
    ADD_FAILURE() << what << "\n  " << ctx;
  }

  Controller ctl_;
  std::mt19937_64 rng_;
  const uint64_t seed_;
  std::vector<ModelGroup> g_;
  std::vector<int> cpus_;
  cpu_set_t saved_;
  int op_ = 0;
  int next_dynamic_ = 0;
  int charges_ = 0, failures_ = 0, forced_ = 0;
  bool ok_ = true;
};

class ChargeModel : public ::testing::TestWithParam<Config> {};

INSTANTIATE_TEST_SUITE_P(Stock, ChargeModel,
                         ::testing::Values(Config{"PerCpu", 0, 64}, Config{"OneShard", 1, 64},
                                           Config{"SmallBatch", 0, 16}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_P(ChargeModel, RandomSequencesMatchTheModel) {
  int charges = 0, failures = 0, forced = 0;
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    ModelRun run(GetParam(), seed);
    if (testing::rseq_disabled_by_env()) {
      EXPECT_FALSE(run.ctl().stock().uses_rseq());
    }
    run.random_ops(kOpsPerSeed);
    run.finish();
    charges += run.charges();
    failures += run.failures();
    forced += run.forced();
    if (HasFailure()) break;
  }
  // The limits are meant to be reached: a run where nothing fails checks little of the ladder.
  EXPECT_GT(failures, charges / 50) << "charges " << charges;
  EXPECT_GT(forced, 0);
  RecordProperty("charges", charges);
  RecordProperty("failures", failures);
}

// The smallest sequence the model found: the charge first fails at the leaf because of the leaf's
// own stock, the drain fixes that, and the exact retry then fails one level up because of a
// sibling's stock. The room is real at every level (a: 82 of 140 charged), so the ladder must
// drain again for the higher level instead of calling it full.
TEST(ChargeLadder, DrainsAgainWhenAHigherLevelFails) {
  Options o;
  o.nr_shards = 1;  // every CPU on the same shard: the sequence does not depend on migration
  Controller ctl(o);
  int ooms = 0;
  ctl.set_reclaim_hook([](Group&, int64_t) { return int64_t{0}; });
  ctl.set_oom_hook([&](Group&, int64_t) { return ++ooms, false; });
  GroupRef a, x, y;
  ASSERT_EQ(ctl.create("a", &a), 0);
  ASSERT_EQ(ctl.create("a/x", &x), 0);
  ASSERT_EQ(ctl.create("a/y", &y), 0);
  a->set_max(140 * kUnit);
  y->set_max(140 * kUnit);
  ASSERT_EQ(try_charge(*x, 1), ChargeStatus::kOk);  // x: 1 real + 63 stocked
  ASSERT_EQ(try_charge(*y, 1), ChargeStatus::kOk);  // y: 1 real + 63 stocked
  ASSERT_EQ(a->memory().usage(), 128);
  // 80 > batch: charged exactly. y: 64 + 80 > 140 fails; drain y; then a: 65 + 80 > 140 fails
  // because of x's 63 stocked units.
  EXPECT_EQ(try_charge(*y, 80), ChargeStatus::kOk);
  EXPECT_EQ(ooms, 0);
  EXPECT_EQ(ctl.stock().stocked(x.get()), 0);
  ctl.stock().drain_all(&ctl.root());
  EXPECT_EQ(a->memory().usage(), 82);
}

// The same sequences with the stock on its try-lock path (MEMCG_NO_RSEQ=1), in a child process.
TEST(ChargeModelNoRseq, RandomSequencesMatchTheModel) {
  if (testing::rseq_disabled_by_env()) GTEST_SKIP() << "already without rseq";
  EXPECT_EQ(testing::rerun_without_rseq("Stock/ChargeModel.*"), 0);
}

}  // namespace
}  // namespace memcg
