//! Reservations: bytes held for one query or job, given back on drop.
use std::ffi::c_int;
use std::ptr::{null_mut, NonNull};
use std::sync::Arc;
use std::time::Duration;

use memcg_sys as sys;

use crate::{check, refusal, Counted, Group, Member, Result, Status};

// ---- reservations ---------------------------------------------------------------------------

/// What a reservation that does not fit may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    owner: Owner, // dropped after the reservation: the member outlives it
    _count: Counted,
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
        Ok(Reservation {
            inner: Arc::new(ReservationInner {
                ptr,
                owner,
                _count: count,
            }),
        })
    }

    fn ptr(&self) -> *mut sys::memcg_reservation {
        self.inner.ptr.as_ptr()
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

    /// Makes it hold `total` bytes (may run the OOM killer, per its policy).
    pub fn reserve(&mut self, total: u64) -> Result<bool> {
        // SAFETY: valid reservation, &mut: one thread.
        self.result(unsafe { sys::memcg_reserve(self.ptr(), total) })
    }

    /// The same, waiting up to `timeout` for room (never OOM-kills).
    pub fn reserve_for(&mut self, total: u64, timeout: Duration) -> Result<bool> {
        // SAFETY: as above.
        self.result(unsafe { sys::memcg_reserve_for(self.ptr(), total, timeout_ns(timeout)) })
    }

    /// The same with a deadline on [`Controller::now_ns`].
    pub fn reserve_until(&mut self, total: u64, deadline_ns: u64) -> Result<bool> {
        // SAFETY: as above.
        self.result(unsafe { sys::memcg_reserve_until(self.ptr(), total, deadline_ns) })
    }

    /// Adds `bytes`.
    #[inline]
    pub fn grow(&mut self, bytes: u64) -> Result<bool> {
        // SAFETY: as above.
        self.result(unsafe { sys::memcg_reservation_grow(self.ptr(), bytes) })
    }

    /// Adds `bytes`, waiting up to `timeout`.
    pub fn grow_for(&mut self, bytes: u64, timeout: Duration) -> Result<bool> {
        // SAFETY: as above.
        self.result(unsafe {
            sys::memcg_reservation_grow_for(self.ptr(), bytes, timeout_ns(timeout))
        })
    }

    /// Gives back `bytes` (at most what it holds).
    #[inline]
    pub fn shrink(&mut self, bytes: u64) {
        // SAFETY: as above.
        unsafe { sys::memcg_reservation_shrink(self.ptr(), bytes) }
    }

    /// Gives back everything.
    pub fn release(&mut self) {
        // SAFETY: as above.
        unsafe { sys::memcg_reservation_release(self.ptr()) }
    }

    /// What it holds, in bytes.
    pub fn bytes(&self) -> u64 {
        // SAFETY: valid reservation.
        unsafe { sys::memcg_reservation_bytes(self.ptr()) }
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
