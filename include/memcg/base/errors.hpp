// Error convention of memcg: three kinds of entry points, each with one way to fail.
//
// 1. Set-up, registration and text: an `int`, 0 on success or a positive errno value, always
//    [[nodiscard]] (the project builds with -Werror=unused-result; a result ignored on purpose
//    is cast to void with a comment saying why). All of them (tests/nodiscard checks each):
//      Controller::create/remove; Group::set_max_checked, PageCounter::set_max_checked;
//      attach_current_thread, Group::attach; set_wait_priority, set_wait_preempt; MirroredCharge::set;
//      open_file, read_file, write_file, File::read/write;
//      parse_limit, parse_bytes, parse_duration, parse_oom_group, parse_reclaim,
//      parse_psi_trigger, parse_pressure_level, parse_event_control;
//      PsiTrigger::arm, PressureListener::listen/set_rate_limit, register_event_control,
//      EventListener::open;
//      jemalloc::Arena::create; http::Server::start; host::HostBinding::start/refresh,
//      host::discover, host::read_small_file and host's procfs parsers.
//    Bad input changes nothing. The codes have the meaning a cgroup v2 file operation gives them:
//
//   EINVAL      the text does not follow the file's grammar, or a value is out of its range
//   ERANGE      an integer does not fit (memory.oom.group), a duration overflows
//   EBUSY       a second registration on one handle; a counter's max set below its usage; a
//               group removed while it has children or attached threads; a process budget set
//               while another is being reached (ProcessBudget::set)
//   EAGAIN      memory.reclaim fell short of its target after its retries; no arena to spare
//   EINTR       memory.reclaim was cancelled
//   ENOMEM      an internal allocation failed
//   EACCES      the file is not writable (a read-only file)
//   ENOENT      no such file or group (e.g. a per-group file asked of the root group)
//   ENODEV      a read or write of an open file whose group was removed since it was opened
//   ENOSPC      a group has as many OOM handlers as it may hold (OomHandler::add)
//   EEXIST      the group already exists
//   EBADF       an eventfd that cannot be duplicated
//   EMFILE, ENFILE  no descriptor left for an eventfd
//   EALREADY    the HTTP server is already running
//   EIO         the HTTP server stopped as soon as it started; a member's callback threw on an
//               operator's kill or request (kill_member, preempt_member)
//   ENAMETOOLONG  the HTTP server's Unix socket path is empty or longer than a socket address
//               holds (ServerOptions::unix_socket)
//   EADDRINUSE, EADDRNOTAVAIL, EAFNOSUPPORT  the HTTP server's bind (which may also pass on
//               another errno of bind(2) or listen(2): errno_name says "unknown" for those,
//               strerror() knows them)
//   EFBIG       a kernel cgroup file larger than memcg::host reads (host/)
//   EOPNOTSUPP  (= ENOTSUP) jemalloc does not serve malloc in this process (Arena::create)
//   ECONNABORTED, EHOSTDOWN, EHOSTUNREACH, ENETDOWN, ENETUNREACH, ENOBUFS, ENONET, ENOPROTOOPT,
//   ENOTSOCK, EPERM, EPROTO, ETIMEDOUT
//               accept(2) errors that the HTTP server handles and counts (ServerStats); named
//               so that a report of them reads by name
//
//    errno values are used instead of an enum so that results can be handed straight to code
//    that already speaks errno (a FUSE front end, strerror, a scenario's `expect: EINVAL`).
//
// 2. The memory path: a status enum, never an exception, because a refusal there is an expected
//    outcome the caller branches on: ChargeStatus (try_charge, Member::charge), WaitStatus
//    (waiting charges), ReserveStatus (Reservation, which also says which rule refused). The
//    three enum types are [[nodiscard]], so every function returning one is. Each has a
//    *_name() function for logs.
//
// 3. Exceptions, only where no code can be returned: constructors given impossible arguments
//    (Controller with Options out of range, a Member of a removed group: std::invalid_argument),
//    and the allocator interfaces whose standard contract is std::bad_alloc (charge_or_throw,
//    Allocator, MemoryResource, the operator new hook, jemalloc arenas). The library's own
//    allocations may throw std::bad_alloc from the calls that allocate (create, open_file, ...).
//
// The two name functions below are pure and thread-safe; they allocate nothing.

#ifndef MEMCG_ERRORS_HPP_
#define MEMCG_ERRORS_HPP_

#include <cerrno>
#include <string_view>

namespace memcg {

// Every errno value an entry point of the library returns (see above), 0 first.
inline constexpr int kLibraryErrnos[] = {0,      EINVAL, ERANGE,     EBUSY,         EAGAIN,
                                         EINTR,  ENOMEM, EACCES,     ENOENT,        EEXIST,
                                         EBADF,  EMFILE, ENFILE,     EALREADY,      EADDRINUSE,
                                         EADDRNOTAVAIL,  EAFNOSUPPORT, EIO,
                                         EFBIG,  EOPNOTSUPP, ECONNABORTED, EHOSTDOWN,
                                         EHOSTUNREACH, ENETDOWN, ENETUNREACH, ENOBUFS, ENONET,
                                         ENOPROTOOPT, ENOTSOCK, EPERM, EPROTO, ETIMEDOUT, ENODEV,
                                         ENOSPC, ENAMETOOLONG};

// The symbolic name of a result code: "ok" for 0, "EINVAL" etc. for every code of
// kLibraryErrnos, "unknown" for anything else.
constexpr const char* errno_name(int code) {
  switch (code) {
    case 0: return "ok";
    case EINVAL: return "EINVAL";
    case ERANGE: return "ERANGE";
    case EBUSY: return "EBUSY";
    case EAGAIN: return "EAGAIN";
    case EINTR: return "EINTR";
    case ENOMEM: return "ENOMEM";
    case EACCES: return "EACCES";
    case ENOENT: return "ENOENT";
    case ENODEV: return "ENODEV";
    case ENOSPC: return "ENOSPC";
    case EEXIST: return "EEXIST";
    case EBADF: return "EBADF";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case EALREADY: return "EALREADY";
    case EADDRINUSE: return "EADDRINUSE";
    case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
    case EAFNOSUPPORT: return "EAFNOSUPPORT";
    case EIO: return "EIO";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case EFBIG: return "EFBIG";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case ECONNABORTED: return "ECONNABORTED";
    case EHOSTDOWN: return "EHOSTDOWN";
    case EHOSTUNREACH: return "EHOSTUNREACH";
    case ENETDOWN: return "ENETDOWN";
    case ENETUNREACH: return "ENETUNREACH";
    case ENOBUFS: return "ENOBUFS";
    case ENONET: return "ENONET";
    case ENOPROTOOPT: return "ENOPROTOOPT";
    case ENOTSOCK: return "ENOTSOCK";
    case EPERM: return "EPERM";
    case EPROTO: return "EPROTO";
    case ETIMEDOUT: return "ETIMEDOUT";
    default: return "unknown";
  }
}

// The inverse of errno_name for the names it returns (exact, case-sensitive): "ok" → 0,
// "EINVAL" → EINVAL, …; -1 for any other text, "unknown" included.
constexpr int errno_from_name(std::string_view name) {
  for (int code : kLibraryErrnos) {
    if (name == errno_name(code)) return code;
  }
  return -1;
}

}  // namespace memcg

#endif  // MEMCG_ERRORS_HPP_
