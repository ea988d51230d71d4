// The kernel's pressure notifications memcg::host listens to, as one pollable descriptor each.
#pragma once

#include <string>

namespace memcg::host::internal {

// A PSI trigger: `spec` ("some 150000 2000000") written to `pressure_file` (a cgroup's
// memory.pressure or /proc/pressure/memory), held open; an event shows as POLLPRI.
// Returns the descriptor, or -errno.
int open_psi_trigger(const std::string& pressure_file, const std::string& spec);

// A v1 vmpressure notification at `level` ("low", "medium", "critical"): an eventfd registered
// through the cgroup's cgroup.event_control; an event shows as POLLIN on the eventfd, which is
// returned (*level_fd receives the memory.pressure_level descriptor, to close with it), or -errno.
int open_vmpressure(const std::string& cgroup_dir, const std::string& level, int* level_fd);

}  // namespace memcg::host::internal
