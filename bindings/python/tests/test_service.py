"""The service calls (drain, statistics, the group list, the OOM log, scores, grow until a
deadline, charges that never sleep), text refused or bounded, the exceptions' standard bases,
and the lifetimes of callbacks and of handles made while their owner closes."""
from __future__ import annotations

import errno
import gc
import sys
import threading
import time
import unittest

import memcg
from memcg import _lib

from .test_memcg import Base, KiB, MiB


class Service(Base):
    def test_drain_makes_current_zero(self) -> None:
        g = self.ctl.create_group("t/a")
        with memcg.Member(g, "m") as m, m.reservation() as r:
            r.reserve(256 * KiB)
            with g.charged(8 * KiB):
                pass
        self.assertNotEqual(int(self.top["memory.current"]), 0, "the stock was not used")
        self.ctl.drain()
        self.assertEqual(int(self.top["memory.current"]), 0)
        self.assertEqual(int(g["memory.current"]), 0)
        # memory.reclaim drains too, but answers EAGAIN when nothing was reclaimable.
        with g.charged(8 * KiB):
            pass
        with self.assertRaises(memcg.MemcgOSError) as cm:
            g["memory.reclaim"] = "1M"
        self.assertEqual(cm.exception.errno, errno.EAGAIN)
        self.assertIsInstance(cm.exception, BlockingIOError)
        self.assertEqual(int(g["memory.current"]), 0)

    def test_flush_stats_list_and_score(self) -> None:
        b = self.ctl.create_group("t/b")
        a = self.ctl.create_group("t/a")
        self.ctl.create_group("t/a/x")
        self.assertEqual(self.top.list(), ["t/a", "t/a/x", "t/b"])
        with self.ctl.group("/") as root:
            self.assertEqual(root.list(), ["t", "t/a", "t/a/x", "t/b"])
        self.assertEqual(b.list(), [])
        with a.charged(64 * KiB):
            self.ctl.flush_stats()
            self.assertEqual(a.keyed("memory.stat")["anon"], 64 * KiB)
        self.ctl.flush_stats()
        self.assertEqual(a.keyed("memory.stat")["anon"], 0)
        with memcg.Member(b, "m", 100) as m:
            self.assertEqual(m.score_adj, 100)
            m.score_adj = -1000
            self.assertEqual(m.score_adj, -1000)
            with self.assertRaises(ValueError):
                m.score_adj = 1001
            self.assertEqual(m.score_adj, -1000)
        self.ctl.remove_group("t/a/x")
        self.assertEqual(self.top.list(), ["t/a", "t/b"])

    def test_oom_log(self) -> None:
        g = self.ctl.create_group("t/a")
        g["memory.max"] = "1M"
        self.assertEqual(self.ctl.oom_log_last_seq(), 0)
        self.assertEqual(self.ctl.oom_log(), [])
        victim = memcg.Member(g, "victim", 1000, lambda m, reason: m.close())
        victim.charge(768 * KiB)
        other = memcg.Member(g, "other")
        with other.reservation(oom=memcg.OomPolicy.PIECES) as r:
            r.reserve(512 * KiB)
        seq = self.ctl.oom_log_last_seq()
        log = self.ctl.oom_log()
        self.assertGreater(seq, 0)
        self.assertIn("victim=victim", log[-1])
        self.assertEqual(self.ctl.oom_log(seq), [])
        other.close()

    def test_grow_until_and_nowait(self) -> None:
        g = self.ctl.create_group("t/a")
        g["memory.max"] = "1M"
        with memcg.Reservation(g, oom=memcg.OomPolicy.NEVER) as r, g.charged(512 * KiB):
            r.grow(256 * KiB, deadline_ns=self.ctl.now_ns() + 10**9)
            start = time.monotonic()
            with self.assertRaises(memcg.TimedOut):  # would fit were the charge given back
                r.grow(512 * KiB, deadline_ns=self.ctl.now_ns() + 50 * 10**6)
            self.assertGreater(time.monotonic() - start, 0.04)
            # NOWAIT: refused at once at the limit.
            start = time.monotonic()
            with self.assertRaises(memcg.MemoryLimit):
                g.charge(512 * KiB, memcg.ChargeFlags.NOWAIT)
            self.assertLess(time.monotonic() - start, 1.0)
            r.shrink()
            with g.charged(64 * KiB, memcg.ChargeFlags.NOWAIT):
                pass

    def test_nul_refused_and_messages_bounded(self) -> None:
        g = self.ctl.create_group("t/a")
        g["memory.max"] = "1G"
        for call in (lambda: g.write("memory.max", "1\0G"),
                     lambda: self.ctl.create_group("t/evil\0suffix"),
                     lambda: memcg.Member(g, "m\0")):
            with self.assertRaises(ValueError):
                call()
        self.assertEqual(g["memory.max"], "1073741824\n")
        with self.assertRaises(memcg.MemcgOSError):
            self.ctl.group("t/evil")
        with self.assertRaises(memcg.MemcgOSError) as cm:
            g["memory.max"] = "7" * (1 << 20)
        self.assertLess(len(str(cm.exception)), 300)
        self.assertIn('"...', str(cm.exception))

    def test_standard_exception_bases(self) -> None:
        with self.assertRaises(FileNotFoundError):
            self.ctl.group("absent")
        with self.assertRaises(FileExistsError):
            self.ctl.create_group("t")
        with self.assertRaises(ValueError):
            self.ctl.remove_group("/")
        self.assertTrue(issubclass(memcg.TimedOut, TimeoutError))
        g = self.ctl.create_group("t/a")
        g["memory.max"] = "256K"
        with g.charged(192 * KiB), memcg.Reservation(g) as r, self.assertRaises(TimeoutError):
            r.reserve(128 * KiB, timeout=0.01)

    def test_pyproject_version_is_the_librarys(self) -> None:
        import os
        import re
        with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "pyproject.toml")) as f:
            version = re.search(r'^version = "([^"]+)"$', f.read(), re.M)
        self.assertIsNotNone(version)
        self.assertEqual(version.group(1), self.ctl.version())  # type: ignore[union-attr]

    def test_library_missing_names_memcg_library(self) -> None:
        import os
        import subprocess
        env = dict(os.environ, MEMCG_LIBRARY="/nonexistent/libmemcg.so.0.2")
        out = subprocess.run([sys.executable, "-c", "import memcg; memcg.Controller()"],
                             env=env, capture_output=True, text=True, timeout=60)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("LibraryNotFound", out.stderr)
        self.assertIn("MEMCG_LIBRARY", out.stderr)


class Lifetimes(Base):
    def test_callbacks_go_through_ids(self) -> None:
        before = _lib.registered()
        calls = []
        g = self.ctl.create_group("t/a")
        m = memcg.Member(g, "m", on_kill=lambda member, reason: calls.append(reason))
        listener = g.watch_events(lambda *a: None)
        self.assertEqual(_lib.registered(), before + 2)
        cid = m._cid
        _lib._kill(None, 0, cid)  # what C does: the module's thunk, the id as user data
        self.assertEqual(calls, [memcg.CancelReason.OOM_KILL])
        m.close()
        listener.close()
        self.assertEqual(_lib.registered(), before)
        _lib._kill(None, 0, cid)  # a call after the close: nothing runs
        self.assertEqual(calls, [memcg.CancelReason.OOM_KILL])

    def test_kill_callbacks_racing_close_and_the_collector(self) -> None:
        # Kills on one thread while another closes and drops the members and collects: each
        # callback either runs for its own member or not at all (the old per-member thunk was
        # freed under a call: C then called unrelated Python functions, or crashed).
        g = self.ctl.create_group("t/a")
        g["memory.max"] = "512K"
        wrong = []
        stop = time.monotonic() + 2.0
        lock = threading.Lock()
        members = []

        def make(i: int) -> memcg.Member:
            def on_kill(member: memcg.Member, reason: memcg.CancelReason) -> None:
                if member.name != "m%d" % i:
                    wrong.append((member.name, i))
                member.uncharge(1 << 40)
            return memcg.Member(g, "m%d" % i, 1000, on_kill)

        def closer() -> None:
            i = 0
            while time.monotonic() < stop:
                m = make(i)
                try:
                    m.charge(64 * KiB)
                except memcg.Refused:
                    pass
                with lock:
                    members.append(m)
                    old = members.pop(0) if len(members) > 4 else None
                if old is not None:
                    old.close()
                del old, m
                if i % 8 == 0:
                    gc.collect()
                i += 1

        # A freed thunk reused by another one shows as an exception "ignored on calling ctypes
        # callback function" (seen: WeakSet._remove() called with the kill callback's three
        # arguments): collect those.
        unraisable = []
        hook = sys.unraisablehook
        sys.unraisablehook = lambda u: unraisable.append("%s: %s" % (u.exc_type, u.exc_value))
        try:
            t = threading.Thread(target=closer)
            t.start()
            other = memcg.Member(g, "other", -1000)
            while time.monotonic() < stop:
                try:
                    with other.reservation(oom=memcg.OomPolicy.PIECES) as r:
                        r.reserve(480 * KiB)
                except memcg.Refused:
                    pass
            t.join(30)
        finally:
            sys.unraisablehook = hook
        self.assertFalse(t.is_alive())
        self.assertEqual(wrong, [])
        self.assertEqual(unraisable, [])
        for m in members:
            m.close()
        other.close()
        self.assertEqual(self.ctl.open_handles(), 2)

    def test_controller_close_racing_creation(self) -> None:
        # Children made while the controller closes are freed too (the old code leaked one
        # whose close came before its C handle existed, and with it the controller).
        for i in range(40):
            ctl = memcg.Controller()
            top = ctl.create_group("t")
            m = memcg.Member(top, "m")
            made = []

            def make() -> None:
                for _ in range(40):
                    for fn in (lambda: ctl.group("t"), m.reservation,
                               lambda: memcg.Member(top, "x")):
                        try:
                            made.append(fn())
                        except memcg.Closed:
                            pass
            t = threading.Thread(target=make)
            t.start()
            time.sleep((i % 5) * 0.0002)
            ctl.close()
            t.join(30)
            self.assertTrue(all(h.closed for h in made))
            self.assertEqual(ctl.open_handles(), 0, "round %d" % i)
            self.assertIsNone(ctl._ptr, "round %d: the controller was not destroyed" % i)

    def test_member_close_racing_reservation_creation(self) -> None:
        # A reservation made while its member closes is closed with it (none left open).
        g = self.ctl.create_group("t/a")
        for i in range(40):
            m = memcg.Member(g, "m")
            made = []

            def make() -> None:
                for _ in range(40):
                    try:
                        made.append(m.reservation())
                    except memcg.Closed:
                        pass
            t = threading.Thread(target=make)
            t.start()
            time.sleep((i % 5) * 0.0002)
            m.close()
            t.join(30)
            self.assertTrue(all(r.closed for r in made), "round %d" % i)
            self.assertEqual(self.ctl.open_handles(), 2, "round %d" % i)


if __name__ == "__main__":
    unittest.main()
