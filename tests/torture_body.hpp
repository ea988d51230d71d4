// The randomized torture test, shared by torture_test.cpp (plain build, every preset) and
// hook_torture_test.cpp (the global operator-new hook linked, default preset only).
//
// Through the public API only, for a bounded time: charger threads charge and uncharge every way
// the library offers (units, bytes, ChargeHandle, object charges, pmr resources, STL allocators,
// members), attach and move between groups, run OOM-killable queries on worker threads and
// register caches and misbehaving reclaimers; meanwhile other threads create and remove groups,
// write every knob (invalid values included, which must be refused), read every file and the
// Prometheus exposition, and register and destroy event, vmpressure and PSI listeners (also from
// inside their callbacks) and run memory.reclaim. At the end everything is dropped but the
// listeners, the stocks are drained, every counter and byte statistic must read exactly 0, and
// once every group is removed none may stay dying while its listeners are still open: each was
// told of the removal.
//
// Environment (all optional):
//   MEMCG_TORTURE_SECONDS  run time of the random phase (default 5; 3 under sanitizers)
//   MEMCG_TORTURE_SEED     seed of every thread's generator (default fixed: runs are repeatable
//                          up to thread interleaving); printed at start and on failure
//   MEMCG_TORTURE_THREADS  charger threads (default 3)
//   MEMCG_TORTURE_GRACE    seconds past the run time after which the watchdog declares a hang
//                          and aborts (default 60)
//   MEMCG_TORTURE_SKIP     comma-separated features to leave out, for exploring one failure at a
//                          time: lie, bigreport, throw, block, callback, unregister, killthrow,
//                          killdestroy, killjoin, query, huge, badkind, members, lru, evil,
//                          attach, listeners, knobs, tree, reads, reclaimfile, hookalloc,
//                          hookcalls
#pragma once

#include "torture_charger.hpp"
#include "torture_listeners.hpp"
#include "torture_state.hpp"

namespace memcg::torture {

// ---- group creation and removal ----------------------------------------------------------------

inline void tree_mutator(Shared& sh) {
  std::mt19937_64 rng(sh.cfg.seed * 1000003 + 1);
  const int me = sh.progress.slot("tree");
  auto& op = sh.progress.op[me];
  Controller& ctl = sh.ctl;
  while (sh.running()) {
    std::unique_ptr<ScopedAttach> attach;
    if (sh.cfg.hook && sh.cfg.on("hookcalls") && chance(rng, 50))
      if (GroupRef a = sh.lookup(rng)) attach = std::make_unique<ScopedAttach>(*a);
    try {
      const char* path = kPaths[rng() % kPaths.size()];
      if (!sh.cfg.on("tree")) {
        op = "create";
        (void)ctl.create(path);
      } else if (chance(rng, 55)) {
        op = "create";
        GroupRef g;
        const int rc = ctl.create(path, &g);
        if (rc != 0 && rc != EEXIST && rc != ENOENT) sh.fail(__LINE__, "create(%s): rc=%d", path, rc);
        if (rc == 0) {
          sh.creates.fetch_add(1, std::memory_order_relaxed);
          g->set_oom_group(chance(rng, 30));
        }
      } else if (chance(rng, 70)) {
        op = "remove(path)";
        const int rc = ctl.remove(path);
        if (rc != 0 && rc != EBUSY && rc != ENOENT) sh.fail(__LINE__, "remove(%s): rc=%d", path, rc);
        if (rc == 0) sh.removes.fetch_add(1, std::memory_order_relaxed);
      } else if (GroupRef g = ctl.lookup(path)) {
        op = "remove(group)";
        const int rc = ctl.remove(*g);
        if (rc != 0 && rc != EBUSY && rc != ENOENT) sh.fail(__LINE__, "remove(%s): rc=%d", path, rc);
        if (rc == 0) sh.removes.fetch_add(1, std::memory_order_relaxed);
      } else {
        op = "invalid paths";
        for (const char* bad : {"", "/", "t0//a", "../x", "bad name", "t0/./a", "t0/a b"})
          if (ctl.create(bad) == 0) sh.fail(__LINE__, "create(\"%s\") accepted", bad);
        if (const int rc = ctl.remove(ctl.root()); rc != EINVAL)
          sh.fail(__LINE__, "remove(root): rc=%d", rc);
        if (const int rc = ctl.remove("/"); rc != EINVAL) sh.fail(__LINE__, "remove(\"/\"): rc=%d", rc);
      }
    } catch (const std::bad_alloc&) {
      sh.fail(__LINE__, "%s threw std::bad_alloc on an attached thread", op.load());
    }
    attach.reset();
    std::this_thread::sleep_for(std::chrono::microseconds(pick(rng, 20, 400)));
  }
  op = "done";
}

// ---- knobs --------------------------------------------------------------------------------------

inline void knob_writer(Shared& sh) {
  std::mt19937_64 rng(sh.cfg.seed * 1000003 + 2);
  const int me = sh.progress.slot("knobs");
  auto& op = sh.progress.op[me];
  // Mostly generous, sometimes tight: tight limits make reclaim and OOM run, generous ones let
  // the chargers (throttled above memory.high for up to 2 s a charge) make progress.
  static constexpr const char* kValid[] = {"0",   "max", "128K", "512K",    "1M",       "4M",
                                           "max", "max", "64M",  "0x4000000", "67108864", "32M"};
  static constexpr const char* kInvalid[] = {"-1", "abc", "1Q",  "",    "  ", "max1", "1.5M",
                                             "1M 2M", "+5", "1KB", "MAX", "K",   "0x", "08"};
  static constexpr const char* kKnobs[] = {"memory.min", "memory.low", "memory.high",
                                           "memory.max"};
  while (sh.running()) {
    GroupRef g = chance(rng, 5) ? GroupRef(&sh.ctl.root()) : sh.lookup(rng);
    if (!g || !sh.cfg.on("knobs")) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      continue;
    }
    const bool nonblocking = chance(rng, 40);
    sh.knob_writes.fetch_add(1, std::memory_order_relaxed);
    switch (rng() % 10) {
      case 0:
      case 1: {
        op = "write_file knob";
        const char* knob = kKnobs[rng() % 4];
        const int rc = write_file(*g, knob, kValid[rng() % std::size(kValid)], nonblocking);
        EXPECT_TRUE(rc == (g->is_root() ? ENOENT : 0) || file_gone(rc, *g)) << knob << " " << rc;
        break;
      }
      case 2: {
        op = "write_file invalid";
        if (g->is_root()) break;
        const char* knob = kKnobs[2 + rng() % 2];  // high/max: only this thread changes them
        const char* text = kInvalid[rng() % std::size(kInvalid)];
        std::string before, after;
        if (const int rc = read_file(*g, knob, &before); rc != 0) {
          EXPECT_TRUE(file_gone(rc, *g)) << knob << " " << rc;
          break;
        }
        EXPECT_NE(write_file(*g, knob, text, nonblocking), 0)
            << knob << " accepted \"" << text << "\"; seed=" << sh.cfg.seed;
        if (const int rc = read_file(*g, knob, &after); rc != 0) {
          EXPECT_TRUE(file_gone(rc, *g)) << knob << " " << rc;
          break;
        }
        EXPECT_EQ(before, after) << "a refused write to " << knob << " changed it";
        EXPECT_NE(write_file(*g, "memory.oom.group", text), 0);
        EXPECT_NE(write_file(*g, "memory.min", text), 0);
        EXPECT_NE(write_file(*g, "memory.oom.group", "2"), 0);
        for (const char* ro : {"memory.current", "memory.stat"}) {
          const int rc = write_file(*g, ro, "0");
          EXPECT_TRUE(rc == EACCES || file_gone(rc, *g)) << ro << " " << rc;
        }
        EXPECT_EQ(write_file(*g, "memory.nonexistent", "0"), ENOENT);
        sh.refused_writes.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      case 3:
        op = "setters";
        if (g->is_root()) break;
        g->set_min(static_cast<uint64_t>(pick(rng, 0, 4 << 20)));
        g->set_low(static_cast<uint64_t>(pick(rng, 0, 8 << 20)));
        if (chance(rng, 50))
          g->set_high(chance(rng, 50) ? kUnlimited : static_cast<uint64_t>(pick(rng, 0, 64 << 20)));
        if (chance(rng, 50))
          g->set_max(chance(rng, 50) ? kUnlimited : static_cast<uint64_t>(pick(rng, 64 << 10, 64 << 20)));
        else
          (void)g->set_max_checked(static_cast<uint64_t>(pick(rng, 0, 64 << 20)));
        break;
      case 4:
        op = "write_high/write_max";
        if (g->is_root()) break;
        if (chance(rng, 50))
          write_high(*g, chance(rng, 40) ? kUnlimited : static_cast<uint64_t>(pick(rng, 0, 64 << 20)),
                     nonblocking);
        else
          write_max(*g, chance(rng, 40) ? kUnlimited : static_cast<uint64_t>(pick(rng, 0, 64 << 20)),
                    nonblocking);
        break;
      case 5:
        op = "oom.group";
        if (g->is_root()) break;
        {
          const int rc = write_file(*g, "memory.oom.group", chance(rng, 50) ? "1" : "0");
          EXPECT_TRUE(rc == 0 || file_gone(rc, *g)) << "memory.oom.group rc=" << rc;
        }
        break;
      case 6:
        op = "memory.reclaim";
        if (!sh.cfg.on("reclaimfile")) break;
        {
          static constexpr const char* kReclaim[] = {"4K", "64K", "1M", "4M swappiness=60",
                                                     "512K swappiness=max"};
          const int rc = write_file(*g, "memory.reclaim", kReclaim[rng() % std::size(kReclaim)]);
          EXPECT_TRUE(rc == 0 || rc == EAGAIN || file_gone(rc, *g)) << "memory.reclaim rc=" << rc;
          const int bad = write_file(*g, "memory.reclaim", "lots");
          EXPECT_TRUE(bad == EINVAL || file_gone(bad, *g)) << "memory.reclaim lots rc=" << bad;
          EXPECT_NE(write_file(*g, "memory.reclaim", "1M swappiness=201"), 0);
        }
        break;
      default:
        op = "relax limits";
        if (g->is_root()) break;
        // Bias towards limits that let work proceed.
        g->set_high(kUnlimited);
        write_max(*g, kUnlimited, true);
        break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(pick(rng, 50, 1000)));
  }
  // The last limits written stay: lift them, so that the chargers' last operations are not
  // throttled for seconds after the run (the watchdog would take that for a hang).
  op = "lift limits";
  std::vector<GroupRef> all;  // dying groups too: members and handles may still charge them
  sh.ctl.walk(sh.ctl.root(), [&](Group& g) {
    if (GroupRef r = GroupRef::try_acquire(&g); r && !g.is_root()) all.push_back(std::move(r));
  });
  for (GroupRef& g : all) {
    g->set_high(kUnlimited);
    g->set_max(kUnlimited);
  }
  op = "done";
}

// ---- reads --------------------------------------------------------------------------------------

inline void reader(Shared& sh) {
  std::mt19937_64 rng(sh.cfg.seed * 1000003 + 3);
  const int me = sh.progress.slot("reader");
  auto& op = sh.progress.op[me];
  Controller& ctl = sh.ctl;
  GroupRef kept;  // a reference kept across removals: a dying group's files still read
  while (sh.running()) {
    std::this_thread::sleep_for(std::chrono::microseconds(pick(rng, 10, 200)));
    if (!sh.cfg.on("reads")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    GroupRef g = chance(rng, 15) ? GroupRef(&ctl.root()) : sh.lookup(rng);
    if (chance(rng, 10)) kept = g;
    if (kept && chance(rng, 20)) g = kept;
    if (!g) continue;
    sh.reads.fetch_add(1, std::memory_order_relaxed);
    switch (rng() % 5) {
      case 0:
      case 1:
        op = "read every file";
        for (const std::string& name : file_names(*g)) {
          std::string s;
          const int rc = read_file(*g, name, &s);
          EXPECT_TRUE(rc == 0 || (rc == EACCES && name == "memory.reclaim") || file_gone(rc, *g))
              << name << " " << rc;
        }
        {
          std::unique_ptr<File> peak;
          if (!g->is_root() && open_file(*g, "memory.peak", &peak) == 0) {
            std::string s;
            for (const int rc : {peak->read(&s), peak->write("reset"), peak->read(&s)})
              EXPECT_TRUE(rc == 0 || file_gone(rc, *g)) << "memory.peak " << rc;
          }
        }
        break;
      case 2:
        op = "render_prometheus";
        (void)render_prometheus(ctl);
        break;
      case 3:
        op = "psi/walk/stats";
        (void)format_psi(psi_stats(*g));
        (void)under_socket_pressure(*g);
        {
          uint64_t sum = 0;
          ctl.walk(*g, [&](Group& x) { sum += x.current() + static_cast<uint64_t>(x.stat(0)); },
                   chance(rng, 50));
          (void)sum;
        }
        (void)g->children();
        (void)charge_stats(ctl);
        (void)vmpressure_stats();
        (void)ctl.obj_stock().stats();
        (void)ctl.nr_groups();
        (void)ctl.nr_dying();
        break;
      default:
        op = "oom report/tick";
        (void)OomKiller::last_report(ctl).format();
        ctl.tick();
        if (chance(rng, 10)) {
          op = "flush_stats";
          ctl.flush_stats();
        }
        break;
    }
  }
  op = "done";
}

// ---- the run ------------------------------------------------------------------------------------

// Empties both stocks and folds every statistic.
inline void drain(Controller& ctl) {
  ctl.obj_stock().drain_all(nullptr);
  ctl.stock().drain_all(nullptr);
  ctl.flush_stats();
}

// Every counter and byte statistic of `g` is 0 (after drain()).
inline void expect_empty(Controller& ctl, Group& g, const Config& cfg) {
  const StatRegistry& reg = ctl.stats();
  SCOPED_TRACE("group " + g.path() + (g.is_online() ? "" : " (dying)") +
               ", seed=" + std::to_string(cfg.seed));
  EXPECT_EQ(g.current(), 0u);
  EXPECT_EQ(g.memory().usage(), 0);
  for (size_t i = 0; i < reg.size(); ++i)
    if (reg.item(i).kind == StatKind::kState) {
      EXPECT_EQ(g.stat(static_cast<int>(i)), 0) << reg.item(i).name;
      EXPECT_EQ(g.stat_local(static_cast<int>(i)), 0) << reg.item(i).name;
    }
  EXPECT_EQ(ObjStock::pooled(g), 0);
  EXPECT_EQ(ctl.obj_stock().stocked(&g), 0);
  EXPECT_EQ(ctl.stock().stocked(&g), 0);
  if (!g.is_root() && g.is_online()) {  // a removed group's files are gone (files.hpp)
    std::string s;
    ASSERT_EQ(read_file(g, "memory.current", &s), 0);
    EXPECT_EQ(s, "0\n");
  }
}

inline void Shared::print_counts() const {
  const Shared& sh = *this;
  std::printf(
      "torture: charges=%llu refused=%llu kills=%llu reclaimer-calls=%llu lies=%llu throws=%llu "
      "unregisters=%llu creates=%llu removes=%llu knob-writes=%llu refused-writes=%llu "
      "reads=%llu listener-ops=%llu notifications=%llu queries=%llu attach-ops=%llu\n",
      (unsigned long long)sh.charges, (unsigned long long)sh.refused,
      (unsigned long long)sh.kills, (unsigned long long)sh.reclaims, (unsigned long long)sh.lies,
      (unsigned long long)sh.throws, (unsigned long long)sh.unregisters,
      (unsigned long long)sh.creates, (unsigned long long)sh.removes,
      (unsigned long long)sh.knob_writes, (unsigned long long)sh.refused_writes,
      (unsigned long long)sh.reads, (unsigned long long)sh.listeners,
      (unsigned long long)sh.notifications, (unsigned long long)sh.queries,
      (unsigned long long)sh.attaches);
  std::fflush(stdout);
}

// Everything was released: checks that the books balance.
inline void finish_run(const Config& cfg, Controller& ctl) {
  // Everything was released: after a drain every counter and statistic is exactly 0.
  drain(ctl);
  std::vector<GroupRef> all;
  ctl.walk(ctl.root(), [&](Group& g) {
    if (GroupRef r = GroupRef::try_acquire(&g)) all.push_back(std::move(r));
  });
  for (GroupRef& g : all) expect_empty(ctl, *g, cfg);
  std::vector<std::string> paths;
  for (GroupRef& g : all)
    if (!g->is_root() && g->is_online()) paths.push_back(g->path());
  all.clear();

  // Remove every group, children first: nothing may stay dying.
  std::sort(paths.begin(), paths.end(), [](const std::string& a, const std::string& b) {
    return std::count(a.begin(), a.end(), '/') > std::count(b.begin(), b.end(), '/');
  });
  for (const std::string& p : paths) EXPECT_EQ(ctl.remove(p), 0) << p;
  drain(ctl);
  EXPECT_EQ(ctl.nr_groups(), 1u) << "seed=" << cfg.seed;
  EXPECT_EQ(ctl.nr_dying(), 0u) << "groups leaked (still referenced); seed=" << cfg.seed;
  ctl.walk(ctl.root(), [&](Group& g) {
    if (!g.is_online())
      std::printf("torture: dying group %s (id %llu): refs=%lld attached=%d current=%llu\n",
                  g.path().c_str(), static_cast<unsigned long long>(g.id()),
                  static_cast<long long>(g.nr_refs()), g.nr_attached(),
                  static_cast<unsigned long long>(g.current()));
  });
  expect_empty(ctl, ctl.root(), cfg);
  if (::testing::Test::HasFailure())
    std::printf("torture: FAILED with seed=%llu (MEMCG_TORTURE_SEED=%llu)\n",
                static_cast<unsigned long long>(cfg.seed),
                static_cast<unsigned long long>(cfg.seed));
}


inline void run(const Config& cfg) {
  std::printf("torture: seed=%llu seconds=%.1f chargers=%d grace=%.0f hook=%d skip=%s\n",
              static_cast<unsigned long long>(cfg.seed), cfg.seconds, cfg.chargers, cfg.grace,
              cfg.hook ? 1 : 0, cfg.skip.c_str());
  std::fflush(stdout);
  SCOPED_TRACE("rerun with MEMCG_TORTURE_SEED=" + std::to_string(cfg.seed));
  Options options;
  options.stat_kinds = {"torture_kind"};
  Controller ctl(options);
  Shared sh(cfg, ctl);
  sh.app_kind = ctl.stat_index("torture_kind");
  ASSERT_GE(sh.app_kind, 0);
  Watchdog watchdog(cfg, sh.progress, [&sh] { sh.print_counts(); });
  for (const char* p : kPaths) ASSERT_EQ(ctl.create(p), 0) << p;

  {
    std::vector<std::thread> threads;
    for (int i = 0; i < cfg.chargers; ++i) threads.emplace_back(charger, std::ref(sh), i);
    threads.emplace_back(tree_mutator, std::ref(sh));
    threads.emplace_back(knob_writer, std::ref(sh));
    threads.emplace_back(reader, std::ref(sh));
    threads.emplace_back(listener_churn, std::ref(sh));
    for (auto& t : threads) t.join();
  }
  for (size_t i = 0; i < std::min(sh.nr_failures, sh.failures.size()); ++i)
    ADD_FAILURE() << sh.failures[i].data();
  if (sh.nr_failures > sh.failures.size())
    ADD_FAILURE() << "... and " << sh.nr_failures - sh.failures.size() << " more such failures";
  {
    std::lock_guard lock(sh.boxes_mu);
    for (auto& b : sh.boxes) b.reset();
  }
  sh.print_counts();
  finish_run(cfg, ctl);  // under the watchdog too: drains and removals may hang
  // Every group was removed with the listeners of the random phase still open: each was told.
  for (const auto& l : sh.kept_events) EXPECT_TRUE(l->removed() && l->group() == nullptr);
  for (const auto& l : sh.kept_pressure) EXPECT_TRUE(l->removed());
  for (const auto& t : sh.kept_triggers) EXPECT_TRUE(t->removed());
  sh.kept_events.clear();
  sh.kept_pressure.clear();
  sh.kept_triggers.clear();
}

}  // namespace memcg::torture
