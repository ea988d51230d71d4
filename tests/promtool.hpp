// `promtool check metrics` on a text exposition, for the tests of every place that serves one.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace memcg::testing {

// Success when `promtool` (a command or path) accepts `text`; otherwise its output.
inline ::testing::AssertionResult promtool_accepts(const std::string& promtool,
                                                   const std::string& text) {
  char path[] = "/tmp/memcg_promtool_XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) return ::testing::AssertionFailure() << "mkstemp failed";
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written) {
    ::unlink(path);
    return ::testing::AssertionFailure() << "could not write " << path;
  }
  const std::string cmd = promtool + " check metrics < " + path + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) {
    ::unlink(path);
    return ::testing::AssertionFailure() << "could not run " << cmd;
  }
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int status = ::pclose(p);
  ::unlink(path);
  if (status != 0) return ::testing::AssertionFailure() << out;
  return ::testing::AssertionSuccess();
}

}  // namespace memcg::testing
