/* The reference of bench/bindings_bench.py: a reservation's grow + shrink pair (4 KiB) through
 * the C API, on a group at depth 3 of a fresh controller, timed over N pairs.
 * Usage: bindings_pair N. Prints "ns_per_pair X". */
#include <memcg/c/memcg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char** argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  memcg_controller* ctl;
  memcg_group* leaf;
  memcg_reservation* r;
  if (n <= 0 || memcg_controller_create(NULL, &ctl) != 0 ||
      memcg_group_create(ctl, "a", NULL) != 0 || memcg_group_create(ctl, "a/b", NULL) != 0 ||
      memcg_group_create(ctl, "a/b/c", &leaf) != 0 ||
      memcg_reservation_create(leaf, NULL, MEMCG_OOM_KERNEL, MEMCG_PRIORITY_DEFAULT, &r) != 0) {
    fprintf(stderr, "bindings_pair: set-up failed\n");
    return 1;
  }
  double start = now_ns();
  for (long i = 0; i < n; i++) {
    if (memcg_reservation_grow(r, 4096) != MEMCG_RESERVE_OK) {
      fprintf(stderr, "bindings_pair: grow refused\n");
      return 1;
    }
    memcg_reservation_shrink(r, 4096);
  }
  double elapsed = now_ns() - start;
  printf("ns_per_pair %.2f\n", elapsed / (double)n);
  memcg_reservation_destroy(r);
  memcg_group_release(leaf);
  return memcg_controller_destroy(ctl) == 0 ? 0 : 1;
}
