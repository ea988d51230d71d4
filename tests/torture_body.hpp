// The randomized torture test, shared by torture_test.cpp (plain build, every preset) and
// hook_torture_test.cpp (the global operator-new hook linked, default preset only).
//
// Through the public API only, for a bounded time: charger threads charge and uncharge every way
// the library offers (units, bytes, ChargeHandle, object charges, pmr resources, STL allocators,
// members), attach and move between groups, run OOM-killable queries on worker threads and
// register caches and misbehaving reclaimers; meanwhile other threads create and remove groups,
// write every knob (invalid values included, which must be refused), read every file and the
// Prometheus exposition, and register and destroy event, vmpressure and PSI listeners and run
// memory.reclaim. At the end everything is dropped, the stocks are drained and every counter and
// byte statistic must read exactly 0, with no group left dying.
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

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <functional>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "memcg/core/attach.hpp"
#include "memcg/files/files.hpp"
#include "memcg/core/limits.hpp"
#include "memcg/alloc/lru_cache.hpp"
#include "memcg/memcg.hpp"
#include "memcg/core/notify.hpp"
#include "memcg/core/oom.hpp"
#include "memcg/files/prometheus.hpp"
#include "memcg/core/psi.hpp"
#include "memcg/core/reclaim.hpp"
#include "memcg/core/vmpressure.hpp"

namespace memcg::torture {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr double kDefaultSeconds = 3;
#else
inline constexpr double kDefaultSeconds = 5;
#endif

using Clock = std::chrono::steady_clock;

struct Config {
  uint64_t seed = 20261130;
  double seconds = kDefaultSeconds;
  int chargers = 3;
  double grace = 60;
  bool hook = false;  // the global operator-new hook is linked
  std::string skip;   // ",a,b," features left out

  bool on(std::string_view feature) const {
    return skip.find("," + std::string(feature) + ",") == std::string::npos;
  }
};

inline Config config_from_env(bool hook) {
  Config c;
  c.hook = hook;
  if (const char* s = std::getenv("MEMCG_TORTURE_SECONDS")) c.seconds = std::atof(s);
  if (const char* s = std::getenv("MEMCG_TORTURE_SEED")) c.seed = std::strtoull(s, nullptr, 0);
  if (const char* s = std::getenv("MEMCG_TORTURE_THREADS")) c.chargers = std::max(1, std::atoi(s));
  if (const char* s = std::getenv("MEMCG_TORTURE_GRACE")) c.grace = std::atof(s);
  if (const char* s = std::getenv("MEMCG_TORTURE_SKIP")) c.skip = "," + std::string(s) + ",";
  c.seconds = std::clamp(c.seconds, 0.1, 86400.0);
  c.grace = std::clamp(c.grace, 1.0, 86400.0);
  return c;
}

// ---- what every thread is doing, for the watchdog's report ------------------------------------

inline constexpr int kMaxThreads = 64;
struct Progress {
  std::array<std::atomic<const char*>, kMaxThreads> op{};
  std::array<std::atomic<const char*>, kMaxThreads> role{};
  // A free entry for a new thread (the last one is shared when all are taken).
  int slot(const char* role_name) {
    for (int i = 0; i < kMaxThreads - 1; ++i) {
      const char* expect = nullptr;
      if (role[i].compare_exchange_strong(expect, role_name)) {
        op[i].store("start", std::memory_order_relaxed);
        return i;
      }
    }
    role[kMaxThreads - 1].store(role_name, std::memory_order_relaxed);
    return kMaxThreads - 1;
  }
  // A short-lived thread gives its entry back when it ends.
  void release(int i) {
    op[i].store(nullptr, std::memory_order_relaxed);
    role[i].store(nullptr, std::memory_order_release);
  }
};

// Aborts the process with the seed and every thread's last operation when the run outlives its
// time plus the grace: a deadlock or a hang becomes a failure instead of a stuck CI job.
class Watchdog {
 public:
  Watchdog(const Config& cfg, Progress& progress, std::function<void()> report)
      : cfg_(cfg), progress_(progress), report_(std::move(report)), thread_([this] { run(); }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void run() {
    const auto limit = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(cfg_.seconds + cfg_.grace));
    std::unique_lock lock(mu_);
    if (cv_.wait_until(lock, limit, [this] { return done_; })) return;
    std::fprintf(stderr,
                 "\ntorture: HANG: the run exceeded %.1f s + %.1f s grace (deadlock?); "
                 "seed=%llu (rerun with MEMCG_TORTURE_SEED=%llu)\n",
                 cfg_.seconds, cfg_.grace, static_cast<unsigned long long>(cfg_.seed),
                 static_cast<unsigned long long>(cfg_.seed));
    if (report_) report_();
    for (int i = 0; i < kMaxThreads; ++i) {
      const char* op = progress_.op[i].load();
      if (op == nullptr) continue;
      const char* role = progress_.role[i].load();
      std::fprintf(stderr, "torture:   thread %2d %-10s last op: %s\n", i, role ? role : "?", op);
    }
    std::fflush(stderr);
    std::abort();
  }

  const Config& cfg_;
  Progress& progress_;
  std::function<void()> report_;  // prints the operation counts
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// ---- shared state ------------------------------------------------------------------------------

// Candidate group paths: three top-level groups with three children each.
inline const std::array<const char*, 12> kPaths = {"t0",   "t1",   "t2",   "t0/a", "t0/b", "t0/c",
                                                   "t1/a", "t1/b", "t1/c", "t2/a", "t2/b", "t2/c"};

struct Box;

struct Shared {
  Shared(const Config& c, Controller& controller)
      : cfg(c), ctl(controller), end(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(c.seconds))) {}
  const Config& cfg;
  Controller& ctl;
  const Clock::time_point end;
  Progress progress;
  int app_kind = -1;

  // Registered misbehaving reclaimers, so that one may unregister another. A fixed array: the
  // test takes this lock inside reclaim() and must not allocate under it (the hook would charge).
  std::mutex boxes_mu;
  std::array<std::shared_ptr<Box>, 32> boxes;

  std::atomic<uint64_t> charges{0}, refused{0}, kills{0}, reclaims{0}, lies{0}, throws{0},
      unregisters{0}, creates{0}, removes{0}, knob_writes{0}, refused_writes{0}, reads{0},
      listeners{0}, notifications{0}, queries{0}, attaches{0};

  bool running() const { return Clock::now() < end; }
  void print_counts() const;

  // Failures seen on threads that may be attached to a group. Recorded without allocating:
  // under the hook a gtest message built there would be charged to the group (and refused when
  // it is full), and would outlive the controller. run() reports them from the main thread.
  void fail(int line, const char* fmt, ...) __attribute__((format(printf, 3, 4))) {
    char buf[sizeof(FailureText)];
    const int n = std::snprintf(buf, sizeof(buf), "torture_body.hpp:%d: ", line);
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf + n, sizeof(buf) - static_cast<size_t>(n), fmt, ap);
    va_end(ap);
    std::lock_guard lock(failures_mu);
    if (nr_failures < failures.size()) std::memcpy(failures[nr_failures].data(), buf, sizeof(buf));
    ++nr_failures;
  }
  using FailureText = std::array<char, 256>;
  std::mutex failures_mu;
  std::array<FailureText, 32> failures{};
  size_t nr_failures = 0;  // guarded by failures_mu
  GroupRef lookup(std::mt19937_64& rng) const {
    return ctl.lookup(kPaths[rng() % kPaths.size()]);
  }
};

inline thread_local bool tl_is_worker = false;


inline int64_t pick(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
inline bool chance(std::mt19937_64& rng, int percent) {
  return static_cast<int>(rng() % 100) < percent;
}
inline uint32_t random_flags(std::mt19937_64& rng) {
  static constexpr uint32_t kFlags[] = {
      kDefaultCharge, kDefaultCharge,         0,         kMayBlock | kNoRetry,
      kMayBlock | kRetryMayFail, kNoFail | kMayBlock, kHighPrio, kMayBlock | kNoSpin,
      kNoFail};
  return kFlags[rng() % std::size(kFlags)];
}
inline int random_kind(std::mt19937_64& rng, const Shared& sh) {
  static constexpr int kKinds[] = {StatRegistry::kAnon, StatRegistry::kFile, StatRegistry::kKernel,
                                   StatRegistry::kSock, StatRegistry::kShmem};
  if (sh.app_kind >= 0 && chance(rng, 20)) return sh.app_kind;
  return kKinds[rng() % std::size(kKinds)];
}

// ---- a reclaimer that misbehaves -----------------------------------------------------------------

// Holds units charged to its group (as file memory) and, when asked, frees some honestly or lies,
// throws, calls back into the library, blocks briefly, or unregisters itself or another one.
class Evil final : public Reclaimer {
 public:
  Evil(Shared& sh, Group& g, uint64_t seed)
      : sh_(sh), group_(&g), rng_(seed), chronic_liar_(rng_() % 5 == 0) {}
  ~Evil() override { release(held_.exchange(0)); }

  // Charges `n` more units (the owner's thread).
  void grow(int64_t n, uint32_t flags) {
    if (charged(try_charge(*group_, n, flags, StatRegistry::kFile))) held_.fetch_add(n);
  }
  void shrink(int64_t n) { release(take(n)); }

  int64_t reclaimable() const noexcept override { return held_.load(std::memory_order_relaxed); }
  ReclaimResult reclaim(int64_t nr, int priority) override;

  Box* box = nullptr;
  std::atomic<int> inflight{0};  // reclaim() calls running (the owner waits them out)

 private:
  int64_t take(int64_t n) {
    int64_t h = held_.load();
    while (h > 0 && !held_.compare_exchange_weak(h, h - std::min(h, n))) {
    }
    return std::max<int64_t>(0, std::min(h, n));
  }
  void release(int64_t n) {
    if (n > 0) uncharge_direct(*group_, n, StatRegistry::kFile);
  }

  Shared& sh_;
  GroupRef group_;
  std::atomic<int64_t> held_{0};
  std::mt19937_64 rng_;  // reclaim() only (never concurrent with itself)
  const bool chronic_liar_;  // every call claims what it was asked and frees nothing
};

struct Box {
  Box(Shared& sh, Group& g, uint64_t seed) : r(sh, g, seed) { r.box = this; }
  // Takes the registration out under the lock and resets it outside: reset() waits for an
  // in-flight call, which may itself be taking another box's registration.
  void unregister() {
    ReclaimerRegistration taken;
    {
      std::lock_guard lock(mu);
      taken = std::move(reg);
    }
    taken.reset();
  }
  Evil r;
  std::mutex mu;
  ReclaimerRegistration reg;  // declared last: unregistered before `r` is destroyed
};

inline ReclaimResult Evil::reclaim(int64_t nr, int priority) {
  (void)priority;
  struct InFlight {
    std::atomic<int>& n;
    explicit InFlight(std::atomic<int>& c) : n(c) { n.fetch_add(1); }
    ~InFlight() { n.fetch_sub(1); }
  } in_flight(inflight);
  sh_.reclaims.fetch_add(1, std::memory_order_relaxed);
  const Config& cfg = sh_.cfg;
  if (chronic_liar_ && cfg.on("lie")) {
    sh_.lies.fetch_add(1, std::memory_order_relaxed);
    return {nr, nr};
  }
  switch (rng_() % 12) {
    case 0:
      if (cfg.on("lie")) {  // claims exactly what it was asked, frees nothing
        sh_.lies.fetch_add(1, std::memory_order_relaxed);
        return {nr, nr};
      }
      break;
    case 1:
      if (cfg.on("bigreport")) {
        sh_.lies.fetch_add(1, std::memory_order_relaxed);
        return chance(rng_, 50) ? ReclaimResult{INT64_MAX, INT64_MAX} : ReclaimResult{1000, 1000};
      }
      break;
    case 2:
      if (cfg.on("lie")) {  // frees a little, reports more freed than scanned
        release(take(1));
        return {1, 1000};
      }
      break;
    case 3:
      if (cfg.on("throw")) {
        sh_.throws.fetch_add(1, std::memory_order_relaxed);
        release(take(1));
        throw std::runtime_error("torture: reclaimer throws");
      }
      break;
    case 4:
      if (cfg.on("block")) std::this_thread::sleep_for(std::chrono::microseconds(pick(rng_, 50, 2000)));
      break;
    case 5:
      if (cfg.on("callback")) {  // reads files and charges from inside reclaim (forced)
        std::string s;
        if (const int rc = read_file(*group_, "memory.stat", &s); rc != 0)
          sh_.fail(__LINE__, "memory.stat read from inside reclaim(): rc=%d", rc);
        (void)read_file(*group_, "memory.current", &s);
        if (charged(try_charge(*group_, 1, kDefaultCharge, StatRegistry::kKernel)))
          uncharge(*group_, 1, StatRegistry::kKernel);
      }
      break;
    case 6:
      if (cfg.on("unregister")) {  // itself
        sh_.unregisters.fetch_add(1, std::memory_order_relaxed);
        box->unregister();
      }
      break;
    case 7:
      if (cfg.on("unregister")) {  // another one
        std::shared_ptr<Box> other;
        {
          std::lock_guard lock(sh_.boxes_mu);
          auto& slot = sh_.boxes[rng_() % sh_.boxes.size()];
          if (slot.get() != box) other = slot;
        }
        if (other) {
          sh_.unregisters.fetch_add(1, std::memory_order_relaxed);
          other->unregister();
        }
      }
      break;
    default:
      break;
  }
  const int64_t freed = take(nr);
  release(freed);
  return {std::max(nr, freed), freed};
}

// ---- OOM-killable work ---------------------------------------------------------------------------

// A member owned by one charger thread. Its kill callback releases synchronously, asks the owner
// to release later, destroys the member (only on the owner's thread, possibly from inside the
// member's own charge), or throws.
struct Slot {
  std::unique_ptr<Member> m;
  std::atomic<bool> release_requested{false};
  std::thread::id owner;
  int behaviour = 0;
};

// A query: a worker thread charging through its own member until cancelled. The kill callback
// cancels it and, unless it runs on a worker thread itself, joins the worker, whose teardown
// destroys the member (the callback's own).
struct Query {
  std::thread th;
  std::atomic<bool> ready{false};
  std::atomic<bool> cancel{false};
  std::atomic<int> join_state{0};  // 0 nobody, 1 claimed, 2 joined

  // Joins the worker, or waits for whoever claimed the join (bounded by the watchdog).
  void finish() {
    cancel.store(true);
    int expect = 0;
    if (join_state.compare_exchange_strong(expect, 1)) {
      th.join();
      join_state.store(2);
      return;
    }
    while (join_state.load() != 2) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
};

inline void query_worker(Shared& sh, std::weak_ptr<Query> wq, GroupRef g, uint64_t seed,
                         bool short_lived) {
  tl_is_worker = true;
  std::mt19937_64 rng(seed);
  const int me = sh.progress.slot(short_lived ? "oneshot" : "query");
  auto& op = sh.progress.op[me];
  std::shared_ptr<Query> q = wq.lock();
  while (!q->ready.load()) std::this_thread::yield();
  if (short_lived) {
    // Charges without blocking, possibly over memory.high, and exits: pending high work must
    // not keep a reference beyond the thread.
    op = "oneshot charge";
    const int64_t n = pick(rng, 1, 256);
    if (charged(try_charge(*g, n, 0))) uncharge(*g, n);
    q.reset();
    sh.progress.release(me);
    return;
  }
  try {
    op = "query member";
    Member m(
        *g, "query",
        [wq, &sh](Member&) {
          std::shared_ptr<Query> query = wq.lock();  // local: the captures die with the member
          if (!query) return;
          query->cancel.store(true);
          // A worker never joins another (two would join each other); killjoin off: cancel only.
          if (tl_is_worker || !sh.cfg.on("killjoin")) return;
          int expect = 0;
          if (query->join_state.compare_exchange_strong(expect, 1)) {
            query->th.join();
            query->join_state.store(2);
          }
        },
        static_cast<int>(pick(rng, -500, 1000)));
    std::unique_ptr<ScopedAttach> attach;
    if (sh.cfg.on("attach") && chance(rng, 50)) attach = std::make_unique<ScopedAttach>(*g);
    while (!q->cancel.load() && sh.running()) {
      op = "query charge";
      const uint32_t flags = chance(rng, 30) ? 0 : random_flags(rng);
      m.charge(pick(rng, 1, 32), flags);
      if (chance(rng, 30)) {
        op = "query uncharge";
        m.uncharge(pick(rng, 1, 32));
      }
      if (chance(rng, 10)) {
        op = "query pending high";
        handle_pending_high();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(pick(rng, 10, 300)));
    }
    op = "query teardown";
  } catch (const std::exception&) {
    // The group went offline before the member joined it.
  }
  q.reset();
  sh.progress.release(me);
}

// ---- the charger ---------------------------------------------------------------------------------

inline void charger(Shared& sh, int id) {
  const Config& cfg = sh.cfg;
  Controller& ctl = sh.ctl;
  std::mt19937_64 rng(cfg.seed * 1000003 + 11 + id);
  const int me = sh.progress.slot("charger");
  auto& op = sh.progress.op[me];

  struct Units {
    GroupRef g;
    int64_t n;
    int kind;
    bool object;  // bytes through the object layer
  };
  struct Pmr {
    std::unique_ptr<MemoryResource> mr;
    std::unique_ptr<std::pmr::vector<char>> v;  // declared after mr: destroyed first
  };
  using AVec = std::vector<uint64_t, Allocator<uint64_t>>;
  constexpr size_t kCap = 48;
  // Bookkeeping is reserved before any attachment: under the hook a push_back that grows would
  // be charged, and could fail, after the charge it records was made.
  std::vector<Units> units;
  std::vector<ChargeHandle> handles;
  std::vector<Pmr> pmrs;
  std::vector<std::unique_ptr<AVec>> avecs;
  std::vector<std::shared_ptr<Slot>> slots;
  std::vector<std::shared_ptr<Query>> queries;
  std::vector<std::unique_ptr<LruCache>> caches;
  std::vector<std::shared_ptr<Box>> boxes;
  std::vector<std::pmr::string> tagged_strings;
  std::vector<std::unique_ptr<std::string>> plain;  // hook: plain allocations while attached
  units.reserve(kCap + 1);
  handles.reserve(kCap + 1);
  pmrs.reserve(kCap + 1);
  avecs.reserve(kCap + 1);
  slots.reserve(kCap + 1);
  queries.reserve(kCap + 1);
  caches.reserve(kCap + 1);
  boxes.reserve(kCap + 1);
  plain.reserve(kCap + 1);
  MemoryResource tagged(ctl);  // charges the allocating thread's group
  tagged_strings.reserve(kCap + 1);

  auto drop_random = [&](auto& v) {
    if (v.empty()) return;
    std::swap(v[rng() % v.size()], v.back());
    v.pop_back();
  };
  auto drop_units = [&](size_t i) {
    Units& u = units[i];
    if (u.object)
      uncharge_object(*u.g, static_cast<uint64_t>(u.n), u.kind);
    else if (chance(rng, 50))
      uncharge(*u.g, u.n, u.kind);
    else
      uncharge_direct(*u.g, u.n, u.kind);
    std::swap(units[i], units.back());
    units.pop_back();
  };
  auto drop_slot = [&](size_t i) {
    slots[i]->m.reset();
    std::swap(slots[i], slots.back());
    slots.pop_back();
  };
  auto drop_box = [&](size_t i) {
    std::shared_ptr<Box> b = boxes[i];
    {
      std::lock_guard lock(sh.boxes_mu);
      for (auto& s : sh.boxes)
        if (s == b) s.reset();
    }
    b->unregister();
    // A reclaimer that unregistered itself is not waited for by reset(), and another one may be
    // in the middle of resetting this registration: the box goes only once nobody uses it, and
    // never from inside a reclaim().
    boxes[i].reset();
    while (b.use_count() > 1 || b->r.inflight.load() > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    b.reset();
    std::swap(boxes[i], boxes.back());
    boxes.pop_back();
  };

  while (sh.running()) {
    GroupRef g;
    try {
      op = "lookup";
      g = sh.lookup(rng);
    } catch (const std::bad_alloc&) {
      // Under the hook: lookup returns nothing allocated, so nothing of it may be charged.
      sh.fail(__LINE__, "Controller::lookup threw std::bad_alloc on a thread attached to a full group");
    }
    if (!g) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    const int kind = random_kind(rng, sh);
    const uint32_t flags = random_flags(rng);
    // Under the hook any allocation of an attached thread may be refused; bookkeeping is
    // reserved, so a refusal never loses track of a charge.
    try {
    switch (rng() % 21) {
      case 0:
      case 1:  // units
        if (units.size() < kCap) {
          op = "try_charge";
          const int64_t n = pick(rng, 1, 64);
          if (charged(try_charge(*g, n, flags, kind))) {
            units.push_back({g, n, kind, false});
            sh.charges.fetch_add(1, std::memory_order_relaxed);
          } else {
            sh.refused.fetch_add(1, std::memory_order_relaxed);
          }
        } else {
          op = "uncharge";
          drop_units(rng() % units.size());
        }
        break;
      case 2:  // bytes, rounded to units both ways
        if (units.size() < kCap) {
          op = "try_charge_bytes";
          const uint64_t b = static_cast<uint64_t>(pick(rng, 1, 200000));
          if (charged(try_charge_bytes(*g, b, flags, kind))) {
            op = "uncharge_bytes";
            if (chance(rng, 80)) std::this_thread::yield();
            uncharge_bytes(*g, b, kind);
          }
        }
        break;
      case 3:  // object layer
        if (units.size() < kCap) {
          op = "try_charge_object";
          const int64_t b = pick(rng, 1, 9000);
          if (charged(try_charge_object(*g, static_cast<uint64_t>(b), flags, kind)))
            units.push_back({g, b, kind, true});
        } else {
          op = "uncharge_object";
          drop_units(rng() % units.size());
        }
        break;
      case 4:  // ChargeHandle and charge_or_throw
        op = "ChargeHandle";
        if (handles.size() < kCap) {
          ChargeHandle h(*g, static_cast<uint64_t>(pick(rng, 1, 100000)), flags, kind);
          if (h.ok()) handles.push_back(std::move(h));
        } else {
          drop_random(handles);
        }
        op = "charge_or_throw";
        try {
          const uint64_t b = static_cast<uint64_t>(pick(rng, 1, 50000));
          charge_or_throw(*g, b, flags, kind);
          uncharge_bytes(*g, b, kind);
        } catch (const std::bad_alloc&) {
          sh.refused.fetch_add(1, std::memory_order_relaxed);
        }
        break;
      case 5:  // pmr containers over a group-bound resource
        op = "pmr";
        if (pmrs.size() < kCap / 4 && chance(rng, 60)) {
          try {
            Pmr p;
            p.mr = std::make_unique<MemoryResource>(*g, MemoryResourceOptions{kind, flags});
            p.v = std::make_unique<std::pmr::vector<char>>(p.mr.get());
            p.v->resize(static_cast<size_t>(pick(rng, 1, 20000)));
            pmrs.push_back(std::move(p));
          } catch (const std::bad_alloc&) {
            sh.refused.fetch_add(1, std::memory_order_relaxed);
          }
        } else if (!pmrs.empty()) {
          Pmr& p = pmrs[rng() % pmrs.size()];
          try {
            if (chance(rng, 50))
              p.v->resize(static_cast<size_t>(pick(rng, 0, 40000)));
            else
              p.v->shrink_to_fit();
          } catch (const std::bad_alloc&) {
          }
          if (chance(rng, 30)) drop_random(pmrs);
        }
        break;
      case 6:  // STL allocator
        op = "Allocator";
        if (avecs.size() < kCap / 4 && chance(rng, 60)) {
          try {
            auto v = std::make_unique<AVec>(Allocator<uint64_t>(*g, kind, flags));
            v->resize(static_cast<size_t>(pick(rng, 1, 3000)));
            avecs.push_back(std::move(v));
          } catch (const std::bad_alloc&) {
            sh.refused.fetch_add(1, std::memory_order_relaxed);
          }
        } else {
          drop_random(avecs);
        }
        break;
      case 7:
      case 8:  // members
        if (!cfg.on("members")) break;
        if (slots.size() < 6 && chance(rng, 40)) {
          op = "Member()";
          auto s = std::make_shared<Slot>();
          s->owner = std::this_thread::get_id();
          s->behaviour = static_cast<int>(rng() % 4);
          std::weak_ptr<Slot> weak = s;
          try {
            s->m = std::make_unique<Member>(
                *g, "m",
                [weak, &sh](Member& victim) {
                  sh.kills.fetch_add(1, std::memory_order_relaxed);
                  // Local: the member (and this callback) may be destroyed below.
                  const std::shared_ptr<Slot> slot = weak.lock();
                  if (!slot) return;
                  switch (slot->behaviour) {
                    case 0:  // release synchronously, from whichever thread
                      victim.uncharge(victim.charged());
                      return;
                    case 1:  // release later, on the owner's thread
                      slot->release_requested.store(true);
                      return;
                    case 2:  // destroy the member, maybe from inside its own charge
                      if (sh.cfg.on("killdestroy") &&
                          std::this_thread::get_id() == slot->owner) {
                        slot->m.reset();
                        return;
                      }
                      slot->release_requested.store(true);
                      return;
                    default:
                      if (sh.cfg.on("killthrow")) throw std::runtime_error("torture: kill throws");
                      slot->release_requested.store(true);
                      return;
                  }
                },
                static_cast<int>(pick(rng, -1000, 1000)));
            slots.push_back(std::move(s));
          } catch (const std::invalid_argument&) {
            // The group went offline meanwhile.
          }
        } else if (!slots.empty()) {
          const size_t i = rng() % slots.size();
          Slot& s = *slots[i];
          if (!s.m || s.release_requested.load() || chance(rng, 10)) {
            op = "~Member";
            drop_slot(i);
          } else if (chance(rng, 60)) {
            op = "Member::charge";
            s.m->charge(pick(rng, 1, 64), random_flags(rng));
            // s.m may have been destroyed by its own kill callback during the charge.
          } else if (chance(rng, 70)) {
            op = "Member::uncharge";
            s.m->uncharge(pick(rng, 1, 64));
          } else {
            s.m->set_score_adj(static_cast<int>(pick(rng, -1100, 1100)));
          }
        }
        break;
      case 9:  // queries on worker threads; short-lived threads that charge and exit
        if (!cfg.on("query")) break;
        if (queries.size() < 2 && chance(rng, 30)) {
          op = "spawn query";
          auto q = std::make_shared<Query>();
          const bool oneshot = chance(rng, 40);
          q->th = std::thread(query_worker, std::ref(sh), std::weak_ptr<Query>(q), g, rng(),
                              oneshot);
          q->ready.store(true);
          queries.push_back(std::move(q));
          sh.queries.fetch_add(1, std::memory_order_relaxed);
        } else if (!queries.empty() && (queries.size() >= 2 || chance(rng, 30))) {
          op = "cancel+join query";
          const size_t i = rng() % queries.size();
          queries[i]->finish();
          std::swap(queries[i], queries.back());
          queries.pop_back();
        }
        break;
      case 10:  // caches
        if (!cfg.on("lru")) break;
        if (caches.size() < 3 && chance(rng, 30)) {
          op = "LruCache()";
          try {
            caches.push_back(std::make_unique<LruCache>(*g, "cache", static_cast<int>(rng() % 60)));
          } catch (const std::exception&) {
          }
        } else if (!caches.empty()) {
          LruCache& c = *caches[rng() % caches.size()];
          if (chance(rng, 60)) {
            op = "LruCache::grow";
            // One charge per unit, each may be throttled above memory.high: keep it short.
            c.grow(pick(rng, 1, 16), random_flags(rng));
          } else if (chance(rng, 70)) {
            op = "LruCache::shrink";
            c.shrink(pick(rng, 1, 64));
          } else {
            op = "~LruCache";
            drop_random(caches);
          }
        }
        break;
      case 11:  // misbehaving reclaimers
        if (!cfg.on("evil")) break;
        if (boxes.size() < 3 && chance(rng, 30)) {
          op = "Evil register";
          std::shared_ptr<Box> b;
          try {
            b = std::make_shared<Box>(sh, *g, rng());
            b->reg = ReclaimerRegistration(*g, b->r);
          } catch (const std::exception&) {
            break;
          }
          {
            std::lock_guard lock(sh.boxes_mu);
            sh.boxes[rng() % sh.boxes.size()] = b;  // may push out another: it stays registered
          }
          boxes.push_back(std::move(b));
        } else if (!boxes.empty()) {
          const size_t i = rng() % boxes.size();
          if (chance(rng, 60)) {
            op = "Evil grow";
            boxes[i]->r.grow(pick(rng, 1, 64), random_flags(rng));
          } else if (chance(rng, 60)) {
            op = "Evil shrink";
            boxes[i]->r.shrink(pick(rng, 1, 64));
          } else {
            op = "Evil unregister";
            drop_box(i);
          }
        }
        break;
      case 12:  // attach, move, detach; charge the current group
        if (!cfg.on("attach")) break;
        sh.attaches.fetch_add(1, std::memory_order_relaxed);
        if (chance(rng, 40)) {
          op = "attach";
          (void)attach_current_thread(*g);  // ENOENT when it went offline
        } else if (chance(rng, 30)) {
          op = "detach";
          detach_current_thread();
        } else {
          op = "ScopedAttach";
          ScopedAttach a(*g);
          if (a.ok()) {
            ChargeHandle h = charge_current(ctl, static_cast<uint64_t>(pick(rng, 1, 30000)), flags);
            if (charged(try_charge_current(ctl, 4096, flags))) uncharge(current_group(ctl), 1);
          }
        }
        break;
      case 13:  // the tagged resource, charging whichever group the thread is in
        op = "tagged pmr";
        if (tagged_strings.size() < kCap && chance(rng, 60)) {
          try {
            tagged_strings.emplace_back(static_cast<size_t>(pick(rng, 20, 5000)), 'x', &tagged);
          } catch (const std::bad_alloc&) {
          }
        } else {
          drop_random(tagged_strings);
        }
        break;
      case 14:
        op = "handle_pending_high";
        handle_pending_high();
        if (chance(rng, 30)) {
          op = "MemStall";
          MemStall stall(*g);
          std::this_thread::sleep_for(std::chrono::microseconds(pick(rng, 10, 300)));
        }
        break;
      case 15:  // counts that cannot be represented must be refused
        if (!cfg.on("huge")) break;
        op = "huge charge";
        // An accepted one is reverted at once, so that the final accounting still means something.
        if (charged(try_charge(*g, INT64_MAX, kNoFail))) {
          sh.fail(__LINE__, "try_charge(INT64_MAX, kNoFail) was accepted");
          uncharge_direct(*g, INT64_MAX);
        }
        if (charged(try_charge_bytes(*g, UINT64_MAX, kNoFail))) {
          sh.fail(__LINE__, "try_charge_bytes(UINT64_MAX, kNoFail) was accepted");
          uncharge_direct(*g, ctl.to_units_ceil(UINT64_MAX));
        }
        break;
      case 18:  // stat kinds out of range: refused, or charged and uncharged symmetrically
        if (!cfg.on("badkind")) break;
        {
          const int bad_kinds[] = {-2, static_cast<int>(ctl.stats().size()), ObjStock::kMaxKinds,
                                   10000, INT32_MAX, INT32_MIN};
          const int bad = bad_kinds[rng() % std::size(bad_kinds)];
          op = "bad kind: try_charge";
          if (charged(try_charge(*g, 1, flags, bad))) uncharge(*g, 1, bad);
          op = "bad kind: object";
          if (charged(try_charge_object(*g, 100, flags, bad))) uncharge_object(*g, 100, bad);
          op = "bad kind: bytes";
          if (charged(try_charge_bytes(*g, 5000, flags, bad))) uncharge_bytes(*g, 5000, bad);
          op = "bad kind: pmr";
          // A resource is configured once: a kind the controller does not have is refused there.
          bool refused_kind = false;
          try {
            MemoryResource mr(*g, MemoryResourceOptions{bad, flags});
          } catch (const std::invalid_argument&) {
            refused_kind = true;
          }
          if (!refused_kind) sh.fail(__LINE__, "MemoryResource accepted stat kind %d", bad);
        }
        break;
      case 16:  // hook: plain allocations while attached
        if (!cfg.hook || !cfg.on("hookalloc")) break;
        op = "hook alloc";
        try {
          if (plain.size() < kCap && chance(rng, 60)) {
            auto s = std::make_unique<std::string>(static_cast<size_t>(pick(rng, 1, 20000)), 'y');
            std::vector<int> tmp(static_cast<size_t>(pick(rng, 1, 2000)));
            int* raw = new int[static_cast<size_t>(pick(rng, 1, 500))];
            delete[] raw;
            plain.push_back(std::move(s));
          } else {
            drop_random(plain);
          }
        } catch (const std::bad_alloc&) {
          sh.refused.fetch_add(1, std::memory_order_relaxed);
        }
        break;
      case 17:  // hook: library calls from an attached (possibly full) thread
        if (!cfg.hook || !cfg.on("hookcalls")) break;
        try {  // what these return is the caller's memory: a refusal is a fair answer
          std::string s;
          op = "hook read memory.stat";
          (void)read_file(*g, "memory.stat", &s);
          op = "hook prometheus";
          if (chance(rng, 10)) (void)render_prometheus(ctl);
        } catch (const std::bad_alloc&) {
          sh.refused.fetch_add(1, std::memory_order_relaxed);
        }
        try {  // these return nothing allocated: none of their memory may be refused
          op = "hook lookup";
          (void)ctl.lookup(kPaths[rng() % kPaths.size()]);
          op = "hook create";
          (void)ctl.create(kPaths[rng() % kPaths.size()]);
          op = "hook remove";
          (void)ctl.remove(kPaths[rng() % kPaths.size()]);
        } catch (const std::bad_alloc&) {
          sh.fail(__LINE__, "%s threw std::bad_alloc on an attached thread", op.load());
        }
        break;
      default: {  // releases, so that the population stays bounded
        op = "release";
        if (!units.empty()) drop_units(rng() % units.size());
        if (!handles.empty() && chance(rng, 50)) handles[rng() % handles.size()].release();
        for (size_t i = 0; i < slots.size(); ++i)
          if (slots[i]->release_requested.load() && slots[i]->m) slots[i]->m->uncharge(INT64_MAX);
        break;
      }
    }
    } catch (const std::bad_alloc&) {
      sh.refused.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // Everything goes, the group references last.
  op = "teardown";
  detach_current_thread();
  for (auto& q : queries) q->finish();
  queries.clear();
  while (!units.empty()) drop_units(units.size() - 1);
  handles.clear();
  pmrs.clear();
  avecs.clear();
  tagged_strings.clear();
  plain.clear();
  while (!slots.empty()) drop_slot(slots.size() - 1);
  caches.clear();
  while (!boxes.empty()) drop_box(boxes.size() - 1);
  op = "done";
}

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
        EXPECT_EQ(rc, g->is_root() ? ENOENT : 0) << knob;
        break;
      }
      case 2: {
        op = "write_file invalid";
        if (g->is_root()) break;
        const char* knob = kKnobs[2 + rng() % 2];  // high/max: only this thread changes them
        const char* text = kInvalid[rng() % std::size(kInvalid)];
        std::string before, after;
        ASSERT_EQ(read_file(*g, knob, &before), 0);
        EXPECT_NE(write_file(*g, knob, text, nonblocking), 0)
            << knob << " accepted \"" << text << "\"; seed=" << sh.cfg.seed;
        ASSERT_EQ(read_file(*g, knob, &after), 0);
        EXPECT_EQ(before, after) << "a refused write to " << knob << " changed it";
        EXPECT_NE(write_file(*g, "memory.oom.group", text), 0);
        EXPECT_NE(write_file(*g, "memory.min", text), 0);
        EXPECT_NE(write_file(*g, "memory.oom.group", "2"), 0);
        EXPECT_EQ(write_file(*g, "memory.current", "0"), EACCES);
        EXPECT_EQ(write_file(*g, "memory.stat", "0"), EACCES);
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
        EXPECT_EQ(write_file(*g, "memory.oom.group", chance(rng, 50) ? "1" : "0"), 0);
        break;
      case 6:
        op = "memory.reclaim";
        if (!sh.cfg.on("reclaimfile")) break;
        {
          static constexpr const char* kReclaim[] = {"4K", "64K", "1M", "4M swappiness=60",
                                                     "512K swappiness=max"};
          const int rc = write_file(*g, "memory.reclaim", kReclaim[rng() % std::size(kReclaim)]);
          EXPECT_TRUE(rc == 0 || rc == EAGAIN) << "memory.reclaim rc=" << rc;
          EXPECT_EQ(write_file(*g, "memory.reclaim", "lots"), EINVAL);
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
          EXPECT_TRUE(rc == 0 || (rc == EACCES && name == "memory.reclaim")) << name << " " << rc;
        }
        {
          std::unique_ptr<File> peak;
          if (!g->is_root() && open_file(*g, "memory.peak", &peak) == 0) {
            std::string s;
            EXPECT_EQ(peak->read(&s), 0);
            EXPECT_EQ(peak->write("reset"), 0);
            EXPECT_EQ(peak->read(&s), 0);
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

// memory.events listeners that callbacks destroy: from inside any listener's callback (their
// own included), on whatever thread delivers it. A listener is taken out under the lock and
// destroyed after it, so that no destruction waits while holding it.
struct VictimPool {
  std::mutex mu;
  std::vector<std::unique_ptr<EventListener>> v;
  ~VictimPool() {
    std::vector<std::unique_ptr<EventListener>> out;
    {
      std::lock_guard lock(mu);
      out.swap(v);
    }
    out.clear();  // waits for their calls; a call still running finds the pool empty
  }
  void add(std::unique_ptr<EventListener> l) {
    std::lock_guard lock(mu);
    v.push_back(std::move(l));
  }
  size_t size() {
    std::lock_guard lock(mu);
    return v.size();
  }
  void destroy_one(uint64_t r) {
    std::unique_ptr<EventListener> victim;
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
                         [&notes](PressureLevel) { notes.fetch_add(1, std::memory_order_relaxed); });
        }
        EXPECT_EQ(rc, 0);
        PressureListener bad;
        EXPECT_EQ(bad.listen(*g, "urgent", [](PressureLevel) {}), EINVAL);
        if (rc == 0) pressure.push_back(std::move(l));
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
        int rc;
        if (chance(rng, 30))
          rc = t->arm(*g, "some 150000 2000000", [&notes] { notes.fetch_add(1); }, -1, false);
        else
          rc = t->arm(*g, chance(rng, 50) ? "some 1000 100000" : "full 5000 500000",
                      [&notes] { notes.fetch_add(1, std::memory_order_relaxed); });
        EXPECT_EQ(rc, 0);
        PsiTrigger bad;
        EXPECT_EQ(bad.arm(*g, "some 0 0", [] {}), EINVAL);
        EXPECT_EQ(bad.arm(*g, "sometimes 1 2", [] {}), EINVAL);
        if (rc == 0) triggers.push_back(std::move(t));
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
        ASSERT_EQ(open_file(*g, "memory.pressure", &f), 0);
        EXPECT_EQ(f->write("some 2000 200000"), 0);
        EXPECT_GE(pressure_file_eventfd(*f), 0);
        std::string s;
        EXPECT_EQ(f->read(&s), 0);
        std::unique_ptr<File> bad;
        ASSERT_EQ(open_file(*g, "memory.pressure", &bad), 0);
        EXPECT_NE(bad->write("full 20000000 1000"), 0);
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
  events.clear();
  pressure.clear();
  triggers.clear();
  pressure_files.clear();
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
  if (!g.is_root()) {
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
}

}  // namespace memcg::torture
