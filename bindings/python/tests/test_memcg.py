"""Tests of the memcg package against the built library (MEMCG_LIBRARY names it):
python3 -m unittest discover -s bindings/python/tests -t bindings/python."""
from __future__ import annotations

import errno
import gc
import os
import re
import threading
import time
import unittest
from typing import List

import memcg

KiB, MiB = 1 << 10, 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def drained(group: memcg.Group) -> int:
    """memory.current of ``group`` once the per-CPU stocks are given back."""
    group._controller.drain()
    return int(group["memory.current"])


class Base(unittest.TestCase):
    def setUp(self) -> None:
        self.errors: List[str] = []
        self.ctl = memcg.Controller(callback_error=lambda e, where: self.errors.append(
            "%s: %s" % (where, e)))
        self.top = self.ctl.create_group("t")

    def tearDown(self) -> None:
        # Every counter back to 0: no charge, no handle.
        self.assertEqual(self.top.keyed("memory.stat")["anon"], 0)
        self.assertEqual(drained(self.top), 0)
        self.ctl.close()
        self.assertEqual(self.ctl.open_handles(), 0)
        self.assertTrue(self.ctl.closed)


class Files(Base):
    def test_by_name(self) -> None:
        g = self.ctl.create_group("t/a")
        g["memory.max"] = "512M"
        self.assertEqual(g["memory.max"], "%d\n" % (512 * MiB))
        g["memory.high"] = 64 * MiB
        self.assertEqual(int(g["memory.high"]), 64 * MiB)
        self.assertEqual(g.path, "t/a")
        self.assertIn("anon", g.keyed("memory.stat"))

    def test_malformed_values_change_nothing(self) -> None:
        g = self.ctl.create_group("t/a")
        g["memory.max"] = "1M"
        for bad in ("lots", "-1", "1Q", "", "1M 2M"):
            with self.assertRaises(memcg.MemcgOSError) as cm:
                g["memory.max"] = bad
            self.assertIn(cm.exception.errno, (errno.EINVAL, errno.ERANGE), bad)
        self.assertEqual(g["memory.max"], "1048576\n")
        with self.assertRaises(memcg.MemcgOSError) as cm:
            g.read("memory.nonsense")
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        with self.assertRaises(ValueError):
            g.read("memory.max\0")
        with self.assertRaises(ValueError):
            g.read(42)  # type: ignore[arg-type]

    def test_set_up_errors(self) -> None:
        with self.assertRaises(memcg.MemcgOSError) as cm:
            self.ctl.create_group("t")
        self.assertEqual(cm.exception.errno, errno.EEXIST)
        with self.assertRaises(memcg.MemcgOSError) as cm:
            self.ctl.create_group("nope/x")
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        with self.assertRaises(memcg.MemcgOSError) as cm:
            self.ctl.group("absent")
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        with self.assertRaises(memcg.MemcgOSError) as cm:
            self.ctl.remove_group("/")
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        with self.assertRaises(ValueError):
            memcg.Member(self.top, "m", score_adj=1001)
        with self.assertRaises(TypeError):
            memcg.Member(self.ctl, "m")  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            memcg.Reservation(None)  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            self.top.charge(-1)
        with self.assertRaises(ValueError):
            self.top.charge(1 << 64)
        with self.assertRaises(memcg.MemcgOSError) as cm:
            self.top.watch_pressure("sideways", lambda *a: None)
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        self.assertEqual(self.ctl.open_handles(), 1)  # the group of setUp, nothing leaked


class Handles(Base):
    def test_closed_and_double_close(self) -> None:
        g = self.ctl.create_group("t/a")
        m = memcg.Member(g, "m")
        r = m.reservation()
        r.reserve(64 * KiB)
        m.close()  # closes its reservation first, which gives the bytes back
        m.close()
        self.assertTrue(r.closed)
        for call in (lambda: r.grow(1), lambda: m.charge(1), lambda: r.nbytes, lambda: m.killed):
            with self.assertRaises(memcg.Closed):
                call()
        with self.assertRaises(memcg.Closed):
            m.reservation()
        g.close()
        with self.assertRaises(memcg.Closed):
            g["memory.max"]
        self.assertEqual(self.ctl.open_handles(), 1)

    def test_controller_close_closes_everything(self) -> None:
        ctl = memcg.Controller()
        g = ctl.create_group("a")
        m = memcg.Member(g, "m")
        r = m.reservation()
        r.reserve(MiB)
        listener = g.watch_events(lambda *a: None)
        self.assertEqual(ctl.open_handles(), 4)
        ctl.close()
        self.assertTrue(all(h.closed for h in (g, m, r, listener)))
        self.assertEqual(ctl.open_handles(), 0)
        with self.assertRaises(memcg.Closed):
            ctl.create_group("b")
        ctl.close()

    def test_forgotten_handles_are_freed_by_the_collector(self) -> None:
        g = self.ctl.create_group("t/a")
        m = memcg.Member(g, "m")
        m.reservation().reserve(MiB)  # the reservation object is dropped at once
        gc.collect()
        self.assertEqual(m.charged_bytes, 0)
        del m, g
        gc.collect()
        self.assertEqual(self.ctl.open_handles(), 1)


class Refusals(Base):
    def test_status_exceptions_name_the_limiting_group(self) -> None:
        self.top["memory.max"] = "1M"
        child = self.ctl.create_group("t/c")
        child["memory.max"] = "4M"
        with memcg.Reservation(child) as r:
            with self.assertRaises(memcg.NeverFits) as cm:
                r.reserve(2 * MiB)
            self.assertEqual(cm.exception.group, "t/c")
            self.assertEqual(cm.exception.limiting_group, "t")
            self.assertEqual(r.nbytes, 0)
            r.reserve(768 * KiB)
            with self.assertRaises(memcg.TimedOut) as cm:
                memcg.Reservation(child).reserve(512 * KiB, timeout=0.05)
            self.assertEqual(cm.exception.limiting_group, "t")
            deadline = self.ctl.now_ns() + 50_000_000
            with memcg.Reservation(child) as other, self.assertRaises(memcg.TimedOut):
                other.reserve(512 * KiB, deadline_ns=deadline)
            with self.assertRaises(memcg.MemoryLimit) as mc:
                child.charge(512 * KiB)
            self.assertEqual(mc.exception.limiting_group, "t")
            with self.assertRaises(memcg.InvalidRequest):
                r.reserve((1 << 64) - 1)
            with self.assertRaises(ValueError):
                r.reserve(1, timeout=-1)

    def test_cancel_from_another_thread(self) -> None:
        self.top["memory.max"] = "1M"
        with memcg.Reservation(self.top) as held, memcg.Reservation(self.top) as waiting:
            held.reserve(MiB)
            threading.Timer(0.05, waiting.cancel).start()
            started = time.monotonic()
            with self.assertRaises(memcg.Cancelled) as cm:
                waiting.reserve(512 * KiB, timeout=10)
            self.assertLess(time.monotonic() - started, 5)
            self.assertIsNone(cm.exception.limiting_group)


class Callbacks(Base):
    def crowd(self, victim: memcg.Member, group: memcg.Group) -> memcg.Reservation:
        """Fills ``group`` with ``victim``'s charge, then asks for room as another member."""
        victim.charge(768 * KiB)
        other = memcg.Member(group, "other")
        r = other.reservation(oom=memcg.OomPolicy.PIECES)
        r.reserve(512 * KiB)
        return r

    def test_a_raising_kill_callback_is_reported_not_propagated(self) -> None:
        g = self.ctl.create_group("t/a")
        g["memory.max"] = "1M"

        calls = []

        def on_kill(member: memcg.Member, reason: memcg.CancelReason) -> None:
            calls.append(reason)
            raise RuntimeError("boom in " + member.name)
        victim = memcg.Member(g, "victim", 1000, on_kill)
        with self.assertRaises(memcg.MemcgError):
            self.crowd(victim, g)  # the victim kept its memory: the request is refused
        self.assertTrue(victim.killed)
        # One report per call (a victim that keeps its memory may be chosen again).
        self.assertGreaterEqual(len(calls), 1)
        self.assertEqual(self.ctl.callback_errors, len(calls))
        self.assertEqual(len(self.errors), len(calls))
        self.assertIn("boom in victim", self.errors[0])

    def test_a_kill_callback_closing_its_member(self) -> None:
        g = self.ctl.create_group("t/a")
        g["memory.max"] = "1M"
        victim = memcg.Member(g, "victim", 1000, lambda m, reason: m.close())
        held = victim.reservation()
        r = self.crowd(victim, g)
        self.assertTrue(victim.closed and held.closed)
        self.assertEqual(r.nbytes, 512 * KiB)

    def test_a_kill_callback_closing_the_member_whose_call_runs(self) -> None:
        # The runaway is its own victim: the close waits for its reserve to return.
        g = self.ctl.create_group("t/a")
        g["memory.max"] = "1M"
        seen = []

        def on_kill(member: memcg.Member, reason: memcg.CancelReason) -> None:
            seen.append(reason)
            member.close()
            self.assertTrue(member.closed)
        runaway = memcg.Member(g, "runaway", 1000, on_kill)
        runaway.charge(512 * KiB)
        r = runaway.reservation(oom=memcg.OomPolicy.PIECES)
        with self.assertRaises((memcg.Killed, memcg.MemoryLimit)):
            r.reserve(768 * KiB)
        self.assertEqual(seen, [memcg.CancelReason.OOM_KILL])
        self.assertTrue(runaway.closed and r.closed)
        self.assertEqual(self.ctl.open_handles(), 2)  # t and t/a: member and reservation freed

    def test_a_listener_closing_itself(self) -> None:
        g = self.ctl.create_group("t/a")
        g["memory.max"] = "256K"
        done = threading.Event()
        calls = []

        def on_event(listener: memcg.Listener, value: int, removed: bool) -> None:
            calls.append(value)
            listener.close()
            done.set()
        listener = g.watch_events(on_event)
        with self.assertRaises(memcg.MemoryLimit):
            g.charge(MiB)  # a "max" event
        self.assertTrue(done.wait(10))
        self.assertTrue(listener.closed)
        time.sleep(0.05)
        self.assertEqual(calls, [0])
        with self.assertRaises(memcg.Closed):
            listener.delivered

    def test_a_raising_listener(self) -> None:
        g = self.ctl.create_group("t/a")
        g["memory.max"] = "256K"
        done = threading.Event()
        calls = []

        def on_event(listener: memcg.Listener, value: int, removed: bool) -> None:
            calls.append(value)
            done.set()
            raise ValueError("listener fails")
        with g.watch_events(on_event):
            with self.assertRaises(memcg.MemoryLimit):
                g.charge(MiB)
            self.assertTrue(done.wait(10))
            for _ in range(100):
                if self.ctl.callback_errors:
                    break
                time.sleep(0.01)
        # Closed: no call runs any more; one report per notification it got.
        self.assertGreaterEqual(len(calls), 1)
        self.assertEqual(self.ctl.callback_errors, len(calls))
        self.assertIn("listener fails", self.errors[0])


class Service(Base):
    def test_threads_and_a_runaway_that_is_killed(self) -> None:
        """Eight workers in four tenants reserve, wait with deadlines and grow, while a runaway
        grows until the OOM killer takes it; then every byte and handle is back."""
        self.top["memory.max"] = "16M"
        tenants = []
        for i in range(4):
            t = self.ctl.create_group("t/%d" % i)
            t["memory.max"] = "6M"
            tenants.append(t)
        killed = threading.Event()

        def on_kill(member: memcg.Member, reason: memcg.CancelReason) -> None:
            member.close()
            killed.set()
        runaway = memcg.Member(tenants[0], "runaway", 1000, on_kill)
        failures: List[BaseException] = []
        refusals = [0]
        lock = threading.Lock()

        def worker(tenant: memcg.Group, n: int) -> None:
            try:
                with memcg.Member(tenant, "w%d" % n) as me:
                    # At least 30 requests, and on until the runaway is killed (bounded).
                    stop, count = time.monotonic() + 30, 0
                    while count < 30 or (not killed.is_set() and time.monotonic() < stop):
                        count += 1
                        if me.killed:
                            return  # the OOM killer may choose a worker too: it stops
                        with me.reservation(oom=memcg.OomPolicy.PIECES) as r:
                            try:
                                r.reserve(512 * KiB, timeout=0.2)  # waits, never kills
                            except memcg.Refused:
                                with lock:
                                    refusals[0] += 1
                            try:
                                r.grow(MiB)  # may run the OOM killer
                            except memcg.Refused:
                                with lock:
                                    refusals[0] += 1
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        def run_away() -> None:
            try:
                stop = time.monotonic() + 30
                with runaway.reservation(oom=memcg.OomPolicy.NEVER) as r:
                    while not killed.is_set() and time.monotonic() < stop:
                        try:
                            r.grow(256 * KiB)
                        except (memcg.MemoryLimit, memcg.NeverFits):
                            time.sleep(0.001)
            except (memcg.Killed, memcg.Closed):
                pass
            except BaseException as exc:  # noqa: BLE001
                failures.append(exc)

        threads = [threading.Thread(target=run_away)]
        threads += [threading.Thread(target=worker, args=(tenants[i % 4], i)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
            self.assertFalse(t.is_alive())
        self.assertEqual(failures, [])
        self.assertTrue(killed.is_set())
        self.assertTrue(runaway.closed)
        self.assertGreaterEqual(tenants[0].keyed("memory.events")["oom_kill"], 1)
        self.assertEqual(self.errors, [])
        self.assertEqual(self.ctl.open_handles(), 5)


class Packaging(unittest.TestCase):
    def test_soname_is_the_builds(self) -> None:
        expected = os.environ.get("MEMCG_EXPECTED_SONAME")
        if not expected:
            self.skipTest("MEMCG_EXPECTED_SONAME not set (run by ctest)")
        self.assertEqual(memcg.SONAME, expected)

    def test_readme_service(self) -> None:
        with open(os.path.join(HERE, "..", "README.md"), encoding="utf-8") as f:
            text = f.read()
        code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})


if __name__ == "__main__":
    unittest.main()
