"""memcg's HTTP endpoint for a controller (include/memcg/c/http.h; docs/http.md lists what it
serves): /metrics, the groups' files, the pages, the event stream and, with ``allow_writes``
and a ``token`` (or a Unix socket's allowed uids), the writes and the operator's actions (a
member killed or preempted, the process budget), each audited.

    with memcg.Server(ctl, port=9464, allow_writes=True, token=token) as server:
        server.start()
        ...

The endpoint is a library of its own, libmemcg_http (it needs libmicrohttpd, which libmemcg
does not), loaded on the first Server: from MEMCG_HTTP_LIBRARY when set and not empty, else
beside the loaded libmemcg by its SONAME, else by the loader (LD_LIBRARY_PATH, the system's
directories). :class:`memcg.HttpLibraryNotFound` says where it looked."""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import threading
from typing import Any, List, Optional

from . import _lib
from .core import Controller, _Child
from .errors import HttpLibraryNotFound, os_error

#: The endpoint library's SONAME: libmemcg's version suffix (their ABIs go together).
SONAME = "libmemcg_http.so." + _lib.SONAME.split(".so.", 1)[1]

P = ctypes.c_void_p
_lock = threading.Lock()
_http: Optional[ctypes.CDLL] = None
_http_path: Optional[str] = None


def _declare(lib: ctypes.CDLL) -> None:
    pp = ctypes.POINTER(P)
    table = {
        "memcg_server_create": (ctypes.c_int, [P, pp]),
        "memcg_server_set": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_char_p]),
        "memcg_server_start": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_size_t]),
        "memcg_server_port": (ctypes.c_int, [P]),
        "memcg_server_running": (ctypes.c_int, [P]),
        "memcg_server_stop": (None, [P]),
        "memcg_server_destroy": (None, [P]),
    }
    for name, (restype, argtypes) in table.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def _candidates(tried: List[str]) -> List[str]:
    """Where libmemcg_http is looked for when MEMCG_HTTP_LIBRARY does not say: beside libmemcg
    (as loaded, then with its symlinks resolved: an install keeps both in one directory), then
    by SONAME through the loader, then a path that ctypes.util finds with that very name
    (another minor version may have another ABI). A file absent beside libmemcg goes to
    ``tried``."""
    found: List[str] = []
    core = _lib.path()
    if core is not None:
        for directory in (os.path.dirname(core), os.path.dirname(os.path.realpath(core))):
            candidate = os.path.join(directory, SONAME)
            if candidate in found or any(t.startswith(candidate + " ") for t in tried):
                continue
            if os.path.exists(candidate):
                found.append(candidate)
            else:
                tried.append("%s (no such file)" % candidate)
    found.append(SONAME)
    other = ctypes.util.find_library("memcg_http")
    if other is not None and os.path.basename(other) == SONAME and other not in found:
        found.append(other)
    return found


def load() -> ctypes.CDLL:
    """Loads libmemcg_http once (after libmemcg: it is linked with it and shares its state);
    raises :class:`memcg.HttpLibraryNotFound` when it cannot be loaded."""
    global _http, _http_path
    _lib.load()
    with _lock:
        if _http is not None:
            return _http
        named = os.environ.get("MEMCG_HTTP_LIBRARY")
        tried: List[str] = []
        for where in [named] if named else _candidates(tried):
            try:
                lib = ctypes.CDLL(where)
            except OSError as exc:
                tried.append("%s (%s)" % (where, exc))
                continue
            try:
                _declare(lib)
            except AttributeError as exc:
                tried.append("%s (not the endpoint's library: %s)" % (where, exc))
                continue
            _http, _http_path = lib, where
            return lib
        raise HttpLibraryNotFound(
            "memcg: cannot load the HTTP endpoint's library %s; tried: %s. It is installed with "
            "libmemcg by a build that has the endpoint (libmicrohttpd found); set "
            "MEMCG_HTTP_LIBRARY to its path" % (SONAME, "; ".join(tried)))


def library_path() -> str:
    """The file libmemcg_http was loaded from (loading it when not yet)."""
    lib = load()
    where = _lib.file_of(lib.memcg_server_create)
    assert _http_path is not None
    return where if where is not None else _http_path


def _option_text(name: str, value: Any) -> bytes:
    """An option's value as memcg_server_set takes it: True/False as "1"/"0", an int in
    decimal, a list of uids as "1000,1001", a str or a path as it is."""
    if isinstance(value, bool):
        return b"1" if value else b"0"
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, (list, tuple, set, frozenset)):
        uids = sorted(value) if isinstance(value, (set, frozenset)) else list(value)
        for uid in uids:
            if isinstance(uid, bool) or not isinstance(uid, int) or uid < 0:
                raise ValueError("memcg: server option %s: a list holds uids (ints >= 0), not "
                                 "%r" % (name, uid))
        return ",".join(str(uid) for uid in uids).encode()
    if isinstance(value, (str, os.PathLike)):
        text = os.fsencode(value)
        if b"\0" in text:
            raise ValueError("memcg: server option %s holds a NUL" % name)
        return text
    raise ValueError("memcg: server option %s: %r is not a bool, an int, a str or a list of "
                     "uids" % (name, value))


class Server(_Child):
    """The HTTP endpoint of ``controller``, stopped until :meth:`start`. ``options`` are the
    names of memcg/c/http.h (ServerOptions' fields, a duration's unit in its name): address,
    port (0: a free one), threads, allow_writes, token, token_name, read_timeout_ms,
    keep_alive_timeout_s, unix_socket, unix_allowed_uids ([] for the process's own uid), ...
    A name the library does not know, or a value not of the option's form, raises
    InvalidArgument naming it, and no server is made. Closing (or leaving the ``with`` block)
    stops it and frees it; closing the controller does too. Not to be closed or stopped from a
    callback that the server runs (a member's kill callback over HTTP): stopping joins the
    server's threads."""

    _what = "server"
    _close_order = 0  # first: its actions reach members and groups

    def __init__(self, controller: Controller, **options: Any) -> None:
        super().__init__(controller)
        texts = [(self._name(name), name, _option_text(name, value))
                 for name, value in options.items()]
        self._http = load()
        self._create(controller, self._http.memcg_server_create, "server")
        try:
            for raw, name, text in texts:
                self._set(raw, name, text)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _name(name: str) -> bytes:
        if not isinstance(name, str) or not name or "\0" in name:
            raise ValueError("memcg: a server option's name is a non-empty str, not %r"
                             % (name,))
        return name.encode()

    def _set(self, raw: bytes, name: str, text: bytes) -> None:
        code = self._call(self._http.memcg_server_set, raw, text)
        if code == errno.EBUSY:
            raise os_error(code, "server option %s: the server runs (stop() it first)" % name)
        if code != 0:
            raise os_error(code, "server option %s=%r: an unknown name or a value not of its "
                           "form" % (name, text.decode("utf-8", "replace")))

    def set(self, name: str, value: Any) -> None:
        """Sets one option for the next start (as the constructor's keywords); refused while
        running (EBUSY). A refused value changes nothing."""
        self._set(self._name(name), name, _option_text(name, value))

    def start(self) -> "Server":
        """Starts serving on background threads; returns the server. Raises the errno's
        MemcgOSError with the library's message: InvalidArgument for an option out of range
        (the message names it) or writes allowed without a token or a Unix socket, EALREADY
        when running, EADDRINUSE; a failed start leaves it stopped."""
        error = ctypes.create_string_buffer(512)
        code = self._call(self._http.memcg_server_start, error, len(error))
        if code != 0:
            raise os_error(code, "server start: %s" % error.value.decode("utf-8", "replace"))
        return self

    @property
    def port(self) -> int:
        """The port bound while running (the chosen one for port 0), else 0."""
        return int(self._call(self._http.memcg_server_port))

    @property
    def running(self) -> bool:
        """True while started and listening."""
        return bool(self._call(self._http.memcg_server_running))

    def stop(self) -> None:
        """Stops accepting, closes the connections and joins the threads (within read_timeout
        plus a second); does nothing when stopped. It may be started again."""
        self._call(self._http.memcg_server_stop)

    def _free(self, ptr: int) -> None:
        self._http.memcg_server_destroy(ptr)

    def __repr__(self) -> str:
        if self.closed:
            return "<memcg.Server closed>"
        return "<memcg.Server %s>" % ("port %d" % self.port if self.running else "stopped")


__all__ = ["Server", "SONAME", "load", "library_path"]
