// Runs tests of this binary a second time in a child process with MEMCG_NO_RSEQ=1, so that the
// controller's per-CPU stock takes its try-lock path with one shard per CPU, as a deployment with
// the variable set would. The rseq decision is made once per process (internal::rseq_mode()), so
// a child process is the only way to see both modes in one test binary.
#pragma once

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

namespace memcg::testing {

// True in the child started by rerun_without_rseq() (and whenever the variable turns rseq off).
inline bool rseq_disabled_by_env() {
  const char* v = std::getenv("MEMCG_NO_RSEQ");
  return v != nullptr && v[0] != '\0' && std::string(v) != "0";
}

// Runs this executable with MEMCG_NO_RSEQ=1 and --gtest_filter=`filter`; returns its exit
// status (0 when every selected test passed), or -1 when it could not be started.
inline int rerun_without_rseq(const std::string& filter) {
  std::vector<char> self(4096);
  const ssize_t len = readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (len <= 0) return -1;
  self[static_cast<size_t>(len)] = '\0';

  std::vector<std::string> env_store;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("MEMCG_NO_RSEQ=", 0) != 0) env_store.emplace_back(*e);
  }
  env_store.emplace_back("MEMCG_NO_RSEQ=1");
  std::vector<char*> envp;
  for (std::string& s : env_store) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::string filter_arg = "--gtest_filter=" + filter;
  std::vector<char*> argv = {self.data(), filter_arg.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, self.data(), nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace memcg::testing
