"""memcg for Python: Linux memory-cgroup semantics inside a process, over libmemcg's C API.

Standard library only (ctypes). The shared library is found through MEMCG_LIBRARY (a path),
the ``library`` argument of :class:`Controller`, or its SONAME on the loader's path.

    import memcg
    with memcg.Controller() as ctl, ctl.create_group("tenant") as tenant:
        tenant["memory.max"] = "512M"
        with memcg.Reservation(tenant) as r:
            r.reserve(64 << 20, timeout=1.0)   # raises memcg.TimedOut, memcg.NeverFits, ...

The controller's event stream is ``ctl.subscribe(...)`` (memcg.events), its HTTP endpoint
``memcg.Server(ctl, ...)`` (memcg.http, over libmemcg_http, loaded on first use).
See bindings/python/README.md for a whole service."""
from ._lib import SONAME, load
from .core import (CancelReason, ChargeFlags, Controller, Group, Listener, Member, OomPolicy,
                   Priority, Reservation)
from .errors import (Cancelled, Closed, Exists, HttpLibraryNotFound, InvalidArgument,
                     InvalidRequest, Killed, LibraryNotFound, MemcgError, MemcgOSError,
                     MemoryLimit, MemoryLimitCostly, NeverFits, NotFound, Refused, Removed,
                     SubscriptionDropped, TimedOut, TryAgain)
from .events import Event, EventType, Subscription
from .http import Server

__all__ = [
    "SONAME", "load", "Controller", "Group", "Member", "Reservation", "Listener",
    "CancelReason", "ChargeFlags", "OomPolicy", "Priority", "MemcgError", "MemcgOSError",
    "Closed", "Refused", "MemoryLimit", "MemoryLimitCostly", "TimedOut", "Cancelled", "Killed",
    "Removed", "InvalidRequest", "NeverFits", "NotFound", "Exists", "InvalidArgument",
    "LibraryNotFound", "TryAgain", "Subscription", "Event", "EventType", "SubscriptionDropped",
    "Server", "HttpLibraryNotFound",
]
