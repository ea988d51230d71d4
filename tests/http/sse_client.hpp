// A raw-socket client of GET /v1/events for the tests of memcg::http (loopback or a Unix socket):
// it sends one request and collects the answer as it comes, de-chunked, and splits the
// Server-Sent Events out of it.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hostile_client.hpp"

namespace memcg::http::testing {

struct SseEvent {
  std::string id, event, data;
};

// A connected socket to the Unix socket at `path`, or -1.
inline int connect_unix(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

class SseClient {
 public:
  // Sends `GET target` with `headers` (each "Name: value\r\n") on `fd` (taken over).
  SseClient(int fd, const std::string& target, const std::string& headers = "") : fd_(fd) {
    ok_ = fd_ >= 0 && send_all(fd_, "GET " + target + " HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n");
  }
  ~SseClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  SseClient(const SseClient&) = delete;
  SseClient& operator=(const SseClient&) = delete;

  bool sent() const { return ok_; }

  // Reads for up to `timeout`, until `done()` holds on what came (checked after each read) or the
  // server closed. True when done() held.
  template <typename Done>
  bool read_until(std::chrono::milliseconds timeout, Done done) {
    const auto end = Clock::now() + timeout;
    char buf[16384];
    while (!done()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
      if (left.count() <= 0 || closed_) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        continue;
      }
      raw_.append(buf, static_cast<size_t>(n));
      parse();
    }
    return true;
  }
  // Reads until `n` events came.
  bool wait_events(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    return read_until(timeout, [&] { return events_.size() >= n; });
  }
  // Reads until the server closes the connection (true) or `timeout` passes.
  bool wait_closed(std::chrono::milliseconds timeout) {
    read_until(timeout, [&] { return closed_; });
    return closed_;
  }

  int status() const { return status_of(raw_); }
  const std::string& head() const { return head_; }
  const std::string& body() const { return body_; }  // de-chunked
  const std::vector<SseEvent>& events() const { return events_; }
  bool closed() const { return closed_; }
  bool ended_cleanly() const { return chunked_end_; }  // the last chunk came

 private:
  void parse() {
    if (!in_body_) {
      const size_t end = raw_.find("\r\n\r\n");
      if (end == std::string::npos) return;
      head_ = raw_.substr(0, end + 4);
      pos_ = end + 4;
      in_body_ = true;
      chunked_ = head_.find("chunked") != std::string::npos;
    }
    if (!chunked_) {
      body_ += raw_.substr(pos_);
      pos_ = raw_.size();
    } else {
      while (!chunked_end_) {
        const size_t eol = raw_.find("\r\n", pos_);
        if (eol == std::string::npos) break;
        const size_t size = std::strtoul(raw_.c_str() + pos_, nullptr, 16);
        if (raw_.size() < eol + 2 + size + 2) break;
        body_.append(raw_, eol + 2, size);
        pos_ = eol + 2 + size + 2;
        if (size == 0) chunked_end_ = true;
      }
    }
    // Events: blocks ending with an empty line; comment lines (":") ignored.
    for (;;) {
      const size_t end = body_.find("\n\n", event_pos_);
      if (end == std::string::npos) break;
      SseEvent e;
      bool any = false;
      size_t line = event_pos_;
      while (line < end + 1) {
        const size_t nl = body_.find('\n', line);
        const std::string l = body_.substr(line, nl - line);
        line = nl + 1;
        if (l.rfind("id: ", 0) == 0) e.id = l.substr(4), any = true;
        if (l.rfind("event: ", 0) == 0) e.event = l.substr(7), any = true;
        if (l.rfind("data: ", 0) == 0) e.data = l.substr(6), any = true;
        if (l.rfind(": heartbeat", 0) == 0) ++heartbeats_;
      }
      if (any) events_.push_back(e);
      event_pos_ = end + 2;
    }
  }

 public:
  int heartbeats() const { return heartbeats_; }

 private:
  int fd_;
  bool ok_ = false;
  std::string raw_, head_, body_;
  size_t pos_ = 0, event_pos_ = 0;
  bool in_body_ = false, chunked_ = false, chunked_end_ = false, closed_ = false;
  std::vector<SseEvent> events_;
  int heartbeats_ = 0;
};

}  // namespace memcg::http::testing
