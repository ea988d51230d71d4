// The cgroup-v2 file interface of a group: each knob and statistic as a named virtual file with
// the kernel's exact read format and write grammar, so that tools, scenarios and users who know
// the kernel's files can drive memcg the same way.
//
// Files of features the library does not implement do not exist (ENOENT), and per-group files do
// not exist on the root, as in the kernel. A rejected write changes nothing.
//
// Extensions (no such file or key in the kernel), for the library's waiting charges
// (charge_wait.hpp): memory.events and memory.events.local end with a `wait` line (charges that
// queued on the group's memory.max) and a `preempt` line (members asked to give memory back for
// a waiting charge of a higher class), and every non-root group has a read-only memory.wait:
//   waiters N         charges waiting now on this group's memory.max
//   queued_bytes N    the bytes they asked for
//   reserved_bytes N  bytes already set aside for aged waiters
//   waits N           charges that queued here since the controller was created
//   granted N, timed_out N, cancelled N, removed N   what became of them
//   last_wait_usec N, max_wait_usec N                how long the last / longest wait was
//   high_waiters N ... low_removed N  the seven lines above the times, per class (high, normal,
//                     low; waiters, queued_bytes, waits, granted, timed_out, cancelled, removed)
// a read-write memory.wait.priority ("low", "normal", "high"): the class of the group's
// waiting charges that name none, and a read-write memory.wait.preempt ("0", "1"): cooperative
// preemption for the charges waiting on this group's memory.max (set_wait_preempt).
//
// Thread safety: a File may be used from one thread at a time; different Files of one group may be
// used concurrently. memory.peak keeps per-open-file state, as in the kernel.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "memcg/core/tree/group.hpp"

namespace memcg {

namespace internal {
class FileNode;  // the file's hold on its group (core/internal/file_node.hpp)
}

// An open file. It holds its group until it is closed or the group is removed, whichever comes
// first. The removal deactivates the group's open files, as the kernel's kernfs node
// deactivation on rmdir: from then on read() and write() return ENODEV and the file no longer
// keeps the group (it does not stay dying for an open file). A read or write that began before
// the removal completes on the group. Closing (destroying) the file is fine at any time, also
// after the group's controller is gone once the group was removed.
class File {
 public:
  virtual ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  const std::string& name() const noexcept { return name_; }
  // The group; null once it was removed (the file no longer holds it). The pointer keeps
  // nothing alive: to use the group past a concurrent removal, hold a GroupRef of it.
  Group* group() const noexcept;
  virtual bool readable() const noexcept = 0;
  virtual bool writable() const noexcept = 0;
  // The file's contents. EACCES when the file is write-only; ENODEV once the group was removed.
  [[nodiscard]] virtual int read(std::string* out) = 0;
  // Parses and applies `text`. 0 on success, else EINVAL (grammar), ERANGE, EACCES (read-only
  // file), EAGAIN, EINTR, EBUSY as the file's semantics say, ENODEV once the group was removed;
  // on error nothing changed.
  // `nonblocking` is O_NONBLOCK: memory.high/max then only store the value.
  [[nodiscard]] virtual int write(std::string_view text, bool nonblocking = false) = 0;

 protected:
  // REQUIRES: `node` is attached to its group (internal::attach_file_node).
  File(std::shared_ptr<internal::FileNode> node, std::string name);
  internal::FileNode& node() const noexcept { return *node_; }

 private:
  std::shared_ptr<internal::FileNode> node_;
  std::string name_;
};

// Opens `name` on `group`. ENOENT when the group has no such file or was removed.
[[nodiscard]] int open_file(Group& group, std::string_view name, std::unique_ptr<File>* out);
// The names of the files `group` has, in a stable order.
std::vector<std::string> file_names(const Group& group);

// One-shot helpers: open, read or write, close.
[[nodiscard]] int read_file(Group& group, std::string_view name, std::string* out);
[[nodiscard]] int write_file(Group& group, std::string_view name, std::string_view text,
                             bool nonblocking = false);

// The eventfd that signals events of the trigger written to an open memory.pressure file (it
// becomes readable, like the kernel's POLLPRI; reading it consumes the events), or -1 when `file`
// is not memory.pressure or holds no trigger. Owned by the file. When the group is removed it is
// signalled once more, the trigger's removal notice (psi.hpp: the kernel's POLLERR|POLLPRI), and
// no event follows; a trigger written after the removal is refused with ENODEV.
int pressure_file_eventfd(const File& file) noexcept;

namespace internal {
// Opens memory.pressure on `group` (pressure_file.cpp). ENOENT when the group was removed.
[[nodiscard]] int open_pressure_file(Group& group, std::unique_ptr<File>* out);
}  // namespace internal

}  // namespace memcg
