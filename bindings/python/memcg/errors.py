"""The exceptions of the memcg package: one per C status, each naming what refused.

Set-up calls fail with :class:`MemcgOSError` (an :class:`OSError` with the errno the C API
returned). The memory path's refusals (a charge or a reservation the limits did not allow) raise
a :class:`Refused` subclass per status, carrying the group the request was made on and the
group on its path whose limit held (``limiting_group``: the one with the least room left, read
when the refusal happened; None when the request itself was malformed)."""
from __future__ import annotations

import errno as _errno
import os
from typing import Dict, Optional, Type


class MemcgError(Exception):
    """Base of every exception this package raises."""


class Closed(MemcgError, ValueError):
    """The handle was closed (or its controller was): it must not be used any more."""


class LibraryNotFound(MemcgError, ImportError):
    """The C library could not be loaded; the message says where it was looked for and how to
    name it (MEMCG_LIBRARY)."""


class HttpLibraryNotFound(LibraryNotFound):
    """The HTTP endpoint's library (libmemcg_http) could not be loaded: a build without the
    endpoint, or a library not where it was looked for; the message says where and names
    MEMCG_HTTP_LIBRARY."""


class SubscriptionDropped(MemcgError):
    """The event stream dropped the subscription: ``reason`` is "lagging" (it fell more than
    ``max_lag`` events behind), "overrun" (the ring overwrote an event it had not taken) or
    "closed" (the controller went away); ``cursor`` is the id to resume after with
    ``Controller.subscribe(after_id=cursor)``."""

    def __init__(self, reason: str, cursor: int) -> None:
        super().__init__("memcg: the event subscription was dropped (%s); resume after id %d"
                         % (reason, cursor))
        self.reason = reason
        self.cursor = cursor


class MemcgOSError(MemcgError, OSError):
    """A set-up call failed: ``errno`` is the C API's code (EINVAL, ENOENT, EEXIST, EBUSY, ...)
    and nothing changed. Made by :func:`os_error`, as the subclass of its code: ENOENT is also a
    FileNotFoundError, EEXIST a FileExistsError, EINVAL a ValueError, EAGAIN a
    BlockingIOError."""

    def __init__(self, code: int, what: str) -> None:
        name = _errno.errorcode.get(code, "E%d" % code)
        super().__init__(code, "%s: %s (%s)" % (what, os.strerror(code), name))
        self.what = what


class NotFound(MemcgOSError, FileNotFoundError):
    """ENOENT: no such group or file."""


class Exists(MemcgOSError, FileExistsError):
    """EEXIST: the group exists."""


class InvalidArgument(MemcgOSError, ValueError):
    """EINVAL: a malformed path, value or option."""


class TryAgain(MemcgOSError, BlockingIOError):
    """EAGAIN: memory.reclaim could not reclaim what was asked (nothing reclaimable included)."""


_OS_ERRORS: Dict[int, Type[MemcgOSError]] = {
    _errno.ENOENT: NotFound, _errno.EEXIST: Exists, _errno.EINVAL: InvalidArgument,
    _errno.EAGAIN: TryAgain,
}


def os_error(code: int, what: str) -> MemcgOSError:
    """The exception of a C API error code."""
    return _OS_ERRORS.get(code, MemcgOSError)(code, what)


class Refused(MemcgError):
    """A charge or reservation was not granted; nothing was charged by it."""

    #: The C status name ("nomem", "timed-out", ...), set per subclass.
    status_name = "refused"

    def __init__(self, status: int, what: str, group: Optional[str] = None,
                 limiting_group: Optional[str] = None, request: int = 0) -> None:
        text = "%s: %s" % (what, self.status_name)
        if group is not None:
            text += " in %s" % (group or "/")
        if limiting_group is not None:
            text += " (limit of %s)" % (limiting_group or "/")
        super().__init__(text)
        self.status = status
        self.group = group
        self.limiting_group = limiting_group
        self.request = request


class MemoryLimit(Refused):
    """memory.max held after reclaim (and, where allowed, the OOM killer)."""
    status_name = "nomem"


class MemoryLimitCostly(MemoryLimit):
    """memory.max held for a large request; the OOM killer was not asked."""
    status_name = "nomem-costly"


class TimedOut(Refused, TimeoutError):
    """A waiting request's timeout or deadline passed."""
    status_name = "timed-out"


class Cancelled(Refused):
    """The reservation was cancelled (Reservation.cancel)."""
    status_name = "cancelled"


class Killed(Refused):
    """The reservation's member was OOM-killed."""
    status_name = "killed"


class Removed(Refused):
    """The group was removed while the request waited."""
    status_name = "removed"


class InvalidRequest(Refused, ValueError):
    """A size no counter holds, or a bad option."""
    status_name = "invalid"


class NeverFits(Refused):
    """More than the smallest memory.max on the group's path: neither waiting nor a kill helps."""
    status_name = "never-fits"


# The C values (memcg_reserve_status, memcg_charge_status): the header's numbers.
RESERVE_OK, RESERVE_FORCED = 0, 1
RESERVE_ERRORS: Dict[int, Type[Refused]] = {
    2: MemoryLimit, 3: MemoryLimitCostly, 4: TimedOut, 5: Cancelled, 6: Killed, 7: Removed,
    8: InvalidRequest, 9: NeverFits, 100: Refused,
}
CHARGE_OK, CHARGE_FORCED, CHARGE_NOMEM, CHARGE_INVALID = 0, 1, 2, 3
CHARGE_ERRORS: Dict[int, Type[Refused]] = {CHARGE_NOMEM: MemoryLimit,
                                           CHARGE_INVALID: InvalidRequest}
