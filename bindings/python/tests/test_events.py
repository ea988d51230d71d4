"""The controller's event stream in-process (Controller.subscribe): groups created and removed,
memory.events raised by a charge at memory.max, filters by subtree and type, resuming after an
id, the program's own events, a lagging subscriber dropped with its reason, close from another
thread, and bad arguments refused with nothing made."""
from __future__ import annotations

import errno
import threading
import time
import unittest
from typing import List, Optional

import memcg
from memcg import _lib

from .test_memcg import Base, KiB


def expect(sub: memcg.Subscription, kind: memcg.EventType, group: str,
           timeout: float = 5.0) -> memcg.Event:
    """The next event of ``sub`` of ``kind`` about ``group``, passing over others."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        event = sub.next(max(left, 0))
        if event is None:
            raise AssertionError("no %s event of %s within %.1f s" % (kind.label, group, timeout))
        if event.type == kind and event.group == group:
            return event


class Stream(Base):
    def test_groups_created_and_removed(self) -> None:
        with self.ctl.subscribe() as sub:
            self.assertIsNone(sub.next(0))  # nothing yet
            started = time.time_ns()
            a = self.ctl.create_group("t/a")
            self.ctl.create_group("t/b").close()
            created = expect(sub, memcg.EventType.GROUP_CREATED, "t/a")
            self.assertGreaterEqual(created.time_ns, started - 10**9)
            self.assertLess(created.time_ns, time.time_ns() + 10**9)
            self.assertEqual(created.data, {})
            after = expect(sub, memcg.EventType.GROUP_CREATED, "t/b")
            self.assertGreater(after.id, created.id)
            self.ctl.remove_group("t/b")
            removed = expect(sub, memcg.EventType.GROUP_REMOVED, "t/b")
            self.assertGreater(removed.id, after.id)
            self.assertEqual(sub.cursor, removed.id)
            self.assertIsNone(sub.drop_reason)
            self.assertEqual(self.ctl.open_handles(), 3)  # t, t/a and the subscription
        self.assertEqual(self.ctl.open_handles(), 2)
        a.close()

    def test_memory_events_and_the_filters(self) -> None:
        a = self.ctl.create_group("t/a")
        subs = [self.ctl.subscribe("t/a"), self.ctl.subscribe(a),
                self.ctl.subscribe(types=[memcg.EventType.MEMORY_EVENT]),
                self.ctl.subscribe("/", types="memory_event")]
        self.ctl.create_group("t/b")
        ax = self.ctl.create_group("t/a/x")
        # memory.max holds the second charge: a "max" event. A charge that may sleep and fail
        # (with MAY_BLOCK, RETRY_MAY_FAIL) reaches the limit's event.
        ax["memory.max"] = "64K"
        may_fail = memcg.ChargeFlags.MAY_BLOCK | memcg.ChargeFlags.RETRY_MAY_FAIL
        with ax.charged(48 * KiB, may_fail):
            with self.assertRaises(memcg.MemoryLimit):
                ax.charge(48 * KiB, may_fail)
        for sub in subs[:2]:
            # The subtree: t/a/x created, then its memory event; never t/b.
            first = sub.next(5)
            assert first is not None
            self.assertEqual((first.type, first.group), (memcg.EventType.GROUP_CREATED, "t/a/x"))
            event = expect(sub, memcg.EventType.MEMORY_EVENT, "t/a/x")
            self.assertEqual(event.data["counter"], "max")
            while True:
                other = sub.next(0.1)
                if other is None:
                    break
                self.assertTrue(other.group.startswith("t/a"), other)
        for sub in subs[2:]:
            # The type: memory events only, the first about t/a/x's max.
            event = sub.next(5)
            assert event is not None
            self.assertEqual(event.type, memcg.EventType.MEMORY_EVENT)
            self.assertEqual(event.group, "t/a/x")
            self.assertEqual(event.data["counter"], "max")
            self.assertGreaterEqual(event.data["value"], 1)
        for sub in subs:
            sub.close()

    def test_resume_after_an_id(self) -> None:
        with self.ctl.subscribe() as sub:
            self.ctl.create_group("t/a")
            self.ctl.create_group("t/b")
            self.ctl.create_group("t/c")
            first = expect(sub, memcg.EventType.GROUP_CREATED, "t/a")
        with self.ctl.subscribe(after_id=first.id) as resumed:
            events = [resumed.next(5), resumed.next(5)]
            self.assertEqual([(e.type, e.group) for e in events if e is not None],
                             [(memcg.EventType.GROUP_CREATED, "t/b"),
                              (memcg.EventType.GROUP_CREATED, "t/c")])
            self.assertEqual(resumed.cursor, events[1].id)  # type: ignore[union-attr]
        # An id the ring never held: a gap event first, whatever the type filter.
        with self.ctl.subscribe(types=["oom"], after_id=1) as gapped:
            gap = gapped.next(5)
            assert gap is not None
            self.assertEqual(gap.type, memcg.EventType.GAP)
            self.assertIn("reason", gap.data)

    def test_publish_the_programs_own_events(self) -> None:
        # Nothing subscribes: the stream records nothing.
        self.assertEqual(self.ctl.publish(memcg.EventType.ACTION, None, {"what": "x"}), 0)
        with self.ctl.subscribe(types=["action", "budget"]) as sub:
            mine = self.ctl.publish("action", "t", {"what": "drain", "bytes": 3})
            self.assertNotEqual(mine, 0)
            event = sub.next(5)
            assert event is not None
            self.assertEqual((event.id, event.type, event.group),
                             (mine, memcg.EventType.ACTION, "t"))
            self.assertEqual(event.data, {"what": "drain", "bytes": 3})
            budget = self.ctl.publish(memcg.EventType.BUDGET, "/", ' {"state":"reached"} ')
            event = sub.next(5)
            assert event is not None
            self.assertEqual((event.id, event.group, event.payload),
                             (budget, "/", '{"state":"reached"}'))
            self.assertEqual(self.ctl.publish(memcg.EventType.ACTION, self.top, "{}"), budget + 1)

    def test_a_lagging_subscriber_is_dropped(self) -> None:
        with self.ctl.subscribe(max_lag=8) as slow:
            for i in range(64):
                self.assertNotEqual(self.ctl.publish("action", None, {"i": i}), 0)
            # The stream drops it on its own thread: events taken before may come first.
            dropped: Optional[memcg.SubscriptionDropped] = None
            deadline = time.monotonic() + 10
            while dropped is None and time.monotonic() < deadline:
                try:
                    slow.next(0.05)
                except memcg.SubscriptionDropped as exc:
                    dropped = exc
            assert dropped is not None, "not dropped"
            self.assertEqual(dropped.reason, "lagging")
            self.assertIn("lagging", str(dropped))
            self.assertEqual(slow.drop_reason, "lagging")
            with self.assertRaises(memcg.SubscriptionDropped):
                slow.next(0)  # and again
            self.assertEqual(slow.cursor, dropped.cursor)
        # Resuming after its cursor: the ring still holds what it missed.
        with self.ctl.subscribe(after_id=dropped.cursor) as again:
            event = again.next(5)
            assert event is not None
            self.assertEqual(event.id, dropped.cursor + 1)
            self.assertEqual(event.type, memcg.EventType.ACTION)

    def test_close_from_another_thread_wakes_next(self) -> None:
        sub = self.ctl.subscribe()
        outcome: List[str] = []

        def wait() -> None:
            try:
                sub.next(None)
                outcome.append("event")
            except memcg.Closed:
                outcome.append("closed")
        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.1)
        started = time.monotonic()
        sub.close()
        t.join(10)
        self.assertFalse(t.is_alive())
        self.assertLess(time.monotonic() - started, 5)
        self.assertEqual(outcome, ["closed"])
        with self.assertRaises(memcg.Closed):
            sub.next(0)
        with self.assertRaises(memcg.Closed):
            sub.cursor
        sub.close()
        self.assertEqual(self.ctl.open_handles(), 1)

    def test_iteration_ends_at_close(self) -> None:
        sub = self.ctl.subscribe(types=["group_created"])
        seen: List[str] = []

        def follow() -> None:
            for event in sub:
                seen.append(event.group)
        t = threading.Thread(target=follow)
        t.start()
        for name in ("t/a", "t/b", "t/c"):
            self.ctl.create_group(name)
        deadline = time.monotonic() + 10
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        sub.close()
        t.join(10)
        self.assertFalse(t.is_alive())
        self.assertEqual(seen, ["t/a", "t/b", "t/c"])

    def test_controller_close_closes_and_wakes(self) -> None:
        ctl = memcg.Controller()
        sub = ctl.subscribe()
        woke = threading.Event()

        def wait() -> None:
            try:
                sub.next(None)
            except memcg.Closed:
                woke.set()
        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.05)
        self.assertEqual(ctl.open_handles(), 1)
        ctl.close()
        t.join(10)
        self.assertTrue(woke.is_set())
        self.assertTrue(sub.closed)
        self.assertEqual(ctl.open_handles(), 0)
        self.assertIsNone(ctl._ptr, "the controller was not destroyed")
        with self.assertRaises(memcg.Closed):
            ctl.subscribe()

    def test_next_waits_its_timeout(self) -> None:
        with self.ctl.subscribe() as sub:
            started = time.monotonic()
            self.assertIsNone(sub.next(0.2))
            self.assertGreaterEqual(time.monotonic() - started, 0.19)
            # A second thread's next() waits for the first one's.
            t = threading.Thread(target=sub.next, args=(0.5,))
            t.start()
            time.sleep(0.05)
            started = time.monotonic()
            self.assertIsNone(sub.next(0.05))
            self.assertLess(time.monotonic() - started, 0.4)
            t.join(10)

    def test_bad_arguments_make_nothing(self) -> None:
        for kwargs in ({"types": []}, {"types": ["nope"]}, {"types": [memcg.EventType.OOM, "Oom"]},
                       {"types": 42}, {"types": [True]}, {"types": object()},
                       {"after_id": -1}, {"after_id": 1 << 64}, {"max_lag": -1},
                       {"max_lag": True}, {"max_lag": 1.5}, {"subtree": "t\0a"},
                       {"subtree": 7}):
            with self.assertRaises(ValueError, msg=str(kwargs)):
                self.ctl.subscribe(**kwargs)  # type: ignore[arg-type]
        for subtree in ("../x", "a b", "t//a"):
            with self.assertRaises(memcg.InvalidArgument, msg=subtree) as cm:
                self.ctl.subscribe(subtree)
            self.assertEqual(cm.exception.errno, errno.EINVAL)
            self.assertIn(subtree, str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            self.ctl.subscribe(types=["nope"])
        self.assertIn("memory_event", str(cm.exception))  # the message names the known types
        self.assertEqual(self.ctl.open_handles(), 1)
        with self.ctl.subscribe() as sub:
            for timeout in (-1, float("nan"), "1", True):
                with self.assertRaises(ValueError):
                    sub.next(timeout)  # type: ignore[arg-type]
            for call in (lambda: self.ctl.publish("nope", None, {}),
                         lambda: self.ctl.publish(99, None, {}),
                         lambda: self.ctl.publish("action", None, "not json"),
                         lambda: self.ctl.publish("action", None, "[1, 2]"),
                         lambda: self.ctl.publish("action", None, '{"a":\n1}'),
                         lambda: self.ctl.publish("action", None, '{"a": NaN}'),
                         lambda: self.ctl.publish("action", None, {"a": float("nan")}),
                         lambda: self.ctl.publish("action", None, 42),
                         lambda: self.ctl.publish("action", "t\0", {})):
                with self.assertRaises(ValueError):
                    call()  # type: ignore[no-untyped-call]
            with self.assertRaises(FileNotFoundError):
                self.ctl.publish("action", "no/such", {})
            self.assertIsNone(sub.next(0))  # nothing was published
        self.assertEqual(self.ctl.open_handles(), 1)

    def test_the_librarys_names(self) -> None:
        lib = _lib.load()
        for kind in memcg.EventType:
            self.assertEqual(lib.memcg_event_type_name(int(kind)).decode(), kind.label)
            self.assertEqual(lib.memcg_event_type_from_name(kind.label.encode()), int(kind))
            self.assertIs(memcg.EventType.from_label(kind.label), kind)
        self.assertEqual(lib.memcg_event_type_name(len(memcg.EventType)), b"unknown")
        self.assertEqual([lib.memcg_drop_reason_name(i) for i in range(4)],
                         [b"none", b"lagging", b"overrun", b"closed"])

    def test_member_ids(self) -> None:
        g = self.ctl.create_group("t/a")
        with memcg.Member(g, "m1") as m1, memcg.Member(g, "m2") as m2:
            self.assertGreater(m1.id, 0)
            self.assertNotEqual(m1.id, m2.id)
            ids = (m1.id, m2.id)
        with memcg.Member(g, "m3") as m3:
            self.assertNotIn(m3.id, ids)  # never reused
        with self.assertRaises(memcg.Closed):
            m1.id


if __name__ == "__main__":
    unittest.main()
