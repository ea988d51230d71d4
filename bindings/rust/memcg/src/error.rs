//! Errors: set-up failures carry the C API's errno; refusals of the memory path carry their
//! status, the group the request was made on and the group whose limit held.
use std::ffi::{c_int, CStr};
use std::fmt;

use crate::DropReason;

/// Why the memory path refused a request (`memcg_reserve_status` / `memcg_charge_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Status {
    /// memory.max held after reclaim (and the OOM killer where allowed).
    NoMem,
    /// memory.max held for a large request; the OOM killer was not asked.
    NoMemCostly,
    /// A waiting request's timeout or deadline passed.
    TimedOut,
    /// The reservation was cancelled.
    Cancelled,
    /// Its member was OOM-killed.
    Killed,
    /// The group was removed while the request waited.
    Removed,
    /// A size no counter holds, or a bad option.
    Invalid,
    /// More than the smallest memory.max on the path: neither waiting nor a kill helps.
    NeverFits,
    /// A refusal this crate does not name (a newer library): nothing was charged.
    Refused(i32),
}

impl Status {
    pub(crate) fn from_reserve(code: c_int) -> Status {
        use memcg_sys::*;
        match code {
            MEMCG_RESERVE_NOMEM => Status::NoMem,
            MEMCG_RESERVE_NOMEM_COSTLY => Status::NoMemCostly,
            MEMCG_RESERVE_TIMED_OUT => Status::TimedOut,
            MEMCG_RESERVE_CANCELLED => Status::Cancelled,
            MEMCG_RESERVE_KILLED => Status::Killed,
            MEMCG_RESERVE_REMOVED => Status::Removed,
            MEMCG_RESERVE_INVALID => Status::Invalid,
            MEMCG_RESERVE_NEVER_FITS => Status::NeverFits,
            other => Status::Refused(other),
        }
    }

    /// The C name: "nomem", "timed-out", "never-fits", ...
    pub fn name(self) -> &'static str {
        match self {
            Status::NoMem => "nomem",
            Status::NoMemCostly => "nomem-costly",
            Status::TimedOut => "timed-out",
            Status::Cancelled => "cancelled",
            Status::Killed => "killed",
            Status::Removed => "removed",
            Status::Invalid => "invalid",
            Status::NeverFits => "never-fits",
            Status::Refused(_) => "refused",
        }
    }

    /// True when a limit held (the error then names the limiting group).
    pub fn is_limit(self) -> bool {
        matches!(
            self,
            Status::NoMem | Status::NoMemCostly | Status::TimedOut | Status::NeverFits
        )
    }
}

/// Every failure of this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A set-up call failed with this errno (EINVAL, ENOENT, EEXIST, EBUSY, ...); nothing
    /// changed.
    Os { code: i32, what: String },
    /// A charge or reservation was refused; nothing was charged by it.
    Refused {
        status: Status,
        group: String,
        limiting_group: Option<String>,
    },
    /// An argument refused before the library (a NUL inside a name or a written value).
    InvalidArgument(String),
    /// The bus dropped the subscription (it fell behind): subscribe again after its cursor
    /// (`SubscribeOptions::after(subscription.cursor())`).
    Dropped { reason: DropReason },
    /// The subscription was closed (`Subscription::close`).
    Closed,
}

impl Error {
    pub(crate) fn os(code: c_int, what: impl Into<String>) -> Error {
        Error::Os {
            code,
            what: what.into(),
        }
    }

    /// The errno of an Os error.
    pub fn code(&self) -> Option<i32> {
        match self {
            Error::Os { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The status of a refusal.
    pub fn status(&self) -> Option<Status> {
        match self {
            Error::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

pub(crate) fn errno_name(code: c_int) -> String {
    // SAFETY: memcg_errno_name never returns NULL and points to static storage.
    unsafe { CStr::from_ptr(memcg_sys::memcg_errno_name(code)) }
        .to_string_lossy()
        .into_owned()
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Os { code, what } => write!(f, "{what}: {}", errno_name(*code)),
            Error::Refused {
                status,
                group,
                limiting_group,
            } => {
                write!(
                    f,
                    "{} in {}",
                    status.name(),
                    if group.is_empty() { "/" } else { group }
                )?;
                match limiting_group {
                    Some(g) => write!(f, " (limit of {})", if g.is_empty() { "/" } else { g }),
                    None => Ok(()),
                }
            }
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::Dropped { reason } => write!(
                f,
                "subscription dropped ({reason}): resume after its cursor"
            ),
            Error::Closed => f.write_str("subscription closed"),
        }
    }
}

impl std::error::Error for Error {}

/// The result of this crate's calls.
pub type Result<T> = std::result::Result<T, Error>;
