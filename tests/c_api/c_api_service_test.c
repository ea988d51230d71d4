/* What a C service needs of the C API (memcg/c/memcg.h) beyond the tour of c_api_test.c: stocks
 * drained (memory.current back to 0), charges that never sleep, a runaway alone in its group
 * OOM-killed, cancellation that refuses shrinking requests too, the root's files, what
 * memory.events `wait` counts, and the calls of 0.2: groups listed, the OOM log read, statistics
 * flushed, a member's score changed, grow_until, names read back into codes. Prints
 * "c_api_service_test: ok". */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "memcg/c/memcg.h"
#include "check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#define KIB(n) ((uint64_t)(n) << 10)
#define MS(n) ((uint64_t)(n) * 1000000u)

static uint64_t read_number(memcg_group* g, const char* file) {
  char buf[64];
  if (memcg_group_read(g, file, buf, sizeof buf, NULL) != 0) return UINT64_MAX;
  return strtoull(buf, NULL, 10);
}

/* The value of `key` in a flat-keyed file (memory.stat, memory.events, memory.wait). */
static uint64_t read_key(memcg_group* g, const char* file, const char* key) {
  char buf[8192];
  if (memcg_group_read(g, file, buf, sizeof buf, NULL) != 0) return UINT64_MAX;
  size_t len = strlen(key);
  for (const char* line = buf; *line != '\0';) {
    if (strncmp(line, key, len) == 0 && line[len] == ' ') return strtoull(line + len + 1, NULL, 10);
    const char* next = strchr(line, '\n');
    if (next == NULL) break;
    line = next + 1;
  }
  return UINT64_MAX;
}

static uint64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* After everything is uncharged the per-CPU stock still holds a batch: memory.reclaim gives it
 * back first, and so does memcg_controller_drain_stocks. */
static void test_stocks_drain_to_zero(void) {
  memcg_controller* c = NULL;
  memcg_group* g = NULL;
  CHECK(memcg_controller_create(NULL, &c) == 0);
  CHECK(memcg_group_create(c, "t", &g) == 0);
  for (int i = 0; i < 2; i++) {
    CHECK(memcg_charge(g, KIB(4), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK);
    memcg_uncharge(g, KIB(4));
    CHECK(read_number(g, "memory.current") > 0); /* the rest of the batch, in the stock */
    if (i == 0) {
      CHECK(memcg_group_write(g, "memory.reclaim", "4K", 2, 0) == 0);
    } else {
      CHECK(memcg_controller_drain_stocks(c) == 0);
    }
    CHECK(read_number(g, "memory.current") == 0);
  }
  CHECK(memcg_controller_drain_stocks(NULL) == EINVAL);
  memcg_group_release(g);
  CHECK(memcg_controller_destroy(c) == 0);
}

/* Far above memory.high a default charge sleeps its penalty; MEMCG_CHARGE_NOWAIT never does. */
static void test_nowait_charges_never_sleep(void) {
  memcg_controller* c = NULL;
  memcg_group* g = NULL;
  CHECK(memcg_controller_create(NULL, &c) == 0);
  CHECK(memcg_group_create(c, "t", &g) == 0);
  CHECK(memcg_group_write(g, "memory.high", "64K", 3, 0) == 0);
  CHECK(memcg_group_write(g, "memory.max", "8M", 2, 0) == 0);
  const uint64_t start = monotonic_ns();
  int ok = 0;
  for (int i = 0; i < 1024; i++) /* 4M, 64 times memory.high */
    if (memcg_charge(g, KIB(4), MEMCG_CHARGE_NOWAIT) == MEMCG_CHARGE_OK) ok++;
  CHECK(ok == 1024);
  CHECK(monotonic_ns() - start < MS(500)); /* one throttled charge alone sleeps longer */
  CHECK(read_number(g, "memory.current") >= KIB(4) * 1024);
  /* At memory.max it fails at once, without reclaim. */
  CHECK(memcg_charge(g, KIB(8192), MEMCG_CHARGE_NOWAIT) == MEMCG_CHARGE_NOMEM);
  memcg_uncharge(g, KIB(4) * 1024);
  memcg_group_release(g);
  CHECK(memcg_controller_destroy(c) == 0);
}

static void count_kill(memcg_member* m, memcg_cancel_reason reason, void* user) {
  (void)m;
  if (reason == MEMCG_CANCEL_OOM_KILL) ++*(int*)user;
}

/* A runaway alone in its group: killed when its total grows past memory.max (its callback
 * runs); the OOM log tells of it; only one request over the limit is never-fits. */
static void test_runaway_alone_is_killed_and_logged(void) {
  memcg_controller* c = NULL;
  memcg_group* g = NULL;
  CHECK(memcg_controller_create(NULL, &c) == 0);
  CHECK(memcg_group_create(c, "t", &g) == 0);
  CHECK(memcg_group_write(g, "memory.max", "1M", 2, 0) == 0);
  int kills = 0;
  memcg_member* m = NULL;
  memcg_reservation* r = NULL;
  CHECK(memcg_member_create(g, "runaway", 0, count_kill, &kills, &m) == 0);
  CHECK(memcg_member_score_adj(m) == 0);
  CHECK(memcg_member_set_score_adj(m, 300) == 0);
  CHECK(memcg_member_score_adj(m) == 300);
  CHECK(memcg_member_set_score_adj(m, 1001) == EINVAL);
  CHECK(memcg_member_set_score_adj(NULL, 0) == EINVAL);
  CHECK(memcg_member_score_adj(m) == 300);
  CHECK(memcg_oom_log_last_seq(c) == 0);
  CHECK(memcg_reservation_create(NULL, m, MEMCG_OOM_PIECES, MEMCG_PRIORITY_DEFAULT, &r) == 0);
  CHECK(memcg_reservation_grow(r, KIB(1025)) == MEMCG_RESERVE_NEVER_FITS);
  memcg_reserve_status s = MEMCG_RESERVE_OK;
  for (int i = 0; i < 64 && (s == MEMCG_RESERVE_OK || s == MEMCG_RESERVE_FORCED); i++)
    s = memcg_reservation_grow(r, KIB(64));
  CHECK(s == MEMCG_RESERVE_KILLED);
  CHECK(kills == 1 && memcg_member_killed(m) == 1);
  CHECK(memcg_reservation_bytes(r) == KIB(1024));

  /* The OOM log: the size first, then the text; nothing after the last. */
  CHECK(memcg_oom_log_last_seq(c) == 1);
  size_t len = 0;
  CHECK(memcg_oom_log_read(c, 0, NULL, 0, &len) == ERANGE);
  char* text = malloc(len + 1);
  CHECK(text != NULL);
  if (text != NULL) {
    CHECK(memcg_oom_log_read(c, 0, text, len + 1, NULL) == 0);
    CHECK(strncmp(text, "oom_kill seq=1 ", 15) == 0);
    CHECK(strstr(text, "runaway") != NULL);
    CHECK(strlen(text) == len && text[len - 1] == '\n');
    free(text);
  }
  char empty[4] = "x";
  CHECK(memcg_oom_log_read(c, 1, empty, sizeof empty, &len) == 0);
  CHECK(len == 0 && empty[0] == '\0');
  CHECK(memcg_oom_log_read(NULL, 0, empty, sizeof empty, &len) == EINVAL);
  CHECK(memcg_oom_log_last_seq(NULL) == 0);

  memcg_reservation_destroy(r);
  memcg_member_destroy(m);
  memcg_group_release(g);
  CHECK(memcg_controller_destroy(c) == 0);
}

/* After cancellation every request is CANCELLED, one that would shrink too; shrink and release
 * still give back. grow_until waits to a deadline on the controller's clock. */
static void test_cancel_and_grow_until(void) {
  memcg_controller* c = NULL;
  memcg_group* g = NULL;
  memcg_reservation* r = NULL;
  CHECK(memcg_controller_create(NULL, &c) == 0);
  CHECK(memcg_group_create(c, "t", &g) == 0);
  CHECK(memcg_group_write(g, "memory.max", "1M", 2, 0) == 0);
  CHECK(memcg_reservation_create(g, NULL, MEMCG_OOM_NEVER, MEMCG_PRIORITY_DEFAULT, &r) == 0);
  CHECK(memcg_reservation_grow_until(NULL, 1, 0) == MEMCG_RESERVE_INVALID);
  CHECK(memcg_reservation_grow_until(r, KIB(512), 0) == MEMCG_RESERVE_OK); /* fits: at once */
  uint64_t deadline = memcg_controller_now_ns(c) + MS(20);
  CHECK(memcg_reservation_grow_until(r, KIB(768), deadline) == MEMCG_RESERVE_NEVER_FITS);
  CHECK(memcg_charge(g, KIB(256), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK);
  CHECK(memcg_reservation_grow_until(r, KIB(400), deadline) == MEMCG_RESERVE_TIMED_OUT);
  CHECK(memcg_controller_now_ns(c) >= deadline);
  CHECK(memcg_reservation_bytes(r) == KIB(512));
  memcg_uncharge(g, KIB(256));

  memcg_reservation_cancel(r);
  CHECK(memcg_reserve(r, KIB(256)) == MEMCG_RESERVE_CANCELLED);
  CHECK(memcg_reserve_for(r, KIB(256), MS(10)) == MEMCG_RESERVE_CANCELLED);
  CHECK(memcg_reservation_grow_until(r, 0, deadline) == MEMCG_RESERVE_CANCELLED);
  CHECK(memcg_reservation_bytes(r) == KIB(512)); /* nothing changed */
  memcg_reservation_shrink(r, KIB(256));
  CHECK(memcg_reservation_bytes(r) == KIB(256));
  memcg_reservation_release(r);
  CHECK(memcg_reservation_bytes(r) == 0);
  memcg_reservation_destroy(r);
  memcg_group_release(g);
  CHECK(memcg_controller_destroy(c) == 0);
}

/* memory.events `wait` counts charges that queued on a group's memory.max, on that group and its
 * ancestors; not a try without time left, nor an admission waiting for its expected peak to fit
 * (memory.wait admit_waits counts those). */
static void test_wait_event_counts_queued_charges(void) {
  memcg_controller* c = NULL;
  memcg_group *parent = NULL, *child = NULL;
  memcg_reservation *a = NULL, *b = NULL;
  CHECK(memcg_controller_create(NULL, &c) == 0);
  CHECK(memcg_group_create(c, "p", &parent) == 0);
  CHECK(memcg_group_create(c, "p/c", &child) == 0);
  CHECK(memcg_group_write(parent, "memory.max", "1M", 2, 0) == 0);
  CHECK(memcg_charge(child, KIB(768), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK);
  CHECK(memcg_reservation_create(child, NULL, MEMCG_OOM_NEVER, MEMCG_PRIORITY_DEFAULT, &a) == 0);
  CHECK(memcg_reserve_for(a, KIB(512), 0) == MEMCG_RESERVE_TIMED_OUT); /* no time: a try */
  CHECK(read_key(parent, "memory.events", "wait") == 0);
  CHECK(memcg_reserve_for(a, KIB(512), MS(20)) == MEMCG_RESERVE_TIMED_OUT); /* queued */
  CHECK(read_key(parent, "memory.events", "wait") == 1);
  CHECK(read_key(parent, "memory.events.local", "wait") == 1);
  CHECK(read_key(child, "memory.events", "wait") == 0); /* the limit was the parent's */
  CHECK(read_key(parent, "memory.wait", "timed_out") == 1);
  memcg_uncharge(child, KIB(768));
  /* An admission by expected peak (a fixed growth factor of 2): the second waits for the
   * first's promise, not for memory.max, and raises no `wait`. */
  CHECK(memcg_group_write(child, "memory.admit.growth", "2", 1, 0) == 0);
  CHECK(memcg_reservation_create(child, NULL, MEMCG_OOM_NEVER, MEMCG_PRIORITY_DEFAULT, &b) == 0);
  CHECK(memcg_reserve_for(a, KIB(300), MS(20)) == MEMCG_RESERVE_OK);
  CHECK(memcg_reserve_for(b, KIB(300), MS(20)) == MEMCG_RESERVE_TIMED_OUT);
  CHECK(read_key(parent, "memory.wait", "admit_waits") == 1); /* on the limited level */
  CHECK(read_key(parent, "memory.events", "wait") == 1);
  memcg_reservation_destroy(a);
  memcg_reservation_destroy(b);
  memcg_group_release(child);
  memcg_group_release(parent);
  CHECK(memcg_controller_destroy(c) == 0);
}

/* Listing, the root's files, statistics flushed, names read back. */
static void test_tree_root_stats_and_names(void) {
  memcg_controller* c = NULL;
  memcg_group *root = NULL, *a = NULL;
  CHECK(memcg_controller_create(NULL, &c) == 0);
  CHECK(memcg_group_create(c, "b", NULL) == 0);
  CHECK(memcg_group_create(c, "a", &a) == 0);
  CHECK(memcg_group_create(c, "a/x", NULL) == 0);
  CHECK(memcg_group_create(c, "gone", NULL) == 0);
  CHECK(memcg_group_remove(c, "gone") == 0);
  CHECK(memcg_group_lookup(c, "/", &root) == 0);
  char buf[256];
  size_t len = 0;
  CHECK(memcg_group_list(root, buf, sizeof buf, &len) == 0);
  CHECK(strcmp(buf, "a\na/x\nb\n") == 0 && len == 8);
  CHECK(memcg_group_list(a, buf, sizeof buf, &len) == 0);
  CHECK(strcmp(buf, "a/x\n") == 0);
  CHECK(memcg_group_list(root, buf, 4, &len) == ERANGE && len == 8);
  CHECK(memcg_group_list(NULL, buf, sizeof buf, &len) == EINVAL);

  /* The root: no memory.current nor limits (ENOENT); memory.stat and memory.reclaim. */
  CHECK(memcg_group_read(root, "memory.current", buf, sizeof buf, &len) == ENOENT);
  CHECK(memcg_group_read(root, "memory.max", buf, sizeof buf, &len) == ENOENT);
  CHECK(memcg_group_read(root, "memory.events", buf, sizeof buf, &len) == ENOENT);
  CHECK(memcg_group_write(root, "memory.reclaim", "0", 1, 0) == 0);

  /* After a flush memory.stat is exact. */
  CHECK(memcg_charge(a, KIB(8), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK);
  CHECK(memcg_controller_flush_stats(c) == 0);
  CHECK(read_key(a, "memory.stat", "anon") == KIB(8));
  CHECK(memcg_controller_flush_stats(NULL) == EINVAL);
  memcg_uncharge(a, KIB(8));

  CHECK(memcg_reserve_status_from_name("never-fits") == MEMCG_RESERVE_NEVER_FITS);
  CHECK(memcg_reserve_status_from_name("ok") == MEMCG_RESERVE_OK);
  CHECK(memcg_reserve_status_from_name("refused") == MEMCG_RESERVE_REFUSED);
  CHECK(memcg_reserve_status_from_name("unknown") == -1);
  CHECK(memcg_reserve_status_from_name("Never-fits") == -1);
  CHECK(memcg_reserve_status_from_name(NULL) == -1);
  for (int s = MEMCG_RESERVE_OK; s <= MEMCG_RESERVE_NEVER_FITS; s++)
    CHECK(memcg_reserve_status_from_name(memcg_reserve_status_name(s)) == s);
  for (int s = MEMCG_CHARGE_OK; s <= MEMCG_CHARGE_INVALID; s++)
    CHECK(memcg_charge_status_from_name(memcg_charge_status_name(s)) == s);
  CHECK(memcg_charge_status_from_name("unknown") == -1);
  CHECK(memcg_charge_status_from_name(NULL) == -1);
  CHECK(memcg_errno_from_name("EBUSY") == EBUSY);
  CHECK(memcg_errno_from_name("ok") == 0);
  CHECK(memcg_errno_from_name("unknown") == -1);
  CHECK(memcg_errno_from_name(NULL) == -1);

  memcg_group_release(a);
  memcg_group_release(root);
  CHECK(memcg_controller_destroy(c) == 0);
}

int main(void) {
  test_stocks_drain_to_zero();
  test_nowait_charges_never_sleep();
  test_runaway_alone_is_killed_and_logged();
  test_cancel_and_grow_until();
  test_wait_event_counts_queued_charges();
  test_tree_root_stats_and_names();
  return check_report("c_api_service_test");
}
