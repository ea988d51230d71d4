/* Handle lifetimes of the C API (memcg/c/memcg.h) under the OOM killer: a kill callback that
 * destroys its member while a reservation is bound to it, one that destroys the reservation
 * whose own request ran the killer (on its thread or while it waits on another), and a member
 * destroyed by the program while its reservations live on. Each was a use-after-free before the handles were reference-counted; run it under
 * ASan (the asan preset) or valgrind to see one come back. Prints "c_api_lifetime_test: ok". */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "memcg/c/memcg.h"
#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#define KIB(n) ((uint64_t)(n) << 10)

static uint64_t read_number(memcg_group* g, const char* file) {
  char buf[64];
  if (memcg_group_read(g, file, buf, sizeof buf, NULL) != 0) return UINT64_MAX;
  return strtoull(buf, NULL, 10);
}

/* The value of `key` in a flat-keyed file. */
static uint64_t read_key(memcg_group* g, const char* file, const char* key) {
  char buf[1024];
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

/* A query: its member and its reservation, as a service keeps them. */
struct query {
  memcg_member* member;
  memcg_reservation* reservation;
  int kills;
  int destroy_reservation; /* the callback destroys the reservation too (before the member) */
};

/* The natural cleanup of a killed query: drop what it owns. */
static void kill_query(memcg_member* m, memcg_cancel_reason reason, void* user) {
  struct query* q = user;
  (void)reason;
  q->kills++;
  if (q->destroy_reservation) {
    memcg_reservation_destroy(q->reservation);
    q->reservation = NULL;
  }
  memcg_member_destroy(m);
  q->member = NULL;
}

/* A group of 256K with 100K charged outside any member, and a query holding 128K through a
 * reservation of its member: growing by 32K (small enough for the OOM killer under either
 * policy) passes the limit, and the query is the only member the killer can choose. */
static void setup(memcg_controller** c, memcg_group** g, struct query* q, int policy) {
  CHECK(memcg_controller_create(NULL, c) == 0);
  CHECK(memcg_group_create(*c, "t", g) == 0);
  CHECK(memcg_group_write(*g, "memory.max", "256K", 4, 0) == 0);
  CHECK(memcg_charge(*g, KIB(100), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK);
  CHECK(memcg_member_create(*g, "q", 0, kill_query, q, &q->member) == 0);
  CHECK(memcg_reservation_create(NULL, q->member, policy, MEMCG_PRIORITY_DEFAULT,
                                 &q->reservation) == 0);
  CHECK(memcg_reserve(q->reservation, KIB(128)) == MEMCG_RESERVE_OK);
  CHECK(memcg_member_charged(q->member) == KIB(128));
}

/* Everything of the query was given back: only the 100K outside it stays charged. */
static void teardown(memcg_controller* c, memcg_group* g) {
  CHECK(memcg_controller_drain_stocks(c) == 0);
  CHECK(read_number(g, "memory.current") == KIB(100));
  memcg_uncharge(g, KIB(100));
  memcg_group_release(g);
  CHECK(memcg_controller_destroy(c) == 0); /* no handle left behind */
}

/* Item: the callback destroys its member; the reservation bound to it lives on. */
static void test_kill_destroys_member(int policy) {
  memcg_controller* c = NULL;
  memcg_group* g = NULL;
  struct query q = {NULL, NULL, 0, 0};
  setup(&c, &g, &q, policy);
  memcg_reservation* r = q.reservation;
  CHECK(memcg_reservation_grow(r, KIB(32)) == MEMCG_RESERVE_KILLED);
  CHECK(q.kills == 1 && q.member == NULL);
  CHECK(memcg_reservation_bytes(r) == KIB(128)); /* nothing changed */
  CHECK(memcg_reservation_grow(r, KIB(4)) == MEMCG_RESERVE_KILLED);
  memcg_reservation_shrink(r, KIB(64)); /* gives back through the member kept alive */
  CHECK(memcg_reservation_bytes(r) == KIB(64));
  CHECK(read_key(g, "memory.events", "oom_kill") == 1);
  CHECK(memcg_controller_destroy(c) == EBUSY); /* the reservation, and through it the member */
  memcg_reservation_destroy(r);                /* the member goes with it */
  teardown(c, g);
}

/* Item: the callback destroys the reservation whose growth ran the killer, then its member. */
static void test_kill_destroys_own_reservation(int policy) {
  memcg_controller* c = NULL;
  memcg_group* g = NULL;
  struct query q = {NULL, NULL, 0, 1};
  setup(&c, &g, &q, policy);
  CHECK(memcg_reservation_grow(q.reservation, KIB(32)) == MEMCG_RESERVE_KILLED);
  CHECK(q.kills == 1 && q.member == NULL && q.reservation == NULL);
  teardown(c, g); /* both were freed when the growth returned */
}

/* The program destroys the member first, outside any callback: its reservation still works, the
 * member can still be killed, and its callback is not called any more. */
static void test_member_destroyed_before_reservation(void) {
  memcg_controller* c = NULL;
  memcg_group* g = NULL;
  struct query q = {NULL, NULL, 0, 0};
  setup(&c, &g, &q, MEMCG_OOM_PIECES);
  memcg_reservation* r = q.reservation;
  memcg_member_destroy(q.member);
  CHECK(memcg_reservation_grow(r, KIB(16)) == MEMCG_RESERVE_OK); /* 244K in all */
  /* Another member, immune, fills the group: the killer chooses the destroyed one. */
  memcg_member* other = NULL;
  CHECK(memcg_member_create(g, "other", -1000, NULL, NULL, &other) == 0);
  CHECK(memcg_member_charge(other, KIB(8), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK);
  /* Past the limit: the victim gives nothing back (its reservation holds it), so the charge
   * fails once the killer stops waiting for it (up to a second). */
  CHECK(memcg_member_charge(other, KIB(8), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_NOMEM);
  CHECK(read_key(g, "memory.events", "oom_kill") == 1);
  CHECK(q.kills == 0); /* the program was done with it: no callback */
  CHECK(memcg_reservation_grow(r, KIB(4)) == MEMCG_RESERVE_KILLED);
  memcg_reservation_destroy(r);
  CHECK(memcg_member_uncharge(other, KIB(64)) == KIB(8));
  memcg_member_destroy(other);
  teardown(c, g);
}

/* A query waits in a growth on its own thread; another thread's charge OOM-kills its member, and
 * the kill callback (on that other thread) destroys the query's reservation and member while
 * the wait is in progress: the wait ends KILLED, and both are freed when it returns. */
struct waiting_query {
  struct query q;
  memcg_reserve_status status;
};

static void* wait_to_grow(void* arg) {
  struct waiting_query* w = arg;
  w->status = memcg_reservation_grow_for(w->q.reservation, KIB(64), 30ull * 1000000000ull);
  return NULL;
}

static void test_kill_destroys_waiting_reservation(void) {
  memcg_controller* c = NULL;
  memcg_group* g = NULL;
  struct waiting_query w = {{NULL, NULL, 0, 1}, MEMCG_RESERVE_OK};
  setup(&c, &g, &w.q, MEMCG_OOM_PIECES); /* 228K of 256K */
  pthread_t t;
  CHECK(pthread_create(&t, NULL, wait_to_grow, &w) == 0);
  for (int i = 0; i < 2000 && read_key(g, "memory.events", "wait") == 0; i++) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  CHECK(read_key(g, "memory.events", "wait") == 1); /* it waits */
  memcg_member* other = NULL;
  CHECK(memcg_member_create(g, "other", -1000, NULL, NULL, &other) == 0);
  /* Past the limit: the waiting query's member is the only victim; its memory comes back once
   * the wait returns and frees the reservation. */
  CHECK(memcg_member_charge(other, KIB(32), MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(w.status == MEMCG_RESERVE_KILLED);
  CHECK(w.q.kills == 1 && w.q.member == NULL && w.q.reservation == NULL);
  CHECK(memcg_member_uncharge(other, KIB(32)) == KIB(32));
  memcg_member_destroy(other);
  teardown(c, g);
}

int main(void) {
  test_kill_destroys_member(MEMCG_OOM_PIECES);
  test_kill_destroys_member(MEMCG_OOM_KERNEL);
  test_kill_destroys_own_reservation(MEMCG_OOM_PIECES);
  test_kill_destroys_own_reservation(MEMCG_OOM_KERNEL);
  test_member_destroyed_before_reservation();
  test_kill_destroys_waiting_reservation();
  return check_report("c_api_lifetime_test");
}
