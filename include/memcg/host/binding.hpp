// HostBinding: ties a Controller's root to the kernel cgroup that holds the process
// (discovery.hpp), so that the in-process tree refuses, reclaims and kills before the kernel
// reclaims the process's anonymous memory or OOM-kills all of it.
//
// What it does, on its own thread (start() .. stop()):
//  - Limits follow the kernel. The root's memory.max is set to
//        binding limit - headroom - unaccounted,   headroom = max(headroom_bytes,
//                                                              limit x headroom_permille / 1000)
//    (one headroom, from the max, or from the high when there is no max)
//    where unaccounted = the working set of the binding cgroup - the root's memory.current
//    (what the process holds outside every group: libraries, stacks, other processes of the
//    cgroup), saturated at 0. The working set is the kernel's usage minus the inactive file
//    pages of its memory.stat (cAdvisor's working set, HostCgroup::working_set()): page cache
//    the kernel drops before it reclaims anything else must not shrink the tenants' budget and
//    start reclaim or OOM kills in the process. The kernel's memory.high gives the root's high the
//    same way; the library does not throttle at the root (the kernel has no root high either), so
//    the binding reclaims the root's excess over it proactively instead. No kernel limit: the
//    root is set to "max". Re-read every `period_ms` and, on cgroup v2, whenever the binding
//    cgroup's memory.events changes (inotify).
//  - Drift is visible: the kernel's usage and the process's RSS next to the root's usage, their
//    differences as "unaccounted" gauges in the root-level file memory.host (open_file()) and in
//    Prometheus text (render_prometheus(), to append to memcg::render_prometheus()).
//  - Kernel pressure -> in-process reclaim. A pressure event (a PSI trigger on the binding's
//    memory.pressure, or /proc/pressure/memory; v1: memory.pressure_level through
//    cgroup.event_control; or a descriptor the caller supplies) writes memory.reclaim at the root
//    (which respects every group's min and low), at most once per `reclaim_interval_ns` on the
//    controller's clock; events inside the interval are counted, not acted on.
//
// The machine's cgroup files are only read; the one write is the registration of the pressure
// trigger (a PSI trigger line into memory.pressure, or one cgroup.event_control line on v1),
// which changes no setting of the cgroup and goes away with the descriptor.
//
// Errors: start() fails (and changes nothing) when discovery fails. Later, a refresh that fails
// (a file gone, unreadable or malformed, the cgroup removed) leaves the root as it was and counts
// an error with its message in status(). Nothing crashes, nothing is retried faster than the
// period.
//
// Thread safety: every call may be made from any thread. No lock of this class is held while the
// library reclaims or writes a limit (which may call reclaimers and OOM kill callbacks), so those
// may call status() or refresh() (which then returns EBUSY). stop() waits for at most one pass of
// the reclaim driver in flight (reclaim.hpp), of at most 1 MiB (the binding reclaims in such
// passes, measured: 18 calls of a reclaimer that takes 100 ms per call, tests/host).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "memcg/core/admission/budget.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/files/files.hpp"
#include "memcg/host/discovery.hpp"

namespace memcg::host {

enum class PressureMode {
  kAuto,        // v2 or /proc/pressure: a PSI trigger; v1: memory.pressure_level
  kPsi,         // a PSI trigger on pressure_file only
  kVmpressure,  // v1 memory.pressure_level only
  kFd,          // `pressure_fd`: each time it is readable is one event (tests, custom sources)
  kNone,
};

struct BindOptions {
  DiscoverOptions discover;
  // Headroom below the kernel's limit: room for what the process allocates between two
  // re-reads and for the kernel's own rounding. The larger of the two.
  uint64_t headroom_bytes = 32ull << 20;
  unsigned headroom_permille = 50;  // 5 %; 0..1000
  // Re-read period (the component's thread, wall clock), 10 ms .. 1 h.
  uint64_t period_ms = 1000;
  bool watch_events = true;  // inotify on the binding's memory.events (v2)
  // A lowered root memory.max is enforced as a memory.max write is (reclaim, then OOM); false
  // only stores it.
  bool enforce = true;
  PressureMode pressure = PressureMode::kAuto;
  std::string psi_trigger = "some 150000 2000000";  // unprivileged: a 2 s multiple
  std::string vmpressure_level = "medium";
  int pressure_fd = -1;  // kFd: duplicated; a pipe's EOF stops watching it
  // Reclaim on pressure: max(reclaim_min_bytes, root usage x reclaim_permille / 1000), at most
  // once per interval (controller clock).
  uint64_t reclaim_interval_ns = 1'000'000'000;
  unsigned reclaim_permille = 50;  // 0..1000
  uint64_t reclaim_min_bytes = 1ull << 20;
  // The process budget (budget.hpp), if one is used: the binding then gives it the root's limit
  // and the kernel's usage beyond the root's (set_outside) instead of writing the root's
  // memory.max, so that the root holds min(budget, kernel limit), each counted once. REQUIRES:
  // outlives the binding.
  ProcessBudget* budget = nullptr;
};

// What the root would be set to for a discovered cgroup and a root usage (pure).
struct RootSettings {
  uint64_t max = kNoLimit;
  uint64_t high = kNoLimit;
  uint64_t headroom = 0;
  uint64_t kernel_usage = 0;  // the binding cgroup's memory.current (usage_in_bytes on v1)
  uint64_t working_set = 0;   // kernel_usage - its inactive_file, at least 0
  uint64_t unaccounted = 0;   // working_set - root usage, saturated at 0
};
RootSettings compute_root_settings(const HostCgroup& cg, uint64_t root_current,
                                   const BindOptions& options);

struct HostStatus {
  bool bound = false;
  HostCgroup cgroup;     // the last successful discovery
  RootSettings applied;  // what the root was last set to
  uint64_t root_current = 0;
  int64_t unaccounted = 0;      // working set of the binding - root usage (may be negative)
  int64_t unaccounted_rss = 0;  // process RSS - root usage
  uint64_t refreshes = 0, errors = 0;
  uint64_t pressure_events = 0, reclaims = 0, reclaims_suppressed = 0, reclaimed_bytes = 0;
  uint64_t high_reclaims = 0;
  std::string pressure_source;  // "psi:<file>", "vmpressure:<file>", "fd", "none"
  std::string last_error;       // empty when the last refresh succeeded
};

class HostBinding {
 public:
  // REQUIRES: `controller` outlives the binding. Throws std::invalid_argument for options out
  // of range.
  HostBinding(Controller& controller, BindOptions options = {});
  ~HostBinding();  // stop()
  HostBinding(const HostBinding&) = delete;
  HostBinding& operator=(const HostBinding&) = delete;

  // Discovers, sets the root, opens the pressure source and starts the thread. 0, or an errno
  // value with a sentence in `error` and nothing changed; EBUSY when already started.
  [[nodiscard]] int start(std::string* error = nullptr);
  // Stops the thread and closes the sources; the root keeps its last settings. Idempotent.
  void stop() noexcept;
  // Re-reads the kernel's files and applies the result now (also done by the thread). EBUSY
  // when another refresh is in flight; on error the root is left as it was.
  [[nodiscard]] int refresh(std::string* error = nullptr);

  HostStatus status() const;
  // The contents of memory.host (docs/host.md lists the keys).
  std::string format_file() const;
  // Prometheus text (0.0.4) of the memcg_host_* families.
  std::string render_prometheus() const;
  // memory.host as a read-only file of the root. REQUIRES: the binding outlives the file.
  std::unique_ptr<File> open_file();

 private:
  void run() noexcept;
  void on_pressure() noexcept;
  void reclaim_root(uint64_t bytes, bool pressure) noexcept;
  [[nodiscard]] int open_pressure(const HostCgroup& cg, std::string* error);
  void close_sources() noexcept;

  Controller& controller_;
  const BindOptions options_;
  std::mutex refresh_mu_;     // try-locked: one refresh at a time, never waited for
  mutable std::mutex mu_;     // guards status_ only (a leaf, held for copies)
  HostStatus status_;
  bool have_last_reclaim_ = false;   // the component thread's only
  uint64_t last_reclaim_ns_ = 0;
  int stop_fd_ = -1, pressure_fd_ = -1, inotify_fd_ = -1;
  bool pressure_pri_ = false;        // PSI: poll POLLPRI
  int v1_level_fd_ = -1;
  std::string watched_events_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<bool> stop_requested_{false};  // ends a root reclaim between driver passes
};

}  // namespace memcg::host
