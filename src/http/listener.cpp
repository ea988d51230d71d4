// The acceptor of memcg::http::Server: accepts connections and hands them to libmicrohttpd's
// workers, enforces the per-request deadlines (read_timeout, write_timeout) that
// libmicrohttpd's inactivity timeout cannot, and survives every accept() error: one client's
// errors are skipped, a descriptor or memory shortage is counted and waited out (a spare
// descriptor, kept or taken again, refuses the waiting clients meanwhile), and a failed
// listening socket is closed, reported (running() false) and bound again every second.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "server_impl.hpp"

namespace memcg::http::detail {
namespace {

constexpr int kTickMs = 100;               // deadline granularity
constexpr int kFullTickMs = 10;            // how often a full server looks for room
constexpr auto kShortageBackoff = std::chrono::milliseconds(100);
constexpr auto kRebindInterval = std::chrono::seconds(1);
constexpr int kAcceptBurst = 64;           // accepts per wakeup before deadlines are looked at

// Errors of one connection that accept() reports (accept(2): Linux passes pending network
// errors of the new socket on): skip it and go on.
bool client_error(int err) {
  switch (err) {
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case EPERM:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
    case ETIMEDOUT:
      return true;
    default:
      return false;
  }
}

bool shortage(int err) { return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM; }

bool uid_allowed(const ServerOptions& o, uint32_t uid) {
  if (o.unix_allowed_uids.empty()) return uid == ::geteuid();
  return std::find(o.unix_allowed_uids.begin(), o.unix_allowed_uids.end(), uid) !=
         o.unix_allowed_uids.end();
}

}  // namespace

int listen_unix(const std::string& path, dev_t* dev, ino_t* ino) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) return -ENAMETOOLONG;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
    // Only a socket file is ever replaced, and only a stale one: no server accepts on it.
    if (!S_ISSOCK(st.st_mode)) return -EEXIST;
    const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0) return -errno;
    const int r = ::connect(probe, reinterpret_cast<const sockaddr*>(&addr), len);
    const int err = errno;
    ::close(probe);
    if (r == 0) return -EADDRINUSE;
    if (err != ECONNREFUSED) return -err;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return -errno;
  } else if (errno != ENOENT) {
    return -errno;
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  // Linux gives the file bind() creates the socket inode's mode (less the umask): 0600 from the
  // start, never a moment wider. The chmod after is for the record, should that ever differ.
  ::fchmod(fd, 0600);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    const int err = errno;
    ::close(fd);
    return -err;
  }
  if (::chmod(path.c_str(), 0600) != 0 || ::listen(fd, 128) != 0 ||
      ::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(path.c_str());
    return -err;
  }
  *dev = st.st_dev;
  *ino = st.st_ino;
  return fd;
}

int listen_on(const sockaddr* addr, socklen_t len) {
  const int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  const int yes = 1;
  // SO_REUSEADDR only: SO_REUSEPORT would let a second server (of any program of this user)
  // bind the same port and take a share of the connections.
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  if (addr->sa_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &yes, sizeof yes);
  if (::bind(fd, addr, len) != 0 || ::listen(fd, 128) != 0) {
    const int err = errno;
    ::close(fd);
    return -err;
  }
  return fd;
}

// Clients of the Unix socket: a peer whose uid is not allowed (SO_PEERCRED) is closed before
// libmicrohttpd sees it; the others are handed over as TCP clients are.
void Impl::accept_unix(size_t room, SteadyClock::time_point* paused_until) {
  const int burst = static_cast<int>(std::min<size_t>(room, kAcceptBurst));
  for (int i = 0; i < burst; ++i) {
    sockaddr_un peer{};
    socklen_t len = sizeof peer;
    const int fd = ::accept4(unix_fd, reinterpret_cast<sockaddr*>(&peer), &len,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if (client_error(err)) continue;
      accept_errors.fetch_add(1, std::memory_order_relaxed);
      if (shortage(err)) *paused_until = SteadyClock::now() + kShortageBackoff;
      return;
    }
    ucred cred{};
    socklen_t cred_len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0 ||
        !uid_allowed(options, cred.uid)) {
      unix_refused.fetch_add(1, std::memory_order_relaxed);  // before the peer can see the close
      ::close(fd);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(conns_mutex);
      ++pending_starts;
      last_add = SteadyClock::now();
    }
    // An unnamed client socket has only its family: libmicrohttpd is given the whole record.
    if (MHD_add_connection(daemon, fd, reinterpret_cast<sockaddr*>(&peer), sizeof peer) != MHD_YES) {
      refused.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock(conns_mutex);
      if (pending_starts > 0) --pending_starts;
    }
  }
}

void Impl::accept_loop() {
  // A descriptor held in reserve: when descriptors run out, it is given up to accept and close
  // the waiting client, so that clients are refused instead of piling up in the backlog.
  int spare = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  SteadyClock::time_point paused_until{}, rebind_at{};
  while (!stopping.load()) {
    // The spare may be missing: not to be had when the acceptor started, or taken by another
    // thread in the moment it was given up. Taken again as soon as a descriptor is free (one
    // failing open() a round while none is).
    if (spare < 0) spare = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const SteadyClock::time_point now = SteadyClock::now();
    // At the connection limit, further clients wait in the kernel's listen backlog (bounded by
    // the kernel) until a connection closes, rather than being accepted and dropped.
    size_t room;
    {
      std::lock_guard<std::mutex> lock(conns_mutex);
      // A connection handed over is registered by a worker a moment later; one that never is
      // (the worker failed it) stops counting after a second.
      if (pending_starts > 0 && now - last_add > std::chrono::seconds(1)) pending_starts = 0;
      const size_t open = conns.size() + pending_starts;
      room = open < max_connections ? max_connections - open : 0;
    }
    const bool poll_listener = listen_fd >= 0 && now >= paused_until && room > 0;
    const bool poll_unix = unix_fd >= 0 && now >= paused_until && room > 0;
    // The Unix socket, when polled, is the last entry (after the TCP listener if that is).
    pollfd fds[3] = {{wake_fd, POLLIN, 0}, {listen_fd, POLLIN, 0}, {unix_fd, POLLIN, 0}};
    if (!poll_listener) fds[1] = fds[2];
    const nfds_t nfds = 1 + (poll_listener ? 1 : 0) + (poll_unix ? 1 : 0);
    ::poll(fds, nfds, room > 0 ? kTickMs : kFullTickMs);
    if (stopping.load()) break;
    if (poll_unix && fds[nfds - 1].revents != 0) accept_unix(room, &paused_until);
    // Event streams silent for a heartbeat interval are resumed to send one.
    wake_streams(false);

    if (poll_listener && fds[1].revents != 0 && fds[1].fd == listen_fd) {
      const int burst = static_cast<int>(std::min<size_t>(room, kAcceptBurst));
      for (int i = 0; i < burst; ++i) {
        sockaddr_storage peer{};
        socklen_t len = sizeof peer;
        const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len,
                                 SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
          // Over the per-peer limit (or out of memory) libmicrohttpd closes it at once. It
          // decides that here, inside MHD_add_connection(), against its own count of the peer's
          // connections (kept from the hand-off until the connection is cleaned up).
          {
            std::lock_guard<std::mutex> lock(conns_mutex);
            ++pending_starts;
            last_add = SteadyClock::now();
          }
          // Not counted as accepted here: a worker counts it when it takes the connection
          // (on_connection, before it reads from it), so that a refused connection is never
          // counted as accepted, not even while libmicrohttpd refuses it.
          if (MHD_add_connection(daemon, fd, reinterpret_cast<sockaddr*>(&peer), len) != MHD_YES) {
            refused.fetch_add(1, std::memory_order_relaxed);
            std::lock_guard<std::mutex> lock(conns_mutex);
            if (pending_starts > 0) --pending_starts;
          }
          continue;
        }
        const int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK) break;
        if (client_error(err)) continue;
        accept_errors.fetch_add(1, std::memory_order_relaxed);
        if (shortage(err)) {
          if ((err == EMFILE || err == ENFILE) && spare >= 0) {
            ::close(spare);
            const int victim = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (victim >= 0) {
              ::close(victim);
              refused.fetch_add(1, std::memory_order_relaxed);
            }
            spare = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
          }
          paused_until = SteadyClock::now() + kShortageBackoff;
          break;
        }
        // The listening socket itself failed (EBADF, EINVAL, ENOTSOCK, ...).
        listener_losses.fetch_add(1, std::memory_order_relaxed);
        listening.store(false);
        ::close(listen_fd);
        listen_fd = -1;
        rebind_at = SteadyClock::now() + kRebindInterval;
        break;
      }
    }

    if (listen_fd < 0 && SteadyClock::now() >= rebind_at) {
      const int fd = listen_on(reinterpret_cast<const sockaddr*>(&bound), bound_len);
      if (fd >= 0) {
        listen_fd = fd;
        listening.store(true);
      } else {
        rebind_at = SteadyClock::now() + kRebindInterval;
      }
    }

    // Deadlines: a connection past its own is shut down; libmicrohttpd then sees the end of the
    // stream and closes it (a registered descriptor is never closed before it is unregistered).
    const SteadyClock::time_point t = SteadyClock::now();
    std::lock_guard<std::mutex> lock(conns_mutex);
    for (Conn* c : conns) {
      if (c->cut || t < c->deadline) continue;
      c->cut = true;
      ::shutdown(c->fd, SHUT_RDWR);
      timed_out.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (spare >= 0) ::close(spare);
}

}  // namespace memcg::http::detail
