// Error convention of memcg.
//
// Every fallible operation returns an `int`: 0 on success, or a positive errno value that says
// what went wrong, with the meaning a cgroup v2 file write would give it:
//
//   EINVAL  the text does not follow the file's grammar, or a value is out of its range
//   ERANGE  an integer does not fit (memory.oom.group), a duration overflows
//   EBUSY   a second PSI trigger on one handle; a counter's max set below its usage
//   EAGAIN  memory.reclaim fell short of its target after its retries
//   EINTR   memory.reclaim was cancelled
//   ENOMEM  an internal allocation failed
//   EACCES  the file is not writable (a read-only file)
//   ENOENT  no such file (e.g. a per-group file asked of the root group)
//
// errno values are used instead of an enum so that results can be handed straight to code that
// already speaks errno (a FUSE front end, strerror, a scenario's `expect: EINVAL`).
//
// The two name functions below are pure and thread-safe; they allocate nothing.

#ifndef MEMCG_ERRORS_HPP_
#define MEMCG_ERRORS_HPP_

#include <cerrno>
#include <string_view>

namespace memcg {

// The symbolic name of a result code: "ok" for 0, "EINVAL", "ERANGE", "EBUSY", "EAGAIN", "EINTR",
// "ENOMEM", "EACCES", "ENOENT" for the codes above, "unknown" for anything else.
constexpr const char* errno_name(int code) {
  switch (code) {
    case 0:
      return "ok";
    case EINVAL:
      return "EINVAL";
    case ERANGE:
      return "ERANGE";
    case EBUSY:
      return "EBUSY";
    case EAGAIN:
      return "EAGAIN";
    case EINTR:
      return "EINTR";
    case ENOMEM:
      return "ENOMEM";
    case EACCES:
      return "EACCES";
    case ENOENT:
      return "ENOENT";
    default:
      return "unknown";
  }
}

// The inverse of errno_name for the names it returns (exact, case-sensitive): "ok" → 0,
// "EINVAL" → EINVAL, …; -1 for any other text, "unknown" included.
constexpr int errno_from_name(std::string_view name) {
  constexpr int kCodes[] = {0, EINVAL, ERANGE, EBUSY, EAGAIN, EINTR, ENOMEM, EACCES, ENOENT};
  for (int code : kCodes) {
    if (name == errno_name(code)) return code;
  }
  return -1;
}

}  // namespace memcg

#endif  // MEMCG_ERRORS_HPP_
