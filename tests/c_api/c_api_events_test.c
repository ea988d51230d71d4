/* The event stream from C (memcg/c/memcg.h): a subscription sees groups created and removed and
 * memory.events raised, filtered by subtree and type; resumes after an id; a subscriber that
 * falls behind is dropped with its reason; close wakes a waiting thread; bad arguments are
 * refused. Prints "c_api_events_test: ok". */
#define _POSIX_C_SOURCE 200809L
#include "memcg/c/memcg.h"
#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>


/* The next event of `s` within a second, of `type`, skipping others; 0 when found. */
static int expect(memcg_subscription* s, int type, const char* group, memcg_event* e) {
  for (;;) {
    int err = memcg_subscription_next(s, 1000, e);
    if (err != 0) {
      fprintf(stderr, "waiting for %s of %s: %s\n", memcg_event_type_name(type), group,
              memcg_errno_name(err));
      return err;
    }
    if (e->type == type && strcmp(e->group, group) == 0) return 0;
  }
}

static void test_stream_filters_and_resume(void) {
  memcg_controller* c = NULL;
  CHECK(memcg_controller_create(NULL, &c) == 0);
  memcg_subscription* all = NULL;
  memcg_subscription* under_a = NULL;
  memcg_subscription* kinds = NULL;
  CHECK(memcg_subscribe(c, NULL, MEMCG_EVENT_ALL, 0, 0, &all) == 0);
  CHECK(memcg_subscribe(c, "a", MEMCG_EVENT_ALL, 0, 0, &under_a) == 0);
  CHECK(memcg_subscribe(c, "/", MEMCG_EVENT_BIT(MEMCG_EVENT_MEMORY_EVENT), 0, 0, &kinds) == 0);

  memcg_event e = MEMCG_EVENT_INIT;
  CHECK(memcg_subscription_next(all, 0, &e) == EAGAIN); /* nothing yet */
  CHECK(memcg_group_create(c, "a", NULL) == 0);
  CHECK(memcg_group_create(c, "b", NULL) == 0);
  memcg_group* ab = NULL;
  CHECK(memcg_group_create(c, "a/x", &ab) == 0);

  CHECK(expect(all, MEMCG_EVENT_GROUP_CREATED, "a", &e) == 0);
  const uint64_t first_id = e.id;
  CHECK(e.time_ns > 0);
  CHECK(e.payload[0] == '{');
  CHECK(expect(all, MEMCG_EVENT_GROUP_CREATED, "b", &e) == 0);
  CHECK(e.id > first_id);
  CHECK(expect(all, MEMCG_EVENT_GROUP_CREATED, "a/x", &e) == 0);

  /* The subtree's filter: "a" and "a/x", never "b". */
  CHECK(memcg_subscription_next(under_a, 1000, &e) == 0);
  CHECK(strcmp(e.group, "a") == 0);
  CHECK(memcg_subscription_next(under_a, 1000, &e) == 0);
  CHECK(strcmp(e.group, "a/x") == 0);
  CHECK(memcg_subscription_next(under_a, 0, &e) == EAGAIN);

  /* memory.events: a charge that meets memory.max raises max; the type filter lets those
   * through and not the group creations. */
  const unsigned may_fail = MEMCG_CHARGE_MAY_BLOCK | MEMCG_CHARGE_RETRY_MAY_FAIL;
  CHECK(memcg_group_write(ab, "memory.max", "64K", 3, 0) == 0);
  CHECK(memcg_charge(ab, 48u << 10, may_fail) == MEMCG_CHARGE_OK);
  CHECK(memcg_charge(ab, 48u << 10, may_fail) == MEMCG_CHARGE_NOMEM);
  memcg_uncharge(ab, 48u << 10);
  CHECK(memcg_subscription_next(kinds, 1000, &e) == 0);
  CHECK(e.type == MEMCG_EVENT_MEMORY_EVENT);
  CHECK(strcmp(e.group, "a/x") == 0);
  CHECK(strstr(e.payload, "\"counter\":\"max\"") != NULL);

  /* Resume after the first event: the ring still holds the rest. */
  memcg_subscription* resumed = NULL;
  CHECK(memcg_subscribe(c, NULL, MEMCG_EVENT_ALL, first_id, 0, &resumed) == 0);
  CHECK(memcg_subscription_next(resumed, 1000, &e) == 0);
  CHECK(e.type == MEMCG_EVENT_GROUP_CREATED && strcmp(e.group, "b") == 0);
  CHECK(memcg_subscription_cursor(resumed) == e.id);

  /* The program's own events. */
  uint64_t mine = 0;
  CHECK(memcg_events_publish(c, MEMCG_EVENT_ACTION, "a", "{\"what\":\"drain\"}", &mine) == 0);
  CHECK(mine != 0);
  /* Refused with a reason, nothing appended, the id zeroed. */
  uint64_t id = 7;
  CHECK(memcg_events_publish(c, MEMCG_EVENT_ACTION, "a", "not json", &id) == EINVAL && id == 0);
  CHECK(memcg_events_publish(c, MEMCG_EVENT_ACTION, "a", "{\n}", &id) == EINVAL);
  CHECK(memcg_events_publish(c, 99, "a", "{}", &id) == EINVAL);
  CHECK(memcg_events_publish(c, -1, "a", "{}", &id) == EINVAL);
  id = 7;
  CHECK(memcg_events_publish(c, MEMCG_EVENT_ACTION, "no/such", "{}", &id) == ENOENT && id == 0);
  CHECK(expect(under_a, MEMCG_EVENT_ACTION, "a", &e) == 0);
  CHECK(e.id == mine);
  CHECK(strcmp(e.payload, "{\"what\":\"drain\"}") == 0);

  /* Removal. */
  memcg_group_release(ab);
  CHECK(memcg_group_remove(c, "a/x") == 0);
  CHECK(expect(all, MEMCG_EVENT_GROUP_REMOVED, "a/x", &e) == 0);

  /* The controller counts subscriptions as handles. */
  CHECK(memcg_controller_destroy(c) == EBUSY);
  memcg_subscription_destroy(all);
  memcg_subscription_destroy(under_a);
  memcg_subscription_destroy(kinds);
  memcg_subscription_destroy(resumed);
  CHECK(memcg_controller_destroy(c) == 0);
}

static void test_lagging_subscriber_is_dropped(void) {
  memcg_controller* c = NULL;
  CHECK(memcg_controller_create(NULL, &c) == 0);
  memcg_subscription* slow = NULL;
  CHECK(memcg_subscribe(c, NULL, MEMCG_EVENT_ALL, 0, 8, &slow) == 0);
  for (int i = 0; i < 64; i++) {
    uint64_t id = 0;
    CHECK(memcg_events_publish(c, MEMCG_EVENT_ACTION, NULL, "{}", &id) == 0 && id != 0);
  }
  memcg_event e = MEMCG_EVENT_INIT;
  /* Dropped by the notifier thread: give it a moment. */
  int err = 0;
  for (int i = 0; i < 100 && err != ECONNABORTED; i++) {
    err = memcg_subscription_next(slow, 10, &e);
    if (err == 0) continue;
  }
  CHECK(err == ECONNABORTED);
  CHECK(memcg_subscription_drop_reason(slow) == 1);
  CHECK(strcmp(memcg_drop_reason_name(memcg_subscription_drop_reason(slow)), "lagging") == 0);
  memcg_subscription_destroy(slow);
  CHECK(memcg_controller_destroy(c) == 0);
}

static void* wait_for_next(void* arg) {
  memcg_event e = MEMCG_EVENT_INIT;
  static int result;
  result = memcg_subscription_next((memcg_subscription*)arg, 60000, &e);
  return &result;
}

static void test_close_wakes_a_waiter(void) {
  memcg_controller* c = NULL;
  CHECK(memcg_controller_create(NULL, &c) == 0);
  memcg_subscription* s = NULL;
  CHECK(memcg_subscribe(c, NULL, MEMCG_EVENT_ALL, 0, 0, &s) == 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, wait_for_next, s) == 0);
  struct timespec pause = {0, 50 * 1000 * 1000};
  nanosleep(&pause, NULL);
  memcg_subscription_close(s);
  memcg_subscription_close(s); /* idempotent */
  void* result = NULL;
  pthread_join(t, &result);
  CHECK(*(int*)result == EBADF);
  memcg_event e = MEMCG_EVENT_INIT;
  CHECK(memcg_subscription_next(s, 0, &e) == EBADF);
  memcg_subscription_destroy(s);
  CHECK(memcg_controller_destroy(c) == 0);
}

static void test_bad_arguments(void) {
  memcg_controller* c = NULL;
  CHECK(memcg_controller_create(NULL, &c) == 0);
  /* Nothing subscribed yet: a valid event is dropped, which is no error. */
  uint64_t dropped = 7;
  CHECK(memcg_events_publish(c, MEMCG_EVENT_ACTION, NULL, "{}", &dropped) == 0 && dropped == 0);
  memcg_subscription* s = NULL;
  CHECK(memcg_subscribe(NULL, NULL, MEMCG_EVENT_ALL, 0, 0, &s) == EINVAL);
  CHECK(memcg_subscribe(c, NULL, 0, 0, 0, &s) == EINVAL);
  CHECK(memcg_subscribe(c, NULL, 1u << 20, 0, 0, &s) == EINVAL);
  CHECK(memcg_subscribe(c, "../x", MEMCG_EVENT_ALL, 0, 0, &s) == EINVAL);
  CHECK(memcg_subscribe(c, "a b", MEMCG_EVENT_ALL, 0, 0, &s) == EINVAL);
  CHECK(memcg_subscribe(c, NULL, MEMCG_EVENT_ALL, 0, 0, NULL) == EINVAL);
  CHECK(s == NULL);
  memcg_event e = MEMCG_EVENT_INIT;
  CHECK(memcg_subscription_next(NULL, 0, &e) == EINVAL);
  CHECK(memcg_subscribe(c, NULL, MEMCG_EVENT_ALL, 0, 0, &s) == 0);
  CHECK(memcg_subscription_next(s, -1, &e) == EINVAL);
  CHECK(memcg_subscription_next(s, 0, NULL) == EINVAL);
  memcg_event small = MEMCG_EVENT_INIT;
  small.size = sizeof(memcg_event) - 1; /* a caller that sets no size, or a wrong one */
  CHECK(memcg_subscription_next(s, 0, &small) == EINVAL);
  small.size = 0;
  CHECK(memcg_subscription_next(s, 0, &small) == EINVAL);
  CHECK(memcg_subscription_cursor(NULL) == 0);
  CHECK(memcg_subscription_drop_reason(NULL) == 0);
  memcg_subscription_close(NULL);
  memcg_subscription_destroy(NULL);
  memcg_subscription_destroy(s);
  CHECK(memcg_event_type_from_name("oom") == MEMCG_EVENT_OOM);
  CHECK(memcg_event_type_from_name("gap") == MEMCG_EVENT_GAP);
  CHECK(memcg_event_type_from_name("Oom") == -1);
  CHECK(memcg_event_type_from_name(NULL) == -1);
  CHECK(strcmp(memcg_event_type_name(MEMCG_EVENT_GROUP_CREATED), "group_created") == 0);
  CHECK(strcmp(memcg_event_type_name(11), "unknown") == 0);
  CHECK(strcmp(memcg_event_type_name(-1), "unknown") == 0);
  CHECK(strcmp(memcg_drop_reason_name(4), "unknown") == 0);
  uint64_t id = 7;
  CHECK(memcg_events_publish(NULL, MEMCG_EVENT_ACTION, NULL, "{}", &id) == EINVAL && id == 0);
  CHECK(memcg_events_publish(c, MEMCG_EVENT_ACTION, NULL, NULL, &id) == EINVAL);
  CHECK(memcg_events_publish(c, MEMCG_EVENT_ACTION, NULL, "{}", NULL) == EINVAL);
  CHECK(memcg_member_id(NULL) == 0);
  CHECK(memcg_controller_destroy(c) == 0);
}

static void test_member_ids(void) {
  memcg_controller* c = NULL;
  memcg_group* g = NULL;
  CHECK(memcg_controller_create(NULL, &c) == 0);
  CHECK(memcg_group_create(c, "t", &g) == 0);
  memcg_member* m1 = NULL;
  memcg_member* m2 = NULL;
  CHECK(memcg_member_create(g, "m1", 0, NULL, NULL, &m1) == 0);
  CHECK(memcg_member_create(g, "m2", 0, NULL, NULL, &m2) == 0);
  CHECK(memcg_member_id(m1) != 0);
  CHECK(memcg_member_id(m2) != 0 && memcg_member_id(m2) != memcg_member_id(m1));
  memcg_member_destroy(m1);
  memcg_member_destroy(m2);
  memcg_group_release(g);
  CHECK(memcg_controller_destroy(c) == 0);
}

int main(void) {
  test_stream_filters_and_resume();
  test_lagging_subscriber_is_dropped();
  test_close_wakes_a_waiter();
  test_bad_arguments();
  test_member_ids();
  return check_report("c_api_events_test");
}
