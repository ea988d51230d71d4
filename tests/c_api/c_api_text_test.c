/* Text crossing the C API: a NUL inside a written value's length is refused (EINVAL, nothing
 * changed), memcg_quote bounds what a binding puts into an error message, and memory.reclaim's
 * answer when nothing was reclaimable (EAGAIN, the stocks drained all the same). Prints
 * "c_api_text_test: ok". */
#include "memcg/c/memcg.h"
#include "check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static void read_text(memcg_group* g, const char* file, char* buf, size_t size) {
  buf[0] = '\0';
  CHECK(memcg_group_read(g, file, buf, size, NULL) == 0);
}

/* "1\0G" (3 bytes) was memory.max 1: the parser stopped at the NUL. */
static void test_nul_inside_length_refused(void) {
  memcg_controller* c = NULL;
  memcg_group* g = NULL;
  char buf[64];
  CHECK(memcg_controller_create(NULL, &c) == 0);
  CHECK(memcg_group_create(c, "t", &g) == 0);
  CHECK(memcg_group_write(g, "memory.max", "1G", 2, 0) == 0);
  CHECK(memcg_group_write(g, "memory.max", "1\0G", 3, 0) == EINVAL);
  read_text(g, "memory.max", buf, sizeof buf);
  CHECK(strcmp(buf, "1073741824\n") == 0);
  CHECK(memcg_group_write(g, "memory.high", "max\0", 4, 0) == EINVAL);
  CHECK(memcg_group_write(g, "memory.min", "\0", 1, 0) == EINVAL);
  /* The NUL after the length is not part of the value. */
  CHECK(memcg_group_write(g, "memory.max", "2G\0junk", 2, 0) == 0);
  read_text(g, "memory.max", buf, sizeof buf);
  CHECK(strcmp(buf, "2147483648\n") == 0);
  memcg_group_release(g);
  CHECK(memcg_controller_destroy(c) == 0);
}

static void test_quote_bounded(void) {
  char buf[MEMCG_QUOTE_SIZE];
  size_t len = 0;
  CHECK(memcg_quote("512M", 4, buf, sizeof buf, &len) == 0);
  CHECK(strcmp(buf, "\"512M\"") == 0 && len == 6);
  CHECK(memcg_quote("1\0G\n\"\\", 6, buf, sizeof buf, &len) == 0);
  CHECK(strcmp(buf, "\"1\\x00G\\x0a\\\"\\\\\"") == 0);
  CHECK(memcg_quote(NULL, 0, buf, sizeof buf, &len) == 0 && strcmp(buf, "\"\"") == 0);
  CHECK(memcg_quote(NULL, 1, buf, sizeof buf, &len) == EINVAL);
  /* 1 MiB of digits: 64 of them and "...". */
  size_t big = (size_t)1 << 20;
  char* digits = malloc(big);
  CHECK(digits != NULL);
  if (digits == NULL) return;
  memset(digits, '7', big);
  CHECK(memcg_quote(digits, big, buf, sizeof buf, &len) == 0);
  CHECK(len == 2 + MEMCG_QUOTE_MAX + 3);
  CHECK(buf[0] == '"' && buf[MEMCG_QUOTE_MAX + 1] == '"' &&
        strcmp(buf + MEMCG_QUOTE_MAX + 2, "...") == 0);
  /* The worst case (every byte escaped) fits MEMCG_QUOTE_SIZE. */
  memset(digits, 0x01, big);
  CHECK(memcg_quote(digits, big, buf, sizeof buf, &len) == 0);
  CHECK(len == MEMCG_QUOTE_SIZE - 1);
  /* The size asked first, as every read of the API. */
  CHECK(memcg_quote(digits, 10, NULL, 0, &len) == ERANGE && len == 42);
  free(digits);
}

/* Nothing reclaimable: EAGAIN, yet memory.current is 0 (the stock given back). */
static void test_reclaim_nothing_reclaimable(void) {
  memcg_controller* c = NULL;
  memcg_group* g = NULL;
  char buf[64];
  CHECK(memcg_controller_create(NULL, &c) == 0);
  CHECK(memcg_group_create(c, "t", &g) == 0);
  CHECK(memcg_charge(g, 4096, MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK);
  memcg_uncharge(g, 4096);
  read_text(g, "memory.current", buf, sizeof buf);
  CHECK(strcmp(buf, "0\n") != 0); /* the per-CPU stock */
  CHECK(memcg_group_write(g, "memory.reclaim", "1G", 2, 0) == EAGAIN);
  read_text(g, "memory.current", buf, sizeof buf);
  CHECK(strcmp(buf, "0\n") == 0);
  memcg_group_release(g);
  CHECK(memcg_controller_destroy(c) == 0);
}

int main(void) {
  test_nul_inside_length_refused();
  test_quote_bounded();
  test_reclaim_nothing_reclaimable();
  return check_report("c_api_text_test");
}
