/* memcg's C API: the library's groups, charges, reservations, OOM members and notifications
 * behind opaque handles, for programs that cannot use the C++20 interface (Rust, Go, Python,
 * a plugin loaded across compilers). C11; usable from C++ too.
 *
 * Conventions (docs/c-api.md has the details):
 *  - Handles are opaque pointers made by a *_create / *_lookup function and freed by the matching
 *    *_destroy / *_release. Destroying NULL does nothing.
 *  - Set-up calls return an int: 0, or a positive errno value (EINVAL for a NULL handle or a bad
 *    argument, ENOENT, EEXIST, EBUSY, ... as the C++ calls give them; ENOMEM when the library
 *    could not allocate; EIO for an unexpected internal failure). On error nothing changed and
 *    no handle was made. memcg_errno_name() names a code.
 *  - The memory path returns a status (memcg_charge_status, memcg_reserve_status), as in C++:
 *    a refusal there is an expected outcome, not an error.
 *  - Sizes are bytes. Files are read and written by their cgroup-v2 names ("memory.max",
 *    "memory.stat", ...) with the kernel's formats.
 *  - No C++ exception crosses this interface.
 *  - Callbacks are a function pointer plus a `void*` given back unchanged. They run with no lock
 *    of the library held, may call into the library, and (kill and notification callbacks) may
 *    destroy their own handle, which then must not be used again.
 *  - Lifetimes: a handle must not be used after its destroy call, but the library keeps what it
 *    still needs. A member lives on, invisible to the program, while reservations are bound to
 *    it; a reservation destroyed inside a callback that its own request ran is freed when that
 *    request returns. So a kill callback may destroy its member, and the reservations of its
 *    query, in any order.
 *  - Thread safety: like the C++ objects they wrap. Controllers, groups, members and listeners may
 *    be used from any thread; a reservation from one thread at a time.
 *
 * Parts whose shape may still change are declared only when MEMCG_C_EXPERIMENTAL is defined
 * before this header is included; their symbols are exported all the same. */
#ifndef MEMCG_C_MEMCG_H_
#define MEMCG_C_MEMCG_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ------------------------------------------------------------------------------ */

/* The version of this header; memcg_version() is the library's, which may be a later compatible
 * one when it is a shared library. 0.x releases may change the interface at each minor version.
 * 0.2 added, changing no declaration of 0.1: memcg_controller_drain_stocks, _flush_stats,
 * memcg_group_list, memcg_oom_log_read, _last_seq, memcg_member_set_score_adj, _score_adj,
 * memcg_reservation_grow_until, the *_from_name lookups, MEMCG_CHARGE_NOWAIT and memcg_quote;
 * then MEMCG_CANCEL_OPERATOR, memcg_member_id and the event stream (memcg_subscribe, ...). The
 * HTTP endpoint has its own header and library: memcg/c/http.h, libmemcg_http. */
#define MEMCG_C_VERSION_MAJOR 0
#define MEMCG_C_VERSION_MINOR 2
#define MEMCG_C_VERSION_PATCH 0
#define MEMCG_C_VERSION_NUMBER \
  (MEMCG_C_VERSION_MAJOR * 10000 + MEMCG_C_VERSION_MINOR * 100 + MEMCG_C_VERSION_PATCH)

/* The library's version as MAJOR * 10000 + MINOR * 100 + PATCH, and as "MAJOR.MINOR.PATCH". */
unsigned memcg_version(void);
const char* memcg_version_string(void);

/* True (1) when the library running can serve a program compiled with this header: the same
 * major version, and for 0.x the same minor version too, and not older than the header. */
#define MEMCG_C_VERSION_COMPATIBLE()                                                          \
  (memcg_version() / 10000 == MEMCG_C_VERSION_MAJOR &&                                       \
   (MEMCG_C_VERSION_MAJOR != 0 || memcg_version() / 100 % 100 == MEMCG_C_VERSION_MINOR) &&    \
   memcg_version() >= MEMCG_C_VERSION_NUMBER)

/* ---- errors ------------------------------------------------------------------------------- */

/* "ok" for 0, "EINVAL" etc. for the codes the library returns, "unknown" otherwise. Never NULL;
 * static storage. */
const char* memcg_errno_name(int code);
/* A short printable form of `text` (`length` bytes, any bytes) for an error message, so that a
 * binding never puts a whole written value into one: in double quotes, a byte outside printable
 * ASCII (and `"`, `\`) escaped as \xHH (or \", \\), at most MEMCG_QUOTE_MAX bytes of the text
 * followed by "..." when it was longer. Into `buf` (NUL-terminated) with `*length` and ERANGE as
 * memcg_group_read; MEMCG_QUOTE_SIZE bytes always suffice. EINVAL for a NULL `text` with a
 * nonzero `length`. */
#define MEMCG_QUOTE_MAX 64
#define MEMCG_QUOTE_SIZE (2 + 4 * MEMCG_QUOTE_MAX + 3 + 1)
int memcg_quote(const char* text, size_t length, char* buf, size_t size, size_t* length_out);
/* The inverse, for a configuration or a log read back: "EINVAL" -> EINVAL, "ok" -> 0; -1 for
 * NULL and any other text ("unknown" included). Exact and case-sensitive. */
int memcg_errno_from_name(const char* name);

/* ---- handles ------------------------------------------------------------------------------ */

typedef struct memcg_controller memcg_controller;   /* the tree of groups */
typedef struct memcg_group memcg_group;             /* a reference to one group */
typedef struct memcg_member memcg_member;           /* something the OOM killer may kill */
typedef struct memcg_reservation memcg_reservation; /* bytes held for one query or job */
typedef struct memcg_listener memcg_listener;       /* a notification registration */

/* ---- controller --------------------------------------------------------------------------- */

/* Controller options. Fill with memcg_options_init() first, then change what you need: a later
 * version may add fields at the end, and `size` tells the library how many this program knows. */
typedef struct memcg_options {
  size_t size;               /* sizeof(memcg_options), set by memcg_options_init */
  unsigned unit_shift;       /* charge unit 2^unit_shift bytes, 6..30 (default 12) */
  int64_t batch;             /* per-CPU pre-charge batch in units, 1..127 (default 64) */
  int nr_shards;             /* per-CPU shards, 0 = the machine's CPUs */
  int recursive_protection;  /* the memory_recursiveprot mount option */
  int local_events;          /* the memory_localevents mount option */
} memcg_options;

void memcg_options_init(memcg_options* options);

/* Makes a controller; `options` may be NULL (the defaults). EINVAL for options out of range. */
int memcg_controller_create(const memcg_options* options, memcg_controller** out);

/* Destroys it. EBUSY (and nothing happens) while a handle made from it (group, member,
 * reservation, listener) is still alive: destroy those first. 0 for NULL. */
int memcg_controller_destroy(memcg_controller* controller);

/* Gives back every unit pre-charged in the per-CPU stocks, so that memory.current is exactly
 * what is charged: a charge takes a batch (64 units by default) from its group and keeps the
 * rest for the next charge on that CPU, so after everything was uncharged a group may still
 * show up to a batch per CPU. For a final report or a check that all was given back; a charge
 * that would fail at a limit drains the stocks of that subtree by itself. EINVAL for NULL. */
int memcg_controller_drain_stocks(memcg_controller* controller);

/* Folds every pending statistic now, so that the next memory.stat read is exact (reads fold only
 * when enough is pending or the last full fold is older than 2 s). EINVAL for NULL. */
int memcg_controller_flush_stats(memcg_controller* controller);

/* Creates the group at `path` ("a/b/c"; the parent must exist). `out` may be NULL; otherwise it
 * receives a new reference to release with memcg_group_release. EINVAL for a malformed path,
 * ENOENT without a parent, EEXIST when it exists. */
int memcg_group_create(memcg_controller* controller, const char* path, memcg_group** out);

/* A new reference to the online group at `path` ("/" or "" is the root). ENOENT if none. */
int memcg_group_lookup(memcg_controller* controller, const char* path, memcg_group** out);

/* Takes the group at `path` offline (its charges stay counted until uncharged). EINVAL for the
 * root, ENOENT when absent, EBUSY while it has online children. */
int memcg_group_remove(memcg_controller* controller, const char* path);

/* Drops a reference from create or lookup. */
void memcg_group_release(memcg_group* group);

/* The group's path into `buf` (NUL-terminated), as memcg_group_read does for files. */
int memcg_group_path(const memcg_group* group, char* buf, size_t size, size_t* length);

/* The paths of the group's online descendants (not the group itself), one per line ending in
 * "\n", a parent before its children, siblings in name order; "" when it has none. List from the
 * root ("/") for the whole tree. `buf`, `size`, `length` and ERANGE as memcg_group_read. */
int memcg_group_list(memcg_group* group, char* buf, size_t size, size_t* length);

/* ---- files: the cgroup-v2 interface by name ----------------------------------------------- */

/* The root group ("/"), like the kernel's, has neither memory.current nor the limits, events,
 * OOM and wait files (ENOENT): charges are not counted at the root, so the process's total is
 * the sum of the top-level groups' memory.current (memcg_group_list from the root). Its
 * memory.stat and memory.reclaim are there. */

/* Reads file `name` of the group into `buf` and NUL-terminates it. `*length` (if `length` is not
 * NULL) receives the text's length without the NUL, also when `buf` is too small: then the
 * result is ERANGE and `buf` is untouched, so a caller may ask once with size 0 for the length.
 * ENOENT for a file the group does not have; EACCES for a write-only file. */
int memcg_group_read(memcg_group* group, const char* name, char* buf, size_t size,
                     size_t* length);

/* Writes `text` (`length` bytes; need not be NUL-terminated) to file `name`. The file's
 * grammar and errors (EINVAL, ERANGE, EBUSY, EAGAIN, EACCES for a read-only file, ...); a
 * rejected write changes nothing. A NUL byte inside the `length` bytes is EINVAL (a file's text
 * never holds one; "1\0G" is not "1"). Writing memory.reclaim gives back the stocks of the
 * subtree and reclaims: EAGAIN when less than asked could be reclaimed (nothing reclaimable
 * included), as the kernel's file answers; the stocks were drained all the same.
 * `nonblocking` as O_NONBLOCK (memory.high/max only store). */
int memcg_group_write(memcg_group* group, const char* name, const char* text, size_t length,
                      int nonblocking);

/* ---- charges ------------------------------------------------------------------------------ */

/* Caller flags (the C++ ChargeFlags). */
enum {
  MEMCG_CHARGE_MAY_BLOCK = 1u << 0,      /* reclaim and sleep allowed (the default) */
  MEMCG_CHARGE_NO_RETRY = 1u << 1,       /* fail after the first reclaim pass */
  MEMCG_CHARGE_RETRY_MAY_FAIL = 1u << 2, /* never the OOM killer */
  MEMCG_CHARGE_NO_FAIL = 1u << 3,        /* charge past max rather than fail */
  MEMCG_CHARGE_HIGH_PRIO = 1u << 4,      /* like NO_FAIL on failure */
  MEMCG_CHARGE_DEFAULT = MEMCG_CHARGE_MAY_BLOCK,
  /* Never sleeps nor reclaims (no MAY_BLOCK): NOMEM at once when the limit holds, and no
   * throttling above memory.high; the throttle owed is paid by this thread's next blocking
   * charge, as the kernel's GFP_NOWAIT allocations leave it to the return to user space. For
   * an event loop that must not stall. */
  MEMCG_CHARGE_NOWAIT = 0
};

typedef enum memcg_charge_status {
  MEMCG_CHARGE_OK = 0,      /* charged within the limits */
  MEMCG_CHARGE_FORCED = 1,  /* charged past max (NO_FAIL, HIGH_PRIO) */
  MEMCG_CHARGE_NOMEM = 2,   /* not charged: the limit held */
  MEMCG_CHARGE_INVALID = 3  /* not charged: NULL group or member, unknown flag bits, or more
                               bytes than one charge can hold (about 2^63; memcg_member_charge
                               and memcg_charge alike) */
} memcg_charge_status;

/* "ok", "forced", "nomem", "invalid"; "unknown" for other values. */
const char* memcg_charge_status_name(int status);
/* The inverse: the status named `name`, -1 for NULL or any other text. */
int memcg_charge_status_from_name(const char* name);

/* Charges `bytes` (rounded up to whole units) to the group. The hot path: no lock, no
 * allocation, a few nanoseconds when this CPU's stock covers it. The slow path, when the stock
 * is empty and the flags allow it (MEMCG_CHARGE_MAY_BLOCK, the default): at memory.max it
 * reclaims, may run the OOM killer (whose kill callbacks then run on this thread) and wait for
 * a victim to give its memory back; above memory.high it reclaims and then sleeps a penalty
 * that grows with the overage, up to 2 s per call, as the kernel throttles an allocating task
 * (memory.events `high` counts it). MEMCG_CHARGE_NOWAIT never sleeps. */
memcg_charge_status memcg_charge(memcg_group* group, uint64_t bytes, unsigned flags);

/* Uncharges `bytes` charged to this group by memcg_charge (the same rounding). */
void memcg_uncharge(memcg_group* group, uint64_t bytes);

/* ---- members: what the OOM killer may kill ------------------------------------------------ */

/* Why a member's callback runs. */
typedef enum memcg_cancel_reason {
  MEMCG_CANCEL_OOM_KILL = 0, /* the OOM killer chose it: release its memory */
  MEMCG_CANCEL_PREEMPT = 1,  /* a waiting charge of a higher class asks it to give memory back */
  MEMCG_CANCEL_OTHER = 2,    /* a reason this header does not know yet */
  MEMCG_CANCEL_OPERATOR = 3  /* an operator killed it or asked for memory back (HTTP actions,
                              * the process budget); memcg_member_killed tells which */
} memcg_cancel_reason;

/* Called on the thread that ran the OOM killer (or the waiting charge), no library lock held.
 * It may destroy `member` and any reservation (its own query's included, also the one whose
 * request ran the killer); after that it must not use them. */
typedef void (*memcg_kill_fn)(memcg_member* member, memcg_cancel_reason reason, void* user);

/* Joins `group` (online). `on_kill` may be NULL (a kill then only marks the member).
 * `score_adj` is the oom_score_adj analogue, -1000 (immune) .. 1000. ENOENT for a removed
 * group, EINVAL for NULL arguments or a score out of range. */
int memcg_member_create(memcg_group* group, const char* name, int score_adj,
                        memcg_kill_fn on_kill, void* user, memcg_member** out);

/* Uncharges what it still holds and leaves its group: at once, or, while reservations are bound
 * to it, when the last of them is destroyed (until then it stays in its group, holding what it
 * and they charged, and may still be OOM-killed, which those reservations then report). Its
 * kill callback is not called once this returns (a call already running on another thread
 * finishes). The handle must not be used again, not even to create a reservation. */
void memcg_member_destroy(memcg_member* member);

/* Changes its oom_score_adj (-1000 immune .. 1000), as writing /proc/PID/oom_score_adj does:
 * the next OOM decision sees it. EINVAL for NULL or a score out of range (nothing changed). */
int memcg_member_set_score_adj(memcg_member* member, int score_adj);
/* Its oom_score_adj now (0 for NULL). */
int memcg_member_score_adj(const memcg_member* member);

/* Charges `bytes` for this member (counted in its badness). */
memcg_charge_status memcg_member_charge(memcg_member* member, uint64_t bytes, unsigned flags);

/* Uncharges up to what it holds; returns the bytes uncharged. */
uint64_t memcg_member_uncharge(memcg_member* member, uint64_t bytes);

/* 1 once the OOM killer killed it, 0 otherwise (and for NULL). */
int memcg_member_killed(const memcg_member* member);

/* Bytes it holds now (whole units). */
uint64_t memcg_member_charged(const memcg_member* member);

/* Its id: unique in the controller, never reused, as GET /v1/members lists it and
 * POST /v1/members/<id>/kill names it (docs/http.md). 0 for NULL. */
uint64_t memcg_member_id(const memcg_member* member);

/* ---- reservations ------------------------------------------------------------------------- */

/* What happened to a request: the C++ ReserveStatus, same values, and REFUSED for one that this
 * header does not know. */
typedef enum memcg_reserve_status {
  MEMCG_RESERVE_OK = 0,           /* held */
  MEMCG_RESERVE_FORCED = 1,       /* held, past memory.max */
  MEMCG_RESERVE_NOMEM = 2,        /* memory.max held after reclaim and the OOM killer */
  MEMCG_RESERVE_NOMEM_COSTLY = 3, /* memory.max held; large request, OOM killer not asked */
  MEMCG_RESERVE_TIMED_OUT = 4,    /* a waiting request's deadline passed */
  MEMCG_RESERVE_CANCELLED = 5,    /* memcg_reservation_cancel was called */
  MEMCG_RESERVE_KILLED = 6,       /* its member was OOM-killed */
  MEMCG_RESERVE_REMOVED = 7,      /* the group was removed while waiting */
  MEMCG_RESERVE_INVALID = 8,      /* NULL handle, a size no counter holds, a bad option */
  MEMCG_RESERVE_NEVER_FITS = 9,   /* refused at once: more than the smallest memory.max on the
                                     group's path, so neither waiting nor a kill could help */
  MEMCG_RESERVE_REFUSED = 100     /* refused for a reason a newer library has and this header
                                     does not name: nothing was charged */
} memcg_reserve_status;

/* "ok", "forced", "nomem", "nomem-costly", "timed-out", "cancelled", "killed", "removed",
 * "invalid", "never-fits", "refused"; "unknown" for other values. */
const char* memcg_reserve_status_name(int status);
/* The inverse: the status named `name` ("never-fits" -> MEMCG_RESERVE_NEVER_FITS), -1 for NULL
 * or any other text. */
int memcg_reserve_status_from_name(const char* name);

/* OOM policy for requests that do not fit (the C++ OomPolicy). */
enum {
  MEMCG_OOM_KERNEL = 0, /* one charge; over 32 KiB never OOM-kills */
  MEMCG_OOM_PIECES = 1, /* charged in 32 KiB pieces: every request is OOM-eligible */
  MEMCG_OOM_NEVER = 2   /* reclaim and retries only */
};

/* Waiting class (the C++ WaitPriority). */
enum {
  MEMCG_PRIORITY_DEFAULT = -1, /* the group's memory.wait.priority */
  MEMCG_PRIORITY_LOW = 0,
  MEMCG_PRIORITY_NORMAL = 1,
  MEMCG_PRIORITY_HIGH = 2
};

/* A reservation bound to `group` or to `member` (exactly one of them non-NULL), holding
 * nothing yet. EINVAL for a bad policy or priority, or both/neither owner. A member keeps living
 * (in its group) while reservations are bound to it, even once memcg_member_destroy was called
 * on it: destroying them in any order is safe. */
int memcg_reservation_create(memcg_group* group, memcg_member* member, int oom_policy,
                             int priority, memcg_reservation** out);

/* Gives back what it holds and frees it. Called from a callback that a request of this same
 * reservation ran (a kill callback of its member, say), the reservation is given back and freed
 * when that request returns, with its status. */
void memcg_reservation_destroy(memcg_reservation* reservation);

/* Makes it hold `total` bytes (grows or shrinks). On any status but OK/FORCED nothing changed. */
memcg_reserve_status memcg_reserve(memcg_reservation* reservation, uint64_t total);
/* The same, waiting up to `timeout_ns` when the limit holds (never OOM-kills). */
memcg_reserve_status memcg_reserve_for(memcg_reservation* reservation, uint64_t total,
                                       uint64_t timeout_ns);
/* The same with a deadline on the controller's clock (memcg_controller_now_ns). */
memcg_reserve_status memcg_reserve_until(memcg_reservation* reservation, uint64_t total,
                                         uint64_t deadline_ns);
/* Adds `bytes` to what it holds, at once or waiting up to `timeout_ns`. memcg_reservation_grow
 * is refused as NEVER_FITS only when `bytes` alone is more than the smallest memory.max on the
 * path; a total that grows past the limit goes to the OOM killer (per the policy), which may
 * choose this reservation's own member, as the kernel kills a task that grows past its limit:
 * KILLED, its kill callback having run. A waiting growth never kills: NEVER_FITS when the total
 * could not fit even if everything else were freed. */
memcg_reserve_status memcg_reservation_grow(memcg_reservation* reservation, uint64_t bytes);
memcg_reserve_status memcg_reservation_grow_for(memcg_reservation* reservation, uint64_t bytes,
                                                uint64_t timeout_ns);
/* The same with a deadline on the controller's clock, for a query whose requests share one. */
memcg_reserve_status memcg_reservation_grow_until(memcg_reservation* reservation, uint64_t bytes,
                                                  uint64_t deadline_ns);
/* Gives back `bytes` (at most what it holds), or everything; it may grow again. */
void memcg_reservation_shrink(memcg_reservation* reservation, uint64_t bytes);
void memcg_reservation_release(memcg_reservation* reservation);
/* What the owner asked for, in bytes (0 for NULL). */
uint64_t memcg_reservation_bytes(const memcg_reservation* reservation);
/* Makes every later request (memcg_reserve* to a smaller total too), and one waiting now (from
 * another thread), return CANCELLED. What it holds stays held until memcg_reservation_shrink,
 * _release or _destroy, which still give back. Thread-safe, unlike the other reservation
 * calls. */
void memcg_reservation_cancel(memcg_reservation* reservation);

/* The controller's clock, in nanoseconds (for memcg_reserve_until). 0 for NULL. */
uint64_t memcg_controller_now_ns(const memcg_controller* controller);

/* ---- the OOM log: the recent OOM and preemption reports ------------------------------------ */

/* The sequence number of the latest report (1, 2, ... per controller, never reused; 0 for none
 * or NULL). A service polls it and reads what is new. */
uint64_t memcg_oom_log_last_seq(memcg_controller* controller);

/* The reports held with a sequence number above `after` (0: all the log keeps, the last 32 by
 * default), oldest first, one line each ending in "\n": "oom_kill seq=3 t=1.250s domain=/a
 * victim=q1 ... top_members=... top_groups=...", as memcg::format_oom_log_line writes them.
 * `buf`, `size`, `length` and ERANGE as memcg_group_read (a report may arrive between a size
 * query and the read: ask again on ERANGE). EINVAL for NULL. */
int memcg_oom_log_read(memcg_controller* controller, uint64_t after, char* buf, size_t size,
                       size_t* length);

/* ---- listeners: notifications ------------------------------------------------------------- */

/* A notification. `value`: for memory.events listeners 0 (memory.events) or 1
 * (memory.events.local); for vmpressure listeners the level (0 low, 1 medium, 2 critical).
 * `removed` is 1 for the final notification sent when the group is removed. The callback runs
 * with no library lock held and may destroy its own listener. */
typedef void (*memcg_notify_fn)(memcg_listener* listener, int value, int removed, void* user);

/* Notifications of changes to memory.events (`local` = 0) or memory.events.local (1) of a
 * non-root group, at most one per 10 ms. ENOENT for the root or a removed group. */
int memcg_listener_create_events(memcg_group* group, int local, memcg_notify_fn fn, void* user,
                                 memcg_listener** out);

/* vmpressure notifications, `args` as memory.pressure_level's registration ("low",
 * "medium,hierarchy", "critical,local"). EINVAL for bad args. */
int memcg_listener_create_vmpressure(memcg_group* group, const char* args, memcg_notify_fn fn,
                                     void* user, memcg_listener** out);

/* Unregisters and frees: when it returns, the callback does not run again (inside a callback
 * of the library it does not wait for a call running on another thread). */
void memcg_listener_destroy(memcg_listener* listener);

/* Notifications delivered so far (the final removal notice not counted). */
uint64_t memcg_listener_delivered(const memcg_listener* listener);

/* 1 once the group was removed. */
int memcg_listener_removed(const memcg_listener* listener);

/* ---- events: the controller's event stream, in-process ------------------------------------ */

/* The controller's event bus (memcg/core/signal/event_bus.hpp; GET /v1/events serves the same
 * events): memory.events increments, vmpressure level changes, PSI triggers firing, OOM and
 * preemption reports, groups created and removed, writes, actions and budget progress, each
 * with an id (increasing, larger in a later run of the process) in a bounded ring of the last
 * 4096. Off, and free, until something subscribes (or an HTTP server starts). A subscription
 * is a cursor into that ring: it is never sent more than it asked for, and one that falls
 * more than `max_lag` events behind is dropped, never buffered without bound. */
typedef struct memcg_subscription memcg_subscription;

/* What an event reports; the names (memcg_event_type_name) are the stream's `event:` field. */
typedef enum memcg_event_type {
  MEMCG_EVENT_MEMORY_EVENT = 0,  /* "memory_event": a memory.events counter went up */
  MEMCG_EVENT_VMPRESSURE = 1,    /* "vmpressure": a reclaim root's level changed */
  MEMCG_EVENT_PSI_TRIGGER = 2,   /* "psi_trigger": a PSI trigger fired */
  MEMCG_EVENT_OOM = 3,           /* "oom": an OOM report (the JSON of GET /v1/oom) */
  MEMCG_EVENT_PREEMPT = 4,       /* "preempt": a preemption report */
  MEMCG_EVENT_BUDGET = 5,        /* "budget": the process budget's progress */
  MEMCG_EVENT_GROUP_CREATED = 6, /* "group_created" */
  MEMCG_EVENT_GROUP_REMOVED = 7, /* "group_removed" */
  MEMCG_EVENT_WRITE = 8,         /* "write": a group file written over HTTP */
  MEMCG_EVENT_ACTION = 9,        /* "action": an operator's action applied */
  MEMCG_EVENT_GAP = 10           /* "gap": events asked for that the ring no longer holds */
} memcg_event_type;
/* The bit of `type` in a subscription's `types` mask, and the mask of every type. A gap event
 * is delivered whatever the mask. */
#define MEMCG_EVENT_BIT(type) (1u << (type))
#define MEMCG_EVENT_ALL ((1u << 11) - 1)

/* "memory_event", ... "gap"; "unknown" for other values. */
const char* memcg_event_type_name(int type);
/* The inverse: -1 for NULL or any other text. */
int memcg_event_type_from_name(const char* name);

/* One event. The strings belong to the subscription: valid until its next
 * memcg_subscription_next or its destroy. The caller sets `size` to sizeof(memcg_event) before
 * each call (MEMCG_EVENT_INIT does): a later version may add fields at the end and fills only
 * those this program knows. */
typedef struct memcg_event {
  size_t size;          /* sizeof(memcg_event), set by the caller */
  uint64_t id;          /* resume after it with memcg_subscribe's `after_id` */
  int type;             /* memcg_event_type */
  uint64_t time_ns;     /* wall clock (CLOCK_REALTIME), nanoseconds since the epoch */
  const char* group;    /* the group's path: "/" for the root, "a/b" below it */
  const char* payload;  /* one JSON object on one line */
} memcg_event;
#define MEMCG_EVENT_INIT {sizeof(memcg_event), 0, 0, 0, NULL, NULL}

/* Subscribes to the events of `subtree` (a group path, its descendants included; NULL, "" or
 * "/" for every group) whose type's bit is in `types` (0 is EINVAL), resuming after
 * `after_id`: 0 for the events from now on; an id the ring no longer holds gives a gap event
 * first. `max_lag`: how many events it may fall behind before it is dropped (0: the ring's
 * capacity). EINVAL for a subtree that is not a group path or an unknown type bit, EAGAIN at
 * the bus's 1024 subscriptions. */
int memcg_subscribe(memcg_controller* controller, const char* subtree, uint32_t types,
                    uint64_t after_id, size_t max_lag, memcg_subscription** out);

/* The next event into `*event`, waiting up to `timeout_ms` for one (0: only look; at most
 * 2^31 ms). 0 when one was taken; EAGAIN when none came in time; ECONNABORTED when the
 * subscription was dropped (memcg_subscription_drop_reason says why: resubscribe after
 * memcg_subscription_cursor); EBADF after memcg_subscription_close; EINVAL for NULL, a
 * negative timeout or an `event->size` smaller than the first version's memcg_event (nothing
 * taken then). One thread at a time per subscription. */
int memcg_subscription_next(memcg_subscription* subscription, int64_t timeout_ms,
                            memcg_event* event);

/* The id of the last event handed out or passed over by the filter: resume after it. From the
 * thread that calls memcg_subscription_next (or while none runs): it reads what next() keeps. */
uint64_t memcg_subscription_cursor(const memcg_subscription* subscription);

/* Why a subscription was dropped. */
typedef enum memcg_drop_reason {
  MEMCG_DROP_NONE = 0,    /* not dropped */
  MEMCG_DROP_LAGGING = 1, /* more than max_lag events behind the newest */
  MEMCG_DROP_OVERRUN = 2, /* the ring overwrote an event it had not taken */
  MEMCG_DROP_CLOSED = 3   /* the controller went away */
} memcg_drop_reason;
/* Its memcg_drop_reason. Thread-safe. */
int memcg_subscription_drop_reason(const memcg_subscription* subscription);
/* "none", "lagging", "overrun", "closed"; "unknown" for other values. */
const char* memcg_drop_reason_name(int reason);

/* Unsubscribes; a memcg_subscription_next waiting on another thread returns EBADF at once, and
 * so does every later call, events not yet handed out included. Thread-safe and idempotent (the
 * handle stays valid until destroyed). */
void memcg_subscription_close(memcg_subscription* subscription);

/* Unsubscribes and frees. REQUIRES: no memcg_subscription_next running on it. */
void memcg_subscription_destroy(memcg_subscription* subscription);

/* Appends an event of the program's own (type MEMCG_EVENT_ACTION or MEMCG_EVENT_BUDGET, say)
 * about the group at `group` (a path; NULL or "" for the root) with `payload`, one JSON object
 * on one line. 0 with its id in `*id`, or with `*id` 0 when nothing records the events (no
 * subscription was made on this controller and no HTTP server started: the event is dropped).
 * EINVAL for a NULL argument, a type out of range or a payload that is not one object on one
 * line (only the braces and the line are checked), ENOENT when no group is at `group`, ENOMEM
 * when the library had no memory for it; `*id` is 0 on every error. */
int memcg_events_publish(memcg_controller* controller, int type, const char* group,
                         const char* payload, uint64_t* id);

#ifdef MEMCG_C_EXPERIMENTAL
/* ---- experimental: the shape of these may change in a minor version ----------------------- */

/* A PSI trigger: `spec` as a memory.pressure write ("some 150000 1000000"); `value` of the
 * callback is 0. EINVAL for a bad spec. */
int memcg_listener_create_psi(memcg_group* group, const char* spec, memcg_notify_fn fn,
                              void* user, memcg_listener** out);

/* A reclaimer: memory the application can give back when its group is reclaimed (a cache).
 * `reclaimable` returns the bytes it could free; `reclaim` scans up to `bytes` at `priority`
 * (12 gentle .. 0 desperate), frees what it can, uncharging it itself (memcg_uncharge), and
 * returns the bytes freed. Called with no library lock held. */
typedef struct memcg_reclaimer memcg_reclaimer;
typedef uint64_t (*memcg_reclaimable_fn)(void* user);
typedef uint64_t (*memcg_reclaim_fn)(uint64_t bytes, int priority, void* user);
int memcg_reclaimer_register(memcg_group* group, memcg_reclaimable_fn reclaimable,
                             memcg_reclaim_fn reclaim, void* user, memcg_reclaimer** out);
/* Uncharges `bytes` straight from the counters, so that usage drops at once: what a reclaim
 * callback frees (memcg_uncharge would keep it in this CPU's stock, where reclaim does not see
 * it as freed). */
void memcg_uncharge_direct(memcg_group* group, uint64_t bytes);
/* Unregisters (waits for a call in flight, except from inside reclaim) and frees.
 * REQUIRES: not called from the reclaimer's own `reclaim` callback (it is the object running). */
void memcg_reclaimer_destroy(memcg_reclaimer* reclaimer);
#endif /* MEMCG_C_EXPERIMENTAL */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MEMCG_C_MEMCG_H_ */
