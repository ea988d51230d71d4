// HostBinding: the root follows the kernel cgroup's limits; pressure starts reclaim
// (include/memcg/host/binding.hpp).
#include "memcg/host/binding.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <stdexcept>

#include "memcg/core/charge/limits.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "pressure_source.hpp"

namespace memcg::host {
namespace {

// The largest pass of the reclaim driver between two looks at stop() (256 units of 4 KiB: at
// most 8 bites of 32 units per reclaimer).
constexpr uint64_t kReclaimStepBytes = 1ull << 20;

uint64_t sub_sat(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

int64_t diff(uint64_t a, uint64_t b) {
  const uint64_t cap = static_cast<uint64_t>(INT64_MAX);
  return a >= b ? static_cast<int64_t>(std::min(a - b, cap))
                : -static_cast<int64_t>(std::min(b - a, cap));
}

uint64_t steady_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

void close_fd(int& fd) noexcept {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

RootSettings compute_root_settings(const HostCgroup& cg, uint64_t root_current,
                                   const BindOptions& o) {
  RootSettings s;
  // The budget follows the working set, not memory.current: page cache that the kernel would
  // drop first is not memory the tenants must give up.
  s.kernel_usage = cg.chain.empty() ? 0 : cg.usage();
  s.working_set = cg.chain.empty() ? 0 : cg.working_set();
  s.unaccounted = sub_sat(s.working_set, root_current);
  // One headroom for both, from the limit that binds (the high when there is no max):
  // max(headroom_bytes, limit x permille / 1000), computed without overflow.
  const uint64_t base = cg.limit != kNoLimit ? cg.limit : cg.high;
  if (base != kNoLimit)
    s.headroom = std::max(o.headroom_bytes, base / 1000 * o.headroom_permille +
                                                base % 1000 * o.headroom_permille / 1000);
  auto derive = [&](uint64_t limit) -> uint64_t {
    return limit == kNoLimit ? kNoLimit : sub_sat(sub_sat(limit, s.headroom), s.unaccounted);
  };
  s.max = derive(cg.limit);
  s.high = derive(cg.high);
  return s;
}

HostBinding::HostBinding(Controller& controller, BindOptions options)
    : controller_(controller), options_(std::move(options)) {
  const BindOptions& o = options_;
  if (o.headroom_permille > 1000 || o.reclaim_permille > 1000)
    throw std::invalid_argument("memcg::host: a permille option above 1000");
  if (o.period_ms < 10 || o.period_ms > 3'600'000)
    throw std::invalid_argument("memcg::host: period_ms outside 10 ms .. 1 h");
  if (o.pressure == PressureMode::kFd && o.pressure_fd < 0)
    throw std::invalid_argument("memcg::host: PressureMode::kFd without pressure_fd");
  if (o.discover.version < 0 || o.discover.version > 2)
    throw std::invalid_argument("memcg::host: discover.version must be 0, 1 or 2");
}

HostBinding::~HostBinding() { stop(); }

int HostBinding::refresh(std::string* error) {
  std::unique_lock guard(refresh_mu_, std::try_to_lock);
  if (!guard.owns_lock()) {
    if (error) *error = "a refresh is in flight";
    return EBUSY;
  }
  HostCgroup cg;
  std::string why;
  const int err = discover(options_.discover, &cg, &why);
  if (err) {
    std::lock_guard lock(mu_);
    ++status_.errors;
    status_.last_error = why;
    if (error) *error = why;
    return err;
  }
  Group& root = controller_.root();
  const uint64_t root_current = root.current();
  const RootSettings s = compute_root_settings(cg, root_current, options_);
  {
    std::lock_guard lock(mu_);
    status_.bound = true;
    status_.cgroup = cg;
    status_.applied = s;
    ++status_.refreshes;
    status_.last_error.clear();
  }
  guard.unlock();  // the writes below may reclaim and call back into user code
  root.set_high(s.high);  // stored for readers; the library does not throttle the root
  if (options_.budget != nullptr) {
    // The budget writes min(its limit, ours): the kernel's usage beyond the root's is what the
    // budget's target must also hold (the kubelet counts it, page cache included).
    options_.budget->set_outside(
        {s.max, sub_sat(s.kernel_usage, root_current), s.headroom, options_.enforce});
  } else if (controller_.to_units_floor(s.max) != root.memory().max()) {
    // Only a change is written: an unchanged limit would drain every stock at each period.
    write_max(root, s.max, !options_.enforce);
  }
  const uint64_t current = root.current();
  if (s.high != kNoLimit && current > s.high) reclaim_root(current - s.high, false);
  const uint64_t after = root.current();
  std::lock_guard lock(mu_);
  status_.root_current = after;
  status_.unaccounted = diff(cg.working_set(), after);
  status_.unaccounted_rss = diff(cg.rss, after);
  return 0;
}

int HostBinding::start(std::string* error) {
  if (running_.load()) {
    if (error) *error = "already started";
    return EBUSY;
  }
  HostCgroup cg;
  std::string why;
  if (int err = discover(options_.discover, &cg, &why)) {
    if (error) *error = why;
    return err;
  }
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) {
    if (error) *error = "eventfd failed";
    return errno;
  }
  if (int err = open_pressure(cg, error)) {
    close_sources();
    return err;
  }
  if (options_.watch_events && !cg.events_file.empty()) {
    inotify_fd_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (inotify_fd_ >= 0 && ::inotify_add_watch(inotify_fd_, cg.events_file.c_str(), IN_MODIFY) < 0)
      close_fd(inotify_fd_);  // no inotify here: the period alone follows changes
    if (inotify_fd_ >= 0) watched_events_ = cg.events_file;
  }
  if (int err = refresh(error)) {
    close_sources();
    return err;
  }
  stop_requested_.store(false);
  running_.store(true);
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    running_.store(false);
    close_sources();
    if (error) *error = "cannot start the thread";
    return EAGAIN;
  }
  return 0;
}

int HostBinding::open_pressure(const HostCgroup& cg, std::string* error) {
  PressureMode mode = options_.pressure;
  std::string source = "none";
  if (mode == PressureMode::kAuto)
    mode = cg.version == 1 && !cg.pressure_level_file.empty() ? PressureMode::kVmpressure
           : !cg.pressure_file.empty()                         ? PressureMode::kPsi
                                                               : PressureMode::kNone;
  int fd = -1;
  switch (mode) {
    case PressureMode::kPsi:
      if (cg.pressure_file.empty()) {
        if (error) *error = "no memory.pressure and no /proc/pressure/memory";
        return ENOENT;
      }
      fd = internal::open_psi_trigger(cg.pressure_file, options_.psi_trigger);
      source = "psi:" + cg.pressure_file;
      pressure_pri_ = true;
      break;
    case PressureMode::kVmpressure:
      if (cg.pressure_level_file.empty()) {
        if (error) *error = "no memory.pressure_level (v1 only)";
        return ENOENT;
      }
      fd = internal::open_vmpressure(cg.bound().dir, options_.vmpressure_level, &v1_level_fd_);
      source = "vmpressure:" + cg.pressure_level_file;
      break;
    case PressureMode::kFd:
      fd = ::fcntl(options_.pressure_fd, F_DUPFD_CLOEXEC, 0);
      if (fd < 0) fd = -errno;
      source = "fd";
      break;
    default:
      break;
  }
  if (fd < 0 && mode != PressureMode::kNone) {
    if (error) *error = source + ": cannot register (errno " + std::to_string(-fd) + ")";
    return -fd;
  }
  pressure_fd_ = fd;
  std::lock_guard lock(mu_);
  status_.pressure_source = source;
  return 0;
}

void HostBinding::close_sources() noexcept {
  close_fd(pressure_fd_);
  close_fd(v1_level_fd_);
  close_fd(inotify_fd_);
  close_fd(stop_fd_);
  watched_events_.clear();
}

void HostBinding::stop() noexcept {
  if (!running_.exchange(false)) return;
  stop_requested_.store(true);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(stop_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  close_sources();
}

void HostBinding::reclaim_root(uint64_t bytes, bool pressure) noexcept {
  Group& root = controller_.root();
  const uint64_t before = root.current();
  // memory.reclaim's loop (quarter steps, 16 fruitless passes) in passes of at most 1 MiB, with
  // a look at stop() between passes: stopping waits for one small pass of the driver at most.
  // The driver skips groups within their effective min and breaches low only when a whole pass
  // freed nothing.
  const int64_t target = controller_.to_units_floor(bytes);
  const int64_t step = std::max<int64_t>(1, controller_.to_units_floor(kReclaimStepBytes));
  int64_t reclaimed = 0;
  for (int retries = 16; reclaimed < target && !stop_requested_.load();) {
    const int64_t want = std::clamp<int64_t>((target - reclaimed) / 4, 1, step);
    const int64_t got = reclaim(root, want, ReclaimReason::kProactive);
    reclaimed += got;
    if (got == 0 && --retries == 0) break;
  }
  const uint64_t freed = sub_sat(before, root.current());
  std::lock_guard lock(mu_);
  if (pressure) ++status_.reclaims; else ++status_.high_reclaims;
  status_.reclaimed_bytes += freed;
}

void HostBinding::on_pressure() noexcept {
  const uint64_t now = controller_.clock().now_ns();
  {
    std::lock_guard lock(mu_);
    ++status_.pressure_events;
    if (have_last_reclaim_ && now - last_reclaim_ns_ < options_.reclaim_interval_ns) {
      ++status_.reclaims_suppressed;
      return;
    }
  }
  have_last_reclaim_ = true;
  last_reclaim_ns_ = now;
  const uint64_t usage = controller_.root().current();
  const uint64_t share = usage / 1000 * options_.reclaim_permille +
                         usage % 1000 * options_.reclaim_permille / 1000;
  reclaim_root(std::max(options_.reclaim_min_bytes, share), true);
}

void HostBinding::run() noexcept {
  uint64_t next_refresh = steady_ms() + options_.period_ms;
  for (;;) {
    pollfd fds[3] = {{stop_fd_, POLLIN, 0},
                     {pressure_fd_, static_cast<short>(pressure_pri_ ? POLLPRI : POLLIN), 0},
                     {inotify_fd_, POLLIN, 0}};
    const uint64_t now = steady_ms();
    const int timeout = now >= next_refresh ? 0 : static_cast<int>(next_refresh - now);
    const int n = ::poll(fds, 3, timeout);
    if (n < 0 && errno != EINTR) break;
    if (fds[0].revents) break;
    if (fds[1].revents & (POLLIN | POLLPRI)) {
      char buf[64];
      // eventfd and pipe: consume what made it readable (PSI needs no read); 0 = a pipe's EOF.
      const ssize_t r = pressure_pri_ ? 1 : ::read(pressure_fd_, buf, sizeof buf);
      if (r == 0) {
        close_fd(pressure_fd_);
      } else if (r > 0 || errno == EAGAIN) {
        if (r > 0) on_pressure();
      }
    }
    if (pressure_fd_ >= 0 && (fds[1].revents & (POLLERR | POLLHUP | POLLNVAL)) &&
        !(fds[1].revents & POLLIN)) {
      // The source went away (a removed cgroup's trigger, a closed pipe): stop watching it.
      close_fd(pressure_fd_);
      std::lock_guard lock(mu_);
      status_.last_error = "pressure source closed";
    }
    bool due = steady_ms() >= next_refresh;
    if (inotify_fd_ >= 0 && (fds[2].revents & POLLIN)) {
      alignas(inotify_event) char buf[4096];
      while (::read(inotify_fd_, buf, sizeof buf) > 0) {
      }
      due = true;
    }
    if (due) {
      // A failure is recorded in status() (errors, last_error) and retried next period.
      static_cast<void>(refresh(nullptr));
      next_refresh = steady_ms() + options_.period_ms;
    }
  }
}

HostStatus HostBinding::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

}  // namespace memcg::host
