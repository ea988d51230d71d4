// The library under its own global operator new hook (this program links memcg::hook): nothing
// the library allocates internally is charged, so an attached thread may read files, create,
// look up and remove groups while its group is full, at memory.high 0, or while the library
// flushes statistics, without a nested charge taking a library lock it already holds
// (internal/lock.hpp). Each scenario runs under a watchdog: a deadlock ends the program with a
// message instead of hanging, an EDEADLK from a shared_mutex terminates it, and a charge
// refused inside the library surfaces as std::bad_alloc.
#include "memcg/hook/hook.hpp"

#include <gtest/gtest.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "memcg/core/charge/attach.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/files/files.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/files/prometheus.hpp"
#include "memcg/percpu/internal/stock.hpp"

#include "alloc_test_support.hpp"

namespace memcg {
namespace {

using testing::settle;

// Runs `fn` on a thread of its own and waits at most `seconds` for it. A scenario that does not
// finish is a deadlock: the program exits (the stuck thread cannot be joined). An exception
// thrown by `fn` is rethrown here.
template <typename Fn>
void within(int seconds, const char* what, Fn fn) {
  std::packaged_task<void()> task(std::move(fn));
  std::future<void> done = task.get_future();
  std::thread t(std::move(task));
  if (done.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "%s: no progress after %d s: deadlock\n", what, seconds);
    std::fflush(stderr);
    std::_Exit(3);
  }
  t.join();
  done.get();
}

// Pins the calling thread to the first CPU it may run on: all its statistic updates and the
// flush it triggers then use one shard.
void pin_to_one_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &set)) ++cpu;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
}

// Restores the hook's process-wide kind when a test ends.
struct KindScope {
  explicit KindScope(int kind) {
    hook::set_kind(kind);
    EXPECT_EQ(hook::kind(), kind);
  }
  ~KindScope() { hook::set_kind(StatRegistry::kAnon); }
};

// memory.stat read from an attached thread while the statistics flush grows its work stack:
// every allocation of that thread updates its group's statistics on the flushed shard (a kind
// past the object reserves' 128 goes through the slow path each time), which relinks the group
// on the shard the flush holds.
TEST(HookSafety, StatReadFromAttachedThreadDuringFirstFlush) {
  Options o;
  for (int i = 0; i < 140; ++i) o.stat_kinds.push_back("kind" + std::to_string(i));
  Controller ctl(o);
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  std::vector<GroupRef> children(12);
  for (size_t i = 0; i < children.size(); ++i)
    ASSERT_EQ(ctl.create(*g, "c" + std::to_string(i), &children[i]), 0);
  const int kind = ctl.stat_index("kind130");
  ASSERT_GE(kind, ObjStock::kMaxKinds);
  int err = -1;
  std::string text;
  within(30, "memory.stat read from an attached thread", [&] {
    pin_to_one_cpu();
    // Put the whole subtree on this CPU's tree, so the first flush pushes them all.
    g->stat_add(StatRegistry::kAnon, 4096, 1);
    for (GroupRef& c : children) c->stat_add(StatRegistry::kAnon, 4096, 1);
    KindScope scope(kind);
    ScopedAttach attach(*g);
    // The read's periodic fold is the first flush (the monotonic clock is past its 2 s period);
    // flush_stats() would be otherwise.
    err = read_file(*g, "memory.stat", &text);
    ctl.flush_stats();
  });
  EXPECT_EQ(err, 0);
  EXPECT_NE(text.find("anon "), std::string::npos);
  settle(ctl);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), 13 * 4096);
}

// The group is full: usage at memory.max, nothing to reclaim and no member to kill, so every
// charge of the thread fails. Returns the bytes kept charged until `release`.
struct FullGroup {
  Controller& ctl;
  Group& g;
  std::vector<char>* ballast = nullptr;

  void fill() {
    ballast = new std::vector<char>(3 * 4096);
    // Empty both stocks so that no reserve can serve the next charge.
    ctl.obj_stock().drain_all(nullptr);
    ctl.stock().drain_all(nullptr);
    g.set_max(g.current());
  }
  ~FullGroup() {
    g.set_max(kUnlimited);
    delete ballast;
  }
};

// create/lookup/remove from a thread whose group cannot be charged: before, create/remove
// allocated under the exclusive tree lock and the failing charge's reclaim took it shared
// (EDEADLK, process terminated); path splitting threw std::bad_alloc.
TEST(HookSafety, TreeChangesFromAttachedThreadAtMax) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  int created = -1, created_top = -1, removed = -1, removed_path = -1, found = 0;
  within(30, "create/remove at memory.max", [&] {
    ScopedAttach attach(*g);
    FullGroup full{ctl, *g};
    full.fill();
    GroupRef child;
    created = ctl.create(*g, "child", &child);  // allocates under the exclusive tree lock
    created_top = ctl.create("top");
    found = static_cast<bool>(ctl.lookup("g/child")) ? 1 : 0;
    removed = child ? ctl.remove(*child) : -2;
    child = GroupRef();
    removed_path = ctl.remove("top");
  });
  EXPECT_EQ(created, 0);
  EXPECT_EQ(created_top, 0);
  EXPECT_EQ(found, 1);
  EXPECT_EQ(removed, 0);
  EXPECT_EQ(removed_path, 0);
  EXPECT_EQ(g->events().get(Event::kOom), 0u);
}

// The same at memory.high 0: every charge that reaches the counters reclaims (and walks the
// tree) before it returns. Only the library allocates on the attached thread here: a charge
// of the test's own would be throttled (up to 2 s) by the overage.
TEST(HookSafety, TreeChangesFromAttachedThreadAtHighZero) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  static constexpr const char* kNames[] = {"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"};
  int created = -1, removed = -1, removed_path = -1;
  within(30, "create/remove at memory.high 0", [&] {
    ScopedAttach attach(*g);
    std::vector<char>* ballast = new std::vector<char>(3 * 4096);
    ctl.obj_stock().drain_all(nullptr);
    ctl.stock().drain_all(nullptr);
    g->set_high(0);
    for (const char* name : kNames) {
      GroupRef child;
      created = ctl.create(*g, name, &child);
      if (created != 0) break;
      removed = ctl.remove(*child);
      if (removed != 0) break;
    }
    removed_path = ctl.create("g/top") == 0 ? ctl.remove("g/top") : -2;
    g->set_high(kUnlimited);
    delete ballast;
  });
  EXPECT_EQ(created, 0);
  EXPECT_EQ(removed, 0);
  EXPECT_EQ(removed_path, 0);
}

// Reading files, rendering metrics and listing a full group's files allocate nothing that is
// charged, so they work (and do not throw) while the group is full.
TEST(HookSafety, ReadsFromAttachedThreadAtMax) {
  Controller ctl;
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  ASSERT_EQ(ctl.create("g/a"), 0);
  int stat_err = -1, events_err = -1, pressure_err = -1, lookups = 0;
  size_t metrics = 0, names = 0;
  std::string stat, events, pressure;
  stat.reserve(8192);
  events.reserve(8192);
  within(30, "reads at memory.max", [&] {
    ScopedAttach attach(*g);
    FullGroup full{ctl, *g};
    full.fill();
    for (int i = 0; i < 50; ++i) lookups += static_cast<bool>(ctl.lookup("/g/a/")) ? 1 : 0;
    stat_err = read_file(*g, "memory.stat", &stat);
    events_err = read_file(*g, "memory.events", &events);
    pressure_err = read_file(*g, "memory.pressure", &pressure);
    metrics = render_prometheus(ctl).size();
    names = file_names(*g).size();
    ctl.walk(ctl.root(), [](Group&) {});
  });
  EXPECT_EQ(lookups, 50);
  EXPECT_EQ(stat_err, 0);
  EXPECT_EQ(events_err, 0);
  EXPECT_EQ(pressure_err, 0);
  EXPECT_NE(pressure.find("some "), std::string::npos);
  EXPECT_GT(metrics, 0u);
  EXPECT_GT(names, 0u);
  EXPECT_EQ(g->events().get(Event::kOom), 0u);
}

// hook::set_kind is process-wide while kinds are per controller: an application kind of one
// controller, used by a thread attached to another that has no such kind, counts as anon there
// (before, it indexed that controller's statistics past their end). Kinds past the header's byte
// are refused.
TEST(HookSafety, KindOfAnotherControllerCountsAsAnon) {
  Options oa;
  oa.stat_kinds = {"a1", "a2", "a3"};
  Controller a(oa);
  Controller b;
  GroupRef g;
  ASSERT_EQ(b.create("g", &g), 0);
  const int kind = a.stat_index("a3");
  ASSERT_GE(kind, static_cast<int>(b.stats().size()));
  hook::set_kind(256);
  EXPECT_EQ(hook::kind(), StatRegistry::kAnon);
  hook::set_kind(-1);
  EXPECT_EQ(hook::kind(), StatRegistry::kAnon);
  void* p = nullptr;
  {
    KindScope scope(kind);
    ScopedAttach attach(*g);
    p = ::operator new(1000);
  }
  const auto bytes =
      static_cast<int64_t>(malloc_usable_size(static_cast<char*>(p) - hook::kHeaderBytes));
  settle(b);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), bytes);
  ::operator delete(p);
  settle(b);
  EXPECT_EQ(g->stat(StatRegistry::kAnon), 0);
  EXPECT_EQ(g->current(), 0u);
}

}  // namespace
}  // namespace memcg
