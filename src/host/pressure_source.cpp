// Registration of the kernel's memory pressure notifications (pressure_source.hpp).
#include "pressure_source.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

namespace memcg::host::internal {

int open_psi_trigger(const std::string& pressure_file, const std::string& spec) {
  const int fd = ::open(pressure_file.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -errno;
  // The trigger lives as long as the descriptor; the terminating NUL is part of the write.
  if (::write(fd, spec.c_str(), spec.size() + 1) < 0) {
    const int err = errno;
    ::close(fd);
    return -err;
  }
  return fd;
}

int open_vmpressure(const std::string& cgroup_dir, const std::string& level, int* level_fd) {
  const int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd < 0) return -errno;
  const int lfd = ::open((cgroup_dir + "/memory.pressure_level").c_str(), O_RDONLY | O_CLOEXEC);
  if (lfd < 0) {
    const int err = errno;
    ::close(efd);
    return -err;
  }
  const int cfd = ::open((cgroup_dir + "/cgroup.event_control").c_str(), O_WRONLY | O_CLOEXEC);
  int err = cfd < 0 ? errno : 0;
  if (cfd >= 0) {
    const std::string line = std::to_string(efd) + " " + std::to_string(lfd) + " " + level;
    if (::write(cfd, line.c_str(), line.size()) < 0) err = errno;
    ::close(cfd);
  }
  if (err) {
    ::close(lfd);
    ::close(efd);
    return -err;
  }
  *level_fd = lfd;
  return efd;
}

}  // namespace memcg::host::internal
