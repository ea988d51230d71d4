"""Lifetimes of the C handles behind the Python objects.

A C handle must not be destroyed while a library call uses it, nor (for a member) before the
reservations bound to it, and a callback may close the very handle whose call is running. So
every call *pins* its handle (and a reservation's call pins its member too); ``close()`` marks
the handle closed at once (later calls raise :class:`Closed`) and the C handle is destroyed when
the last pin goes: at once when no call uses it (the C API allows a callback to destroy a handle
that is not running), else when the running call returns. So a kill callback that closes the
member whose own charge or reservation ran the OOM killer frees nothing under that call."""
from __future__ import annotations

import threading
from typing import Optional, TypeVar

from .errors import Closed

_H = TypeVar("_H", bound="Handle")


class Handle:
    """One C handle: pinned by calls, destroyed once closed and unpinned."""

    _what = "handle"

    def __init__(self) -> None:
        self._ptr: Optional[int] = None
        self._state = threading.Lock()
        self._pins = 0
        self._closing = False

    def _adopt(self, ptr: int) -> None:
        """Records the C handle once made. A close() that came while it was being made (a
        controller closing its children, a member its reservations) found nothing to free:
        the handle is freed now, else it would leak and keep its controller open."""
        with self._state:
            self._ptr = ptr
            finish = self._closing and self._pins == 0
        if finish:
            self._finish()

    def _pin(self) -> int:
        with self._state:
            if self._closing or self._ptr is None:
                raise Closed("memcg: %s is closed" % self._what)
            self._pins += 1
            return self._ptr

    def _unpin(self) -> None:
        with self._state:
            self._pins -= 1
            finish = self._pins == 0 and self._closing
        if finish:
            self._finish()

    @property
    def closed(self) -> bool:
        """True once close() was called (the C handle may outlive it until its calls return)."""
        return self._closing

    def close(self) -> None:
        """Closes the handle; a second close does nothing. Safe from a callback, including one
        running for this very handle: the C handle is freed once no call uses it."""
        with self._state:
            if self._closing:
                return
            self._closing = True
            finish = self._pins == 0
        self._closing_hook()
        if finish:
            self._finish()

    def _closing_hook(self) -> None:
        """Runs once, at close(), before the C handle goes (a member closes its reservations)."""

    def _finish(self) -> None:
        with self._state:
            ptr, self._ptr = self._ptr, None
            if ptr is None or self._pins != 0:
                self._ptr = ptr
                return
        self._destroy(ptr)

    def _destroy(self, ptr: int) -> None:
        raise NotImplementedError

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A safety net for a handle the program forgot to close; never at interpreter exit,
        # when the library may be gone.
        try:
            if not self._closing and self._ptr is not None:
                self.close()
        except Exception:  # noqa: BLE001 - nothing may escape a finalizer
            pass
