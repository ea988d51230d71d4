// Controller: the tree of groups and the settings that hold for all of it (the analogue of the
// cgroup-v2 hierarchy with its mount options). One process normally has one Controller.
//
// Thread safety: every call may be made from any thread. Creating, looking up and removing
// groups take a reader/writer lock on the tree; charging never does. With the global hook
// (hook.hpp) linked, nothing these calls allocate is charged to the calling thread's group:
// they work from an attached thread whose group is full.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "memcg/base/clock.hpp"
#include "memcg/core/tree/group.hpp"
#include "memcg/percpu/internal/rstat.hpp"
#include "memcg/percpu/stat_registry.hpp"

namespace memcg {

class Stock;
class ObjStock;
class OomLog;  // oom_log.hpp
class EventBus;  // signal/event_bus.hpp
namespace internal {
struct OomState;
struct WaitAccess;       // charge_wait_hooks.hpp
struct ControllerWaits;  // charge_wait.cpp
}

// Slow-path counters of the charge path (see charge_stats()).
struct ChargeCounters {
  std::atomic<uint64_t> slow_path{0};
  std::atomic<uint64_t> forced{0};
  std::atomic<uint64_t> forced_units{0};  // the size of the forced charges, in units
  std::atomic<uint64_t> failed{0};
  std::atomic<uint64_t> drains{0};
  std::atomic<uint64_t> throttled_ms{0};  // memory.high sleeps, in total
};

// Whether controllers check lifetimes by default (Options::check_lifetimes): the environment
// variable MEMCG_CHECK_LIFETIMES when it is set and not empty ("0" off, anything else on), in any
// build; otherwise true in debug builds (no NDEBUG) and in builds compiled with
// MEMCG_CHECK_LIFETIMES (the sanitizer presets), false in release builds. Read at each call.
bool lifetime_checks_default() noexcept;

struct Options {
  // Charge unit is 2^unit_shift bytes (default 4 KiB, the kernel's page). 6..30.
  unsigned unit_shift = 12;
  // Units pre-charged at once into a per-CPU stock (the kernel's MEMCG_CHARGE_BATCH). 1..127.
  int64_t batch = 64;
  // Number of per-CPU shards for stocks and statistics; 0 = the machine's CPUs.
  int nr_shards = 0;
  // The kernel's memory_recursiveprot mount option.
  bool recursive_protection = false;
  // The kernel's memory_localevents mount option.
  bool local_events = false;
  // Time source; null = SystemClock. Must outlive the controller.
  Clock* clock = nullptr;
  // Application kinds of memory for memory.stat (e.g. "hash_tables"), registered at start-up
  // after the built-in ones; names are [a-z0-9_]+. Their indices: Controller::stat_index().
  std::vector<std::string> stat_kinds;
  // Checked lifetimes: ~Controller aborts, with a message naming what is left on stderr, when
  // group references, attached threads, members, listeners, triggers, reclaimer registrations
  // (caches, jemalloc arenas) or charge handles of this controller are still alive.
  bool check_lifetimes = lifetime_checks_default();
};

class Controller {
 public:
  // Throws std::invalid_argument when an option is out of range.
  explicit Controller(Options options = {});
  // REQUIRES: nothing of this controller is still in use: no GroupRef, attachment, Member,
  // Reservation or ChargeHandle, no listener, trigger, file, reclaimer registration or arena
  // (destroy them first: declare the controller before them). Waiting charges are the exception
  // (charge_wait.hpp). Checked when Options::check_lifetimes is set (the default in debug and
  // sanitizer builds): the destructor then aborts with a message naming what is left.
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  Group& root() noexcept { return *root_; }
  const Options& options() const noexcept { return options_; }
  Clock& clock() const noexcept { return *clock_; }

  // Creates the group at `path` ("a/b/c"; the parent must exist, like mkdir). Errors: EINVAL for
  // a malformed path or name, ENOENT when the parent does not exist, EEXIST when the group does.
  [[nodiscard]] int create(std::string_view path, GroupRef* out = nullptr);
  // Creates `name` under `parent` (which must be online). Same errors.
  [[nodiscard]] int create(Group& parent, std::string_view name, GroupRef* out = nullptr);
  // The online group at `path` ("/" or "" is the root); empty if there is none.
  GroupRef lookup(std::string_view path) const;
  // Takes the group offline. Errors: EINVAL for the root, ENOENT when absent, EBUSY while it has
  // online children or attached threads.
  [[nodiscard]] int remove(std::string_view path);
  [[nodiscard]] int remove(Group& group);

  // Visits `from` and its descendants in pre-order (a parent before its children), the dying ones
  // too when `include_dying`. The tree lock is held in shared mode during the walk: `fn` must not
  // create or remove groups. A dying group may be in the middle of its release: to keep one
  // beyond the call, take it with GroupRef::try_acquire(), never with GroupRef(g). Like
  // everything that runs under a library lock, `fn`'s allocations are not charged by the global
  // hook (hook.hpp; internal/lock.hpp says why).
  void walk(Group& from, const std::function<void(Group&)>& fn, bool include_dying = true) const;

  size_t nr_groups() const noexcept;  // online, the root included
  size_t nr_dying() const noexcept;

  // ---- charge path ----------------------------------------------------------------------------
  // The per-CPU stock of pre-charged units shared by all groups of this controller.
  Stock& stock() noexcept { return *stock_; }
  // The per-CPU byte reserves of the object layer (obj_stock.hpp), over the unit stock.
  ObjStock& obj_stock() noexcept { return *obj_stock_; }
  ChargeCounters& charge_counters() noexcept { return charge_counters_; }
  const ChargeCounters& charge_counters() const noexcept { return charge_counters_; }

  // Slow-path policies the failure ladder calls. `reclaim` frees up to `units` from the subtree
  // of `target` and returns what it freed (counted no further than `target`'s usage dropped
  // meanwhile, as the driver's own report is: reclaim.hpp); `oom` tries to resolve an out-of-memory condition in
  // `domain` for a charge of `units` and returns true when it made progress (killed something).
  // By default the library's own reclaim driver (reclaim.hpp) and OOM killer (oom.hpp) run;
  // a hook replaces them (tests, custom policies).
  // REQUIRES: set before charges run (they are read without synchronisation).
  using ReclaimFn = std::function<int64_t(Group& target, int64_t units)>;
  using OomFn = std::function<bool(Group& domain, int64_t units)>;
  void set_reclaim_hook(ReclaimFn fn) { reclaim_hook_ = std::move(fn); }
  void set_oom_hook(OomFn fn) { oom_hook_ = std::move(fn); }
  int64_t reclaim_for_charge(Group& target, int64_t units);
  internal::OomState& oom_state() noexcept { return *oom_; }
  // The recent OOM and preemption reports (oom_log.hpp).
  OomLog& oom_log() noexcept { return *oom_log_; }
  bool out_of_memory(Group& domain, int64_t units);
  // The controller's event stream (event_bus.hpp): off until enabled or subscribed to.
  EventBus& events() noexcept { return *events_; }

  // ---- statistics (memory.stat) -------------------------------------------------------------
  const StatRegistry& stats() const noexcept { return registry_; }
  // Index of a stat item by name (built-in or from Options::stat_kinds); -1 if unknown.
  int stat_index(std::string_view name) const noexcept { return registry_.find(name); }
  Rstat& rstat() noexcept { return *rstat_; }
  // Folds every pending statistic delta now, the counts cached in stock slots and the object
  // reserves' deferred byte deltas included (memory.stat reads otherwise fold only when enough
  // is pending, or when the last full fold is older than the 2 s period).
  void flush_stats();
  // Gives back every unit pre-charged in the per-CPU stocks (the object reserves' first), so
  // that memory.current is exactly what is charged: for a final report, a test, a check that
  // every charge was returned.
  void drain_stocks();
  // How far behind a memory.stat read can be without flush_stats(), in units of charge (summed
  // over the kinds): per level of the group's subtree, the rstat bound
  // (Rstat::staleness_bound_units), plus at most batch × nr_shards per group of the subtree and
  // Stock::stat_slack_bound() in all for the counts the stock slots cache. Lasts at most the
  // 2 s period.
  uint64_t stat_staleness_bound_units(uint64_t levels, uint64_t groups) const noexcept;
  // Periodic work that the kernel does from timers: the 2 s statistics fold. Called by reads and
  // slow paths on their own; call it from an application timer for a bound on staleness that
  // does not depend on reads.
  void tick();

  // A number that no other controller of this process has had or will have: thread-local
  // records that outlive a controller tell by it that their groups are gone.
  uint64_t serial() const noexcept { return serial_; }

  // ---- units ----------------------------------------------------------------------------------
  unsigned unit_shift() const noexcept { return options_.unit_shift; }
  uint64_t unit_size() const noexcept { return uint64_t{1} << options_.unit_shift; }
  int64_t max_units() const noexcept { return PageCounter::sentinel(options_.unit_shift); }
  // Bytes of `units`; kUnlimited for the sentinel.
  uint64_t to_bytes(int64_t units) const noexcept;
  // Whole units in `bytes`, floored and clamped to the sentinel (knob writes).
  int64_t to_units_floor(uint64_t bytes) const noexcept;
  // Units needed to hold `bytes` (charges).
  int64_t to_units_ceil(uint64_t bytes) const noexcept;

 private:
  friend class Group;
  friend struct internal::WaitAccess;
  void release(Group* g) noexcept;  // the last reference went
  Group* find_locked(std::string_view path) const;
  static bool valid_name(std::string_view name) noexcept;
  // What users still hold, group by group ("" when nothing): the lifetime check of ~Controller.
  // REQUIRES: the stocks are drained (their slots hold references too).
  std::string in_use_report() const;

  const Options options_;
  Clock* const clock_;
  uint64_t serial_ = 0;  // set last in the constructor: a throwing one registers nothing
  StatRegistry registry_;
  std::unique_ptr<Rstat> rstat_;
  std::unique_ptr<Stock> stock_;
  std::unique_ptr<ObjStock> obj_stock_;
  ChargeCounters charge_counters_;
  std::unique_ptr<internal::OomState> oom_;
  std::unique_ptr<OomLog> oom_log_;
  std::unique_ptr<EventBus> events_;
  // Waiting charges (charge_wait.cpp): created by the first wait, freed by ~Controller.
  std::atomic<internal::ControllerWaits*> waits_{nullptr};
  ReclaimFn reclaim_hook_;
  OomFn oom_hook_;
  mutable std::shared_mutex tree_mutex_;
  Group* root_ = nullptr;
  uint64_t next_id_ = 1;  // guarded by tree_mutex_
  size_t nr_groups_ = 1;  // guarded by tree_mutex_
  size_t nr_dying_ = 0;   // guarded by tree_mutex_
};

}  // namespace memcg
