/* The HTTP endpoint from C (memcg/c/http.h): options set by name (bad names and values refused,
 * nothing changed), the server started with writes and actions allowed behind a token, an
 * operator's kill over HTTP reaching a C member's callback with MEMCG_CANCEL_OPERATOR and the
 * in-process event stream, the Unix socket, stop and restart, and a callback that asks the
 * server's port while another thread stops it. Talks to 127.0.0.1 only. Prints
 * "c_api_server_test: ok". */
#define _POSIX_C_SOURCE 200809L
#include "memcg/c/http.h"
#include "check.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>


/* One HTTP/1.0 exchange on a connected socket `fd`: the whole answer into `out` (NUL-ended).
 * Returns the status code, or -1. */
static int exchange(int fd, const char* request, char* out, size_t size) {
  size_t len = strlen(request), sent = 0;
  while (sent < len) {
    ssize_t n = write(fd, request + sent, len - sent);
    if (n <= 0) return -1;
    sent += (size_t)n;
  }
  size_t got = 0;
  for (;;) {
    ssize_t n = read(fd, out + got, size - 1 - got);
    if (n <= 0) break;
    got += (size_t)n;
    if (got == size - 1) break;
  }
  out[got] = '\0';
  close(fd);
  int status = -1;
  if (sscanf(out, "HTTP/1.%*d %d", &status) != 1) return -1;
  return status;
}

static int tcp_request(int port, const char* request, char* out, size_t size) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr*)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return exchange(fd, request, out, size);
}

static int unix_request(const char* path, const char* request, char* out, size_t size) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  strncpy(a.sun_path, path, sizeof a.sun_path - 1);
  if (connect(fd, (struct sockaddr*)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return exchange(fd, request, out, size);
}

static int kills = 0;
static memcg_cancel_reason last_reason = MEMCG_CANCEL_OTHER;
static void on_kill(memcg_member* member, memcg_cancel_reason reason, void* user) {
  (void)member;
  (void)user;
  kills++;
  last_reason = reason;
}

/* A server on 127.0.0.1 (a port of its choice) that takes writes and actions with the token
 * "s3cret"; not started. */
static memcg_server* writable_server(memcg_controller* c) {
  memcg_server* s = NULL;
  CHECK(memcg_server_create(c, &s) == 0);
  CHECK(memcg_server_set(s, "address", "127.0.0.1") == 0);
  CHECK(memcg_server_set(s, "port", "0") == 0);
  CHECK(memcg_server_set(s, "allow_writes", "1") == 0);
  CHECK(memcg_server_set(s, "token", "s3cret") == 0);
  return s;
}

static void test_options(memcg_controller* c) {
  memcg_server* s = NULL;
  CHECK(memcg_server_create(NULL, &s) == EINVAL);
  CHECK(memcg_server_create(c, NULL) == EINVAL);
  CHECK(memcg_server_create(c, &s) == 0);
  CHECK(memcg_server_set(s, "no_such_option", "1") == EINVAL);
  CHECK(memcg_server_set(s, "port", "http") == EINVAL);
  CHECK(memcg_server_set(s, "port", "") == EINVAL);
  CHECK(memcg_server_set(s, "threads", "-1") == EINVAL);
  CHECK(memcg_server_set(s, "allow_writes", "yes") == EINVAL);
  CHECK(memcg_server_set(s, "unix_allowed_uids", "1,") == EINVAL);
  CHECK(memcg_server_set(s, "unix_allowed_uids", "x") == EINVAL);
  CHECK(memcg_server_set(s, NULL, "1") == EINVAL);
  CHECK(memcg_server_set(s, "port", NULL) == EINVAL);
  /* Ranges are checked at start, with a message naming the option. */
  CHECK(memcg_server_set(s, "threads", "1000") == 0);
  char error[256] = "";
  CHECK(memcg_server_start(s, error, sizeof error) == EINVAL);
  CHECK(strstr(error, "threads") != NULL);
  CHECK(memcg_server_running(s) == 0);
  CHECK(memcg_server_port(s) == 0);
  /* Writes without a token. */
  CHECK(memcg_server_set(s, "threads", "2") == 0);
  CHECK(memcg_server_set(s, "allow_writes", "1") == 0);
  CHECK(memcg_server_start(s, error, sizeof error) == EINVAL);
  CHECK(strstr(error, "token") != NULL);
  /* A short error buffer is cut, never overrun. */
  char tiny[4] = "xxx";
  CHECK(memcg_server_start(s, tiny, sizeof tiny) == EINVAL);
  CHECK(strlen(tiny) == 3);
  CHECK(memcg_server_start(NULL, error, sizeof error) == EINVAL);
  memcg_server_destroy(s);
  memcg_server_destroy(NULL);
  memcg_server_stop(NULL);
  CHECK(memcg_server_port(NULL) == 0 && memcg_server_running(NULL) == 0);
}

static void test_actions_over_http(memcg_controller* c) {
  memcg_group* g = NULL;
  CHECK(memcg_group_create(c, "q", &g) == 0);
  memcg_member* m = NULL;
  CHECK(memcg_member_create(g, "query-1", 0, on_kill, NULL, &m) == 0);
  CHECK(memcg_member_charge(m, 1u << 20, MEMCG_CHARGE_DEFAULT) == MEMCG_CHARGE_OK);
  memcg_subscription* sub = NULL;
  /* An action on a member is an event about its group (docs/http.md). */
  CHECK(memcg_subscribe(c, "q", MEMCG_EVENT_BIT(MEMCG_EVENT_ACTION), 0, 0, &sub) == 0);

  memcg_server* s = writable_server(c);
  CHECK(memcg_server_set(s, "threads", "2") == 0);
  CHECK(memcg_server_set(s, "allow_writes", "true") == 0);
  CHECK(memcg_server_set(s, "token_name", "ops") == 0);
  char error[256] = "";
  CHECK(memcg_server_start(s, error, sizeof error) == 0);
  CHECK(memcg_server_start(s, error, sizeof error) == EALREADY);
  CHECK(memcg_server_set(s, "port", "1") == EBUSY);
  CHECK(memcg_server_running(s) == 1);
  const int port = memcg_server_port(s);
  CHECK(port > 0);

  static char answer[1 << 16];
  CHECK(tcp_request(port, "GET /healthz HTTP/1.0\r\n\r\n", answer, sizeof answer) == 200);
  CHECK(tcp_request(port, "GET /v1/members?group=q HTTP/1.0\r\n\r\n", answer, sizeof answer) ==
        200);
  CHECK(strstr(answer, "\"name\":\"query-1\"") != NULL);

  char request[256];
  snprintf(request, sizeof request,
           "POST /v1/members/%llu/kill HTTP/1.0\r\nContent-Length: 0\r\n\r\n",
           (unsigned long long)memcg_member_id(m));
  CHECK(tcp_request(port, request, answer, sizeof answer) == 401); /* no token */
  CHECK(kills == 0);
  snprintf(request, sizeof request,
           "POST /v1/members/%llu/kill HTTP/1.0\r\nAuthorization: Bearer s3cret\r\n"
           "Content-Length: 0\r\n\r\n",
           (unsigned long long)memcg_member_id(m));
  const int status = tcp_request(port, request, answer, sizeof answer);
  CHECK(status == 200 || status == 202);
  CHECK(kills == 1);
  CHECK(last_reason == MEMCG_CANCEL_OPERATOR);
  CHECK(memcg_member_killed(m) == 1);
  /* Idempotent: not killed twice. */
  CHECK(tcp_request(port, request, answer, sizeof answer) / 100 == 2);
  CHECK(kills == 1);

  memcg_event e = MEMCG_EVENT_INIT;
  if (memcg_subscription_next(sub, 2000, &e) == 0) {
    CHECK(e.type == MEMCG_EVENT_ACTION && strcmp(e.group, "q") == 0);
    CHECK(strstr(e.payload, "/kill") != NULL);
  } else {
    CHECK(!"the kill is on the event stream");
  }

  /* The audit names the token, never shows it. */
  CHECK(tcp_request(port, "GET /v1/audit HTTP/1.0\r\n\r\n", answer, sizeof answer) == 200);
  CHECK(strstr(answer, "ops") != NULL);
  CHECK(strstr(answer, "s3cret") == NULL);

  memcg_server_stop(s);
  CHECK(memcg_server_running(s) == 0);
  CHECK(tcp_request(port, "GET /healthz HTTP/1.0\r\n\r\n", answer, sizeof answer) == -1);
  /* Stopped, it takes new options, and starts again. */
  CHECK(memcg_server_set(s, "allow_writes", "0") == 0);
  CHECK(memcg_server_start(s, error, sizeof error) == 0);
  const int port2 = memcg_server_port(s);
  CHECK(tcp_request(port2, request, answer, sizeof answer) == 405); /* writes off now */
  memcg_server_destroy(s);

  memcg_member_uncharge(m, 1u << 20);
  memcg_member_destroy(m);
  memcg_subscription_destroy(sub);
  memcg_group_release(g);
}

/* A kill callback (run on a server thread by POST .../kill) that asks the server's port and
 * state while the main thread stops the server, which waits for this very thread: port and
 * running must answer at once (they did wait for the stop, a deadlock). */
static memcg_server* stopping_server = NULL;
static atomic_int in_callback = 0, stop_begun = 0, asked = 0, callback_done = 0;
static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}
static void on_kill_asks(memcg_member* member, memcg_cancel_reason reason, void* user) {
  (void)member;
  (void)reason;
  (void)user;
  atomic_store(&in_callback, 1);
  while (!atomic_load(&stop_begun)) sleep_ms(1);
  sleep_ms(20); /* the stop is under way by now: it waits (up to 1 s) for this thread */
  const int port = memcg_server_port(stopping_server);
  const int running = memcg_server_running(stopping_server);
  if (port >= 0 && (running == 0 || running == 1)) atomic_store(&asked, 1);
  atomic_store(&callback_done, 1);
}
static int kill_port = 0;
static char kill_request[256];
static void* send_kill(void* arg) {
  (void)arg;
  static char out[4096];
  tcp_request(kill_port, kill_request, out, sizeof out); /* answered, or cut by the stop */
  return NULL;
}

static void test_callback_asks_during_stop(memcg_controller* c) {
  memcg_group* g = NULL;
  CHECK(memcg_group_create(c, "stop", &g) == 0);
  memcg_member* m = NULL;
  CHECK(memcg_member_create(g, "asker", 0, on_kill_asks, NULL, &m) == 0);
  memcg_server* s = writable_server(c);
  char error[256] = "";
  CHECK(memcg_server_start(s, error, sizeof error) == 0);
  stopping_server = s;
  kill_port = memcg_server_port(s);
  snprintf(kill_request, sizeof kill_request,
           "POST /v1/members/%llu/kill HTTP/1.0\r\nAuthorization: Bearer s3cret\r\n"
           "Content-Length: 0\r\n\r\n",
           (unsigned long long)memcg_member_id(m));
  pthread_t client;
  CHECK(pthread_create(&client, NULL, send_kill, NULL) == 0);
  for (int i = 0; i < 10000 && !atomic_load(&in_callback); ++i) sleep_ms(1);
  CHECK(atomic_load(&in_callback) == 1);
  atomic_store(&stop_begun, 1);
  alarm(30); /* a deadlock ends the test here instead of at ctest's timeout */
  memcg_server_stop(s);
  alarm(0);
  /* Asked before the stop returned: the stop joined the callback's thread, it did not give up
   * on it after its second (nor wait that second). */
  CHECK(atomic_load(&asked) == 1);
  CHECK(memcg_server_running(s) == 0);
  CHECK(pthread_join(client, NULL) == 0);
  /* Had the stop given up on it, the callback still uses the server: not freed under it. */
  for (int i = 0; i < 10000 && !atomic_load(&callback_done); ++i) sleep_ms(1);
  memcg_server_destroy(s);
  memcg_member_destroy(m);
  memcg_group_release(g);
}

static void test_unix_socket(memcg_controller* c) {
  char path[108];
  snprintf(path, sizeof path, "/tmp/memcg-c-api-%d.sock", (int)getpid());
  memcg_server* s = NULL;
  CHECK(memcg_server_create(c, &s) == 0);
  CHECK(memcg_server_set(s, "unix_socket", path) == 0);
  CHECK(memcg_server_set(s, "unix_allowed_uids", "") == 0);
  CHECK(memcg_server_set(s, "allow_writes", "1") == 0);
  char error[256] = "";
  CHECK(memcg_server_start(s, error, sizeof error) == 0);
  static char answer[1 << 16];
  CHECK(unix_request(path, "GET /healthz HTTP/1.0\r\n\r\n", answer, sizeof answer) == 200);
  /* The process's own uid writes without a token. */
  CHECK(memcg_group_create(c, "u", NULL) == 0);
  CHECK(unix_request(path,
                     "POST /v1/groups/u/memory.high HTTP/1.0\r\nContent-Length: 2\r\n\r\n8M",
                     answer, sizeof answer) == 200);
  memcg_group* u = NULL;
  CHECK(memcg_group_lookup(c, "u", &u) == 0);
  char value[64];
  CHECK(memcg_group_read(u, "memory.high", value, sizeof value, NULL) == 0);
  CHECK(strcmp(value, "8388608\n") == 0);
  memcg_group_release(u);
  memcg_server_destroy(s);
  CHECK(access(path, F_OK) != 0); /* stop removed it */
}

int main(void) {
  memcg_controller* c = NULL;
  CHECK(memcg_controller_create(NULL, &c) == 0);
  test_options(c);
  test_actions_over_http(c);
  test_unix_socket(c);
  test_callback_asks_during_stop(c);
  CHECK(memcg_controller_destroy(c) == 0);
  return check_report("c_api_server_test");
}
