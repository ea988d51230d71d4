// A benchmark's set-up must work, or the benchmark measures something else (a null group, a
// listener that is not there, an empty stock): BENCH_CHECK(call) aborts with the call's text and
// its result (errno name or status) when an errno call does not return 0 or a charge is not kOk.
// Timed loops do not use it: no branch is added to the code being measured.
#ifndef MEMCG_BENCH_CHECK_HPP_
#define MEMCG_BENCH_CHECK_HPP_

#include <cstdio>
#include <cstdlib>

#include "memcg/base/errors.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/wait/charge_wait.hpp"

namespace memcg::bench {

[[noreturn]] inline void check_failed(const char* call, const char* result) {
  std::fprintf(stderr, "benchmark set-up failed: %s: %s\n", call, result);
  std::abort();
}
inline void check(int err, const char* call) {
  if (err != 0) check_failed(call, errno_name(err));
}
inline void check(ChargeStatus s, const char* call) {
  if (s != ChargeStatus::kOk) check_failed(call, charge_status_name(s));
}
inline void check(WaitStatus s, const char* call) {
  if (s != WaitStatus::kOk) check_failed(call, wait_status_name(s));
}

}  // namespace memcg::bench

#define BENCH_CHECK(call) ::memcg::bench::check((call), #call)

#endif  // MEMCG_BENCH_CHECK_HPP_
