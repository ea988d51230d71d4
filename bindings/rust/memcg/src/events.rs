//! The controller's event stream in-process (`memcg_subscribe`, ...): the events `GET /v1/events`
//! serves (docs/http.md), taken one at a time from a cursor into the bus's shared ring.
use std::ffi::{c_int, CStr, CString};
use std::ptr::{null, null_mut, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use memcg_sys as sys;

use crate::{check, cstring, quote, Controller, Counted, Error, Result};

// The errno values memcg_subscription_next answers with (Linux).
const EAGAIN: c_int = 11;
const EBADF: c_int = 9;
const ECONNABORTED: c_int = 103;
/// memcg_subscription_next's longest wait (2^31 ms); a longer timeout waits again.
const MAX_WAIT_MS: i64 = 1 << 31;
const MAX_WAIT: Duration = Duration::from_millis(1 << 31);

/// A name the library keeps in static storage ("unknown" for a value it does not know).
fn static_name(p: *const std::ffi::c_char) -> &'static str {
    if p.is_null() {
        return "unknown";
    }
    // SAFETY: the library's names are NUL-terminated static strings, never freed.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("unknown")
}

/// What an event reports: the stream's `event:` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventKind {
    /// "memory_event": a memory.events counter of the group went up.
    MemoryEvent,
    /// "vmpressure": the group's vmpressure level changed.
    Vmpressure,
    /// "psi_trigger": a PSI trigger of the group fired.
    PsiTrigger,
    /// "oom": an OOM report (the JSON of GET /v1/oom).
    Oom,
    /// "preempt": a preemption report.
    Preempt,
    /// "budget": the process budget's progress.
    Budget,
    /// "group_created".
    GroupCreated,
    /// "group_removed".
    GroupRemoved,
    /// "write": a group file written over HTTP.
    Write,
    /// "action": an operator's action applied (HTTP), or the program's own.
    Action,
    /// "gap": events asked for that the ring no longer holds; delivered whatever the filter.
    Gap,
    /// A type this crate does not name (a newer library), with its C value.
    Other(i32),
}

impl EventKind {
    const KNOWN: [EventKind; 11] = [
        EventKind::MemoryEvent,
        EventKind::Vmpressure,
        EventKind::PsiTrigger,
        EventKind::Oom,
        EventKind::Preempt,
        EventKind::Budget,
        EventKind::GroupCreated,
        EventKind::GroupRemoved,
        EventKind::Write,
        EventKind::Action,
        EventKind::Gap,
    ];

    /// Every kind this crate names.
    pub fn all() -> impl Iterator<Item = EventKind> {
        Self::KNOWN.into_iter()
    }

    fn from_code(code: c_int) -> EventKind {
        usize::try_from(code)
            .ok()
            .and_then(|i| Self::KNOWN.get(i).copied())
            .unwrap_or(EventKind::Other(code))
    }

    /// Its C value (memcg_event_type).
    pub fn code(self) -> i32 {
        match self {
            EventKind::MemoryEvent => sys::MEMCG_EVENT_MEMORY_EVENT,
            EventKind::Vmpressure => sys::MEMCG_EVENT_VMPRESSURE,
            EventKind::PsiTrigger => sys::MEMCG_EVENT_PSI_TRIGGER,
            EventKind::Oom => sys::MEMCG_EVENT_OOM,
            EventKind::Preempt => sys::MEMCG_EVENT_PREEMPT,
            EventKind::Budget => sys::MEMCG_EVENT_BUDGET,
            EventKind::GroupCreated => sys::MEMCG_EVENT_GROUP_CREATED,
            EventKind::GroupRemoved => sys::MEMCG_EVENT_GROUP_REMOVED,
            EventKind::Write => sys::MEMCG_EVENT_WRITE,
            EventKind::Action => sys::MEMCG_EVENT_ACTION,
            EventKind::Gap => sys::MEMCG_EVENT_GAP,
            EventKind::Other(code) => code,
        }
    }

    /// The stream's name: "memory_event", "group_created", ...; "unknown" for a type the
    /// library does not know.
    pub fn name(self) -> &'static str {
        // SAFETY: any value; the answer is static.
        static_name(unsafe { sys::memcg_event_type_name(self.code()) })
    }

    /// The kind named `name` ("oom"); None for any other text.
    pub fn from_name(name: &str) -> Option<EventKind> {
        let c = CString::new(name).ok()?;
        // SAFETY: a NUL-terminated string.
        let code = unsafe { sys::memcg_event_type_from_name(c.as_ptr()) };
        (code >= 0).then(|| EventKind::from_code(code))
    }

    /// True when the loaded library knows this type.
    fn known(self) -> bool {
        self.name() != "unknown"
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the bus dropped a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// It fell more than its `max_lag` events behind the newest.
    Lagging,
    /// The ring overwrote an event it had not taken.
    Overrun,
    /// The bus closed (its controller went away).
    Closed,
    /// A reason this crate does not name, with its C value.
    Other(i32),
}

impl DropReason {
    fn from_code(code: c_int) -> Option<DropReason> {
        match code {
            0 => None,
            1 => Some(DropReason::Lagging),
            2 => Some(DropReason::Overrun),
            3 => Some(DropReason::Closed),
            other => Some(DropReason::Other(other)),
        }
    }

    fn code(self) -> c_int {
        match self {
            DropReason::Lagging => 1,
            DropReason::Overrun => 2,
            DropReason::Closed => 3,
            DropReason::Other(code) => code,
        }
    }

    /// The C name: "lagging", "overrun", "closed".
    pub fn name(self) -> &'static str {
        // SAFETY: any value; the answer is static.
        static_name(unsafe { sys::memcg_drop_reason_name(self.code()) })
    }
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One event, its strings copied out of the library.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Event {
    /// Increasing, larger in a later run of the process: resume after it
    /// ([`SubscribeOptions::after`]).
    pub id: u64,
    pub kind: EventKind,
    /// Wall clock, nanoseconds since the epoch.
    pub time_ns: u64,
    /// The group's path: "/" for the root, "a/b" below it.
    pub group: String,
    /// One JSON object on one line: the type's data (docs/http.md, "Event stream").
    pub payload: String,
}

impl Event {
    /// When it happened, as a `SystemTime`.
    pub fn time(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_nanos(self.time_ns)
    }
}

/// What a subscription takes: a subtree, kinds, where to start, how far it may fall behind.
/// [`SubscribeOptions::new`]: every event of every group from now on, dropped only when the
/// ring (4096 events) laps it.
#[derive(Debug, Clone, Default)]
pub struct SubscribeOptions {
    subtree: Option<String>,
    kinds: Option<Vec<EventKind>>,
    after: u64,
    max_lag: usize,
}

impl SubscribeOptions {
    /// Every event of every group, from now on.
    pub fn new() -> SubscribeOptions {
        SubscribeOptions::default()
    }

    /// The events of the group at `path` and its descendants ("/" or "" for every group).
    pub fn subtree(mut self, path: &str) -> SubscribeOptions {
        self.subtree = Some(path.to_string());
        self
    }

    /// Only these kinds (a gap is delivered all the same). None at all is refused by
    /// subscribe.
    pub fn kinds(mut self, kinds: impl IntoIterator<Item = EventKind>) -> SubscribeOptions {
        self.kinds = Some(kinds.into_iter().collect());
        self
    }

    /// Resume after event `id` (0: from now on). An id the ring no longer holds gives a
    /// [`EventKind::Gap`] event first.
    pub fn after(mut self, id: u64) -> SubscribeOptions {
        self.after = id;
        self
    }

    /// How many events it may fall behind before it is dropped (0: the ring's capacity).
    pub fn max_lag(mut self, events: usize) -> SubscribeOptions {
        self.max_lag = events;
        self
    }

    /// The `types` mask of memcg_subscribe.
    fn mask(&self) -> Result<u32> {
        let Some(kinds) = &self.kinds else {
            return Ok(sys::MEMCG_EVENT_ALL);
        };
        let mut mask = 0u32;
        for kind in kinds {
            let bit = u32::try_from(kind.code())
                .ok()
                .and_then(|shift| 1u32.checked_shl(shift))
                .ok_or_else(|| {
                    Error::InvalidArgument(format!("event type {} has no bit", kind.code()))
                })?;
            mask |= bit;
        }
        Ok(mask)
    }
}

impl Controller {
    /// Subscribes to the controller's event stream (turning it on: the stream is off, and free,
    /// until the first subscription or HTTP server). A subtree that is not a group path or no
    /// kind at all is [`Error::Os`] EINVAL; EAGAIN at the bus's 1024 subscriptions.
    pub fn subscribe(&self, options: &SubscribeOptions) -> Result<Subscription> {
        let types = options.mask()?;
        let subtree = options
            .subtree
            .as_deref()
            .map(|s| cstring(s, "subtree"))
            .transpose()?;
        let mut out = null_mut();
        // SAFETY: valid controller; the subtree is NUL-terminated or NULL; `out` is valid.
        let code = unsafe {
            sys::memcg_subscribe(
                self.ptr(),
                subtree.as_ref().map_or(null(), |s| s.as_ptr()),
                types,
                options.after,
                options.max_lag,
                &mut out,
            )
        };
        check(code, || {
            format!(
                "subscribe to {} (types {types:#x})",
                quote(options.subtree.as_deref().unwrap_or("/"))
            )
        })?;
        let ptr = NonNull::new(out).expect("memcg returned a NULL subscription");
        // SAFETY: just made; no other thread has it yet.
        let cursor = unsafe { sys::memcg_subscription_cursor(ptr.as_ptr()) };
        Ok(Subscription {
            inner: Arc::new(SubscriptionInner {
                ptr,
                turn: Turn::default(),
                cursor: AtomicU64::new(cursor),
                _count: Counted::new(self),
            }),
        })
    }

    /// Appends an event of the program's own (an [`EventKind::Action`] it took, say) about the
    /// group at `group` ("/" or "" for the root), `payload` one JSON object on one line.
    /// Returns its id; None when the stream is off (nothing subscribed to this controller yet,
    /// and no HTTP server started: the event is dropped). A payload not of that form, a type
    /// the library does not know or a NUL is [`Error::InvalidArgument`]; no group at `group`
    /// is ENOENT, no memory for it ENOMEM.
    pub fn publish(&self, kind: EventKind, group: &str, payload: &str) -> Result<Option<u64>> {
        if !kind.known() {
            return Err(Error::InvalidArgument(format!(
                "event type {} is not one the library knows",
                kind.code()
            )));
        }
        // The library's own test (EventBus::publish), made here for a message that names it.
        let one_object = payload.len() >= 2
            && payload.starts_with('{')
            && payload.ends_with('}')
            && !payload.contains(['\r', '\n']);
        if !one_object {
            return Err(Error::InvalidArgument(format!(
                "payload {} is not one JSON object on one line",
                quote(payload)
            )));
        }
        let g = cstring(group, "group")?;
        let p = cstring(payload, "payload")?;
        let mut id = 0u64;
        // SAFETY: valid controller; NUL-terminated strings; `id` outlives the call.
        check(
            unsafe {
                sys::memcg_events_publish(self.ptr(), kind.code(), g.as_ptr(), p.as_ptr(), &mut id)
            },
            || format!("publish {} about {}", kind.code(), quote(group)),
        )?;
        Ok((id != 0).then_some(id))
    }
}

/// One `next` at a time (the C API's rule), waited for within the caller's timeout.
#[derive(Default)]
struct Turn {
    busy: Mutex<bool>,
    free: Condvar,
}

struct TurnGuard<'a>(&'a Turn);

fn lock(m: &Mutex<bool>) -> MutexGuard<'_, bool> {
    // Nothing panics under it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Turn {
    /// The turn, or None when `deadline` passed first (None: no deadline).
    fn take(&self, deadline: Option<Instant>) -> Option<TurnGuard<'_>> {
        let mut busy = lock(&self.busy);
        while *busy {
            busy = match deadline {
                None => self.free.wait(busy).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return None;
                    }
                    self.free
                        .wait_timeout(busy, d - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
        *busy = true;
        Some(TurnGuard(self))
    }
}

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        *lock(&self.0.busy) = false;
        self.0.free.notify_one();
    }
}

struct SubscriptionInner {
    ptr: NonNull<sys::memcg_subscription>,
    turn: Turn,
    // memcg_subscription_cursor reads what memcg_subscription_next changes, so it is read after
    // each next, under the turn, and kept here: cursor() never waits for a next in progress.
    cursor: AtomicU64,
    _count: Counted,
}
// SAFETY: next runs under the turn; close and drop_reason are thread-safe in the C API; the
// cursor is read under the turn only.
unsafe impl Send for SubscriptionInner {}
unsafe impl Sync for SubscriptionInner {}

impl SubscriptionInner {
    fn close(&self) {
        // SAFETY: valid until destroyed; thread-safe and idempotent.
        unsafe { sys::memcg_subscription_close(self.ptr.as_ptr()) }
    }
}

impl Drop for SubscriptionInner {
    fn drop(&mut self) {
        // SAFETY: the last reference: no next runs (each holds one). Destroyed once.
        unsafe { sys::memcg_subscription_destroy(self.ptr.as_ptr()) }
    }
}

/// A cursor into the controller's event stream. `Send + Sync`: one thread waits in
/// [`Subscription::next`] (or iterates), another may [`Subscription::close`] it to end the
/// wait; a second `next` waits its turn within its own timeout. Dropping it unsubscribes.
pub struct Subscription {
    inner: Arc<SubscriptionInner>,
}

/// Closes a subscription from any thread, even one that does not own it: a [`Subscription::next`]
/// waiting returns [`Error::Closed`] at once.
#[derive(Clone)]
pub struct SubscriptionCloser {
    inner: Arc<SubscriptionInner>,
}

impl SubscriptionCloser {
    /// Closes it (idempotent).
    pub fn close(&self) {
        self.inner.close();
    }
}

impl std::fmt::Debug for SubscriptionCloser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubscriptionCloser")
    }
}

/// Whole milliseconds, rounded up (a wait is never shorter than asked), at most MAX_WAIT_MS.
fn wait_ms(d: Duration) -> i64 {
    let ms = d.as_millis() + u128::from(d.subsec_nanos() % 1_000_000 != 0);
    i64::try_from(ms).map_or(MAX_WAIT_MS, |ms| ms.min(MAX_WAIT_MS))
}

impl Subscription {
    /// The next event, waiting up to `timeout` for one (zero: only look). Ok(None) when none
    /// came in time; [`Error::Dropped`] once the bus dropped it (subscribe again with
    /// [`SubscribeOptions::after`] its [`Subscription::cursor`], and a `max_lag` it can keep
    /// up with); [`Error::Closed`] after [`Subscription::close`].
    pub fn next(&self, timeout: Duration) -> Result<Option<Event>> {
        let start = Instant::now();
        let Some(_turn) = self.inner.turn.take(start.checked_add(timeout)) else {
            return Ok(None);
        };
        let ptr = self.inner.ptr.as_ptr();
        let mut left = timeout.saturating_sub(start.elapsed());
        let mut e = sys::memcg_event::default();
        let code = loop {
            // SAFETY: valid subscription; the turn makes this the only next; `e` is valid.
            let code = unsafe { sys::memcg_subscription_next(ptr, wait_ms(left), &mut e) };
            if code != EAGAIN || left <= MAX_WAIT {
                break code;
            }
            left -= MAX_WAIT; // past the C API's longest wait: wait again
        };
        let out = match code {
            0 => Ok(Some(Event {
                id: e.id,
                kind: EventKind::from_code(e.r#type),
                time_ns: e.time_ns,
                // SAFETY: NUL-terminated strings valid until the next call, which the turn
                // keeps away until they are copied.
                group: unsafe { text(e.group) },
                payload: unsafe { text(e.payload) },
            })),
            EAGAIN => Ok(None),
            ECONNABORTED => Err(Error::Dropped {
                reason: self.drop_reason().unwrap_or(DropReason::Other(0)),
            }),
            EBADF => Err(Error::Closed),
            other => Err(Error::os(other, "next event")),
        };
        // SAFETY: under the turn: no next runs.
        let cursor = unsafe { sys::memcg_subscription_cursor(ptr) };
        self.inner.cursor.store(cursor, Ordering::Release);
        out
    }

    /// The id of the last event taken, or passed over by the filter: resume after it.
    pub fn cursor(&self) -> u64 {
        self.inner.cursor.load(Ordering::Acquire)
    }

    /// Why the bus dropped it; None while it is not dropped.
    pub fn drop_reason(&self) -> Option<DropReason> {
        // SAFETY: valid subscription; an atomic read in the library.
        DropReason::from_code(unsafe {
            sys::memcg_subscription_drop_reason(self.inner.ptr.as_ptr())
        })
    }

    /// Unsubscribes: a [`Subscription::next`] waiting on another thread returns
    /// [`Error::Closed`] at once, and every later one too. Idempotent.
    pub fn close(&self) {
        self.inner.close();
    }

    /// A handle that closes it from any thread (for a thread that does not hold it).
    pub fn closer(&self) -> SubscriptionCloser {
        SubscriptionCloser {
            inner: self.inner.clone(),
        }
    }

    /// The events as they come, each waited for without bound: ends after
    /// [`Subscription::close`] (from another thread), or after yielding [`Error::Dropped`].
    pub fn iter(&self) -> Events<'_> {
        Events {
            subscription: self,
            done: false,
        }
    }

    /// The events ready now, without waiting: ends when none is left (or when closed), after
    /// yielding [`Error::Dropped`] when dropped.
    pub fn try_iter(&self) -> TryEvents<'_> {
        TryEvents {
            subscription: self,
            done: false,
        }
    }
}

/// SAFETY: `p` is NULL or a NUL-terminated string.
unsafe fn text(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    CStr::from_ptr(p).to_string_lossy().into_owned()
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // Out of the bus now, even while a closer keeps the C handle.
        self.inner.close();
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Subscription(cursor {}", self.cursor())?;
        match self.drop_reason() {
            Some(reason) => write!(f, ", dropped: {reason})"),
            None => f.write_str(")"),
        }
    }
}

/// [`Subscription::iter`]: events as they come.
#[derive(Debug)]
pub struct Events<'a> {
    subscription: &'a Subscription,
    done: bool,
}

impl Iterator for Events<'_> {
    type Item = Result<Event>;

    fn next(&mut self) -> Option<Result<Event>> {
        if self.done {
            return None;
        }
        loop {
            match self.subscription.next(Duration::MAX) {
                Ok(Some(event)) => return Some(Ok(event)),
                Ok(None) => continue,
                Err(Error::Closed) => {
                    self.done = true;
                    return None;
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

impl<'a> IntoIterator for &'a Subscription {
    type Item = Result<Event>;
    type IntoIter = Events<'a>;

    fn into_iter(self) -> Events<'a> {
        self.iter()
    }
}

/// [`Subscription::try_iter`]: the events ready now.
#[derive(Debug)]
pub struct TryEvents<'a> {
    subscription: &'a Subscription,
    done: bool,
}

impl Iterator for TryEvents<'_> {
    type Item = Result<Event>;

    fn next(&mut self) -> Option<Result<Event>> {
        if self.done {
            return None;
        }
        match self.subscription.next(Duration::ZERO) {
            Ok(event) => event.map(Ok),
            Err(Error::Closed) => None,
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
