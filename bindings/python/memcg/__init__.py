"""memcg for Python: Linux memory-cgroup semantics inside a process, over libmemcg's C API.

Standard library only (ctypes). The shared library is found through MEMCG_LIBRARY (a path),
the ``library`` argument of :class:`Controller`, or its SONAME on the loader's path.

    import memcg
    with memcg.Controller() as ctl, ctl.create_group("tenant") as tenant:
        tenant["memory.max"] = "512M"
        with memcg.Reservation(tenant) as r:
            r.reserve(64 << 20, timeout=1.0)   # raises memcg.TimedOut, memcg.NeverFits, ...

See bindings/python/README.md for a whole service."""
from ._lib import SONAME, load
from .core import (CancelReason, ChargeFlags, Controller, Group, Listener, Member, OomPolicy,
                   Priority, Reservation)
from .errors import (Cancelled, Closed, Exists, InvalidArgument, InvalidRequest, Killed,
                     LibraryNotFound, MemcgError, MemcgOSError, MemoryLimit, MemoryLimitCostly,
                     NeverFits, NotFound, Refused, Removed, TimedOut, TryAgain)

__all__ = [
    "SONAME", "load", "Controller", "Group", "Member", "Reservation", "Listener",
    "CancelReason", "ChargeFlags", "OomPolicy", "Priority", "MemcgError", "MemcgOSError",
    "Closed", "Refused", "MemoryLimit", "MemoryLimitCostly", "TimedOut", "Cancelled", "Killed",
    "Removed", "InvalidRequest", "NeverFits", "NotFound", "Exists", "InvalidArgument",
    "LibraryNotFound", "TryAgain",
]
