"""The controller's event stream, in-process (memcg.h, "events"): the events ``GET /v1/events``
serves (memory.events increments, vmpressure levels, PSI triggers, OOM and preemption reports,
groups created and removed, writes, actions, the process budget), each with an increasing id, in
a bounded ring of the latest 4096. A :class:`Subscription` is a cursor into that ring: it is
never sent more than it asked for, and one that falls more than ``max_lag`` events behind is
dropped (:class:`memcg.SubscriptionDropped`), never buffered without bound.

    with ctl.subscribe("tenants", types=["memory_event", "oom"]) as events:
        for event in events:          # ends when another thread closes the subscription
            print(event.id, event.type.label, event.group, event.data)
"""
from __future__ import annotations

import ctypes
import enum
import errno
import json
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Union

from . import _lib
from .core import Controller, Group, _Child, _bytes, _check, _text
from .errors import Closed, SubscriptionDropped


class EventType(enum.IntEnum):
    """What an event reports (memcg_event_type); ``label`` is the stream's name of it."""
    MEMORY_EVENT = 0   #: a memory.events counter went up
    VMPRESSURE = 1     #: a reclaim root's vmpressure level changed
    PSI_TRIGGER = 2    #: a PSI trigger fired
    OOM = 3            #: an OOM report (the JSON of GET /v1/oom)
    PREEMPT = 4        #: a preemption report
    BUDGET = 5         #: the process budget's progress
    GROUP_CREATED = 6
    GROUP_REMOVED = 7
    WRITE = 8          #: a group file written over HTTP
    ACTION = 9         #: an operator's action applied (or one the program published)
    GAP = 10           #: events asked for that the ring no longer holds

    @property
    def label(self) -> str:
        """Its name in the stream ("memory_event", "oom", ...: memcg_event_type_name)."""
        return self.name.lower()

    @classmethod
    def from_label(cls, label: str) -> "EventType":
        """The type named ``label`` ("oom"); ValueError naming the known ones otherwise."""
        for member in cls:
            if member.label == label:
                return member
        raise ValueError("memcg: no event type %r (one of %s)"
                         % (label, ", ".join(m.label for m in cls)))


#: Every type this package knows (MEMCG_EVENT_ALL); a gap event comes whatever the mask.
ALL_TYPES = (1 << len(EventType)) - 1

TypeLike = Union[EventType, str, int]


def _event_type(value: TypeLike) -> EventType:
    if isinstance(value, EventType):
        return value
    if isinstance(value, str):
        return EventType.from_label(value)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return EventType(value)
        except ValueError:
            pass
    raise ValueError("memcg: an event type is an EventType or its label (%s), not %r"
                     % (", ".join(m.label for m in EventType), value))


def _types_mask(types: Union[None, TypeLike, Iterable[TypeLike]]) -> int:
    if types is None:
        return ALL_TYPES
    if isinstance(types, (str, int)):  # one type (an EventType is an int)
        types = [types]
    try:
        items = list(types)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError("memcg: types must be None (every type) or an iterable of event "
                         "types, not %r" % (types,)) from None
    if not items:
        raise ValueError("memcg: types is empty: name one event type at least, or None for all")
    mask = 0
    for item in items:
        mask |= 1 << _event_type(item)
    return mask


def _path_arg(path: Union[None, str, Group], what: str) -> Optional[bytes]:
    """A group path for the C API, None for the root ("", "/" and None alike)."""
    if isinstance(path, Group):
        path = path.path
    if path is None:
        return None
    data = _text(path, what)
    return None if data in (b"", b"/") else data


def _payload(payload: Union[str, Mapping[str, Any]]) -> bytes:
    """One JSON object on one line, what the bus takes. The library checks only the braces and
    the line; the JSON is checked here, so that no subscriber gets a malformed object."""
    if isinstance(payload, Mapping):
        # One line: json.dumps escapes every control character in strings.
        return json.dumps(dict(payload), separators=(",", ":"), allow_nan=False).encode()
    if not isinstance(payload, str):
        raise ValueError("memcg: a payload is a dict or a JSON object's text, not %r"
                         % (payload,))
    text = payload.strip()

    def no_constant(name: str) -> Any:
        raise ValueError("%s is not JSON" % name)
    try:
        value = json.loads(text, parse_constant=no_constant)
    except ValueError as exc:
        raise ValueError("memcg: the payload is not JSON (%s): %.80r" % (exc, payload)) from None
    if not isinstance(value, dict) or "\n" in text or "\r" in text:
        raise ValueError("memcg: the payload must be one JSON object on one line: %.80r"
                         % (payload,))
    return text.encode()


@dataclass(frozen=True)
class Event:
    """One event of the stream."""
    id: int            #: increasing; resume after it with subscribe(after_id=...)
    type: EventType
    time_ns: int       #: wall clock (CLOCK_REALTIME), nanoseconds since the epoch
    group: str         #: the group's path: "/" for the root, "a/b" below it
    payload: str       #: the type's data, one JSON object on one line (docs/http.md)

    @property
    def data(self) -> Any:
        """The payload parsed (a dict)."""
        return json.loads(self.payload)


# The longest single wait in the C library: a program's signals (KeyboardInterrupt) are handled
# between two waits, never later than this.
_WAIT_SLICE_MS = 1000


class Subscription(_Child):
    """A cursor into the controller's event stream (see :meth:`Controller.subscribe`).

    ``next()`` from one thread at a time (a second caller waits for the first); ``close()`` from
    any thread, which wakes a ``next()`` waiting. Iterating gives the events as they come and
    ends once the subscription is closed."""

    _what = "subscription"
    _close_order = 2

    def __init__(self, controller: Controller, subtree: Union[None, str, Group] = None,
                 types: Union[None, TypeLike, Iterable[TypeLike]] = None, after_id: int = 0,
                 max_lag: int = 0) -> None:
        super().__init__(controller)
        where = _path_arg(subtree, "subtree")
        mask = _types_mask(types)
        after_id = _bytes(after_id, "after_id")
        if (isinstance(max_lag, bool) or not isinstance(max_lag, int) or max_lag < 0
                or max_lag >= 1 << (8 * ctypes.sizeof(ctypes.c_size_t))):
            raise ValueError("memcg: max_lag must be an int >= 0 (0: the ring's capacity), not %r"
                             % (max_lag,))
        self.subtree = "/" if where is None else where.decode()
        self._next_lock = threading.Lock()
        self._create(controller, lambda cptr, out: self._lib.memcg_subscribe(
            cptr, where, mask, after_id, max_lag, out),
            "subscribe to %s" % self.subtree)

    def _closing_hook(self) -> None:
        # Wakes a next() waiting on another thread (it then raises Closed). The pin taken by hand
        # (close() has already marked it closed) keeps the C handle alive through this call even
        # when that next() returns meanwhile and would otherwise free it.
        with self._state:
            ptr = self._ptr
            if ptr is None:
                return  # not made yet: _adopt frees it
            self._pins += 1
        try:
            self._lib.memcg_subscription_close(ptr)
        finally:
            self._unpin()

    def _free(self, ptr: int) -> None:
        self._lib.memcg_subscription_destroy(ptr)

    def next(self, timeout: Optional[float] = None) -> Optional[Event]:
        """The next event, waiting up to ``timeout`` seconds (None: until one comes; 0: only
        look); None when none came in time. Raises :class:`memcg.SubscriptionDropped` once the
        stream dropped it, :class:`memcg.Closed` once closed (a close from another thread
        wakes the wait)."""
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, (int, float))
                                    or timeout != timeout or timeout < 0):
            raise ValueError("memcg: timeout must be seconds >= 0 or None, not %r" % (timeout,))
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._next_lock.acquire(timeout=-1 if timeout is None else min(timeout, 1e9)):
            return None  # another thread's next() held it all the time
        try:
            ptr = self._pin()
            try:
                return self._take(ptr, deadline)
            finally:
                self._unpin()
        finally:
            self._next_lock.release()

    def _take(self, ptr: int, deadline: Optional[float]) -> Optional[Event]:
        raw = _lib.EventStruct()
        while True:
            if deadline is None:
                wait_ms = _WAIT_SLICE_MS
            else:
                left = deadline - time.monotonic()
                wait_ms = 0 if left <= 0 else min(_WAIT_SLICE_MS, math.ceil(left * 1000))
            code = self._lib.memcg_subscription_next(ptr, wait_ms, ctypes.byref(raw))
            if code == 0:
                try:
                    kind = EventType(raw.type)
                except ValueError:
                    continue  # not asked for (the mask names known types): passed over
                # Copied now: the C strings live until the next call.
                return Event(int(raw.id), kind, int(raw.time_ns),
                             (raw.group or b"").decode("utf-8", "replace"),
                             (raw.payload or b"{}").decode("utf-8", "replace"))
            if code == errno.EAGAIN:
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                continue
            if code == errno.EBADF:
                raise Closed("memcg: subscription is closed")
            if code == errno.ECONNABORTED:
                reason = self._lib.memcg_subscription_drop_reason(ptr)
                raise SubscriptionDropped(self._lib.memcg_drop_reason_name(reason).decode(),
                                          int(self._lib.memcg_subscription_cursor(ptr)))
            _check(code, "next event")

    def __iter__(self) -> "Subscription":
        return self

    def __next__(self) -> Event:
        try:
            event = self.next(None)
        except Closed:
            raise StopIteration from None
        assert event is not None  # next(None) waits until one comes
        return event

    @property
    def cursor(self) -> int:
        """The id of the last event taken or passed over by the filter: resume after it. Waits
        for a next() running on another thread."""
        with self._next_lock:
            return int(self._call(self._lib.memcg_subscription_cursor))

    @property
    def drop_reason(self) -> Optional[str]:
        """None while it is served; once dropped "lagging", "overrun" or "closed"."""
        reason = int(self._call(self._lib.memcg_subscription_drop_reason))
        return None if reason == 0 else self._lib.memcg_drop_reason_name(reason).decode()

    def __repr__(self) -> str:
        return "<memcg.Subscription %s%s>" % (self.subtree, " closed" if self.closed else "")


def publish(controller: Controller, type: TypeLike, group: Union[None, str, Group],
            payload: Union[str, Mapping[str, Any]]) -> int:
    """Controller.publish's body."""
    kind = _event_type(type)
    where = _path_arg(group, "group")
    data = _payload(payload)
    ptr = controller._pin()
    try:
        id = ctypes.c_uint64()
        _check(controller._lib.memcg_events_publish(ptr, int(kind), where, data,
                                                    ctypes.byref(id)),
               "publish %s about %s" % (kind.label, "/" if where is None else where.decode()))
        return id.value
    finally:
        controller._unpin()


__all__ = ["EventType", "Event", "Subscription", "ALL_TYPES"]
