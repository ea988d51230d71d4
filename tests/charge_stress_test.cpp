// Concurrency stress of the charge path and its per-CPU stock: no false failure.
//
// Four threads on whatever CPUs the process may use, each moving to another CPU every few
// hundred operations (pthread_setaffinity_np), so that units of one group sit in the stocks of
// several CPUs at once:
//  - two owner threads; owner k alone charges the subtree t/o<k> = {o<k>, o<k>/x, o<k>/y}, with
//    tight limits on o<k> and o<k>/x. Since nobody else charges there, the owner knows the real
//    usage of every level of its subtree at every instant (per-group atomics), and so can tell
//    whether a failed kMayBlock charge was genuinely impossible: some limited level L with
//    real(L) + n > max(L). A failure without such a level is a false failure (units hidden in a
//    stock that the ladder did not give back).
//  - two noise threads that charge and uncharge more unlimited sibling groups than a shard has
//    slots (so slots are evicted all the time, the owners' included), drain subtrees and the
//    whole tree, and create, charge and remove short-lived groups (dying groups in the stock).
//    The owners also charge a noise group now and then, evicting their own slots.
// At the end every thread has uncharged what it charged; after stock().drain_all(&root) every
// usage is 0.
//
// Bounded by a deadline and an iteration cap per thread; no timed assertion. Runs with the
// default stock, with a single shared shard (try-lock path, contended), and in a child process
// with MEMCG_NO_RSEQ=1 (try-lock path, one shard per CPU).

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"
#include "memcg/percpu/internal/stock.hpp"
#include "no_rseq_rerun.hpp"

namespace memcg {
namespace {

constexpr uint64_t kUnit = 4096;
constexpr int kOwners = 2;
constexpr int kNoiseThreads = 2;
constexpr int kNoiseGroups = 10;  // more than Stock::kSlots: a CPU's slots are evicted in turn
constexpr int kIterCap = 300000;  // per thread
constexpr auto kDuration = std::chrono::milliseconds(700);
// Owner subtree: o (limited), o/x (limited), o/y (unlimited). Limits small against the slack.
constexpr int64_t kOwnerMax = 160;
constexpr int64_t kOwnerXMax = 100;

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

struct Owner {
  GroupRef o, x, y;
  // Units the owner thread charged to each group and did not uncharge yet. Written by the owner
  // only, after a successful charge and before an uncharge: never above the real charge.
  std::array<std::atomic<int64_t>, 3> real{};
  std::atomic<int64_t> genuine_failures{0};
  std::atomic<int64_t> false_failures{0};
};

struct Shared {
  explicit Shared(Options opt) : ctl(opt) {
    ctl.set_reclaim_hook([](Group&, int64_t) { return int64_t{0}; });
    ctl.set_oom_hook([](Group&, int64_t) { return false; });
    EXPECT_EQ(ctl.create("t", &top), 0);
    for (int k = 0; k < kOwners; ++k) {
      const std::string p = "t/o" + std::to_string(k);
      EXPECT_EQ(ctl.create(p, &owners[k].o), 0);
      EXPECT_EQ(ctl.create(p + "/x", &owners[k].x), 0);
      EXPECT_EQ(ctl.create(p + "/y", &owners[k].y), 0);
      owners[k].o->set_max(kOwnerMax * kUnit);
      owners[k].x->set_max(kOwnerXMax * kUnit);
    }
    for (int i = 0; i < kNoiseGroups; ++i)
      EXPECT_EQ(ctl.create("t/n" + std::to_string(i), &noise[i]), 0);
    cpus = allowed_cpus();
    deadline = std::chrono::steady_clock::now() + kDuration;
  }

  bool go_on(int iter) const {
    return iter < kIterCap && ((iter & 255) != 0 || std::chrono::steady_clock::now() < deadline);
  }

  void report(const std::string& s) {
    std::lock_guard lock(mu);
    if (first_false_failure.empty()) first_false_failure = s;
  }

  Controller ctl;
  GroupRef top;
  std::array<Owner, kOwners> owners;
  std::array<GroupRef, kNoiseGroups> noise;
  std::vector<int> cpus;
  std::chrono::steady_clock::time_point deadline;
  std::mutex mu;
  std::string first_false_failure;
  std::atomic<int> next_temp{0};
};

int64_t pick_size(std::mt19937_64& rng) {
  const uint64_t r = rng() % 100;
  if (r < 70) return 1 + static_cast<int64_t>(rng() % 8);
  if (r < 90) return 9 + static_cast<int64_t>(rng() % 56);
  return 65 + static_cast<int64_t>(rng() % 56);
}

void maybe_migrate(Shared& s, std::mt19937_64& rng, int iter, int& next_move) {
  if (iter < next_move || s.cpus.size() < 2) return;
  pin(s.cpus[rng() % s.cpus.size()]);
  next_move = iter + 200 + static_cast<int>(rng() % 200);
}

void owner_thread(Shared& s, int k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Owner& ow = s.owners[k];
  Group* groups[3] = {ow.o.get(), ow.x.get(), ow.y.get()};
  Group& noise = *s.noise[static_cast<size_t>(k)];
  int64_t noise_held = 0;
  int next_move = 0;
  for (int iter = 0; s.go_on(iter); ++iter) {
    maybe_migrate(s, rng, iter, next_move);
    const uint64_t r = rng() % 100;
    if (r < 5) {
      // A charge elsewhere on this CPU: installs a slot that may evict one of ours.
      const int64_t n = 1 + static_cast<int64_t>(rng() % 8);
      if (charged(try_charge(noise, n))) noise_held += n;
      continue;
    }
    if (r < 8 && noise_held > 0) {
      uncharge(noise, noise_held);
      noise_held = 0;
      continue;
    }
    const int g = static_cast<int>(rng() % 3);
    if (r < 60) {
      const int64_t n = pick_size(rng);
      const uint32_t flags = rng() % 10 == 0 ? 0u : uint32_t{kMayBlock};
      const ChargeStatus st = try_charge(*groups[g], n, flags);
      if (charged(st)) {
        ow.real[g].fetch_add(n, std::memory_order_relaxed);
        continue;
      }
      if (!(flags & kMayBlock)) continue;  // may fail on units stocked elsewhere
      // Nobody else charges this subtree: these are its real usages during the whole call.
      const int64_t rx = ow.real[1].load(std::memory_order_relaxed);
      const int64_t ry = ow.real[2].load(std::memory_order_relaxed);
      const int64_t ro = ow.real[0].load(std::memory_order_relaxed) + rx + ry;
      const bool genuine = ro + n > kOwnerMax || (g == 1 && rx + n > kOwnerXMax);
      if (genuine) {
        ow.genuine_failures.fetch_add(1, std::memory_order_relaxed);
      } else {
        ow.false_failures.fetch_add(1, std::memory_order_relaxed);
        std::ostringstream os;
        os << "owner " << k << " group " << groups[g]->path() << " n " << n << " real o/x/y " << ro
           << "/" << rx << "/" << ry << " usage o/x " << ow.o->memory().usage() << "/"
           << ow.x->memory().usage();
        s.report(os.str());
      }
    } else {
      const int64_t held = ow.real[g].load(std::memory_order_relaxed);
      if (held == 0) continue;
      const int64_t n = std::min(held, pick_size(rng));
      ow.real[g].fetch_sub(n, std::memory_order_relaxed);
      if (rng() % 5 == 0) {
        uncharge_direct(*groups[g], n);
      } else {
        uncharge(*groups[g], n);
      }
    }
  }
  for (int g = 0; g < 3; ++g) {
    const int64_t held = ow.real[g].exchange(0, std::memory_order_relaxed);
    if (held > 0) uncharge(*groups[g], held);
  }
  if (noise_held > 0) uncharge(noise, noise_held);
}

void noise_thread(Shared& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::array<int64_t, kNoiseGroups> held{};
  int next_move = 0;
  for (int iter = 0; s.go_on(iter); ++iter) {
    maybe_migrate(s, rng, iter, next_move);
    const uint64_t r = rng() % 1000;
    if (r < 4) {
      s.ctl.stock().drain_all(&s.ctl.root());
    } else if (r < 12) {
      // Drain one owner's subtree or one noise group, as a failing charge elsewhere would.
      const uint64_t k = rng() % (kOwners + kNoiseGroups);
      s.ctl.stock().drain_all(k < kOwners ? s.owners[k].o.get() : s.noise[k - kOwners].get());
    } else if (r < 14) {
      // A short-lived group: charged, partly uncharged into the stock, removed (which drains
      // it), then uncharged into the stock again while dying; the slot keeps it alive after our
      // reference goes.
      GroupRef tmp;
      const std::string name = "tmp" + std::to_string(s.next_temp.fetch_add(1));
      if (s.ctl.create(*s.top, name, &tmp) == 0) {
        if (charged(try_charge(*tmp, 5))) {
          uncharge(*tmp, 3);
          EXPECT_EQ(s.ctl.remove(*tmp), 0);
          uncharge(*tmp, 2);
        }
      }
    } else {
      const size_t i = rng() % kNoiseGroups;
      if (r < 550) {
        const int64_t n = pick_size(rng);
        if (charged(try_charge(*s.noise[i], n))) held[i] += n;
      } else if (held[i] > 0) {
        const int64_t n = std::min(held[i], pick_size(rng));
        uncharge(*s.noise[i], n);
        held[i] -= n;
      }
    }
  }
  for (size_t i = 0; i < kNoiseGroups; ++i)
    if (held[i] > 0) uncharge(*s.noise[i], held[i]);
}

void run_stress(const Options& opt) {
  Shared s(opt);
  if (testing::rseq_disabled_by_env()) {
    EXPECT_FALSE(s.ctl.stock().uses_rseq());
  }
  std::vector<std::thread> threads;
  for (int k = 0; k < kOwners; ++k)
    threads.emplace_back(owner_thread, std::ref(s), k, 1000 + static_cast<uint64_t>(k));
  for (int k = 0; k < kNoiseThreads; ++k)
    threads.emplace_back(noise_thread, std::ref(s), 2000 + static_cast<uint64_t>(k));
  for (std::thread& t : threads) t.join();

  int64_t genuine = 0;
  for (Owner& ow : s.owners) {
    EXPECT_EQ(ow.false_failures.load(), 0);
    genuine += ow.genuine_failures.load();
  }
  EXPECT_EQ(s.first_false_failure, "") << "first false failure";
  // The limits were reached: the ladder ran to its end many times.
  EXPECT_GT(genuine, 0);

  s.ctl.stock().drain_all(&s.ctl.root());
  for (Owner& ow : s.owners) {
    for (Group* g : {ow.o.get(), ow.x.get(), ow.y.get()}) {
      EXPECT_EQ(g->memory().usage(), 0) << g->path();
      EXPECT_EQ(s.ctl.stock().stocked(g), 0) << g->path();
    }
  }
  for (GroupRef& g : s.noise) EXPECT_EQ(g->memory().usage(), 0) << g->path();
  EXPECT_EQ(s.top->memory().usage(), 0);
  EXPECT_EQ(s.ctl.root().memory().usage(), 0);
  ::testing::Test::RecordProperty("genuine_failures", static_cast<int>(genuine));
}

TEST(ChargeStress, NoFalseFailureWhileMigrating) {
  run_stress(Options{});
}

// One shard for every CPU: the try-lock path, with the shard contended by all threads.
TEST(ChargeStress, NoFalseFailureOneSharedShard) {
  Options o;
  o.nr_shards = 1;
  run_stress(o);
}

// The default configuration with the stock on its try-lock path (MEMCG_NO_RSEQ=1).
TEST(ChargeStressNoRseq, NoFalseFailureWhileMigrating) {
  if (testing::rseq_disabled_by_env()) GTEST_SKIP() << "already without rseq";
  EXPECT_EQ(testing::rerun_without_rseq("ChargeStress.NoFalseFailureWhileMigrating"), 0);
}

}  // namespace
}  // namespace memcg
