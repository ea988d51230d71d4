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
#include "torture_state.hpp"

namespace memcg::torture {

// ---- group creation and removal ----------------------------------------------------------------

// A file operation on a group that the tree mutator removed meanwhile: the open finds no group
// (ENOENT) or the open file was deactivated (ENODEV; files.hpp).
inline bool file_gone(int rc, const Group& g) {
  return (rc == ENOENT || rc == ENODEV) && !g.is_online();
}

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

// ---- listeners ----------------------------------------------------------------------------------

// Listeners that callbacks destroy (memory.events listeners, vmpressure listeners, PSI
// triggers): from inside any listener's callback (their own included, and the final notification
// of a removal), on whatever thread delivers it. A listener is taken out under the lock and
// destroyed after it, so that no destruction waits while holding it.
struct VictimPool {
  std::mutex mu;
  std::vector<std::shared_ptr<void>> v;  // each an EventListener, PressureListener or PsiTrigger
  ~VictimPool() {
    std::vector<std::shared_ptr<void>> out;
    {
      std::lock_guard lock(mu);
      out.swap(v);
    }
    out.clear();  // waits for their calls; a call still running finds the pool empty
  }
  template <typename T>
  void add(std::unique_ptr<T> l) {
    std::shared_ptr<void> owner(std::move(l));
    std::lock_guard lock(mu);
    v.push_back(std::move(owner));
  }
  size_t size() {
    std::lock_guard lock(mu);
    return v.size();
  }
  void destroy_one(uint64_t r) {
    std::shared_ptr<void> victim;
    {
      std::lock_guard lock(mu);
      if (v.empty()) return;
      std::swap(v[r % v.size()], v.back());
      victim = std::move(v.back());
      v.pop_back();
    }
    victim.reset();
  }
};

// A registration whose add returned ENOENT: its group was removed (the check before may have
// seen it online).
inline bool refused_as_removed(int rc, const Group& g) {
  return (rc == ENOENT || rc == ENODEV) && !g.is_online();
}

// A listener of a removed group was told so and let go of it.
inline void check_removed_listener(Shared& sh, const EventListener& l) {
  if (l.removed() && l.group() != nullptr)
    sh.fail(__LINE__, "a listener told of its group's removal still holds the group");
}

inline void listener_churn(Shared& sh) {
  std::mt19937_64 rng(sh.cfg.seed * 1000003 + 4);
  const int me = sh.progress.slot("listeners");
  auto& op = sh.progress.op[me];
  // Shared, and seen by callbacks through a weak pointer: a call of a listener destroyed from
  // inside another callback is not waited for and may outlast this function.
  auto victims = std::make_shared<VictimPool>();
  std::vector<std::unique_ptr<EventListener>> events;
  std::vector<std::unique_ptr<PressureListener>> pressure;
  std::vector<std::unique_ptr<PsiTrigger>> triggers;
  std::vector<std::unique_ptr<File>> pressure_files;
  std::atomic<uint64_t>& notes = sh.notifications;
  const bool hook = sh.cfg.hook;
  while (sh.running()) {
    if (!sh.cfg.on("listeners")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    GroupRef g = sh.lookup(rng);
    if (!g) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      continue;
    }
    sh.listeners.fetch_add(1, std::memory_order_relaxed);
    switch (rng() % 6) {
      case 0: {
        op = "EventListener::open";
        if (events.size() >= 8) {
          op = "~EventListener";
          std::swap(events[rng() % events.size()], events.back());
          events.pop_back();
          break;
        }
        std::unique_ptr<EventListener> l;
        const EventsFile file = chance(rng, 50) ? EventsFile::kEvents : EventsFile::kEventsLocal;
        EventListener::Callback cb;
        // Without the hook, some callbacks destroy a listener of the pool (maybe their own);
        // destroying allocates and frees, which a callback under the hook must not do.
        const bool destroys = !hook && chance(rng, 30);
        const uint64_t pick = rng();
        if (chance(rng, 70))
          cb = [&notes, hook, destroys, pick, pool = std::weak_ptr<VictimPool>(victims)](
                   Group& group, EventsFile f) {
            notes.fetch_add(1, std::memory_order_relaxed);
            // Reads from inside the callback (no charge: only without the hook). The group is
            // valid for the whole call, also when the callback destroyed its own listener.
            if (!hook) {
              std::string s;
              (void)read_file(group, events_file_name(f), &s);
            }
            if (destroys)
              if (auto p = pool.lock()) p->destroy_one(pick);
            if (!hook) (void)group.path();
          };
        const bool online = g->is_online();
        const int rc = EventListener::open(*g, file, std::move(cb), &l);
        // A removed group refuses listeners (ENOENT); a live one accepts them.
        if (rc != 0 && !(rc == ENOENT && !g->is_online()))
          sh.fail(__LINE__, "EventListener::open: rc=%d (online before: %d)", rc, int(online));
        if (rc == ENOENT && online && g->is_online())
          sh.fail(__LINE__, "EventListener::open: ENOENT on an online group");
        if (l) {
          if (!hook && chance(rng, 40) && victims->size() < 8) {
            victims->add(std::move(l));
          } else {
            events.push_back(std::move(l));
          }
        }
        std::unique_ptr<EventListener> on_root;
        EXPECT_EQ(EventListener::open(sh.ctl.root(), file, nullptr, &on_root), ENOENT);
        break;
      }
      case 1:
        op = "EventListener consume";
        for (auto& l : events) {
          (void)(chance(rng, 50) ? l->consume() : l->wait(0));
          check_removed_listener(sh, *l);
        }
        if (!events.empty() && chance(rng, 40)) {
          op = "~EventListener";
          std::swap(events[rng() % events.size()], events.back());
          events.pop_back();
        }
        break;
      case 2: {
        op = "PressureListener";
        if (pressure.size() >= 6) {
          std::swap(pressure[rng() % pressure.size()], pressure.back());
          pressure.pop_back();
          break;
        }
        static constexpr const char* kArgs[] = {"low", "medium", "critical", "low,hierarchy",
                                                "medium,local", "critical,default"};
        auto l = std::make_unique<PressureListener>();
        // Without the hook, some callbacks destroy a listener of the pool (any kind).
        const bool destroys = !hook && chance(rng, 30);
        const uint64_t victim = rng();
        int rc;
        if (chance(rng, 30)) {
          const int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
          ASSERT_GE(efd, 0);
          const std::string line = std::to_string(efd) + " " + std::to_string(efd) + " " +
                                   kArgs[rng() % std::size(kArgs)];
          rc = register_event_control(*g, line, l.get());
          ::close(efd);  // the registration keeps its own duplicate
        } else {
          rc = l->listen(*g, kArgs[rng() % std::size(kArgs)],
                         [&notes, destroys, victim,
                          pool = std::weak_ptr<VictimPool>(victims)](PressureLevel) {
                           notes.fetch_add(1, std::memory_order_relaxed);
                           if (destroys)
                             if (auto p = pool.lock()) p->destroy_one(victim);
                         });
        }
        if (rc != 0 && !refused_as_removed(rc, *g))
          sh.fail(__LINE__, "PressureListener::listen: rc=%d", rc);
        PressureListener bad;
        EXPECT_EQ(bad.listen(*g, "urgent", [](PressureLevel) {}), EINVAL);
        if (rc == 0) {
          if (!hook && chance(rng, 40) && victims->size() < 8) {
            victims->add(std::move(l));
          } else {
            pressure.push_back(std::move(l));
          }
        }
        break;
      }
      case 3: {
        op = "PsiTrigger";
        if (triggers.size() >= 6) {
          std::swap(triggers[rng() % triggers.size()], triggers.back());
          triggers.pop_back();
          break;
        }
        auto t = std::make_unique<PsiTrigger>();
        const bool destroys = !hook && chance(rng, 30);
        const uint64_t victim = rng();
        auto cb = [&notes, destroys, victim, pool = std::weak_ptr<VictimPool>(victims)] {
          notes.fetch_add(1, std::memory_order_relaxed);
          if (destroys)
            if (auto p = pool.lock()) p->destroy_one(victim);
        };
        int rc;
        if (chance(rng, 30))
          rc = t->arm(*g, "some 150000 2000000", cb, -1, false);
        else
          rc = t->arm(*g, chance(rng, 50) ? "some 1000 100000" : "full 5000 500000", cb);
        if (rc != 0 && !refused_as_removed(rc, *g)) sh.fail(__LINE__, "PsiTrigger::arm: rc=%d", rc);
        PsiTrigger bad;
        EXPECT_EQ(bad.arm(*g, "some 0 0", [] {}), EINVAL);
        EXPECT_EQ(bad.arm(*g, "sometimes 1 2", [] {}), EINVAL);
        if (rc == 0) {
          if (!hook && chance(rng, 40) && victims->size() < 8) {
            victims->add(std::move(t));
          } else {
            triggers.push_back(std::move(t));
          }
        }
        break;
      }
      case 4: {
        op = "memory.pressure file";
        if (pressure_files.size() >= 4) {
          std::swap(pressure_files[rng() % pressure_files.size()], pressure_files.back());
          pressure_files.pop_back();
          break;
        }
        std::unique_ptr<File> f;
        if (const int rc = open_file(*g, "memory.pressure", &f); rc != 0) {
          EXPECT_TRUE(file_gone(rc, *g)) << rc;
          break;
        }
        if (const int rc = f->write("some 2000 200000"); rc != 0 && !refused_as_removed(rc, *g))
          sh.fail(__LINE__, "memory.pressure write: rc=%d", rc);
        std::string s;
        const int read_rc = f->read(&s);
        EXPECT_TRUE(read_rc == 0 || file_gone(read_rc, *g)) << read_rc;
        std::unique_ptr<File> bad;
        if (open_file(*g, "memory.pressure", &bad) == 0) {
          EXPECT_NE(bad->write("full 20000000 1000"), 0);
        }
        pressure_files.push_back(std::move(f));
        break;
      }
      default:
        op = "MemStall";
        {
          MemStall stall(*g);
          std::this_thread::sleep_for(std::chrono::microseconds(pick(rng, 10, 500)));
        }
        sh.ctl.tick();
        break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(pick(rng, 20, 300)));
  }
  op = "teardown";
  // The handles left are kept through the final removal of every group (finish_run).
  for (auto& l : events) sh.kept_events.push_back(std::move(l));
  for (auto& l : pressure) sh.kept_pressure.push_back(std::move(l));
  for (auto& t : triggers) sh.kept_triggers.push_back(std::move(t));
  pressure_files.clear();  // an open file keeps its group, as in the kernel
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
