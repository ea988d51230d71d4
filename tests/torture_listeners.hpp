// The torture test's listener churn: memory.events, vmpressure and PSI listeners registered and
// destroyed, also from inside their callbacks (tests/torture_body.hpp puts the run together).

#pragma once

#include "torture_state.hpp"

namespace memcg::torture {

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

}  // namespace memcg::torture
