//! Raw declarations of memcg's C API (`include/memcg/c/memcg.h`, version 0.2). Everything here is
//! `unsafe` to call; the `memcg` crate wraps it. The stable part only: the experimental
//! declarations (`MEMCG_C_EXPERIMENTAL`) are not bound. With the feature `http`, also the HTTP
//! endpoint's (`include/memcg/c/http.h`, libmemcg_http), which build.rs then links.
#![allow(non_camel_case_types)]
use std::ffi::{c_char, c_int, c_uint, c_void};

/// The header version this crate declares (MEMCG_C_VERSION_NUMBER).
pub const MEMCG_C_VERSION_NUMBER: c_uint = 200;

macro_rules! opaque {
    ($($name:ident),*) => {$(
        /// An opaque C handle.
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
            _pinned: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
        }
    )*};
}
opaque!(
    memcg_controller,
    memcg_group,
    memcg_member,
    memcg_reservation,
    memcg_listener,
    memcg_subscription
);

/// memcg_options: fill with memcg_options_init.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct memcg_options {
    pub size: usize,
    pub unit_shift: c_uint,
    pub batch: i64,
    pub nr_shards: c_int,
    pub recursive_protection: c_int,
    pub local_events: c_int,
}

pub const MEMCG_CHARGE_MAY_BLOCK: c_uint = 1 << 0;
pub const MEMCG_CHARGE_NO_RETRY: c_uint = 1 << 1;
pub const MEMCG_CHARGE_RETRY_MAY_FAIL: c_uint = 1 << 2;
pub const MEMCG_CHARGE_NO_FAIL: c_uint = 1 << 3;
pub const MEMCG_CHARGE_HIGH_PRIO: c_uint = 1 << 4;
pub const MEMCG_CHARGE_DEFAULT: c_uint = MEMCG_CHARGE_MAY_BLOCK;
/// Never sleeps nor reclaims: NOMEM at once when the limit holds.
pub const MEMCG_CHARGE_NOWAIT: c_uint = 0;

/// memcg_quote: at most this many bytes of the text, and a buffer of MEMCG_QUOTE_SIZE suffices.
pub const MEMCG_QUOTE_MAX: usize = 64;
pub const MEMCG_QUOTE_SIZE: usize = 2 + 4 * MEMCG_QUOTE_MAX + 3 + 1;

pub const MEMCG_CHARGE_OK: c_int = 0;
pub const MEMCG_CHARGE_FORCED: c_int = 1;
pub const MEMCG_CHARGE_NOMEM: c_int = 2;
pub const MEMCG_CHARGE_INVALID: c_int = 3;

pub const MEMCG_CANCEL_OOM_KILL: c_int = 0;
pub const MEMCG_CANCEL_PREEMPT: c_int = 1;
pub const MEMCG_CANCEL_OTHER: c_int = 2;
pub const MEMCG_CANCEL_OPERATOR: c_int = 3;

pub const MEMCG_RESERVE_OK: c_int = 0;
pub const MEMCG_RESERVE_FORCED: c_int = 1;
pub const MEMCG_RESERVE_NOMEM: c_int = 2;
pub const MEMCG_RESERVE_NOMEM_COSTLY: c_int = 3;
pub const MEMCG_RESERVE_TIMED_OUT: c_int = 4;
pub const MEMCG_RESERVE_CANCELLED: c_int = 5;
pub const MEMCG_RESERVE_KILLED: c_int = 6;
pub const MEMCG_RESERVE_REMOVED: c_int = 7;
pub const MEMCG_RESERVE_INVALID: c_int = 8;
pub const MEMCG_RESERVE_NEVER_FITS: c_int = 9;
pub const MEMCG_RESERVE_REFUSED: c_int = 100;

pub const MEMCG_OOM_KERNEL: c_int = 0;
pub const MEMCG_OOM_PIECES: c_int = 1;
pub const MEMCG_OOM_NEVER: c_int = 2;

pub const MEMCG_PRIORITY_DEFAULT: c_int = -1;
pub const MEMCG_PRIORITY_LOW: c_int = 0;
pub const MEMCG_PRIORITY_NORMAL: c_int = 1;
pub const MEMCG_PRIORITY_HIGH: c_int = 2;

/// What an event reports (memcg_event_type); memcg_event_type_name gives the stream's name.
pub const MEMCG_EVENT_MEMORY_EVENT: c_int = 0;
pub const MEMCG_EVENT_VMPRESSURE: c_int = 1;
pub const MEMCG_EVENT_PSI_TRIGGER: c_int = 2;
pub const MEMCG_EVENT_OOM: c_int = 3;
pub const MEMCG_EVENT_PREEMPT: c_int = 4;
pub const MEMCG_EVENT_BUDGET: c_int = 5;
pub const MEMCG_EVENT_GROUP_CREATED: c_int = 6;
pub const MEMCG_EVENT_GROUP_REMOVED: c_int = 7;
pub const MEMCG_EVENT_WRITE: c_int = 8;
pub const MEMCG_EVENT_ACTION: c_int = 9;
pub const MEMCG_EVENT_GAP: c_int = 10;

/// The bit of `event_type` in memcg_subscribe's `types` mask (the header's macro).
#[allow(non_snake_case)]
pub const fn MEMCG_EVENT_BIT(event_type: c_int) -> u32 {
    1u32 << event_type
}
/// Every type's bit.
pub const MEMCG_EVENT_ALL: u32 = (1u32 << 11) - 1;

/// One event of a subscription. The strings belong to the subscription: valid until its next
/// memcg_subscription_next or its destroy.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct memcg_event {
    /// `size_of::<memcg_event>()`, set by the caller (`Default` does): a later library fills
    /// only the fields this crate knows.
    pub size: usize,
    pub id: u64,
    /// A MEMCG_EVENT_* value.
    pub r#type: c_int,
    /// Wall clock (CLOCK_REALTIME), nanoseconds since the epoch.
    pub time_ns: u64,
    pub group: *const c_char,
    pub payload: *const c_char,
}

impl Default for memcg_event {
    fn default() -> memcg_event {
        memcg_event {
            size: std::mem::size_of::<memcg_event>(),
            id: 0,
            r#type: 0,
            time_ns: 0,
            group: std::ptr::null(),
            payload: std::ptr::null(),
        }
    }
}

/// A kill callback; `reason` is a MEMCG_CANCEL_* value. Must not unwind.
pub type memcg_kill_fn =
    Option<unsafe extern "C" fn(member: *mut memcg_member, reason: c_int, user: *mut c_void)>;
/// A notification callback. Must not unwind.
pub type memcg_notify_fn = Option<
    unsafe extern "C" fn(
        listener: *mut memcg_listener,
        value: c_int,
        removed: c_int,
        user: *mut c_void,
    ),
>;

extern "C" {
    pub fn memcg_version() -> c_uint;
    pub fn memcg_version_string() -> *const c_char;
    pub fn memcg_errno_name(code: c_int) -> *const c_char;
    pub fn memcg_quote(
        text: *const c_char,
        length: usize,
        buf: *mut c_char,
        size: usize,
        length_out: *mut usize,
    ) -> c_int;

    pub fn memcg_options_init(options: *mut memcg_options);
    pub fn memcg_controller_create(
        options: *const memcg_options,
        out: *mut *mut memcg_controller,
    ) -> c_int;
    pub fn memcg_controller_destroy(controller: *mut memcg_controller) -> c_int;
    pub fn memcg_controller_now_ns(controller: *const memcg_controller) -> u64;
    pub fn memcg_controller_drain_stocks(controller: *mut memcg_controller) -> c_int;
    pub fn memcg_controller_flush_stats(controller: *mut memcg_controller) -> c_int;
    pub fn memcg_oom_log_last_seq(controller: *mut memcg_controller) -> u64;
    pub fn memcg_oom_log_read(
        controller: *mut memcg_controller,
        after: u64,
        buf: *mut c_char,
        size: usize,
        length: *mut usize,
    ) -> c_int;

    pub fn memcg_group_create(
        c: *mut memcg_controller,
        path: *const c_char,
        out: *mut *mut memcg_group,
    ) -> c_int;
    pub fn memcg_group_lookup(
        c: *mut memcg_controller,
        path: *const c_char,
        out: *mut *mut memcg_group,
    ) -> c_int;
    pub fn memcg_group_remove(c: *mut memcg_controller, path: *const c_char) -> c_int;
    pub fn memcg_group_release(group: *mut memcg_group);
    pub fn memcg_group_path(
        group: *const memcg_group,
        buf: *mut c_char,
        size: usize,
        length: *mut usize,
    ) -> c_int;
    pub fn memcg_group_list(
        group: *mut memcg_group,
        buf: *mut c_char,
        size: usize,
        length: *mut usize,
    ) -> c_int;
    pub fn memcg_group_read(
        group: *mut memcg_group,
        name: *const c_char,
        buf: *mut c_char,
        size: usize,
        length: *mut usize,
    ) -> c_int;
    pub fn memcg_group_write(
        group: *mut memcg_group,
        name: *const c_char,
        text: *const c_char,
        length: usize,
        nonblocking: c_int,
    ) -> c_int;

    pub fn memcg_charge_status_name(status: c_int) -> *const c_char;
    pub fn memcg_charge(group: *mut memcg_group, bytes: u64, flags: c_uint) -> c_int;
    pub fn memcg_uncharge(group: *mut memcg_group, bytes: u64);

    pub fn memcg_member_create(
        group: *mut memcg_group,
        name: *const c_char,
        score_adj: c_int,
        on_kill: memcg_kill_fn,
        user: *mut c_void,
        out: *mut *mut memcg_member,
    ) -> c_int;
    pub fn memcg_member_destroy(member: *mut memcg_member);
    pub fn memcg_member_set_score_adj(member: *mut memcg_member, score_adj: c_int) -> c_int;
    pub fn memcg_member_score_adj(member: *const memcg_member) -> c_int;
    pub fn memcg_member_charge(member: *mut memcg_member, bytes: u64, flags: c_uint) -> c_int;
    pub fn memcg_member_uncharge(member: *mut memcg_member, bytes: u64) -> u64;
    pub fn memcg_member_killed(member: *const memcg_member) -> c_int;
    pub fn memcg_member_charged(member: *const memcg_member) -> u64;
    pub fn memcg_member_id(member: *const memcg_member) -> u64;

    pub fn memcg_reserve_status_name(status: c_int) -> *const c_char;
    pub fn memcg_reservation_create(
        group: *mut memcg_group,
        member: *mut memcg_member,
        oom_policy: c_int,
        priority: c_int,
        out: *mut *mut memcg_reservation,
    ) -> c_int;
    pub fn memcg_reservation_destroy(reservation: *mut memcg_reservation);
    pub fn memcg_reserve(reservation: *mut memcg_reservation, total: u64) -> c_int;
    pub fn memcg_reserve_for(
        reservation: *mut memcg_reservation,
        total: u64,
        timeout_ns: u64,
    ) -> c_int;
    pub fn memcg_reserve_until(
        reservation: *mut memcg_reservation,
        total: u64,
        deadline_ns: u64,
    ) -> c_int;
    pub fn memcg_reservation_grow(reservation: *mut memcg_reservation, bytes: u64) -> c_int;
    pub fn memcg_reservation_grow_for(
        reservation: *mut memcg_reservation,
        bytes: u64,
        timeout_ns: u64,
    ) -> c_int;
    pub fn memcg_reservation_grow_until(
        reservation: *mut memcg_reservation,
        bytes: u64,
        deadline_ns: u64,
    ) -> c_int;
    pub fn memcg_reservation_shrink(reservation: *mut memcg_reservation, bytes: u64);
    pub fn memcg_reservation_release(reservation: *mut memcg_reservation);
    pub fn memcg_reservation_bytes(reservation: *const memcg_reservation) -> u64;
    pub fn memcg_reservation_cancel(reservation: *mut memcg_reservation);

    pub fn memcg_listener_create_events(
        group: *mut memcg_group,
        local: c_int,
        f: memcg_notify_fn,
        user: *mut c_void,
        out: *mut *mut memcg_listener,
    ) -> c_int;
    pub fn memcg_listener_create_vmpressure(
        group: *mut memcg_group,
        args: *const c_char,
        f: memcg_notify_fn,
        user: *mut c_void,
        out: *mut *mut memcg_listener,
    ) -> c_int;
    pub fn memcg_listener_destroy(listener: *mut memcg_listener);
    pub fn memcg_listener_delivered(listener: *const memcg_listener) -> u64;
    pub fn memcg_listener_removed(listener: *const memcg_listener) -> c_int;

    pub fn memcg_event_type_name(event_type: c_int) -> *const c_char;
    pub fn memcg_event_type_from_name(name: *const c_char) -> c_int;
    pub fn memcg_subscribe(
        controller: *mut memcg_controller,
        subtree: *const c_char,
        types: u32,
        after_id: u64,
        max_lag: usize,
        out: *mut *mut memcg_subscription,
    ) -> c_int;
    pub fn memcg_subscription_next(
        subscription: *mut memcg_subscription,
        timeout_ms: i64,
        event: *mut memcg_event,
    ) -> c_int;
    pub fn memcg_subscription_cursor(subscription: *const memcg_subscription) -> u64;
    pub fn memcg_subscription_drop_reason(subscription: *const memcg_subscription) -> c_int;
    pub fn memcg_drop_reason_name(reason: c_int) -> *const c_char;
    pub fn memcg_subscription_close(subscription: *mut memcg_subscription);
    pub fn memcg_subscription_destroy(subscription: *mut memcg_subscription);
    pub fn memcg_events_publish(
        controller: *mut memcg_controller,
        event_type: c_int,
        group: *const c_char,
        payload: *const c_char,
        id: *mut u64,
    ) -> c_int;
}

/// The HTTP endpoint (`include/memcg/c/http.h`), in libmemcg_http.
#[cfg(feature = "http")]
mod http {
    use super::memcg_controller;
    use std::ffi::{c_char, c_int};

    opaque!(memcg_server);

    extern "C" {
        pub fn memcg_server_create(
            controller: *mut memcg_controller,
            out: *mut *mut memcg_server,
        ) -> c_int;
        pub fn memcg_server_set(
            server: *mut memcg_server,
            name: *const c_char,
            value: *const c_char,
        ) -> c_int;
        pub fn memcg_server_start(
            server: *mut memcg_server,
            error: *mut c_char,
            error_size: usize,
        ) -> c_int;
        pub fn memcg_server_port(server: *const memcg_server) -> c_int;
        pub fn memcg_server_running(server: *const memcg_server) -> c_int;
        pub fn memcg_server_stop(server: *mut memcg_server);
        pub fn memcg_server_destroy(server: *mut memcg_server);
    }
}
#[cfg(feature = "http")]
pub use http::*;
