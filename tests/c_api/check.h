/* The C API tests' checks: CHECK counts a failed condition and goes on, so that one run reports
 * every failure; check_report prints the program's verdict ("<name>: ok", which ctest matches)
 * and gives its exit status. */
#ifndef MEMCG_TESTS_C_API_CHECK_H_
#define MEMCG_TESTS_C_API_CHECK_H_

#include <stdio.h>

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                              \
    }                                                                          \
  } while (0)

static int check_report(const char* name) {
  if (failures != 0) {
    fprintf(stderr, "%s: %d check(s) failed\n", name, failures);
    return 1;
  }
  printf("%s: ok\n", name);
  return 0;
}

#endif /* MEMCG_TESTS_C_API_CHECK_H_ */
