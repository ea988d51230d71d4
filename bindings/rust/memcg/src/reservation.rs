//! Reservations: bytes held for one query or job, given back on drop.
use std::ffi::c_int;
use std::ptr::{null_mut, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

use memcg_sys as sys;

use crate::{check, refusal, Counted, Group, Member, Result, Status};

// ---- reservations ---------------------------------------------------------------------------

/// What a reservation that does not fit may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OomPolicy {
    /// One charge; over 32 KiB never OOM-kills.
    Kernel = 0,
    /// Charged in 32 KiB pieces: every request is OOM-eligible.
    Pieces = 1,
    /// Reclaim and retries only.
    Never = 2,
}

/// Waiting class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Priority {
    /// The group's memory.wait.priority.
    Default = -1,
    Low = 0,
    Normal = 1,
    High = 2,
}

enum Owner {
    Group(Group),
    Member(Member),
}

pub(crate) struct ReservationInner {
    ptr: NonNull<sys::memcg_reservation>,
    // The C calls of a reservation are one thread at a time: the owner's requests hold this,
    // uncontended, and so does a release from another thread (Member::release_reservations).
    calls: Mutex<()>,
    // Set by revoke(): what it holds goes back, now or when the running request returns.
    revoked: AtomicBool,
    owner: Owner, // dropped after the reservation: the member outlives it
    _count: Counted,
}

impl ReservationInner {
    /// Runs one C call of the reservation, then gives back what it holds if it was revoked
    /// meanwhile (the revoking thread could not take the lock).
    fn call<T>(&self, f: impl FnOnce(*mut sys::memcg_reservation) -> T) -> T {
        let guard = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        let out = f(self.ptr.as_ptr());
        drop(guard);
        if self.revoked.load(Ordering::SeqCst) {
            self.release_if_free();
        }
        out
    }

    fn release_if_free(&self) {
        let guard = match self.calls.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            // A request is running: it gives back when it returns (call() checks after it).
            Err(TryLockError::WouldBlock) => return,
        };
        // SAFETY: valid reservation; the lock makes this the only call of it.
        unsafe { sys::memcg_reservation_release(self.ptr.as_ptr()) };
        drop(guard);
    }

    /// Cancels it (a waiting request returns at once) and gives back what it holds: now, or
    /// when the request running on its owner's thread returns. Any thread, a kill callback's
    /// included (it never waits for the owner).
    pub(crate) fn revoke(&self) {
        // SAFETY: valid reservation; cancel is thread-safe.
        unsafe { sys::memcg_reservation_cancel(self.ptr.as_ptr()) };
        // SeqCst with call()'s load: either this thread takes the lock after the request
        // released it, or the request sees the flag after releasing it.
        self.revoked.store(true, Ordering::SeqCst);
        self.release_if_free();
    }
}
// SAFETY: requests go through &mut Reservation (one thread at a time); cancel is thread-safe.
unsafe impl Send for ReservationInner {}
unsafe impl Sync for ReservationInner {}

impl Drop for ReservationInner {
    fn drop(&mut self) {
        // SAFETY: made by memcg_reservation_create, destroyed once, before `owner` drops.
        unsafe { sys::memcg_reservation_destroy(self.ptr.as_ptr()) }
    }
}

/// Bytes held for one query or job; dropping it gives them back.
pub struct Reservation {
    inner: Arc<ReservationInner>,
}

/// Cancels a reservation from any thread: its waiting request and every later one return
/// [`Status::Cancelled`].
#[derive(Clone)]
pub struct Canceller {
    inner: Arc<ReservationInner>,
}

impl Canceller {
    /// Cancels.
    pub fn cancel(&self) {
        // SAFETY: valid reservation; cancel is thread-safe.
        unsafe { sys::memcg_reservation_cancel(self.inner.ptr.as_ptr()) }
    }
}

fn timeout_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Reservation {
    /// A reservation charged to `group`.
    pub fn on_group(group: &Group, oom: OomPolicy, priority: Priority) -> Result<Reservation> {
        Self::create(Owner::Group(group.clone()), oom, priority)
    }

    /// A reservation charged to `member` (which it keeps alive).
    pub fn on_member(member: &Member, oom: OomPolicy, priority: Priority) -> Result<Reservation> {
        Self::create(Owner::Member(member.clone()), oom, priority)
    }

    fn create(owner: Owner, oom: OomPolicy, priority: Priority) -> Result<Reservation> {
        let (g, m) = match &owner {
            Owner::Group(g) => (g.ptr(), null_mut()),
            Owner::Member(m) => (null_mut(), m.ptr()),
        };
        let mut out = null_mut();
        // SAFETY: exactly one owner, both valid; `out` valid.
        let code = unsafe {
            sys::memcg_reservation_create(g, m, oom as c_int, priority as c_int, &mut out)
        };
        check(code, || "reservation".into())?;
        let ptr = NonNull::new(out).expect("memcg returned a NULL reservation");
        let count = Counted::new(match &owner {
            Owner::Group(g) => g.controller(),
            Owner::Member(m) => m.group().controller(),
        });
        let inner = Arc::new(ReservationInner {
            ptr,
            calls: Mutex::new(()),
            revoked: AtomicBool::new(false),
            owner,
            _count: count,
        });
        if let Owner::Member(m) = &inner.owner {
            let mut list = m
                .inner
                .reservations
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            list.retain(|w| w.strong_count() > 0); // bounded by the live ones
            list.push(Arc::downgrade(&inner));
        }
        Ok(Reservation { inner })
    }

    /// A deadline as the controller's clock counts it (memcg_reserve_until's).
    fn deadline_ns(&self, deadline: Instant) -> u64 {
        let now = self.group().controller().now_ns();
        let left = deadline.saturating_duration_since(Instant::now());
        now.saturating_add(timeout_ns(left))
    }

    fn group(&self) -> &Group {
        match &self.inner.owner {
            Owner::Group(g) => g,
            Owner::Member(m) => m.group(),
        }
    }

    #[inline]
    fn result(&self, status: c_int) -> Result<bool> {
        match status {
            sys::MEMCG_RESERVE_OK => Ok(false),
            sys::MEMCG_RESERVE_FORCED => Ok(true),
            other => Err(refusal(Status::from_reserve(other), self.group())),
        }
    }

    // SAFETY of every request below: a valid reservation, one C call at a time (the lock in
    // ReservationInner::call).

    /// Makes it hold `total` bytes (may run the OOM killer, per its policy).
    pub fn reserve(&mut self, total: u64) -> Result<bool> {
        let status = self.inner.call(|p| unsafe { sys::memcg_reserve(p, total) });
        self.result(status)
    }

    /// The same, waiting up to `timeout` for room (never OOM-kills).
    pub fn reserve_for(&mut self, total: u64, timeout: Duration) -> Result<bool> {
        let ns = timeout_ns(timeout);
        let status = self
            .inner
            .call(|p| unsafe { sys::memcg_reserve_for(p, total, ns) });
        self.result(status)
    }

    /// The same with a deadline: a query whose requests share one passes it to each.
    pub fn reserve_until(&mut self, total: u64, deadline: Instant) -> Result<bool> {
        let at = self.deadline_ns(deadline);
        let status = self
            .inner
            .call(|p| unsafe { sys::memcg_reserve_until(p, total, at) });
        self.result(status)
    }

    /// Adds `bytes`.
    #[inline]
    pub fn grow(&mut self, bytes: u64) -> Result<bool> {
        let status = self
            .inner
            .call(|p| unsafe { sys::memcg_reservation_grow(p, bytes) });
        self.result(status)
    }

    /// Adds `bytes`, waiting up to `timeout`.
    pub fn grow_for(&mut self, bytes: u64, timeout: Duration) -> Result<bool> {
        let ns = timeout_ns(timeout);
        let status = self
            .inner
            .call(|p| unsafe { sys::memcg_reservation_grow_for(p, bytes, ns) });
        self.result(status)
    }

    /// Adds `bytes`, waiting until `deadline` at most (never OOM-kills).
    pub fn grow_until(&mut self, bytes: u64, deadline: Instant) -> Result<bool> {
        let at = self.deadline_ns(deadline);
        let status = self
            .inner
            .call(|p| unsafe { sys::memcg_reservation_grow_until(p, bytes, at) });
        self.result(status)
    }

    /// Gives back `bytes` (at most what it holds).
    #[inline]
    pub fn shrink(&mut self, bytes: u64) {
        self.inner
            .call(|p| unsafe { sys::memcg_reservation_shrink(p, bytes) })
    }

    /// Gives back everything.
    pub fn release(&mut self) {
        self.inner
            .call(|p| unsafe { sys::memcg_reservation_release(p) })
    }

    /// What it holds, in bytes.
    pub fn bytes(&self) -> u64 {
        self.inner
            .call(|p| unsafe { sys::memcg_reservation_bytes(p) })
    }

    /// A handle that cancels it from any thread.
    pub fn canceller(&self) -> Canceller {
        Canceller {
            inner: self.inner.clone(),
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // The bytes go back now, even while a Canceller keeps the C handle.
        self.release();
    }
}
