"""Loading libmemcg and declaring the C API (include/memcg/c/memcg.h) for ctypes.

The library is found, in order, at the path in the environment variable MEMCG_LIBRARY, at the
path given to :func:`load`, or by its SONAME on the loader's path (the installed libmemcg0.2
package, or LD_LIBRARY_PATH). Declarations are written once here; the rest of the package never
calls an undeclared function.

Callbacks: the C library gets one ctypes thunk per callback type, made once here and never
freed, and an integer id as its ``void* user``; :func:`register` maps the id to the Python
callable. The C API lets a callback already running on another thread finish after its handle
was destroyed, so a thunk owned by a handle could be freed under a running call; an id that is
no longer registered only makes the call return."""
from __future__ import annotations

import ctypes
import itertools
import os
import threading
from typing import Any, Callable, Dict, Optional

from .errors import LibraryNotFound

#: The SONAME this package was written against (cmake/MemcgLibrary.cmake: 0.x minor versions
#: may change the ABI, so it names the minor version). A test compares it with the build's.
SONAME = "libmemcg.so.0.2"
#: The C header version this package declares (MEMCG_C_VERSION_NUMBER).
C_VERSION = 200

P = ctypes.c_void_p
KILL_FN = ctypes.CFUNCTYPE(None, P, ctypes.c_int, P)
NOTIFY_FN = ctypes.CFUNCTYPE(None, P, ctypes.c_int, ctypes.c_int, P)


class EventStruct(ctypes.Structure):
    """memcg_event: its strings belong to the subscription until its next call."""
    _fields_ = [("size", ctypes.c_size_t), ("id", ctypes.c_uint64), ("type", ctypes.c_int),
                ("time_ns", ctypes.c_uint64), ("group", ctypes.c_char_p),
                ("payload", ctypes.c_char_p)]

    def __init__(self) -> None:
        super().__init__()
        self.size = ctypes.sizeof(self)  # what this package knows of the struct


_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None

# ---- the callback registry ------------------------------------------------------------------
_callbacks: Dict[int, Callable[..., None]] = {}
_callbacks_lock = threading.Lock()
_ids = itertools.count(1)


def register(fn: Callable[..., None]) -> int:
    """Registers ``fn`` for the C thunks; returns the id to pass as ``user``."""
    with _callbacks_lock:
        cid = next(_ids)
        _callbacks[cid] = fn
        return cid


def unregister(cid: int) -> None:
    """Forgets ``cid``: a call of the C library that comes later finds nothing and returns. The
    callable is dropped outside the lock (its destructor may register or unregister too)."""
    with _callbacks_lock:
        fn = _callbacks.pop(cid, None)
    del fn


def registered() -> int:
    """How many callbacks are registered (for tests: nothing may be left behind)."""
    with _callbacks_lock:
        return len(_callbacks)


def _lookup(user: Any) -> Optional[Callable[..., None]]:
    with _callbacks_lock:
        return _callbacks.get(int(user or 0))


def _kill(_member: int, reason: int, user: int) -> None:
    fn = _lookup(user)
    if fn is not None:
        fn(reason)


def _notify(_listener: int, value: int, removed: int, user: int) -> None:
    fn = _lookup(user)
    if fn is not None:
        fn(value, removed)


#: The module's thunks: alive as long as the module, whatever the handles do.
KILL_THUNK = KILL_FN(_kill)
NOTIFY_THUNK = NOTIFY_FN(_notify)


def _declare(lib: ctypes.CDLL) -> None:
    c_int, c_uint, u64, size_t, c_char_p = (ctypes.c_int, ctypes.c_uint, ctypes.c_uint64,
                                             ctypes.c_size_t, ctypes.c_char_p)
    pp = ctypes.POINTER(P)
    table = {
        "memcg_version": (c_uint, []),
        "memcg_version_string": (c_char_p, []),
        "memcg_errno_name": (c_char_p, [c_int]),
        "memcg_quote": (c_int, [c_char_p, size_t, c_char_p, size_t, ctypes.POINTER(size_t)]),
        "memcg_controller_drain_stocks": (c_int, [P]),
        "memcg_controller_flush_stats": (c_int, [P]),
        "memcg_oom_log_last_seq": (u64, [P]),
        "memcg_oom_log_read": (c_int, [P, u64, c_char_p, size_t, ctypes.POINTER(size_t)]),
        "memcg_group_list": (c_int, [P, c_char_p, size_t, ctypes.POINTER(size_t)]),
        "memcg_member_set_score_adj": (c_int, [P, c_int]),
        "memcg_member_score_adj": (c_int, [P]),
        "memcg_reservation_grow_until": (c_int, [P, u64, u64]),
        "memcg_charge_status_name": (c_char_p, [c_int]),
        "memcg_reserve_status_name": (c_char_p, [c_int]),
        "memcg_controller_create": (c_int, [P, pp]),
        "memcg_controller_destroy": (c_int, [P]),
        "memcg_controller_now_ns": (u64, [P]),
        "memcg_group_create": (c_int, [P, c_char_p, pp]),
        "memcg_group_lookup": (c_int, [P, c_char_p, pp]),
        "memcg_group_remove": (c_int, [P, c_char_p]),
        "memcg_group_release": (None, [P]),
        "memcg_group_path": (c_int, [P, c_char_p, size_t, ctypes.POINTER(size_t)]),
        "memcg_group_read": (c_int, [P, c_char_p, c_char_p, size_t, ctypes.POINTER(size_t)]),
        "memcg_group_write": (c_int, [P, c_char_p, c_char_p, size_t, c_int]),
        "memcg_charge": (c_int, [P, u64, c_uint]),
        "memcg_uncharge": (None, [P, u64]),
        "memcg_member_create": (c_int, [P, c_char_p, c_int, KILL_FN, P, pp]),
        "memcg_member_destroy": (None, [P]),
        "memcg_member_charge": (c_int, [P, u64, c_uint]),
        "memcg_member_uncharge": (u64, [P, u64]),
        "memcg_member_killed": (c_int, [P]),
        "memcg_member_charged": (u64, [P]),
        "memcg_reservation_create": (c_int, [P, P, c_int, c_int, pp]),
        "memcg_reservation_destroy": (None, [P]),
        "memcg_reserve": (c_int, [P, u64]),
        "memcg_reserve_for": (c_int, [P, u64, u64]),
        "memcg_reserve_until": (c_int, [P, u64, u64]),
        "memcg_reservation_grow": (c_int, [P, u64]),
        "memcg_reservation_grow_for": (c_int, [P, u64, u64]),
        "memcg_reservation_shrink": (None, [P, u64]),
        "memcg_reservation_release": (None, [P]),
        "memcg_reservation_bytes": (u64, [P]),
        "memcg_reservation_cancel": (None, [P]),
        "memcg_listener_create_events": (c_int, [P, c_int, NOTIFY_FN, P, pp]),
        "memcg_listener_create_vmpressure": (c_int, [P, c_char_p, NOTIFY_FN, P, pp]),
        "memcg_listener_destroy": (None, [P]),
        "memcg_listener_delivered": (u64, [P]),
        "memcg_listener_removed": (c_int, [P]),
        "memcg_member_id": (u64, [P]),
        "memcg_event_type_name": (c_char_p, [c_int]),
        "memcg_event_type_from_name": (c_int, [c_char_p]),
        "memcg_drop_reason_name": (c_char_p, [c_int]),
        "memcg_subscribe": (c_int, [P, c_char_p, ctypes.c_uint32, u64, size_t, pp]),
        "memcg_subscription_next": (c_int, [P, ctypes.c_int64, ctypes.POINTER(EventStruct)]),
        "memcg_subscription_cursor": (u64, [P]),
        "memcg_subscription_drop_reason": (c_int, [P]),
        "memcg_subscription_close": (None, [P]),
        "memcg_subscription_destroy": (None, [P]),
        "memcg_events_publish": (c_int, [P, c_int, c_char_p, c_char_p, ctypes.POINTER(u64)]),
    }
    for name, (restype, argtypes) in table.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def load(path: Optional[str] = None) -> ctypes.CDLL:
    """Loads the library once (later calls return the same one) and checks that its version can
    serve this package (same major, for 0.x the same minor, not older). ``path`` is used when
    MEMCG_LIBRARY is not set; without either, the SONAME is looked up by the dynamic loader."""
    global _lib
    with _lock:
        if _lib is None:
            where = os.environ.get("MEMCG_LIBRARY") or path or SONAME
            try:
                lib = ctypes.CDLL(where)
            except OSError as exc:
                raise LibraryNotFound(
                    "memcg: cannot load the C library %s (%s). Install the libmemcg%s package, "
                    "put the directory of %s on LD_LIBRARY_PATH, or set MEMCG_LIBRARY to its path"
                    % (where, exc, SONAME.split(".so.")[1], SONAME)) from exc
            _declare(lib)
            version = lib.memcg_version()
            if (version // 10000 != C_VERSION // 10000
                    or (C_VERSION // 10000 == 0 and version // 100 % 100 != C_VERSION // 100 % 100)
                    or version < C_VERSION):
                raise ImportError("memcg: %s is version %s, this package needs %d.%d.x" % (
                    where, lib.memcg_version_string().decode(), C_VERSION // 10000,
                    C_VERSION // 100 % 100))
            _lib = lib
        return _lib


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", P), ("dli_sname", ctypes.c_char_p),
                ("dli_saddr", P)]


def path() -> Optional[str]:
    """The file the loaded library was mapped from, as the loader opened it (a symlink's path
    stays one), or None when the loader cannot tell. The HTTP endpoint's library is looked for
    beside it (memcg.http)."""
    return file_of(load().memcg_version)


def file_of(function: Any) -> Optional[str]:
    """The file of the shared object that defines ``function`` (a ctypes function), or None."""
    address = ctypes.cast(function, P).value
    # dladdr is in libc since glibc 2.34, in libdl before.
    for name in (None, "libdl.so.2"):
        try:
            dladdr = ctypes.CDLL(name).dladdr
        except (OSError, AttributeError):
            continue
        dladdr.restype = ctypes.c_int
        dladdr.argtypes = [P, ctypes.POINTER(_DlInfo)]
        info = _DlInfo()
        if dladdr(address, ctypes.byref(info)) != 0 and info.dli_fname:
            return os.fsdecode(info.dli_fname)
    return None
