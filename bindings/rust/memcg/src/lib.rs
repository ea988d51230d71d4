//! memcg for Rust: Linux memory-cgroup semantics inside a process, over libmemcg's C API.
//!
//! - Handles are RAII: dropping a [`Reservation`] gives its bytes back, dropping the last clone
//!   of a [`Member`], [`Group`] or [`Listener`] frees the C handle. Every handle keeps what it
//!   was made from alive (a reservation its member, a member its group, all their controller),
//!   so a member is never freed before its reservations, nor a controller before its handles.
//! - A handle dropped inside a callback while a call of it runs (a kill callback dropping the
//!   member whose charge ran the OOM killer) is freed when that call returns: the call holds a
//!   reference.
//! - Failures are `Result<_, Error>`: [`Error::Os`] with the errno of a set-up call,
//!   [`Error::Refused`] with the [`Status`] of the memory path and the group whose limit held.
//! - Callbacks are closures (`Fn + Send + Sync + 'static`); a panic in one is caught at the
//!   boundary, counted ([`Controller::callback_panics`]) and printed, never unwound into C.
//! - `Controller`, `Group`, `Member`, `Listener`: `Send + Sync` (the C API allows any thread).
//!   `Reservation`: `Send + Sync`, but its requests take `&mut self` (one thread at a time);
//!   [`Canceller`] cancels from any thread.
//! - The event stream: [`Controller::subscribe`] gives a [`Subscription`] (`Send + Sync`:
//!   [`Subscription::close`] from another thread ends a wait); [`Controller::publish`] adds the
//!   program's own events. With the feature `http`, `http::Server` serves the endpoint.
//!
//! The README follows; its samples run as doctests (the endpoint's with the feature `http`).
#![doc = include_str!("../../README.md")]
mod callback;
mod error;
mod events;
#[cfg(feature = "http")]
pub mod http;

pub use error::{Error, Result, Status};
pub use events::{
    DropReason, Event, EventKind, Events, SubscribeOptions, Subscription, SubscriptionCloser,
    TryEvents,
};

use std::ffi::{c_int, CStr, CString};
use std::ptr::{null, null_mut, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use memcg_sys as sys;

fn check(code: c_int, what: impl FnOnce() -> String) -> Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(Error::os(code, what()))
    }
}

fn cstring(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::InvalidArgument(format!("{what} {} holds a NUL", quote(s))))
}

/// `text` for an error message, bounded by the C API (memcg_quote): at most
/// [`sys::MEMCG_QUOTE_MAX`] bytes of it, then "...".
pub(crate) fn quote(text: &str) -> String {
    let mut buf = [0u8; sys::MEMCG_QUOTE_SIZE];
    let mut len = 0usize;
    // SAFETY: `text` is text.len() readable bytes; the buffer holds MEMCG_QUOTE_SIZE bytes,
    // which always suffice.
    let code = unsafe {
        sys::memcg_quote(
            text.as_ptr().cast(),
            text.len(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut len,
        )
    };
    if code != 0 {
        return String::from("\"?\"");
    }
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

/// A text the C API writes into a caller's buffer (`call(buf, size, &mut length)`, ERANGE
/// when too small): asked for its length, then read, again when it grew in between.
fn read_text(
    mut call: impl FnMut(*mut std::ffi::c_char, usize, *mut usize) -> c_int,
    what: impl Fn() -> String,
) -> Result<String> {
    loop {
        let mut len = 0usize;
        let code = call(null_mut(), 0, &mut len);
        if code != 0 && code != ERANGE {
            return Err(Error::os(code, what()));
        }
        let mut buf = vec![0u8; len + 1];
        let code = call(buf.as_mut_ptr().cast(), buf.len(), &mut len);
        if code == ERANGE {
            continue; // grew in between
        }
        check(code, &what)?;
        buf.truncate(len);
        return Ok(String::from_utf8_lossy(&buf).into_owned());
    }
}

/// The loaded library's version, "MAJOR.MINOR.PATCH".
pub fn library_version() -> String {
    // SAFETY: static storage, never NULL.
    unsafe { CStr::from_ptr(sys::memcg_version_string()) }
        .to_string_lossy()
        .into_owned()
}

/// True when the loaded library can serve this crate (same major, for 0.x the same minor).
pub fn compatible() -> bool {
    // SAFETY: no arguments.
    let v = unsafe { sys::memcg_version() };
    let h = sys::MEMCG_C_VERSION_NUMBER;
    v / 10000 == h / 10000 && (h / 10000 != 0 || v / 100 % 100 == h / 100 % 100) && v >= h
}

// ---- controller -------------------------------------------------------------------------------

struct ControllerInner {
    ptr: NonNull<sys::memcg_controller>,
    panics: AtomicU64,
    handles: AtomicU64,
}

/// One live handle of a controller, counted for [`Controller::open_handles`]; it keeps the
/// controller alive.
pub(crate) struct Counted(Controller);

impl Counted {
    pub(crate) fn new(controller: &Controller) -> Counted {
        controller.inner.handles.fetch_add(1, Ordering::Relaxed);
        Counted(controller.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.inner.handles.fetch_sub(1, Ordering::Relaxed);
    }
}
// SAFETY: the C controller may be used from any thread.
unsafe impl Send for ControllerInner {}
unsafe impl Sync for ControllerInner {}

impl Drop for ControllerInner {
    fn drop(&mut self) {
        // Every handle made from it holds this Arc, so none is left: EBUSY cannot happen.
        // SAFETY: the pointer came from memcg_controller_create and is destroyed once.
        let code = unsafe { sys::memcg_controller_destroy(self.ptr.as_ptr()) };
        debug_assert_eq!(code, 0);
    }
}

/// The tree of groups. Clones share it; it is destroyed with the last clone and the last
/// handle made from it.
#[derive(Clone)]
pub struct Controller {
    inner: Arc<ControllerInner>,
}

impl Controller {
    /// A controller with the default options.
    pub fn new() -> Result<Controller> {
        let mut out = null_mut();
        // SAFETY: NULL options are the defaults; `out` is valid.
        check(
            unsafe { sys::memcg_controller_create(null(), &mut out) },
            || "controller".into(),
        )?;
        let ptr = NonNull::new(out).ok_or_else(|| Error::os(libc_eio(), "controller"))?;
        Ok(Controller {
            inner: Arc::new(ControllerInner {
                ptr,
                panics: AtomicU64::new(0),
                handles: AtomicU64::new(0),
            }),
        })
    }

    fn ptr(&self) -> *mut sys::memcg_controller {
        self.inner.ptr.as_ptr()
    }

    /// Creates the group at `path` ("a/b"; the parent must exist).
    pub fn create_group(&self, path: &str) -> Result<Group> {
        self.group_call(path, true)
    }

    /// The online group at `path` ("/" or "" for the root).
    pub fn group(&self, path: &str) -> Result<Group> {
        self.group_call(path, false)
    }

    fn group_call(&self, path: &str, create: bool) -> Result<Group> {
        let c = cstring(path, "path")?;
        let mut out = null_mut();
        // SAFETY: valid controller, NUL-terminated path, valid out pointer.
        let code = unsafe {
            if create {
                sys::memcg_group_create(self.ptr(), c.as_ptr(), &mut out)
            } else {
                sys::memcg_group_lookup(self.ptr(), c.as_ptr(), &mut out)
            }
        };
        check(code, || {
            format!("{} {path}", if create { "create" } else { "lookup" })
        })?;
        Ok(Group {
            inner: Arc::new(GroupInner {
                ptr: NonNull::new(out).expect("memcg returned a NULL group"),
                controller: self.clone(),
                _count: Counted::new(self),
            }),
        })
    }

    /// Takes the group at `path` offline (like rmdir).
    pub fn remove_group(&self, path: &str) -> Result<()> {
        let c = cstring(path, "path")?;
        // SAFETY: valid controller and path.
        check(
            unsafe { sys::memcg_group_remove(self.ptr(), c.as_ptr()) },
            || format!("remove {path}"),
        )
    }

    /// The controller's clock, for deadlines.
    pub fn now_ns(&self) -> u64 {
        // SAFETY: valid controller.
        unsafe { sys::memcg_controller_now_ns(self.ptr()) }
    }

    /// Gives back every unit pre-charged in the per-CPU stocks, so that memory.current is
    /// exactly what is charged (0 once everything was released). Writing memory.reclaim drains
    /// a subtree too, but answers EAGAIN when nothing was reclaimable.
    pub fn drain(&self) -> Result<()> {
        // SAFETY: valid controller.
        check(
            unsafe { sys::memcg_controller_drain_stocks(self.ptr()) },
            || "drain".into(),
        )
    }

    /// Folds every pending statistic, so that the next memory.stat read is exact.
    pub fn flush_stats(&self) -> Result<()> {
        // SAFETY: valid controller.
        check(
            unsafe { sys::memcg_controller_flush_stats(self.ptr()) },
            || "flush stats".into(),
        )
    }

    /// The sequence number of the latest OOM or preemption report (0 for none).
    pub fn oom_log_last_seq(&self) -> u64 {
        // SAFETY: valid controller.
        unsafe { sys::memcg_oom_log_last_seq(self.ptr()) }
    }

    /// The reports with a sequence number above `after` (0: all the log keeps), oldest first,
    /// one line each ("oom_kill seq=3 t=1.250s domain=/a victim=q1 ...").
    pub fn oom_log(&self, after: u64) -> Result<Vec<String>> {
        let text = read_text(
            // SAFETY: valid controller; the buffer holds `size` bytes.
            |buf, size, len| unsafe { sys::memcg_oom_log_read(self.ptr(), after, buf, size, len) },
            || "oom log".into(),
        )?;
        Ok(text.lines().map(str::to_string).collect())
    }

    /// Panics caught in callbacks of this controller's handles.
    pub fn callback_panics(&self) -> u64 {
        self.inner.panics.load(Ordering::Relaxed)
    }

    /// Handles (groups, members, reservations, listeners) made from it and not yet freed.
    pub fn open_handles(&self) -> u64 {
        self.inner.handles.load(Ordering::Relaxed)
    }
}

fn libc_eio() -> c_int {
    5
}

/// The C API's "buffer too small" (Linux errno ERANGE).
const ERANGE: c_int = 34;

// ---- groups -------------------------------------------------------------------------------

struct GroupInner {
    ptr: NonNull<sys::memcg_group>,
    controller: Controller,
    _count: Counted,
}
// SAFETY: a group handle may be used from any thread.
unsafe impl Send for GroupInner {}
unsafe impl Sync for GroupInner {}

impl Drop for GroupInner {
    fn drop(&mut self) {
        // SAFETY: made by create/lookup, released once.
        unsafe { sys::memcg_group_release(self.ptr.as_ptr()) }
    }
}

/// A reference to one group. Files by name: `group.write("memory.max", "512M")`.
#[derive(Clone)]
pub struct Group {
    inner: Arc<GroupInner>,
}

/// Flags of a charge (`MEMCG_CHARGE_*`).
pub mod flags {
    pub use memcg_sys::{
        MEMCG_CHARGE_DEFAULT as DEFAULT, MEMCG_CHARGE_HIGH_PRIO as HIGH_PRIO,
        MEMCG_CHARGE_MAY_BLOCK as MAY_BLOCK, MEMCG_CHARGE_NOWAIT as NOWAIT,
        MEMCG_CHARGE_NO_FAIL as NO_FAIL, MEMCG_CHARGE_NO_RETRY as NO_RETRY,
        MEMCG_CHARGE_RETRY_MAY_FAIL as RETRY_MAY_FAIL,
    };
}

impl Group {
    fn ptr(&self) -> *mut sys::memcg_group {
        self.inner.ptr.as_ptr()
    }

    /// The controller it belongs to.
    pub fn controller(&self) -> &Controller {
        &self.inner.controller
    }

    /// Its path ("" for the root).
    pub fn path(&self) -> String {
        let mut len = 0usize;
        // SAFETY: size 0 asks the length; the buffer then has room for the NUL.
        unsafe { sys::memcg_group_path(self.ptr(), null_mut(), 0, &mut len) };
        let mut buf = vec![0u8; len + 1];
        // SAFETY: as above.
        unsafe { sys::memcg_group_path(self.ptr(), buf.as_mut_ptr().cast(), buf.len(), &mut len) };
        buf.truncate(len);
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// The text of file `name` ("memory.stat", ...).
    pub fn read(&self, name: &str) -> Result<String> {
        let c = cstring(name, "file name")?;
        read_text(
            // SAFETY: valid group and name; the buffer holds `size` bytes.
            |buf, size, len| unsafe {
                sys::memcg_group_read(self.ptr(), c.as_ptr(), buf, size, len)
            },
            || format!("read {name}"),
        )
    }

    /// The paths of its online descendants (not itself), a parent before its children,
    /// siblings in name order. From the root ("/") for the whole tree.
    pub fn list(&self) -> Result<Vec<String>> {
        let text = read_text(
            // SAFETY: valid group; the buffer holds `size` bytes.
            |buf, size, len| unsafe { sys::memcg_group_list(self.ptr(), buf, size, len) },
            || "list".into(),
        )?;
        Ok(text.lines().map(str::to_string).collect())
    }

    /// Writes `value` to file `name`; a rejected write changes nothing. A NUL inside `value`
    /// is [`Error::InvalidArgument`].
    pub fn write(&self, name: &str, value: &str) -> Result<()> {
        let c = cstring(name, "file name")?;
        if value.as_bytes().contains(&0) {
            return Err(Error::InvalidArgument(format!(
                "value {} of {name} holds a NUL",
                quote(value)
            )));
        }
        // SAFETY: `value` is `value.len()` readable bytes (no NUL needed).
        let code = unsafe {
            sys::memcg_group_write(
                self.ptr(),
                c.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        check(code, || format!("write {name}={}", quote(value)))
    }

    /// A flat-keyed file ("memory.stat", "memory.events") as (key, value) pairs.
    pub fn keyed(&self, name: &str) -> Result<Vec<(String, u64)>> {
        let text = self.read(name)?;
        Ok(text
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter_map(|(k, v)| v.trim().parse().ok().map(|v| (k.to_string(), v)))
            .collect())
    }

    /// One key of a flat-keyed file; 0 when absent.
    pub fn key(&self, file: &str, key: &str) -> Result<u64> {
        Ok(self
            .keyed(file)?
            .into_iter()
            .find(|(k, _)| k == key)
            .map_or(0, |(_, v)| v))
    }

    /// Charges `bytes` (whole units); Ok(true) when charged past max (NO_FAIL/HIGH_PRIO).
    #[inline]
    pub fn charge(&self, bytes: u64, flags: u32) -> Result<bool> {
        // SAFETY: valid group.
        let status = unsafe { sys::memcg_charge(self.ptr(), bytes, flags) };
        charge_result(status, self)
    }

    /// Uncharges `bytes` charged to this group by [`Group::charge`].
    #[inline]
    pub fn uncharge(&self, bytes: u64) {
        // SAFETY: valid group.
        unsafe { sys::memcg_uncharge(self.ptr(), bytes) }
    }

    /// memory.events (or memory.events.local) notifications to `f(listener, value, removed)`.
    pub fn watch_events<F>(&self, local: bool, f: F) -> Result<Listener>
    where
        F: Fn(&Listener, i32, bool) + Send + Sync + 'static,
    {
        callback::listener(self, Box::new(f), |g, fp, user, out| unsafe {
            sys::memcg_listener_create_events(g, c_int::from(local), fp, user, out)
        })
    }

    /// vmpressure notifications, `args` as "low", "medium,hierarchy", ...
    pub fn watch_pressure<F>(&self, args: &str, f: F) -> Result<Listener>
    where
        F: Fn(&Listener, i32, bool) + Send + Sync + 'static,
    {
        let c = cstring(args, "pressure args")?;
        callback::listener(self, Box::new(f), |g, fp, user, out| unsafe {
            sys::memcg_listener_create_vmpressure(g, c.as_ptr(), fp, user, out)
        })
    }
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Group({:?})", self.path())
    }
}

fn charge_result(status: c_int, group: &Group) -> Result<bool> {
    match status {
        sys::MEMCG_CHARGE_OK => Ok(false),
        sys::MEMCG_CHARGE_FORCED => Ok(true),
        sys::MEMCG_CHARGE_NOMEM => Err(refusal(Status::NoMem, group)),
        _ => Err(refusal(Status::Invalid, group)),
    }
}

/// The error of a refusal: for a limit that held, the group on the path with the least room
/// under memory.max, read now (the slow path only).
fn refusal(status: Status, group: &Group) -> Error {
    let path = group.path();
    let limiting_group = if status.is_limit() {
        limiting_group(group, &path)
    } else {
        None
    };
    Error::Refused {
        status,
        group: path,
        limiting_group,
    }
}

fn limiting_group(group: &Group, path: &str) -> Option<String> {
    let parts: Vec<&str> = if path.is_empty() {
        Vec::new()
    } else {
        path.split('/').collect()
    };
    let mut best: Option<(String, i128)> = None;
    for i in (1..=parts.len()).rev() {
        let at = parts[..i].join("/");
        let Ok(node) = group.controller().group(&at) else {
            continue;
        };
        let (Ok(max), Ok(current)) = (node.read("memory.max"), node.read("memory.current")) else {
            continue;
        };
        let (Ok(max), Ok(current)) = (max.trim().parse::<i128>(), current.trim().parse::<i128>())
        else {
            continue; // "max": no limit here
        };
        if best
            .as_ref()
            .map_or(true, |(_, room)| max - current < *room)
        {
            best = Some((at, max - current));
        }
    }
    best.map(|(g, _)| g)
}

// ---- members ------------------------------------------------------------------------------

/// Why a kill callback runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelReason {
    /// The OOM killer chose the member: release its memory.
    OomKill,
    /// A waiting charge of a higher class asks it to give memory back.
    Preempt,
    /// A reason this crate does not know.
    Other,
    /// Someone outside the process killed the member or asked for memory back (HTTP actions,
    /// the process budget); `Member::killed` tells which.
    Operator,
}

pub(crate) struct MemberInner {
    ptr: NonNull<sys::memcg_member>,
    group: Group,
    name: String,
    callback: Option<callback::Registration>,
    /// The reservations bound to it, for [`Member::release_reservations`].
    pub(crate) reservations: Mutex<Vec<Weak<reservation::ReservationInner>>>,
    pub(crate) _count: Counted,
}
// SAFETY: a member may be used from any thread; the callback is Send + Sync.
unsafe impl Send for MemberInner {}
unsafe impl Sync for MemberInner {}

impl Drop for MemberInner {
    fn drop(&mut self) {
        // No reservation is left (each holds this Arc). The callback cannot start after the
        // registration is gone (it finds no member), and the closure is freed after the C member.
        if let Some(reg) = &self.callback {
            reg.unregister();
        }
        // SAFETY: made by memcg_member_create, destroyed once.
        unsafe { sys::memcg_member_destroy(self.ptr.as_ptr()) }
    }
}

/// Something the OOM killer may kill. Clones share it; the C member is freed with the last
/// clone and the last of its reservations.
#[derive(Clone)]
pub struct Member {
    inner: Arc<MemberInner>,
}

impl Member {
    /// Joins `group` with `score_adj` (-1000 immune .. 1000) and no kill callback.
    pub fn new(group: &Group, name: &str, score_adj: i32) -> Result<Member> {
        callback::member(group, name, score_adj, None)
    }

    /// Joins `group`; `on_kill(member, reason)` runs on the thread that ran the OOM killer.
    pub fn with_kill<F>(group: &Group, name: &str, score_adj: i32, on_kill: F) -> Result<Member>
    where
        F: Fn(&Member, CancelReason) + Send + Sync + 'static,
    {
        callback::member(group, name, score_adj, Some(Box::new(on_kill)))
    }

    fn ptr(&self) -> *mut sys::memcg_member {
        self.inner.ptr.as_ptr()
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Its group.
    pub fn group(&self) -> &Group {
        &self.inner.group
    }

    /// Charges `bytes` for this member (counted in its badness).
    pub fn charge(&self, bytes: u64, flags: u32) -> Result<bool> {
        // SAFETY: valid member; `self` keeps it alive for the call.
        let status = unsafe { sys::memcg_member_charge(self.ptr(), bytes, flags) };
        charge_result(status, self.group())
    }

    /// Uncharges up to what it holds; returns the bytes uncharged.
    pub fn uncharge(&self, bytes: u64) -> u64 {
        // SAFETY: valid member.
        unsafe { sys::memcg_member_uncharge(self.ptr(), bytes) }
    }

    /// True once the OOM killer killed it.
    pub fn killed(&self) -> bool {
        // SAFETY: valid member.
        unsafe { sys::memcg_member_killed(self.ptr()) != 0 }
    }

    /// Bytes it holds now.
    pub fn charged(&self) -> u64 {
        // SAFETY: valid member.
        unsafe { sys::memcg_member_charged(self.ptr()) }
    }

    /// Its id: unique in the controller, never reused; the one `GET /v1/members` lists and
    /// `POST /v1/members/<id>/kill` names (docs/http.md).
    pub fn id(&self) -> u64 {
        // SAFETY: valid member.
        unsafe { sys::memcg_member_id(self.ptr()) }
    }

    /// Changes its oom_score_adj (-1000 immune .. 1000); the next OOM decision sees it.
    pub fn set_score_adj(&self, score_adj: i32) -> Result<()> {
        // SAFETY: valid member.
        check(
            unsafe { sys::memcg_member_set_score_adj(self.ptr(), score_adj) },
            || format!("score_adj {score_adj} of {}", self.name()),
        )
    }

    /// Its oom_score_adj now.
    pub fn score_adj(&self) -> i32 {
        // SAFETY: valid member.
        unsafe { sys::memcg_member_score_adj(self.ptr()) }
    }

    /// Cancels every reservation bound to this member and gives back what they hold, whichever
    /// thread owns them: at once, or, for one whose request is running, when that request
    /// returns (it returns [`Status::Cancelled`] if it waited). Their later requests return
    /// Cancelled; dropping them stays the owner's. For a kill callback: the member's queries
    /// give their memory back as the kernel's killed task does.
    pub fn release_reservations(&self) {
        let reservations: Vec<_> = {
            let mut list = self
                .inner
                .reservations
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            list.retain(|w| w.strong_count() > 0);
            list.iter().filter_map(Weak::upgrade).collect()
        };
        for r in reservations {
            r.revoke();
        }
    }
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Member({:?} in {:?})", self.name(), self.group().path())
    }
}

mod listener;
mod reservation;
pub use listener::Listener;
pub(crate) use listener::ListenerInner;
pub use reservation::{Canceller, OomPolicy, Priority, Reservation};
