"""Controller, Group, Member, Reservation and Listener over the C API.

Every class is a context manager whose exit closes it; close() is idempotent; a closed object
raises :class:`memcg.Closed`. Thread safety follows the C API: controllers, groups, members and
listeners from any thread; a reservation from one thread at a time (cancel() from any)."""
from __future__ import annotations

import ctypes
import enum
import errno
import sys
import threading
import traceback
import weakref
from contextlib import contextmanager
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Mapping,
                    Optional, Union)

from . import _lib
from ._handle import Handle
from .errors import (CHARGE_ERRORS, CHARGE_FORCED, RESERVE_ERRORS, RESERVE_FORCED, Closed,
                     MemcgError, Refused, os_error)

if TYPE_CHECKING:
    from .events import Subscription, TypeLike

P = ctypes.c_void_p


class CancelReason(enum.IntEnum):
    """Why a member's kill callback runs (memcg_cancel_reason)."""
    OOM_KILL = 0
    PREEMPT = 1
    OTHER = 2
    OPERATOR = 3


def _reason(value: int) -> CancelReason:
    """The reason of a C value; OTHER for one a newer library has and this package does not."""
    try:
        return CancelReason(value)
    except ValueError:
        return CancelReason.OTHER


class OomPolicy(enum.IntEnum):
    """What a reservation that does not fit may do (memcg_reservation_create's oom_policy)."""
    KERNEL = 0
    PIECES = 1
    NEVER = 2


class Priority(enum.IntEnum):
    """Waiting class of a reservation; DEFAULT is the group's memory.wait.priority."""
    DEFAULT = -1
    LOW = 0
    NORMAL = 1
    HIGH = 2


class ChargeFlags(enum.IntFlag):
    """Caller flags of a charge (MEMCG_CHARGE_*)."""
    MAY_BLOCK = 1
    NO_RETRY = 2
    RETRY_MAY_FAIL = 4
    NO_FAIL = 8
    HIGH_PRIO = 16
    DEFAULT = 1
    #: Never sleeps nor reclaims: MemoryLimit at once when the limit holds (an event loop).
    NOWAIT = 0


def _check(code: int, what: str) -> None:
    if code != 0:
        raise os_error(code, what)


def _quote(lib: ctypes.CDLL, data: bytes) -> str:
    """``data`` for an error message, bounded by the C API (memcg_quote): at most 64 bytes of
    it, then "..."."""
    buf = ctypes.create_string_buffer(2 + 4 * 64 + 3 + 1)
    size = ctypes.c_size_t()
    if lib.memcg_quote(data, len(data), buf, len(buf), ctypes.byref(size)) != 0:
        return '"?"'
    return buf.raw[:size.value].decode()


def _read_text(call: Callable[..., int], what: str) -> str:
    """A text the C API writes into a caller's buffer (ERANGE when too small): asked for its
    length, then read, again when it grew in between."""
    while True:
        size = ctypes.c_size_t()
        code = call(None, 0, ctypes.byref(size))
        if code not in (0, errno.ERANGE):  # ERANGE: the size was asked
            raise os_error(code, what)
        buf = ctypes.create_string_buffer(size.value + 1)
        code = call(buf, len(buf), ctypes.byref(size))
        if code == errno.ERANGE:  # grew in between: ask again
            continue
        _check(code, what)
        return buf.raw[:size.value].decode()


def _bytes(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value >= 1 << 64:
        raise ValueError("memcg: %s must be an int in [0, 2**64), not %r" % (what, value))
    return value


def _text(value: str, what: str) -> bytes:
    if not isinstance(value, str) or "\0" in value:
        raise ValueError("memcg: %s must be a str without NUL, not %r" % (what, value))
    return value.encode()


class Controller(Handle):
    """The tree of groups. ``callback_error`` receives (exception, where) for an exception a
    callback raised (it never reaches the library); the default prints the traceback."""

    _what = "controller"

    def __init__(self, library: Optional[str] = None,
                 callback_error: Optional[Callable[[BaseException, str], None]] = None) -> None:
        super().__init__()
        self._lib = _lib.load(library)
        self._children: "weakref.WeakSet[Handle]" = weakref.WeakSet()
        self._children_lock = threading.Lock()
        self._callback_error = callback_error
        self.callback_errors = 0  #: exceptions raised by callbacks and caught
        out = P()
        _check(self._lib.memcg_controller_create(None, ctypes.byref(out)), "controller")
        self._adopt(out.value)

    # -- children --------------------------------------------------------------------------
    def _attach(self, child: Handle) -> None:
        # The pin and the insertion in one step under the lock that close()'s snapshot takes:
        # a child either sees the controller closing or is among the children it closes.
        with self._children_lock:
            self._pin()  # released when the child's C handle is destroyed
            self._children.add(child)

    def _detach(self) -> None:
        self._unpin()

    def _forget(self, child: Handle) -> None:
        with self._children_lock:
            self._children.discard(child)
        self._unpin()

    def _report(self, exc: BaseException, where: str) -> None:
        self.callback_errors += 1
        try:
            if self._callback_error is not None:
                self._callback_error(exc, where)
            else:
                print("memcg: exception in %s (ignored):" % where, file=sys.stderr)
                traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - the reporter itself must not unwind into C
            pass

    def open_handles(self) -> int:
        """Handles made from this controller whose C handle is not yet destroyed."""
        with self._state:
            return self._pins

    def _closing_hook(self) -> None:
        with self._children_lock:
            children = list(self._children)
        # A server first (its actions reach members), reservations before members (a member
        # outlives its reservations), groups last.
        for child in sorted(children, key=lambda c: getattr(c, "_close_order", 4)):
            child.close()

    def _destroy(self, ptr: int) -> None:
        _check(self._lib.memcg_controller_destroy(ptr), "controller destroy")

    # -- groups ----------------------------------------------------------------------------
    def create_group(self, path: str) -> "Group":
        """Creates the group at ``path`` ("a/b"; the parent must exist) and returns it."""
        return Group._make(self, path, create=True)

    def group(self, path: str = "/") -> "Group":
        """The online group at ``path`` ("/" or "" for the root)."""
        return Group._make(self, path, create=False)

    def remove_group(self, path: str) -> None:
        """Takes the group at ``path`` offline (like rmdir)."""
        data = _text(path, "path")
        ptr = self._pin()
        try:
            _check(self._lib.memcg_group_remove(ptr, data), "remove " + path)
        finally:
            self._unpin()

    def now_ns(self) -> int:
        """The controller's clock in nanoseconds (for deadlines)."""
        ptr = self._pin()
        try:
            return int(self._lib.memcg_controller_now_ns(ptr))
        finally:
            self._unpin()

    def version(self) -> str:
        """The loaded library's version, "MAJOR.MINOR.PATCH"."""
        return self._lib.memcg_version_string().decode()

    def _run(self, fn: Callable[..., int], *args: object) -> int:
        ptr = self._pin()
        try:
            return int(fn(ptr, *args))
        finally:
            self._unpin()

    def drain(self) -> None:
        """Gives back every unit pre-charged in the per-CPU stocks, so that memory.current is
        exactly what is charged (0 once everything was released). Writing memory.reclaim drains
        a subtree too, but raises EAGAIN (BlockingIOError) when nothing was reclaimable."""
        _check(self._run(self._lib.memcg_controller_drain_stocks), "drain")

    def flush_stats(self) -> None:
        """Folds every pending statistic, so that the next memory.stat read is exact."""
        _check(self._run(self._lib.memcg_controller_flush_stats), "flush stats")

    def oom_log_last_seq(self) -> int:
        """The sequence number of the latest OOM or preemption report (0 for none)."""
        return self._run(self._lib.memcg_oom_log_last_seq)

    def oom_log(self, after: int = 0) -> List[str]:
        """The reports with a sequence number above ``after`` (0: all the log keeps), oldest
        first, one line each ("oom_kill seq=3 t=1.250s domain=/a victim=q1 ...")."""
        after = _bytes(after, "after")
        ptr = self._pin()
        try:
            text = _read_text(lambda buf, size, n: self._lib.memcg_oom_log_read(
                ptr, after, buf, size, n), "oom log")
        finally:
            self._unpin()
        return text.splitlines()

    # -- the event stream (memcg.events) ----------------------------------------------------
    def subscribe(self, subtree: Union[None, str, "Group"] = None,
                  types: "Union[None, TypeLike, Iterable[TypeLike]]" = None,
                  after_id: int = 0, max_lag: int = 0) -> "Subscription":
        """Subscribes to the events of ``subtree`` (a path or a Group, its descendants
        included; None or "/" for every group) whose type is in ``types`` (EventType values or
        labels such as "oom"; None for all), from now on (``after_id`` 0) or resuming after an
        event's id (a gap event first when the ring no longer holds what follows it). One that
        falls more than ``max_lag`` events behind (0: the ring's capacity) is dropped. Raises
        InvalidArgument for a subtree that is not a group path, TryAgain at the stream's 1024
        subscriptions."""
        from .events import Subscription
        return Subscription(self, subtree, types, after_id, max_lag)

    def publish(self, type: "TypeLike", group: Union[None, str, "Group"],
                payload: "Union[str, Mapping[str, Any]]") -> int:
        """Appends an event of the program's own (EventType.ACTION, say) about ``group`` (None
        for the root) with ``payload``, a dict or one JSON object's text on one line. Returns
        its id; 0 when nothing subscribes (the stream records nothing then). ValueError for
        a payload or type it does not take, FileNotFoundError when no group is there."""
        from .events import publish
        return publish(self, type, group, payload)


class _Child(Handle):
    """A handle made from a controller: pins it until destroyed."""

    #: Its place when the controller closes its children (smaller first).
    _close_order = 4

    def __init__(self, controller: Controller) -> None:
        super().__init__()
        if not isinstance(controller, Controller):
            raise TypeError("memcg: expected a Controller, not %r" % (controller,))
        self._controller = controller
        self._lib = controller._lib

    def _create(self, owner: Handle, make: Callable[[int, object], int], what: str) -> None:
        """Makes the C handle with ``make(owner_ptr, byref(out))`` while ``owner`` is pinned;
        the controller counts it first, so that a controller closing meanwhile refuses it."""
        controller = self._controller
        controller._attach(self)
        out = P()
        try:
            optr = owner._pin()
            try:
                _check(make(optr, ctypes.byref(out)), what)
            finally:
                owner._unpin()
        except BaseException:
            controller._forget(self)
            raise
        self._adopt(out.value)

    def _destroy(self, ptr: int) -> None:
        try:
            self._free(ptr)
        finally:
            self._controller._detach()

    def _free(self, ptr: int) -> None:
        raise NotImplementedError

    def _call(self, fn: Callable[..., int], *args: object) -> int:
        ptr = self._pin()
        try:
            return fn(ptr, *args)
        finally:
            self._unpin()


class Group(_Child):
    """A reference to one group; files by name: ``group["memory.max"] = "512M"``."""

    _what = "group"

    @classmethod
    def _make(cls, controller: Controller, path: str, create: bool) -> "Group":
        data = _text(path, "path")
        self = cls(controller)
        fn = controller._lib.memcg_group_create if create else controller._lib.memcg_group_lookup
        self._create(controller, lambda cptr, out: fn(cptr, data, out),
                     ("create " if create else "lookup ") + (path or "/"))
        return self

    def _free(self, ptr: int) -> None:
        self._lib.memcg_group_release(ptr)

    @property
    def path(self) -> str:
        """The group's path ("" for the root)."""
        size = ctypes.c_size_t()
        self._call(self._lib.memcg_group_path, None, 0, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value + 1)
        _check(self._call(self._lib.memcg_group_path, buf, len(buf), None), "path")
        return buf.value.decode()

    def read(self, name: str) -> str:
        """The text of file ``name`` ("memory.stat", ...)."""
        data = _text(name, "file name")
        return _read_text(lambda buf, size, n: self._call(
            self._lib.memcg_group_read, data, buf, size, n), "read " + name)

    def list(self) -> List[str]:
        """The paths of its online descendants (not itself), a parent before its children,
        siblings in name order. From the root ("/") for the whole tree."""
        return _read_text(lambda buf, size, n: self._call(
            self._lib.memcg_group_list, buf, size, n), "list").splitlines()

    def write(self, name: str, value: Union[str, int], nonblocking: bool = False) -> None:
        """Writes ``value`` to file ``name``; a rejected write raises and changes nothing. A NUL
        inside ``value`` raises ValueError."""
        raw = str(value).encode()
        if b"\0" in raw:
            raise ValueError("memcg: value %s of %s holds a NUL" % (_quote(self._lib, raw), name))
        _check(self._call(self._lib.memcg_group_write, _text(name, "file name"), raw, len(raw),
                          1 if nonblocking else 0),
               "write %s=%s" % (name, _quote(self._lib, raw)))

    def __getitem__(self, name: str) -> str:
        return self.read(name)

    def __setitem__(self, name: str, value: Union[str, int]) -> None:
        self.write(name, value)

    def keyed(self, name: str) -> Dict[str, int]:
        """A flat-keyed file ("memory.stat", "memory.events") as a dict of ints."""
        result: Dict[str, int] = {}
        for line in self.read(name).splitlines():
            key, _, value = line.partition(" ")
            result[key] = int(value)
        return result

    def charge(self, nbytes: int, flags: int = ChargeFlags.DEFAULT) -> bool:
        """Charges ``nbytes`` (whole units); True when charged past max (NO_FAIL/HIGH_PRIO).
        Raises MemoryLimit when the limit held."""
        status = self._call(self._lib.memcg_charge, _bytes(nbytes, "bytes"), int(flags))
        if status in CHARGE_ERRORS:
            raise _refusal(CHARGE_ERRORS[status], status, "charge", self, nbytes)
        return status == CHARGE_FORCED

    def uncharge(self, nbytes: int) -> None:
        """Uncharges ``nbytes`` charged to this group by charge()."""
        self._call(self._lib.memcg_uncharge, _bytes(nbytes, "bytes"))

    @contextmanager
    def charged(self, nbytes: int, flags: int = ChargeFlags.DEFAULT) -> Iterator[None]:
        """``with group.charged(n):`` holds a charge for the block."""
        self.charge(nbytes, flags)
        try:
            yield
        finally:
            self.uncharge(nbytes)

    def watch_events(self, callback: Callable[["Listener", int, bool], None],
                     local: bool = False) -> "Listener":
        """Calls ``callback(listener, value, removed)`` on changes of memory.events (or .local)."""
        return Listener._make(self, callback, local=local)

    def watch_pressure(self, args: str,
                       callback: Callable[["Listener", int, bool], None]) -> "Listener":
        """vmpressure notifications (``args`` as "low", "medium,hierarchy", ...)."""
        return Listener._make(self, callback, pressure=args)

    def __repr__(self) -> str:
        return "<memcg.Group %s>" % ("closed" if self.closed else repr(self.path or "/"))


def _limiting_group(group: Group) -> Optional[str]:
    """The group on ``group``'s path with the least room under memory.max (read now)."""
    try:
        path = group.path
    except Exception:  # noqa: BLE001 - a closed handle: no path to read
        return None
    best, best_room = None, None
    parts = path.split("/") if path else []
    for i in range(len(parts), 0, -1):
        at = "/".join(parts[:i])
        try:
            node = group._controller.group(at)
        except MemcgError:
            continue
        with node:
            try:
                limit = node.read("memory.max").strip()
                current = int(node.read("memory.current"))
            except MemcgError:
                continue
        if limit == "max":
            continue
        room = int(limit) - current
        if best_room is None or room < best_room:
            best, best_room = at, room
    return best


def _refusal(kind: type, status: int, what: str, group: Group, request: int) -> Refused:
    # Only a limit that held has a limiting group; a malformed, cancelled, killed or removed
    # request has none.
    limit_held = kind.status_name in ("nomem", "nomem-costly", "timed-out", "never-fits")
    path = None if group.closed else group.path
    return kind(status, what, group=path,
                limiting_group=_limiting_group(group) if limit_held else None, request=request)


class Member(_Child):
    """Something the OOM killer may kill: ``on_kill(member, reason)`` runs on the thread that ran
    the killer (any thread); it may close this member, which then happens once the library call
    running returns. Closing a member closes its reservations first."""

    _what = "member"
    _close_order = 3

    def __init__(self, group: Group, name: str, score_adj: int = 0,
                 on_kill: Optional[Callable[["Member", CancelReason], None]] = None) -> None:
        if not isinstance(group, Group):
            raise TypeError("memcg: expected a Group, not %r" % (group,))
        super().__init__(group._controller)
        if not -1000 <= score_adj <= 1000:
            raise ValueError("memcg: score_adj must be in [-1000, 1000], not %r" % score_adj)
        self.group = group
        self.name = name
        self._reservations: "weakref.WeakSet[Reservation]" = weakref.WeakSet()
        self._on_kill = on_kill
        data = _text(name, "member name")
        # The C library gets the module's thunk and an id (_lib.register), never a thunk of
        # this object's: a kill callback running on another thread after close() finds no id.
        self._cid = 0
        thunk = _lib.KILL_FN()
        if on_kill is not None:
            self._cid = _lib.register(
                self._trampoline(weakref.ref(self), on_kill, group._controller))
            thunk = _lib.KILL_THUNK
        try:
            self._create(group, lambda gptr, out: self._lib.memcg_member_create(
                gptr, data, int(score_adj), thunk, self._cid or None, out), "member " + name)
        except BaseException:
            _lib.unregister(self._cid)
            raise

    @staticmethod
    def _trampoline(wself: "weakref.ref[Member]", fn: Callable[["Member", CancelReason], None],
                    controller: Controller) -> Callable[[int], None]:
        def trampoline(reason: int) -> None:
            member = wself()  # a strong reference for the duration of the call
            if member is None:
                return
            try:
                fn(member, _reason(reason))
            except BaseException as exc:  # noqa: BLE001 - never unwind into C
                controller._report(exc, "kill callback of member %r" % member.name)
        return trampoline

    def _closing_hook(self) -> None:
        for reservation in list(self._reservations):
            reservation.close()

    def _free(self, ptr: int) -> None:
        # Reservations first, one made while close() ran included (its creation pinned this
        # member); one that a call on another thread still pins (cancel, nbytes) is destroyed
        # when that call returns: the C API keeps the member alive meanwhile.
        for reservation in list(self._reservations):
            reservation.close()
        self._lib.memcg_member_destroy(ptr)
        _lib.unregister(self._cid)

    @property
    def score_adj(self) -> int:
        """Its oom_score_adj (-1000 immune .. 1000); setting it changes the next OOM decision."""
        return int(self._call(self._lib.memcg_member_score_adj))

    @score_adj.setter
    def score_adj(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not -1000 <= value <= 1000:
            raise ValueError("memcg: score_adj must be an int in [-1000, 1000], not %r"
                             % (value,))
        _check(self._call(self._lib.memcg_member_set_score_adj, value),
               "score_adj of %s" % self.name)

    def charge(self, nbytes: int, flags: int = ChargeFlags.DEFAULT) -> bool:
        """Charges ``nbytes`` for this member (counted in its badness); see Group.charge."""
        status = self._call(self._lib.memcg_member_charge, _bytes(nbytes, "bytes"), int(flags))
        if status in CHARGE_ERRORS:
            raise _refusal(CHARGE_ERRORS[status], status, "charge of " + self.name, self.group,
                           nbytes)
        return status == CHARGE_FORCED

    def uncharge(self, nbytes: int) -> int:
        """Uncharges up to what it holds; returns the bytes uncharged."""
        return int(self._call(self._lib.memcg_member_uncharge, _bytes(nbytes, "bytes")))

    @property
    def killed(self) -> bool:
        """True once the OOM killer killed it."""
        return bool(self._call(self._lib.memcg_member_killed))

    @property
    def charged_bytes(self) -> int:
        """Bytes it holds now (whole units)."""
        return int(self._call(self._lib.memcg_member_charged))

    @property
    def id(self) -> int:
        """Its id: unique in the controller, never reused; the one ``GET /v1/members`` lists
        and ``POST /v1/members/<id>/kill`` takes (memcg.Server)."""
        return int(self._call(self._lib.memcg_member_id))

    def reservation(self, oom: OomPolicy = OomPolicy.KERNEL,
                    priority: Priority = Priority.DEFAULT) -> "Reservation":
        """A reservation charged to this member."""
        return Reservation(self, oom, priority)


class Reservation(_Child):
    """Bytes held for one query or job: grow with reserve()/grow(), give back with shrink();
    closing (or leaving the ``with`` block) gives everything back. A refusal raises the
    Refused subclass of its status and changes nothing. One thread at a time, but cancel()."""

    _what = "reservation"
    _close_order = 1

    def __init__(self, owner: Union[Group, Member], oom: OomPolicy = OomPolicy.KERNEL,
                 priority: Priority = Priority.DEFAULT) -> None:
        if not isinstance(owner, (Group, Member)):
            raise TypeError("memcg: a reservation is made on a Group or a Member, not %r"
                            % (owner,))
        super().__init__(owner._controller)
        self.owner = owner
        self.group = owner if isinstance(owner, Group) else owner.group
        self._member = owner if isinstance(owner, Member) else None
        member = self._member

        def make(optr: int, out: object) -> int:
            args = (optr, None) if member is None else (None, optr)
            code = self._lib.memcg_reservation_create(*args, int(oom), int(priority), out)
            if code == 0 and member is not None:  # under the member's pin: before its close
                member._reservations.add(self)
            return int(code)
        self._create(owner, make, "reservation")

    def _free(self, ptr: int) -> None:
        self._lib.memcg_reservation_destroy(ptr)
        if self._member is not None:
            self._member._reservations.discard(self)

    def _status(self, fn: Callable[..., int], what: str, request: int, *args: object) -> bool:
        # The member is pinned too: a kill callback closing it cannot free it under this call.
        mptr = self._member._pin() if self._member is not None else None
        try:
            status = self._call(fn, *args)
        finally:
            if mptr is not None:
                self._member._unpin()  # type: ignore[union-attr]
        if status in (0, RESERVE_FORCED):
            return status == RESERVE_FORCED
        raise _refusal(RESERVE_ERRORS.get(status, Refused), status, what, self.group, request)

    def reserve(self, total: int, timeout: Optional[float] = None,
                deadline_ns: Optional[int] = None) -> bool:
        """Makes it hold ``total`` bytes; with ``timeout`` (seconds) or ``deadline_ns`` (the
        controller's clock) it waits for room instead of OOM-killing. True when forced."""
        total = _bytes(total, "total")
        if deadline_ns is not None:
            return self._status(self._lib.memcg_reserve_until, "reserve", total, total,
                                _bytes(deadline_ns, "deadline_ns"))
        if timeout is not None:
            return self._status(self._lib.memcg_reserve_for, "reserve", total, total,
                                _timeout(timeout))
        return self._status(self._lib.memcg_reserve, "reserve", total, total)

    def grow(self, nbytes: int, timeout: Optional[float] = None,
             deadline_ns: Optional[int] = None) -> bool:
        """Adds ``nbytes``, at once, waiting up to ``timeout`` seconds, or until ``deadline_ns``
        on the controller's clock (a query whose requests share one deadline)."""
        nbytes = _bytes(nbytes, "bytes")
        if deadline_ns is not None:
            return self._status(self._lib.memcg_reservation_grow_until, "grow", nbytes, nbytes,
                                _bytes(deadline_ns, "deadline_ns"))
        if timeout is not None:
            return self._status(self._lib.memcg_reservation_grow_for, "grow", nbytes, nbytes,
                                _timeout(timeout))
        return self._status(self._lib.memcg_reservation_grow, "grow", nbytes, nbytes)

    def shrink(self, nbytes: Optional[int] = None) -> None:
        """Gives back ``nbytes`` (at most what it holds), or everything."""
        if nbytes is None:
            self._call(self._lib.memcg_reservation_release)
        else:
            self._call(self._lib.memcg_reservation_shrink, _bytes(nbytes, "bytes"))

    @property
    def nbytes(self) -> int:
        """What the owner asked for, in bytes."""
        return int(self._call(self._lib.memcg_reservation_bytes))

    def cancel(self) -> None:
        """Makes every later request, and one waiting now, raise Cancelled. Any thread."""
        self._call(self._lib.memcg_reservation_cancel)


def _timeout(seconds: float) -> int:
    if not isinstance(seconds, (int, float)) or seconds != seconds or seconds < 0:
        raise ValueError("memcg: timeout must be seconds >= 0, not %r" % (seconds,))
    return min(int(seconds * 1e9), (1 << 63) - 1)


class Listener(_Child):
    """A notification registration; ``callback(listener, value, removed)`` runs on a library
    thread (or in remove_group for the removal notice), with no library lock held, and may
    close the listener."""

    _what = "listener"
    _close_order = 2

    @classmethod
    def _make(cls, group: Group, callback: Callable[["Listener", int, bool], None],
              local: bool = False, pressure: Optional[str] = None) -> "Listener":
        if not callable(callback):
            raise TypeError("memcg: the callback must be callable, not %r" % (callback,))
        self = cls(group._controller)
        self.group = group
        controller = group._controller
        wself = weakref.ref(self)

        def trampoline(value: int, removed: int) -> None:
            listener = wself()
            if listener is None:
                return
            try:
                callback(listener, value, bool(removed))
            except BaseException as exc:  # noqa: BLE001 - never unwind into C
                controller._report(exc, "listener callback of %s" % group.path)

        args = _text(pressure, "pressure args") if pressure is not None else b""
        self._cid = cid = _lib.register(trampoline)
        thunk = _lib.NOTIFY_THUNK
        try:
            if pressure is None:
                self._create(group, lambda gptr, out: self._lib.memcg_listener_create_events(
                    gptr, 1 if local else 0, thunk, cid, out), "events listener")
            else:
                self._create(group, lambda gptr, out: self._lib.memcg_listener_create_vmpressure(
                    gptr, args, thunk, cid, out), "pressure listener " + pressure)
        except BaseException:
            _lib.unregister(cid)
            raise
        return self

    def _free(self, ptr: int) -> None:
        self._lib.memcg_listener_destroy(ptr)
        _lib.unregister(self._cid)

    @property
    def delivered(self) -> int:
        """Notifications delivered so far."""
        return int(self._call(self._lib.memcg_listener_delivered))

    @property
    def removed(self) -> bool:
        """True once the group was removed."""
        return bool(self._call(self._lib.memcg_listener_removed))


__all__ = ["Controller", "Group", "Member", "Reservation", "Listener", "CancelReason",
           "OomPolicy", "Priority", "ChargeFlags", "Closed"]
