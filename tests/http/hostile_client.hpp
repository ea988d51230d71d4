// Raw-socket clients for the hostile-client tests of memcg::http (loopback only): they send what
// no well-behaved client sends, at the pace they choose, from a chosen loopback source address
// (the whole of 127.0.0.0/8 is local, so an attacker on 127.0.0.2 is another peer for the
// server's per-peer limit than a well-behaved client on 127.0.0.1).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace memcg::http::testing {

using Clock = std::chrono::steady_clock;

// The process's resident set, in bytes (the server runs in the test process).
inline size_t rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  return 0;
}

// A connected socket to 127.0.0.1:`port` from `source`, or -1.
inline int connect_from(int port, const char* source = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in src{};
  src.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &src.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
    ::close(fd);
    return -1;
  }
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{0, 200'000};  // sends block at most 200 ms: a server that stops reading is seen
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return fd;
}

// Sends all of `data`; false when the server closed or stopped reading for 200 ms.
inline bool send_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// What the server sent until it closed the connection or `timeout` passed; *closed says which.
inline std::string read_until_closed(int fd, std::chrono::milliseconds timeout,
                                     bool* closed = nullptr, size_t max = 1 << 20) {
  std::string out;
  const auto end = Clock::now() + timeout;
  if (closed) *closed = false;
  char buf[65536];
  while (Clock::now() < end && out.size() < max) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// The status code of an HTTP answer's first line, or 0.
inline int status_of(const std::string& answer) {
  if (answer.rfind("HTTP/1.", 0) != 0 || answer.size() < 12) return 0;
  return std::atoi(answer.c_str() + 9);
}

// A thread that keeps one hostile connection busy: `step` is called until it returns false, the
// time is up or stop() is called.
class Attacker {
 public:
  template <typename Step>
  Attacker(std::chrono::milliseconds limit, Step step)
      : thread_([this, limit, step]() mutable {
          const auto end = Clock::now() + limit;
          while (!stop_.load() && Clock::now() < end && step()) {
          }
          done_.store(true);
        }) {}
  ~Attacker() { stop(); }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  bool done() const { return done_.load(); }

 private:
  std::atomic<bool> stop_{false}, done_{false};
  std::thread thread_;
};

}  // namespace memcg::http::testing
