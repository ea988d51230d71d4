/* memcg's HTTP endpoint from C (the C++ memcg::http::Server, memcg/http/server.hpp): /metrics,
 * the groups' files, the pages, the event stream (GET /v1/events) and, when writes are allowed
 * with a token or a Unix socket's allowed uids, the writes and the actions (members killed or
 * preempted, the process budget), each audited. docs/http.md describes every endpoint.
 *
 * Its own library, libmemcg_http (pkg-config memcg-c-http), beside libmemcg: it needs
 * libmicrohttpd, which the core library does not. Conventions as memcg/c/memcg.h: 0 or a
 * positive errno value, nothing changed on error, destroy NULL does nothing. */
#ifndef MEMCG_C_HTTP_H_
#define MEMCG_C_HTTP_H_

#include "memcg/c/memcg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memcg_server memcg_server;

/* A stopped server for `controller` with the default options (127.0.0.1, a free port, writes
 * and actions off). Counts as a handle of the controller until destroyed. */
int memcg_server_create(memcg_controller* controller, memcg_server** out);

/* Sets option `name` to `value` (text) for the next start; the names are ServerOptions' fields
 * (memcg/http/server.hpp), durations with their unit in the name:
 *   address, port, threads, max_queued, max_connections_per_peer, max_header_bytes,
 *   max_headers, max_body_bytes, max_answers_in_flight, read_timeout_ms, write_timeout_ms,
 *   keep_alive_timeout_s, allow_writes ("0"/"1"; the writes and the actions), token,
 *   token_name, history_interval_ms, history_groups, history_samples, runbook_base,
 *   max_event_streams, event_stream_lag, event_heartbeat_ms, audit_records, unix_socket,
 *   unix_allowed_uids (uids separated by commas; "" for the process's own).
 * Numbers are decimal. EINVAL for an unknown name or a value that is not of the option's form
 * (the ranges are checked by memcg_server_start), EBUSY while the server runs. */
int memcg_server_set(memcg_server* server, const char* name, const char* value);

/* Starts serving on background threads with the options set. 0 once connections are accepted;
 * otherwise an errno, and (when `error` is not NULL) a message NUL-terminated into `error`
 * (`error_size` bytes, cut to fit): EINVAL for an option out of range (the message names it)
 * or writes allowed without a token or a Unix socket, EALREADY when running, EADDRINUSE (or the
 * bind's errno), EEXIST for a unix_socket path that is some other file, EAGAIN or ENOMEM. A
 * failed start leaves it stopped; it may be started again. */
int memcg_server_start(memcg_server* server, char* error, size_t error_size);

/* The port bound while running (the chosen one for port 0), else 0. */
int memcg_server_port(const memcg_server* server);

/* 1 while started and listening (0 while the listening socket is lost and being bound again,
 * and after stop). */
int memcg_server_running(const memcg_server* server);

/* Stops accepting, closes the connections and joins the threads (within read_timeout plus one
 * second). Does nothing when stopped. REQUIRES: not called from a callback the server runs (a
 * member's kill callback run by POST .../kill, a reclaimer run by a write): it waits for that
 * thread. memcg_server_port and _running answer at once meanwhile, from any thread. */
void memcg_server_stop(memcg_server* server);

/* Stops it and frees it (REQUIRES as memcg_server_stop). */
void memcg_server_destroy(memcg_server* server);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MEMCG_C_HTTP_H_ */
