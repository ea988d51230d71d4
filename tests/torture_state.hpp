// The torture test's configuration, watchdog, shared state, misbehaving reclaimer and
// OOM-killable queries (tests/torture_body.hpp puts the run together).

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

#include "memcg/core/charge/attach.hpp"
#include "memcg/files/files.hpp"
#include "memcg/core/charge/limits.hpp"
#include "memcg/alloc/lru_cache.hpp"
#include "memcg/memcg.hpp"
#include "memcg/core/signal/notify.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/files/prometheus.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/reclaim/vmpressure.hpp"

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

  // The listeners' handles still registered when the random phase ends, kept through the final
  // removal of every group: each must be told, and no group may stay dying for them. run()
  // drops them at the end (they hold nothing of a removed group).
  std::vector<std::unique_ptr<EventListener>> kept_events;
  std::vector<std::unique_ptr<PressureListener>> kept_pressure;
  std::vector<std::unique_ptr<PsiTrigger>> kept_triggers;

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
        // ENOENT: the group was removed (a removed group's files are gone; files.hpp).
        if (const int rc = read_file(*group_, "memory.stat", &s);
            rc != 0 && !(rc == ENOENT && !group_->is_online()))
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
      // Any outcome is legal with random flags; the run checks the counters at the end.
      static_cast<void>(m.charge(pick(rng, 1, 32), flags));
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

// A file operation on a group that the tree mutator removed meanwhile: the open finds no group
// (ENOENT) or the open file was deactivated (ENODEV; files.hpp).
inline bool file_gone(int rc, const Group& g) {
  return (rc == ENOENT || rc == ENODEV) && !g.is_online();
}

}  // namespace memcg::torture
