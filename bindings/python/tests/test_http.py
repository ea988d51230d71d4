"""The HTTP endpoint (memcg.Server over libmemcg_http): options refused with errors naming them,
a start refused with the library's message, an operator's kill over HTTP reaching a member's
kill callback with CancelReason.OPERATOR and the event stream, the Unix socket, stop and
restart, the controller closing its server, and how the library is found. Talks to 127.0.0.1
and a Unix socket only.

MEMCG_HTTP_LIBRARY set to "" (ctest's, for a build without the endpoint) skips the server's
tests; unset, the library is looked for as the package does, and a test fails when it is not
found."""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

import memcg
import memcg.http

from .test_memcg import HERE, Base, MiB

NO_ENDPOINT = os.environ.get("MEMCG_HTTP_LIBRARY") == ""
SKIP_WHY = "built without the HTTP endpoint (MEMCG_HTTP_LIBRARY is empty)"
TOKEN = "s3cret-token"
# No proxy from the environment: the requests go to 127.0.0.1 itself.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http(port: int, method: str, path: str, token: Optional[str] = None,
         body: Optional[bytes] = None) -> Tuple[int, bytes]:
    """One request to 127.0.0.1:``port``: (status, body), errors included."""
    headers = {"Authorization": "Bearer " + token} if token else {}
    if method != "GET" and body is None:
        body = b""
    request = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=body,
                                     method=method, headers=headers)
    try:
        with OPENER.open(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def over_unix(path: str, request: bytes) -> Tuple[int, bytes]:
    """One HTTP/1.0 exchange on the Unix socket ``path``: (status, body)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(request)
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    match = re.match(rb"HTTP/1\.\d (\d+)", head)
    assert match is not None, head
    return int(match.group(1)), body


@unittest.skipIf(NO_ENDPOINT, SKIP_WHY)
class Endpoint(Base):
    def setUp(self) -> None:
        try:
            memcg.http.load()
        except memcg.HttpLibraryNotFound as exc:
            self.fail("the HTTP endpoint's library was not found (set MEMCG_HTTP_LIBRARY to "
                      "its path, or to \"\" for a build without it): %s" % exc)
        super().setUp()

    def test_options_refused_with_clear_errors(self) -> None:
        for options, name in (({"no_such_option": 1}, "no_such_option"),
                              ({"port": "http"}, "port"), ({"threads": -1}, "threads"),
                              ({"allow_writes": "yes"}, "allow_writes"),
                              ({"port": 0, "read_timeout_ms": "soon"}, "read_timeout_ms")):
            with self.assertRaises(memcg.InvalidArgument, msg=name) as cm:
                memcg.Server(self.ctl, **options)
            self.assertEqual(cm.exception.errno, errno.EINVAL)
            self.assertIn(name, str(cm.exception))
        for options, name in (({"threads": 1.5}, "threads"), ({"token": None}, "token"),
                              ({"unix_allowed_uids": [-1]}, "unix_allowed_uids"),
                              ({"unix_allowed_uids": ["0"]}, "unix_allowed_uids"),
                              ({"token": "a\0b"}, "token")):
            with self.assertRaises(ValueError, msg=name) as cm:
                memcg.Server(self.ctl, **options)
            self.assertIn(name, str(cm.exception))
        with self.assertRaises(TypeError):
            memcg.Server(None)  # type: ignore[arg-type]
        self.assertEqual(self.ctl.open_handles(), 1)  # no server left behind
        with memcg.Server(self.ctl) as server:
            with self.assertRaises(ValueError):
                server.set("", 1)
            with self.assertRaises(memcg.InvalidArgument):
                server.set("port", "80x")
            server.set("port", 70000)  # of the form; its range is checked at start
            with self.assertRaises(memcg.InvalidArgument) as cm:
                server.start()
            self.assertIn("port", str(cm.exception))
            server.set("unix_allowed_uids", [1000, 1001])  # "1000,1001"
            server.set("unix_allowed_uids", [])  # "": the process's own uid
            self.assertEqual(self.ctl.open_handles(), 2)

    def test_start_refused_with_the_librarys_message(self) -> None:
        with memcg.Server(self.ctl, address="127.0.0.1", port=0, threads=1000) as server:
            with self.assertRaises(memcg.InvalidArgument) as cm:
                server.start()
            self.assertIn("threads", str(cm.exception))
            self.assertFalse(server.running)
            self.assertEqual(server.port, 0)
            # Writes without a token nor a Unix socket.
            server.set("threads", 2)
            server.set("allow_writes", True)
            with self.assertRaises(memcg.InvalidArgument) as cm:
                server.start()
            self.assertIn("token", str(cm.exception))
            self.assertFalse(server.running)
            server.set("allow_writes", False)
            server.start()
            self.assertTrue(server.running)
            with self.assertRaises(memcg.MemcgOSError) as cm:
                server.start()
            self.assertEqual(cm.exception.errno, errno.EALREADY)
            with self.assertRaises(memcg.MemcgOSError) as cm:
                server.set("port", 1)
            self.assertEqual(cm.exception.errno, errno.EBUSY)
            self.assertIn("port", str(cm.exception))
            # The port it holds: a second server on it cannot bind.
            with memcg.Server(self.ctl, port=server.port, threads=1) as other:
                with self.assertRaises(memcg.MemcgOSError) as cm:
                    other.start()
                self.assertEqual(cm.exception.errno, errno.EADDRINUSE)

    def test_an_operators_kill_over_http(self) -> None:
        q = self.ctl.create_group("t/q")
        kills: List[memcg.CancelReason] = []
        killed = threading.Event()

        def on_kill(member: memcg.Member, reason: memcg.CancelReason) -> None:
            kills.append(reason)
            killed.set()
        member = memcg.Member(q, "query-1", on_kill=on_kill)
        member.charge(MiB)
        actions = self.ctl.subscribe(types=[memcg.EventType.ACTION])
        server = memcg.Server(self.ctl, address="127.0.0.1", port=0, threads=2,
                              allow_writes=True, token=TOKEN, token_name="ops")
        self.assertIs(server.start(), server)
        port = server.port
        self.assertGreater(port, 0)
        self.assertTrue(server.running)
        self.assertEqual(http(port, "GET", "/healthz"), (200, b"ok\n"))

        status, body = http(port, "GET", "/v1/members?group=t/q")
        self.assertEqual(status, 200)
        listed: Dict[str, Any] = json.loads(body)
        self.assertEqual([(m["id"], m["name"], m["state"]) for m in listed["members"]],
                         [(member.id, "query-1", "running")])

        kill = "/v1/members/%d/kill" % member.id
        self.assertEqual(http(port, "POST", kill)[0], 401)  # no token
        self.assertEqual(http(port, "POST", kill, token="wrong")[0], 403)
        self.assertEqual(kills, [])
        self.assertFalse(member.killed)
        status, body = http(port, "POST", kill, token=TOKEN)
        self.assertIn(status, (200, 202))
        self.assertEqual(json.loads(body)["action"], "kill")
        self.assertTrue(killed.wait(10))
        self.assertEqual(kills, [memcg.CancelReason.OPERATOR])
        self.assertTrue(member.killed)
        self.assertEqual(http(port, "POST", kill, token=TOKEN)[0] // 100, 2)  # idempotent
        self.assertEqual(kills, [memcg.CancelReason.OPERATOR])

        # The action is an event about the member's group.
        event = actions.next(5)
        assert event is not None
        self.assertEqual((event.type, event.group), (memcg.EventType.ACTION, "t/q"))
        self.assertIn("/kill", event.payload)
        self.assertIsInstance(event.data, dict)

        # The audit names the token, never shows it.
        status, body = http(port, "GET", "/v1/audit")
        self.assertEqual(status, 200)
        self.assertIn(b"ops", body)
        self.assertNotIn(TOKEN.encode(), body)

        server.stop()
        self.assertFalse(server.running)
        self.assertEqual(server.port, 0)
        with self.assertRaises(urllib.error.URLError):
            OPENER.open("http://127.0.0.1:%d/healthz" % port, timeout=5)
        server.stop()  # stopped: nothing to do

        # Stopped, it takes new options and starts again: writes off now.
        server.set("allow_writes", False)
        server.start()
        self.assertEqual(http(server.port, "POST", kill, token=TOKEN)[0], 405)
        self.assertEqual(self.ctl.open_handles(), 5)  # t, t/q, the member, subscription, server
        server.close()
        server.close()
        with self.assertRaises(memcg.Closed):
            server.start()
        actions.close()
        member.uncharge(MiB)
        member.close()
        q.close()

    def test_the_unix_socket(self) -> None:
        where = tempfile.mkdtemp(prefix="memcg-py-")
        try:
            path = os.path.join(where, "memcg.sock")
            self.ctl.create_group("t/u")
            with memcg.Server(self.ctl, unix_socket=path, unix_allowed_uids=[os.getuid()],
                              allow_writes=True) as server:
                server.start()
                self.assertEqual(over_unix(path, b"GET /healthz HTTP/1.0\r\n\r\n"), (200, b"ok\n"))
                # The allowed uid writes without a token.
                status, _ = over_unix(path, b"POST /v1/groups/t/u/memory.high HTTP/1.0\r\n"
                                            b"Content-Length: 2\r\n\r\n8M")
                self.assertEqual(status, 200)
                with self.ctl.group("t/u") as u:
                    self.assertEqual(u["memory.high"], "%d\n" % (8 * MiB))
            self.assertFalse(os.path.exists(path))  # stop removed it
        finally:
            shutil.rmtree(where)

    def test_the_controller_closes_its_server(self) -> None:
        ctl = memcg.Controller()
        server = memcg.Server(ctl, port=0).start()
        port = server.port
        self.assertEqual(http(port, "GET", "/healthz")[0], 200)
        self.assertEqual(ctl.open_handles(), 1)
        ctl.close()
        self.assertTrue(server.closed)
        self.assertEqual(ctl.open_handles(), 0)
        self.assertIsNone(ctl._ptr, "the controller was not destroyed")
        with self.assertRaises(urllib.error.URLError):
            OPENER.open("http://127.0.0.1:%d/healthz" % port, timeout=5)
        with self.assertRaises(memcg.Closed):
            memcg.Server(ctl)

    def test_found_beside_libmemcg(self) -> None:
        # An install keeps both libraries in one directory: without MEMCG_HTTP_LIBRARY the
        # endpoint's is found beside libmemcg as loaded, by its SONAME.
        where = tempfile.mkdtemp(prefix="memcg-py-")
        try:
            core = os.path.join(where, memcg.SONAME)
            os.symlink(os.path.realpath(memcg._lib.path() or ""), core)
            os.symlink(os.path.realpath(memcg.http.library_path()),
                       os.path.join(where, memcg.http.SONAME))
            env = dict(os.environ, MEMCG_LIBRARY=core)
            env.pop("MEMCG_HTTP_LIBRARY", None)
            out = subprocess.run(
                [sys.executable, "-c", "import memcg, memcg.http\n"
                 "with memcg.Controller() as c, memcg.Server(c, port=0) as s:\n"
                 "    s.start()\n"
                 "    print(memcg.http.library_path(), s.port > 0)"],
                env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stdout.split(),
                             [os.path.join(where, memcg.http.SONAME), "True"])
        finally:
            shutil.rmtree(where)

    def test_readme_endpoint(self) -> None:
        # The README's endpoint sample is fenced ```py: the packaging checks run the ```python
        # service alone, from packages that may not have the endpoint.
        with open(os.path.join(HERE, "..", "README.md"), encoding="utf-8") as f:
            text = f.read()
        blocks = re.findall(r"```py\n(.*?)```", text, re.S)
        self.assertEqual(len(blocks), 1)
        exec(compile(blocks[0], "README.md", "exec"), {"__name__": "readme"})


class Library(unittest.TestCase):
    def test_missing_library_names_memcg_http_library(self) -> None:
        env = dict(os.environ, MEMCG_HTTP_LIBRARY="/nonexistent/libmemcg_http.so.0.2")
        out = subprocess.run(
            [sys.executable, "-c", "import memcg\nc = memcg.Controller()\nmemcg.Server(c)"],
            env=env, capture_output=True, text=True, timeout=60)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("HttpLibraryNotFound", out.stderr)
        self.assertIn("MEMCG_HTTP_LIBRARY", out.stderr)
        self.assertIn("/nonexistent/libmemcg_http.so.0.2", out.stderr)
        self.assertTrue(issubclass(memcg.HttpLibraryNotFound, memcg.LibraryNotFound))
        self.assertTrue(issubclass(memcg.HttpLibraryNotFound, memcg.MemcgError))

    def test_soname_follows_libmemcgs(self) -> None:
        self.assertEqual(memcg.http.SONAME,
                         memcg.SONAME.replace("libmemcg.so.", "libmemcg_http.so."))


if __name__ == "__main__":
    unittest.main()
