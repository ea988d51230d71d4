// CPU identity, possible-CPU count, the process-wide rseq decision, and the per-CPU fence.

#include "memcg/base/internal/cpu.hpp"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "memcg/base/internal/rseq.hpp"

#if __has_include(<linux/membarrier.h>)
#include <linux/membarrier.h>
#endif

namespace memcg::internal {
namespace {

// The membarrier commands used here, for headers that predate them (values are kernel ABI).
constexpr int kMembarrierPrivateExpeditedRseq = 1 << 7;
constexpr int kMembarrierRegisterPrivateExpeditedRseq = 1 << 8;
constexpr unsigned kMembarrierFlagCpu = 1U << 0;
#if defined(MEMBARRIER_CMD_FLAG_CPU)
static_assert(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ == kMembarrierPrivateExpeditedRseq);
static_assert(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ ==
              kMembarrierRegisterPrivateExpeditedRseq);
static_assert(MEMBARRIER_CMD_FLAG_CPU == kMembarrierFlagCpu);
#endif

long membarrier(int cmd, unsigned flags, int cpu) noexcept {
#if defined(SYS_membarrier)
  return syscall(SYS_membarrier, cmd, flags, cpu);
#else
  (void)cmd, (void)flags, (void)cpu;
  errno = ENOSYS;
  return -1;
#endif
}

// Highest id in a list such as "0-3,8-11" (the format of /sys/devices/system/cpu/possible).
int parse_highest_cpu(const char* s) noexcept {
  int highest = -1;
  while (*s != '\0') {
    if (*s >= '0' && *s <= '9') {
      char* end = nullptr;
      const long v = std::strtol(s, &end, 10);
      if (v > highest && v < (1L << 20)) highest = static_cast<int>(v);
      s = end;
    } else {
      ++s;
    }
  }
  return highest;
}

int read_nr_cpu_ids() noexcept {
  if (std::FILE* f = std::fopen("/sys/devices/system/cpu/possible", "re")) {
    char buf[256] = {};
    const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
    std::fclose(f);
    if (ok) {
      const int highest = parse_highest_cpu(buf);
      if (highest >= 0) return highest + 1;
    }
  }
  const long conf = sysconf(_SC_NPROCESSORS_CONF);
  return conf > 0 ? static_cast<int>(conf) : 1;
}

bool decide_rseq_mode() noexcept {
#if MEMCG_RSEQ_CS
  if (env_disables_rseq(std::getenv("MEMCG_NO_RSEQ"))) return false;
  if (__rseq_size == 0) return false;
  if (static_cast<int32_t>(__atomic_load_n(&rseq_area()->cpu_id, __ATOMIC_RELAXED)) < 0) {
    return false;
  }
  return membarrier(kMembarrierRegisterPrivateExpeditedRseq, 0, 0) == 0;
#else
  return false;
#endif
}

}  // namespace

int current_cpu_slow() noexcept {
  const int cpu = sched_getcpu();
  return cpu >= 0 ? cpu : 0;
}

int nr_cpu_ids() noexcept {
  static const int n = read_nr_cpu_ids();
  return n;
}

bool env_disables_rseq(const char* value) noexcept {
  return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

bool rseq_mode() noexcept {
  static const bool mode = decide_rseq_mode();
  return mode;
}

void fence_cpu(int cpu) noexcept {
  if (membarrier(kMembarrierPrivateExpeditedRseq, kMembarrierFlagCpu, cpu) == 0) return;
  // Aimed at one CPU the command can only fail for an id the kernel rejects; the all-CPU form
  // gives the same guarantee at a higher price.
  if (membarrier(kMembarrierPrivateExpeditedRseq, 0, 0) == 0) return;
  // Registration succeeded when rseq_mode() was decided, so this cannot happen; going on would
  // let a critical section commit into data another thread believes it owns.
  std::fprintf(stderr, "memcg: membarrier(PRIVATE_EXPEDITED_RSEQ) failed: %s\n",
               std::strerror(errno));
  std::abort();
}

}  // namespace memcg::internal
