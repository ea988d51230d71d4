/* The C API (memcg/c/memcg.h) from C11: every function, its bad arguments (an errno or an
 * invalid status, and nothing changed), and callbacks that destroy their own handle. Prints
 * "c_api_test: ok" and exits 0, or names the first failed check and exits 1. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#define MEMCG_C_EXPERIMENTAL
#include "memcg/c/memcg.h"
#include "check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#define CHECK_ERR(expr, code)                                                        \
  do {                                                                               \
    int got_ = (expr);                                                               \
    if (got_ != (code)) {                                                            \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s\n", __FILE__, __LINE__, #expr, \
              memcg_errno_name(got_), memcg_errno_name(code));                       \
      failures++;                                                                    \
    }                                                                                \
  } while (0)

#define KIB(n) ((uint64_t)(n) << 10)
#define MIB(n) ((uint64_t)(n) << 20)

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A file's contents parsed as one unsigned number ("max" reads as UINT64_MAX). */
static uint64_t read_number(memcg_group* g, const char* file) {
  char buf[64];
  if (memcg_group_read(g, file, buf, sizeof buf, NULL) != 0) return 0;
  if (strncmp(buf, "max", 3) == 0) return UINT64_MAX;
  return strtoull(buf, NULL, 10);
}

/* The value of `key` in a flat-keyed file (memory.stat, memory.events). */
static uint64_t read_key(memcg_group* g, const char* file, const char* key) {
  char buf[8192];
  if (memcg_group_read(g, file, buf, sizeof buf, NULL) != 0) return UINT64_MAX;
  size_t len = strlen(key);
  for (char* line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    if (strncmp(line, key, len) == 0 && line[len] == ' ') return strtoull(line + len + 1, NULL, 10);
  }
  return UINT64_MAX;
}

static void test_version_and_names(void) {
  CHECK(memcg_version() == MEMCG_C_VERSION_NUMBER);
  CHECK(MEMCG_C_VERSION_COMPATIBLE());
  char expect[32];
  snprintf(expect, sizeof expect, "%d.%d.%d", MEMCG_C_VERSION_MAJOR, MEMCG_C_VERSION_MINOR,
           MEMCG_C_VERSION_PATCH);
  CHECK(strcmp(memcg_version_string(), expect) == 0);
  CHECK(strcmp(memcg_errno_name(0), "ok") == 0);
  CHECK(strcmp(memcg_errno_name(EINVAL), "EINVAL") == 0);
  CHECK(strcmp(memcg_errno_name(-5), "unknown") == 0);
  CHECK(strcmp(memcg_charge_status_name(MEMCG_CHARGE_NOMEM), "nomem") == 0);
  CHECK(strcmp(memcg_charge_status_name(MEMCG_CHARGE_INVALID), "invalid") == 0);
  CHECK(strcmp(memcg_charge_status_name(99), "unknown") == 0);
  CHECK(strcmp(memcg_reserve_status_name(MEMCG_RESERVE_NOMEM_COSTLY), "nomem-costly") == 0);
  CHECK(strcmp(memcg_reserve_status_name(MEMCG_RESERVE_TIMED_OUT), "timed-out") == 0);
  CHECK(strcmp(memcg_reserve_status_name(MEMCG_RESERVE_NEVER_FITS), "never-fits") == 0);
  CHECK(strcmp(memcg_reserve_status_name(MEMCG_RESERVE_REFUSED), "refused") == 0);
  CHECK(strcmp(memcg_reserve_status_name(-1), "unknown") == 0);
}

static void test_controller_and_groups(void) {
  memcg_options o;
  memcg_options_init(NULL); /* harmless */
  memcg_options_init(&o);
  CHECK(o.size == sizeof o && o.unit_shift == 12 && o.batch == 64);
  memcg_controller* c = NULL;
  CHECK_ERR(memcg_controller_create(&o, NULL), EINVAL);
  o.unit_shift = 99;
  CHECK_ERR(memcg_controller_create(&o, &c), EINVAL);
  CHECK(c == NULL);
  memcg_options_init(&o);
  o.size = 4;
  CHECK_ERR(memcg_controller_create(&o, &c), EINVAL);
  CHECK_ERR(memcg_controller_create(NULL, &c), 0);
  CHECK(memcg_controller_now_ns(c) > 0);
  CHECK(memcg_controller_now_ns(NULL) == 0);

  memcg_group* g = NULL;
  CHECK_ERR(memcg_group_create(NULL, "a", &g), EINVAL);
  CHECK_ERR(memcg_group_create(c, NULL, &g), EINVAL);
  CHECK_ERR(memcg_group_create(c, "a/b", &g), ENOENT);
  CHECK_ERR(memcg_group_create(c, "bad name!", &g), EINVAL);
  CHECK(g == NULL);
  CHECK_ERR(memcg_group_create(c, "a", NULL), 0);
  CHECK_ERR(memcg_group_create(c, "a", &g), EEXIST);
  CHECK_ERR(memcg_group_create(c, "a/b", &g), 0);
  char path[16];
  size_t len = 0;
  CHECK_ERR(memcg_group_path(g, path, sizeof path, &len), 0);
  CHECK(strcmp(path, "a/b") == 0 && len == 3);
  CHECK_ERR(memcg_group_path(g, path, 3, &len), ERANGE);
  CHECK(len == 3);
  CHECK_ERR(memcg_group_path(NULL, path, sizeof path, &len), EINVAL);

  memcg_group* a = NULL;
  CHECK_ERR(memcg_group_lookup(c, "a", &a), 0);
  CHECK_ERR(memcg_group_lookup(c, "zz", &a), ENOENT);
  CHECK_ERR(memcg_group_lookup(NULL, "a", &a), EINVAL);
  CHECK_ERR(memcg_group_lookup(c, "a", NULL), EINVAL);
  memcg_group* root = NULL;
  CHECK_ERR(memcg_group_lookup(c, "/", &root), 0);

  /* Handles alive: the controller refuses to go, and stays usable. */
  CHECK_ERR(memcg_controller_destroy(c), EBUSY);
  CHECK_ERR(memcg_group_remove(c, "a"), EBUSY); /* has a child */
  CHECK_ERR(memcg_group_remove(c, "/"), EINVAL);
  CHECK_ERR(memcg_group_remove(c, "nope"), ENOENT);
  CHECK_ERR(memcg_group_remove(NULL, "a"), EINVAL);
  CHECK_ERR(memcg_group_remove(c, NULL), EINVAL);
  CHECK_ERR(memcg_group_remove(c, "a/b"), 0);
  CHECK_ERR(memcg_group_lookup(c, "a/b", &root), ENOENT);
  /* A removed group's handle still answers; its files are gone. */
  char buf[64];
  CHECK_ERR(memcg_group_read(g, "memory.current", buf, sizeof buf, NULL), ENOENT);
  memcg_group_release(g);
  memcg_group_release(a);
  memcg_group_release(root);
  memcg_group_release(NULL);
  CHECK_ERR(memcg_controller_destroy(c), 0);
  CHECK_ERR(memcg_controller_destroy(NULL), 0);
}

static void test_files_and_charges(void) {
  memcg_controller* c = NULL;
  CHECK_ERR(memcg_controller_create(NULL, &c), 0);
  memcg_group* g = NULL;
  CHECK_ERR(memcg_group_create(c, "t", &g), 0);

  char buf[256];
  size_t len = 0;
  CHECK_ERR(memcg_group_read(g, "memory.max", buf, sizeof buf, &len), 0);
  CHECK(strcmp(buf, "max\n") == 0 && len == 4);
  CHECK_ERR(memcg_group_read(g, "memory.max", NULL, 0, &len), ERANGE); /* size query */
  CHECK(len == 4);
  memcpy(buf, "xyz", 4);
  CHECK_ERR(memcg_group_read(g, "memory.max", buf, 4, &len), ERANGE); /* no room for the NUL */
  CHECK(strcmp(buf, "xyz") == 0);
  CHECK_ERR(memcg_group_read(g, "memory.nonexistent", buf, sizeof buf, &len), ENOENT);
  CHECK_ERR(memcg_group_read(NULL, "memory.max", buf, sizeof buf, &len), EINVAL);
  CHECK_ERR(memcg_group_read(g, NULL, buf, sizeof buf, &len), EINVAL);

  CHECK_ERR(memcg_group_write(g, "memory.max", "1M", 2, 0), 0);
  CHECK(read_number(g, "memory.max") == MIB(1));
  CHECK_ERR(memcg_group_write(g, "memory.max", "bogus", 5, 0), EINVAL);
  CHECK_ERR(memcg_group_write(g, "memory.max", "-1", 2, 0), EINVAL);
  CHECK(read_number(g, "memory.max") == MIB(1)); /* unchanged */
  /* Past 2^64: refused, never read back as "max" (the limit would be off). */
  CHECK_ERR(memcg_group_write(g, "memory.max", "18446744073709551616", 20, 0), ERANGE);
  CHECK_ERR(memcg_group_write(g, "memory.max", "16E", 3, 0), ERANGE);
  CHECK(read_number(g, "memory.max") == MIB(1)); /* unchanged */
  CHECK_ERR(memcg_group_write(g, "memory.current", "0", 1, 0), EACCES);
  CHECK_ERR(memcg_group_write(g, "memory.nonexistent", "0", 1, 0), ENOENT);
  CHECK_ERR(memcg_group_write(NULL, "memory.max", "1M", 2, 0), EINVAL);
  CHECK_ERR(memcg_group_write(g, NULL, "1M", 2, 0), EINVAL);
  CHECK_ERR(memcg_group_write(g, "memory.max", NULL, 2, 0), EINVAL);
  /* Not NUL-terminated: only `length` bytes count. */
  CHECK_ERR(memcg_group_write(g, "memory.high", "512Kjunk", 4, 1), 0);
  CHECK(read_number(g, "memory.high") == KIB(512));
  CHECK_ERR(memcg_group_write(g, "memory.high", "max", 3, 0), 0);

  /* Charges. */
  CHECK(memcg_charge(NULL, 4096, MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_INVALID);
  CHECK(memcg_charge(g, 4096, 1u << 30) == MEMCG_CHARGE_INVALID);
  CHECK(read_number(g, "memory.current") == 0);
  CHECK(memcg_charge(g, KIB(100), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK);
  CHECK(read_number(g, "memory.current") >= KIB(100));
  CHECK(memcg_charge(g, MIB(2), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_NOMEM);
  CHECK(memcg_charge(g, MIB(2), MEMCG_CHARGE_NO_FAIL) == MEMCG_CHARGE_FORCED);
  /* More than any counter holds: a bad argument, not a refusal (also with NO_FAIL). */
  CHECK(memcg_charge(g, UINT64_MAX, MEMCG_CHARGE_NO_FAIL) == MEMCG_CHARGE_INVALID);
  CHECK(memcg_charge(g, UINT64_MAX / 2 + 1, MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_INVALID);
  CHECK(read_key(g, "memory.stat", "anon") >= MIB(2));
  memcg_uncharge(g, MIB(2));
  memcg_uncharge(g, KIB(100));
  memcg_uncharge(NULL, KIB(100)); /* ignored */
  memcg_uncharge_direct(NULL, KIB(100));
  CHECK(memcg_charge(g, KIB(8), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK);
  memcg_uncharge_direct(g, KIB(8));
  CHECK(read_key(g, "memory.events", "max") >= 1);

  memcg_group_release(g);
  CHECK_ERR(memcg_group_remove(c, "t"), 0);
  CHECK_ERR(memcg_controller_destroy(c), 0);
}

/* ---- members and kill callbacks ---- */

struct kill_state {
  int calls;
  memcg_cancel_reason reason;
  uint64_t charged_at_kill;
};

/* Destroys its own member: what it held is uncharged. */
static void kill_destroys_self(memcg_member* m, memcg_cancel_reason reason, void* user) {
  struct kill_state* s = user;
  s->calls++;
  s->reason = reason;
  s->charged_at_kill = memcg_member_charged(m);
  memcg_member_destroy(m);
}

static void test_members(void) {
  memcg_controller* c = NULL;
  CHECK_ERR(memcg_controller_create(NULL, &c), 0);
  memcg_group* g = NULL;
  CHECK_ERR(memcg_group_create(c, "t", &g), 0);
  CHECK_ERR(memcg_group_write(g, "memory.max", "256K", 4, 0), 0);

  memcg_member* victim = NULL;
  memcg_member* other = NULL;
  struct kill_state st = {0, MEMCG_CANCEL_OTHER, 0};
  CHECK_ERR(memcg_member_create(NULL, "v", 0, NULL, NULL, &victim), EINVAL);
  CHECK_ERR(memcg_member_create(g, NULL, 0, NULL, NULL, &victim), EINVAL);
  CHECK_ERR(memcg_member_create(g, "v", 0, NULL, NULL, NULL), EINVAL);
  CHECK_ERR(memcg_member_create(g, "v", 1001, NULL, NULL, &victim), EINVAL);
  CHECK_ERR(memcg_member_create(g, "v", -1001, NULL, NULL, &victim), EINVAL);
  CHECK(victim == NULL);
  CHECK_ERR(memcg_member_create(g, "v", 500, kill_destroys_self, &st, &victim), 0);
  CHECK_ERR(memcg_member_create(g, "o", -500, NULL, NULL, &other), 0);

  CHECK(memcg_member_charge(NULL, 4096, MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_INVALID);
  CHECK(memcg_member_charge(victim, 4096, 1u << 20) == MEMCG_CHARGE_INVALID);
  CHECK(memcg_member_charge(victim, UINT64_MAX, MEMCG_CHARGE_NO_FAIL) == MEMCG_CHARGE_INVALID);
  CHECK(memcg_member_charged(victim) == 0);
  CHECK(memcg_member_charge(victim, KIB(200), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK);
  CHECK(memcg_member_charged(victim) == KIB(200));
  CHECK(memcg_member_killed(victim) == 0);
  /* 32 KiB pieces (OOM-eligible) from the other member until the victim is killed. */
  int ok = 0;
  for (int i = 0; i < 4; i++)
    if (memcg_member_charge(other, KIB(32), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK) ok++;
  CHECK(st.calls == 1);
  CHECK(st.reason == MEMCG_CANCEL_OOM_KILL);
  CHECK(st.charged_at_kill == KIB(200));
  CHECK(ok == 4);
  CHECK(memcg_member_charged(other) == KIB(128));
  CHECK(read_key(g, "memory.events", "oom_kill") == 1);
  CHECK(memcg_member_uncharge(other, MIB(1)) == KIB(128)); /* up to what it holds */
  CHECK(memcg_member_uncharge(NULL, 1) == 0);
  CHECK(memcg_member_charged(NULL) == 0);
  CHECK(memcg_member_killed(NULL) == 0);
  memcg_member_destroy(other);
  memcg_member_destroy(NULL);

  /* A member of a removed group cannot be made. */
  memcg_group* gone = NULL;
  CHECK_ERR(memcg_group_create(c, "gone", &gone), 0);
  CHECK_ERR(memcg_group_remove(c, "gone"), 0);
  CHECK_ERR(memcg_member_create(gone, "x", 0, NULL, NULL, &victim), ENOENT);
  memcg_group_release(gone);

  memcg_group_release(g);
  CHECK_ERR(memcg_controller_destroy(c), 0);
}

/* ---- reservations ---- */

static void test_reservations(void) {
  memcg_controller* c = NULL;
  CHECK_ERR(memcg_controller_create(NULL, &c), 0);
  memcg_group* g = NULL;
  CHECK_ERR(memcg_group_create(c, "q", &g), 0);
  CHECK_ERR(memcg_group_write(g, "memory.max", "1M", 2, 0), 0);
  memcg_member* m = NULL;
  CHECK_ERR(memcg_member_create(g, "m", 0, NULL, NULL, &m), 0);

  memcg_reservation* r = NULL;
  CHECK_ERR(memcg_reservation_create(NULL, NULL, MEMCG_OOM_KERNEL, MEMCG_PRIORITY_DEFAULT, &r), EINVAL);
  CHECK_ERR(memcg_reservation_create(g, m, MEMCG_OOM_KERNEL, MEMCG_PRIORITY_DEFAULT, &r), EINVAL);
  CHECK_ERR(memcg_reservation_create(g, NULL, 7, MEMCG_PRIORITY_DEFAULT, &r), EINVAL);
  CHECK_ERR(memcg_reservation_create(g, NULL, MEMCG_OOM_KERNEL, 3, &r), EINVAL);
  CHECK_ERR(memcg_reservation_create(g, NULL, MEMCG_OOM_KERNEL, MEMCG_PRIORITY_HIGH, NULL), EINVAL);
  CHECK(r == NULL);
  CHECK_ERR(memcg_reservation_create(g, NULL, MEMCG_OOM_KERNEL, MEMCG_PRIORITY_HIGH, &r), 0);

  CHECK(memcg_reserve(NULL, 1) == MEMCG_RESERVE_INVALID);
  CHECK(memcg_reserve_for(NULL, 1, 0) == MEMCG_RESERVE_INVALID);
  CHECK(memcg_reserve_until(NULL, 1, 0) == MEMCG_RESERVE_INVALID);
  CHECK(memcg_reservation_grow(NULL, 1) == MEMCG_RESERVE_INVALID);
  CHECK(memcg_reservation_grow_for(NULL, 1, 0) == MEMCG_RESERVE_INVALID);
  memcg_reservation_shrink(NULL, 1);
  memcg_reservation_release(NULL);
  memcg_reservation_cancel(NULL);
  CHECK(memcg_reservation_bytes(NULL) == 0);

  /* Another 300K charged to the group: requests that fit memory.max but not what is free. */
  CHECK(memcg_charge(g, KIB(300), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK);
  CHECK(memcg_reserve(r, KIB(600)) == MEMCG_RESERVE_OK);
  CHECK(memcg_reservation_bytes(r) == KIB(600));
  CHECK(memcg_reservation_grow(r, KIB(200)) == MEMCG_RESERVE_NOMEM_COSTLY);
  CHECK(memcg_reservation_bytes(r) == KIB(600)); /* nothing changed */
  CHECK(memcg_reserve(r, MIB(2)) == MEMCG_RESERVE_NEVER_FITS);
  CHECK(memcg_reserve_for(r, MIB(2), 1000000000) == MEMCG_RESERVE_NEVER_FITS); /* at once */
  CHECK(memcg_reserve(r, UINT64_MAX) == MEMCG_RESERVE_INVALID);
  /* Waiting with a deadline: nothing frees memory, so the wait times out. */
  CHECK(memcg_reserve_for(r, KIB(800), 20000000) == MEMCG_RESERVE_TIMED_OUT);
  CHECK(memcg_reservation_grow_for(r, KIB(200), 0) == MEMCG_RESERVE_TIMED_OUT);
  uint64_t deadline = memcg_controller_now_ns(c) + 20000000;
  CHECK(memcg_reserve_until(r, KIB(800), deadline) == MEMCG_RESERVE_TIMED_OUT);
  CHECK(memcg_controller_now_ns(c) >= deadline);
  CHECK(memcg_reservation_bytes(r) == KIB(600));
  memcg_uncharge(g, KIB(300));
  CHECK(memcg_reserve_for(r, KIB(700), 1000000000) == MEMCG_RESERVE_OK);
  memcg_reservation_shrink(r, KIB(200));
  CHECK(memcg_reservation_bytes(r) == KIB(500));
  memcg_reservation_release(r);
  CHECK(memcg_reservation_bytes(r) == 0);
  CHECK(memcg_reservation_grow(r, KIB(4)) == MEMCG_RESERVE_OK);
  memcg_reservation_cancel(r);
  CHECK(memcg_reservation_grow(r, KIB(4)) == MEMCG_RESERVE_CANCELLED);
  CHECK(memcg_reservation_bytes(r) == KIB(4)); /* cancelling keeps what is held */
  memcg_reservation_destroy(r);
  memcg_reservation_destroy(NULL);

  /* Bound to a member: counted in its charge. */
  memcg_reservation* mr = NULL;
  CHECK_ERR(memcg_reservation_create(NULL, m, MEMCG_OOM_PIECES, MEMCG_PRIORITY_DEFAULT, &mr), 0);
  CHECK(memcg_reserve(mr, KIB(64)) == MEMCG_RESERVE_OK);
  CHECK(memcg_member_charged(m) == KIB(64));
  CHECK_ERR(memcg_controller_destroy(c), EBUSY);
  memcg_reservation_destroy(mr);
  CHECK(memcg_member_charged(m) == 0);

  memcg_member_destroy(m);
  memcg_group_release(g);
  CHECK_ERR(memcg_controller_destroy(c), 0);
}

/* A wait in progress on another thread ends when the reservation is cancelled. */
struct waiter {
  memcg_reservation* r;
  memcg_reserve_status status;
};

static void* wait_thread(void* arg) {
  struct waiter* w = arg;
  w->status = memcg_reserve_for(w->r, KIB(600), 30ull * 1000000000ull); /* 30 s */
  return NULL;
}

static void test_cancel_from_another_thread(void) {
  memcg_controller* c = NULL;
  CHECK_ERR(memcg_controller_create(NULL, &c), 0);
  memcg_group* g = NULL;
  CHECK_ERR(memcg_group_create(c, "w", &g), 0);
  CHECK_ERR(memcg_group_write(g, "memory.max", "1M", 2, 0), 0);
  CHECK(memcg_charge(g, KIB(600), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK); /* 600K + 600K > 1M */
  struct waiter w = {NULL, MEMCG_RESERVE_OK};
  CHECK_ERR(memcg_reservation_create(g, NULL, MEMCG_OOM_NEVER, MEMCG_PRIORITY_LOW, &w.r), 0);
  uint64_t start = memcg_controller_now_ns(c);
  /* pthreads rather than C11 threads: ThreadSanitizer intercepts pthread_create only. */
  pthread_t t;
  CHECK(pthread_create(&t, NULL, wait_thread, &w) == 0);
  sleep_ms(50);
  memcg_reservation_cancel(w.r);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(w.status == MEMCG_RESERVE_CANCELLED);
  CHECK(memcg_controller_now_ns(c) - start < 20ull * 1000000000ull);
  CHECK(memcg_reservation_bytes(w.r) == 0);
  memcg_uncharge_direct(g, KIB(600));
  CHECK(read_number(g, "memory.current") == 0);
  memcg_reservation_destroy(w.r);
  memcg_group_release(g);
  CHECK_ERR(memcg_controller_destroy(c), 0);
}

/* ---- listeners ---- */

struct notify_state {
  int calls;
  int value;
  int removed;
  int destroy_self;
};

static void on_notify(memcg_listener* l, int value, int removed, void* user) {
  struct notify_state* s = user;
  s->calls++;
  s->value = value;
  s->removed = removed;
  if (s->destroy_self) memcg_listener_destroy(l);
}

static void test_listeners(void) {
  memcg_controller* c = NULL;
  CHECK_ERR(memcg_controller_create(NULL, &c), 0);
  memcg_group* g = NULL;
  memcg_group* root = NULL;
  CHECK_ERR(memcg_group_create(c, "n", &g), 0);
  CHECK_ERR(memcg_group_lookup(c, "", &root), 0);
  memcg_listener* l = NULL;
  struct notify_state ev = {0, -1, -1, 1};

  CHECK_ERR(memcg_listener_create_events(NULL, 0, on_notify, &ev, &l), EINVAL);
  CHECK_ERR(memcg_listener_create_events(g, 2, on_notify, &ev, &l), EINVAL);
  CHECK_ERR(memcg_listener_create_events(g, 0, NULL, &ev, &l), EINVAL);
  CHECK_ERR(memcg_listener_create_events(g, 0, on_notify, &ev, NULL), EINVAL);
  CHECK_ERR(memcg_listener_create_events(root, 0, on_notify, &ev, &l), ENOENT);
  CHECK(l == NULL);
  CHECK_ERR(memcg_listener_create_events(g, 1, on_notify, &ev, &l), 0);
  CHECK(memcg_listener_delivered(l) == 0);
  CHECK(memcg_listener_removed(l) == 0);
  /* A `max` event: the callback runs (within 2 s) and destroys its own listener. */
  CHECK_ERR(memcg_group_write(g, "memory.max", "64K", 3, 0), 0);
  CHECK(memcg_charge(g, KIB(128), MEMCG_CHARGE_MAY_BLOCK | MEMCG_CHARGE_RETRY_MAY_FAIL) == MEMCG_CHARGE_NOMEM);
  for (int i = 0; i < 200 && ev.calls == 0; i++) sleep_ms(10);
  CHECK(ev.calls == 1 && ev.value == 1 && ev.removed == 0);

  struct notify_state vp = {0, -1, -1, 1};
  struct notify_state vp_keep = {0, -1, -1, 0};
  struct notify_state psi = {0, -1, -1, 1};
  memcg_listener* vl = NULL;
  memcg_listener* kept = NULL;
  memcg_listener* pl = NULL;
  CHECK_ERR(memcg_listener_create_vmpressure(g, "nonsense", on_notify, &vp, &vl), EINVAL);
  CHECK_ERR(memcg_listener_create_vmpressure(g, NULL, on_notify, &vp, &vl), EINVAL);
  CHECK_ERR(memcg_listener_create_vmpressure(NULL, "low", on_notify, &vp, &vl), EINVAL);
  CHECK_ERR(memcg_listener_create_vmpressure(g, "low", NULL, &vp, &vl), EINVAL);
  CHECK(vl == NULL);
  CHECK_ERR(memcg_listener_create_vmpressure(g, "critical,local", on_notify, &vp, &vl), 0);
  CHECK_ERR(memcg_listener_create_vmpressure(g, "low", on_notify, &vp_keep, &kept), 0);
  CHECK_ERR(memcg_listener_create_psi(g, "bogus", on_notify, &psi, &pl), EINVAL);
  CHECK_ERR(memcg_listener_create_psi(NULL, "some 150000 1000000", on_notify, &psi, &pl), EINVAL);
  CHECK(pl == NULL);
  CHECK_ERR(memcg_listener_create_psi(g, "some 150000 1000000", on_notify, &psi, &pl), 0);
  CHECK(memcg_listener_delivered(vl) == 0 && memcg_listener_delivered(pl) == 0);
  CHECK(memcg_listener_delivered(NULL) == 0 && memcg_listener_removed(NULL) == 0);
  /* Removing the group sends each its final notice; two destroy themselves in it. */
  memcg_group_release(g);
  CHECK_ERR(memcg_group_remove(c, "n"), 0);
  CHECK(vp.calls == 1 && vp.value == 2 && vp.removed == 1);
  CHECK(psi.calls == 1 && psi.removed == 1);
  CHECK(vp_keep.calls == 1 && vp_keep.value == 0 && vp_keep.removed == 1);
  CHECK(memcg_listener_removed(kept) == 1);
  memcg_listener_destroy(kept);
  memcg_listener_destroy(NULL);
  memcg_group_release(root);
  CHECK_ERR(memcg_controller_destroy(c), 0);
}

/* ---- reclaimers (experimental) ---- */

struct cache {
  memcg_group* group;
  uint64_t held;
  int calls;
};

static uint64_t cache_reclaimable(void* user) { return ((struct cache*)user)->held; }

static uint64_t cache_reclaim(uint64_t bytes, int priority, void* user) {
  struct cache* c = user;
  (void)priority;
  uint64_t n = bytes < c->held ? bytes : c->held;
  c->calls++;
  c->held -= n;
  memcg_uncharge_direct(c->group, n);
  return n;
}

static void test_reclaimer(void) {
  memcg_controller* c = NULL;
  CHECK_ERR(memcg_controller_create(NULL, &c), 0);
  memcg_group* g = NULL;
  CHECK_ERR(memcg_group_create(c, "r", &g), 0);
  CHECK_ERR(memcg_group_write(g, "memory.max", "1M", 2, 0), 0);
  struct cache cache = {g, 0, 0};
  memcg_reclaimer* rc = NULL;
  CHECK_ERR(memcg_reclaimer_register(NULL, cache_reclaimable, cache_reclaim, &cache, &rc), EINVAL);
  CHECK_ERR(memcg_reclaimer_register(g, NULL, cache_reclaim, &cache, &rc), EINVAL);
  CHECK_ERR(memcg_reclaimer_register(g, cache_reclaimable, NULL, &cache, &rc), EINVAL);
  CHECK_ERR(memcg_reclaimer_register(g, cache_reclaimable, cache_reclaim, &cache, NULL), EINVAL);
  CHECK_ERR(memcg_reclaimer_register(g, cache_reclaimable, cache_reclaim, &cache, &rc), 0);
  /* The cache fills the group; a new charge makes reclaim take from it. */
  for (int i = 0; i < 16; i++) {
    if (memcg_charge(g, KIB(64), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK) cache.held += KIB(64);
  }
  CHECK(cache.held == MIB(1));
  CHECK(memcg_charge(g, KIB(256), MEMCG_CHARGE_MAY_BLOCK | MEMCG_CHARGE_RETRY_MAY_FAIL) == MEMCG_CHARGE_OK);
  CHECK(cache.calls >= 1 && cache.held <= MIB(1) - KIB(256));
  memcg_uncharge(g, KIB(256));
  memcg_reclaimer_destroy(rc);
  memcg_reclaimer_destroy(NULL);
  memcg_uncharge(g, cache.held);
  memcg_group_release(g);
  CHECK_ERR(memcg_controller_destroy(c), 0);
}

int main(void) {
  test_version_and_names();
  test_controller_and_groups();
  test_files_and_charges();
  test_members();
  test_reservations();
  test_cancel_from_another_thread();
  test_listeners();
  test_reclaimer();
  return check_report("c_api_test");
}
