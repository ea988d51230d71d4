//! The event stream in-process: groups created and removed, memory.events raised by a charge
//! meeting memory.max, subtree and type filters, resuming after an id, the program's own
//! events, a lagging subscriber dropped with its reason, close waking a waiting thread, two
//! threads taking turns, bad arguments refused. Every wait is bounded.
use memcg::*;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

const KIB: u64 = 1 << 10;
const WAIT: Duration = Duration::from_secs(5);

/// The next event of `sub` of `kind` about `group`, passing over others; fails after WAIT.
fn expect(sub: &Subscription, kind: EventKind, group: &str) -> Event {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match sub.next(left) {
            Ok(Some(e)) if e.kind == kind && e.group == group => return e,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("no {kind} event about {group} within {WAIT:?}"),
            Err(e) => panic!("waiting for {kind} about {group}: {e}"),
        }
    }
}

fn all() -> SubscribeOptions {
    SubscribeOptions::new()
}

#[test]
fn groups_memory_events_filters_and_resume() {
    let ctl = Controller::new().unwrap();
    let every = ctl.subscribe(&all()).unwrap();
    let under_a = ctl.subscribe(&all().subtree("a")).unwrap();
    let max_only = ctl
        .subscribe(&all().subtree("/").kinds([EventKind::MemoryEvent]))
        .unwrap();
    assert_eq!(every.next(Duration::ZERO).unwrap(), None); // nothing yet
    assert_eq!(ctl.open_handles(), 3); // subscriptions are handles

    let a = ctl.create_group("a").unwrap();
    let b = ctl.create_group("b").unwrap();
    let ax = ctl.create_group("a/x").unwrap();
    let first = expect(&every, EventKind::GroupCreated, "a");
    assert!(first.time_ns > 0);
    let age = std::time::SystemTime::now()
        .duration_since(first.time())
        .unwrap();
    assert!(age < Duration::from_secs(60), "{age:?}");
    assert!(first.payload.starts_with('{'), "{}", first.payload);
    let second = expect(&every, EventKind::GroupCreated, "b");
    assert!(second.id > first.id);
    expect(&every, EventKind::GroupCreated, "a/x");

    // The subtree: "a" and "a/x", never "b".
    let got: Vec<String> = under_a.try_iter().map(|e| e.unwrap().group).collect();
    assert_eq!(got, ["a", "a/x"]);

    // memory.events "max": a charge that meets memory.max (one that may fail, not the OOM
    // killer); the kind filter lets it through and not the group creations.
    let may_fail = flags::MAY_BLOCK | flags::RETRY_MAY_FAIL;
    ax.write("memory.max", "64K").unwrap();
    ax.charge(48 * KIB, may_fail).unwrap();
    let e = ax.charge(48 * KIB, may_fail).unwrap_err();
    assert_eq!(e.status(), Some(Status::NoMem));
    ax.uncharge(48 * KIB);
    let max = max_only.next(WAIT).unwrap().expect("a memory_event");
    assert_eq!(max.kind, EventKind::MemoryEvent);
    assert_eq!(max.group, "a/x");
    assert!(
        max.payload.contains("\"counter\":\"max\""),
        "{}",
        max.payload
    );
    assert_eq!(max_only.cursor(), max.id);

    // Resuming after the first event: the ring still holds the rest, in order.
    let resumed = ctl.subscribe(&all().after(first.id)).unwrap();
    let e = resumed.next(WAIT).unwrap().unwrap();
    assert_eq!((e.kind, e.group.as_str()), (EventKind::GroupCreated, "b"));
    assert_eq!(e, second);
    assert_eq!(resumed.cursor(), e.id);

    // The program's own events.
    let mine = ctl
        .publish(EventKind::Action, "a", "{\"what\":\"drain\"}")
        .unwrap()
        .expect("the stream is on");
    let e = expect(&under_a, EventKind::Action, "a");
    assert_eq!(e.id, mine);
    assert_eq!(e.payload, "{\"what\":\"drain\"}");
    let root = ctl.publish(EventKind::Budget, "", "{}").unwrap().unwrap();
    assert_eq!(expect(&every, EventKind::Budget, "/").id, root);

    // Removal.
    drop(ax);
    ctl.remove_group("a/x").unwrap();
    expect(&every, EventKind::GroupRemoved, "a/x");
    expect(&under_a, EventKind::GroupRemoved, "a/x");
    // The charge's retries may have raised max more than once: only those passed the filter.
    for e in max_only.try_iter() {
        let e = e.unwrap();
        assert_eq!((e.kind, e.group.as_str()), (EventKind::MemoryEvent, "a/x"));
    }

    drop((every, under_a, max_only, resumed, a, b));
    assert_eq!(ctl.open_handles(), 0);
}

#[test]
fn a_lagging_subscriber_is_dropped_and_resubscribes() {
    let ctl = Controller::new().unwrap();
    let slow = ctl
        .subscribe(&all().kinds([EventKind::Action]).max_lag(8))
        .unwrap();
    assert_eq!(slow.drop_reason(), None);
    let mut ids = Vec::new();
    for i in 0..64 {
        let payload = format!("{{\"n\":{i}}}");
        ids.push(
            ctl.publish(EventKind::Action, "/", &payload)
                .unwrap()
                .unwrap(),
        );
    }
    // The bus's notifier drops it: taken events may come first, then the error, within WAIT.
    let deadline = Instant::now() + WAIT;
    let mut taken = 0;
    let reason = loop {
        match slow.next(Duration::from_millis(10)) {
            Ok(Some(_)) => taken += 1,
            Ok(None) => assert!(Instant::now() < deadline, "not dropped"),
            Err(Error::Dropped { reason }) => break reason,
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(reason, DropReason::Lagging);
    assert_eq!(reason.name(), "lagging");
    assert_eq!(slow.drop_reason(), Some(DropReason::Lagging));
    assert!(format!("{:?}", slow).contains("dropped: lagging"));
    let e = slow.next(Duration::ZERO).unwrap_err();
    assert_eq!(
        e,
        Error::Dropped {
            reason: DropReason::Lagging
        }
    );
    assert!(e.to_string().contains("lagging"), "{e}");
    // The iterators yield the error once and end.
    let mut it = slow.iter();
    assert!(matches!(it.next(), Some(Err(Error::Dropped { .. }))));
    assert!(it.next().is_none());
    let mut it = slow.try_iter();
    assert!(matches!(it.next(), Some(Err(Error::Dropped { .. }))));
    assert!(it.next().is_none());

    // Resubscribing after its cursor misses nothing the ring holds: the rest of the 64.
    let cursor = slow.cursor();
    assert!(cursor < ids[63], "{cursor}");
    let again = ctl
        .subscribe(&all().kinds([EventKind::Action]).after(cursor))
        .unwrap();
    let rest: Vec<u64> = again.try_iter().map(|e| e.unwrap().id).collect();
    let expected: Vec<u64> = ids.iter().copied().filter(|&id| id > cursor).collect();
    assert_eq!(rest, expected);
    assert_eq!(rest.len() + taken, 64);
    assert_eq!(again.drop_reason(), None);
}

#[test]
fn close_from_another_thread_wakes_next() {
    let ctl = Controller::new().unwrap();
    let sub = Arc::new(ctl.subscribe(&all()).unwrap());
    let (tx, rx) = mpsc::channel();
    let waiter = {
        let sub = sub.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let got = sub.next(Duration::from_secs(60));
            tx.send((got, started.elapsed())).unwrap();
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    sub.close();
    sub.close(); // idempotent
    let (got, took) = rx.recv_timeout(WAIT).expect("close did not wake next");
    assert_eq!(got, Err(Error::Closed));
    assert!(took < WAIT, "{took:?}");
    waiter.join().unwrap();
    assert_eq!(sub.next(Duration::ZERO), Err(Error::Closed));
    assert!(sub.iter().next().is_none()); // closed: the iterator ends
    assert!(sub.try_iter().next().is_none());

    // A closer ends an iteration running on a thread that owns the subscription.
    let owned = ctl.subscribe(&all().kinds([EventKind::Action])).unwrap();
    let closer = owned.closer();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for e in &owned {
            tx.send(e.unwrap().payload).unwrap();
        }
        // The iteration ended: the closer closed it.
        assert_eq!(owned.next(Duration::ZERO), Err(Error::Closed));
    });
    ctl.publish(EventKind::Action, "/", "{\"n\":1}")
        .unwrap()
        .unwrap();
    ctl.publish(EventKind::Action, "/", "{\"n\":2}")
        .unwrap()
        .unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), "{\"n\":1}");
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), "{\"n\":2}");
    closer.close();
    // The reader's sender goes when its loop ends: a disconnect, not a timeout.
    assert_eq!(
        rx.recv_timeout(WAIT),
        Err(mpsc::RecvTimeoutError::Disconnected)
    );
    reader.join().unwrap();
    drop(closer);
    drop(sub);
    assert_eq!(ctl.open_handles(), 0);
}

#[test]
fn two_threads_take_turns_within_their_timeouts() {
    let ctl = Controller::new().unwrap();
    let sub = Arc::new(ctl.subscribe(&all().kinds([EventKind::Action])).unwrap());
    let first = {
        let sub = sub.clone();
        std::thread::spawn(move || sub.next(Duration::from_secs(30)))
    };
    std::thread::sleep(Duration::from_millis(50));
    // The first waits in the library; this one's short timeout is kept all the same, and the
    // cursor is read without waiting for it.
    let started = Instant::now();
    assert_eq!(sub.next(Duration::from_millis(100)).unwrap(), None);
    assert!(started.elapsed() < Duration::from_secs(5));
    let before = sub.cursor();
    let id = ctl.publish(EventKind::Action, "/", "{}").unwrap().unwrap();
    let e = first.join().unwrap().unwrap().expect("the event");
    assert_eq!(e.id, id);
    assert!(before < id);
    assert_eq!(sub.cursor(), id);
}

#[test]
fn bad_arguments_are_refused() {
    let ctl = Controller::new().unwrap();
    // Nothing subscribed yet: the stream is off, and a well-formed event is not recorded.
    assert_eq!(ctl.publish(EventKind::Action, "/", "{}").unwrap(), None);
    let einval = |o: SubscribeOptions| ctl.subscribe(&o).unwrap_err().code();
    assert_eq!(einval(all().kinds([])), Some(22));
    assert_eq!(einval(all().kinds([EventKind::Other(20)])), Some(22));
    assert_eq!(einval(all().subtree("../x")), Some(22));
    assert_eq!(einval(all().subtree("a b")), Some(22));
    assert!(matches!(
        ctl.subscribe(&all().kinds([EventKind::Other(40)])),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctl.subscribe(&all().subtree("a\0b")),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(ctl.open_handles(), 0);

    let sub = ctl.subscribe(&all()).unwrap(); // the stream is on now
    for bad in [
        "not json",
        "",
        "{",
        "}",
        "{\"a\":1}\n",
        "{\"a\":\r1}",
        "[1]",
    ] {
        let e = ctl.publish(EventKind::Action, "/", bad).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{bad:?}: {e}");
    }
    assert!(matches!(
        ctl.publish(EventKind::Action, "/", "{\"a\":\"\0\"}"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctl.publish(EventKind::Action, "a\0", "{}"),
        Err(Error::InvalidArgument(_))
    ));
    let e = ctl.publish(EventKind::Other(99), "/", "{}").unwrap_err();
    assert!(e.to_string().contains("99"), "{e}");
    let e = ctl.publish(EventKind::Action, "no/such", "{}").unwrap_err();
    assert_eq!(e.code(), Some(2), "{e}"); // ENOENT: no group there
    assert_eq!(sub.next(Duration::ZERO).unwrap(), None); // none of them was recorded

    // Names both ways, as the library has them.
    for kind in EventKind::all() {
        assert_eq!(EventKind::from_name(kind.name()), Some(kind));
    }
    assert_eq!(EventKind::from_name("oom"), Some(EventKind::Oom));
    assert_eq!(
        EventKind::from_name("group_created"),
        Some(EventKind::GroupCreated)
    );
    assert_eq!(EventKind::from_name("Oom"), None);
    assert_eq!(EventKind::from_name("oom\0"), None);
    assert_eq!(EventKind::Other(11).name(), "unknown");
    assert_eq!(EventKind::Other(-1).name(), "unknown");
    assert_eq!(DropReason::Overrun.name(), "overrun");
    assert_eq!(DropReason::Closed.name(), "closed");
    assert_eq!(DropReason::Other(4).name(), "unknown");
}

#[test]
fn member_ids_are_unique() {
    let ctl = Controller::new().unwrap();
    let g = ctl.create_group("t").unwrap();
    let m1 = Member::new(&g, "m1", 0).unwrap();
    let m2 = Member::new(&g, "m2", 0).unwrap();
    assert_ne!(m1.id(), 0);
    assert_ne!(m2.id(), 0);
    assert_ne!(m1.id(), m2.id());
    assert_eq!(m1.clone().id(), m1.id());
    let old = m2.id();
    drop(m2);
    let m3 = Member::new(&g, "m3", 0).unwrap();
    assert!(m3.id() != old && m3.id() != m1.id()); // never reused
}

#[test]
fn null_handles_through_the_sys_crate() {
    use memcg_sys::*;
    use std::ptr::{null, null_mut};
    let mut e = memcg_event::default();
    let mut out = null_mut();
    // SAFETY: the C API checks every handle for NULL; this is what the safe crate never sends.
    unsafe {
        assert_eq!(
            memcg_subscribe(null_mut(), null(), MEMCG_EVENT_ALL, 0, 0, &mut out),
            22
        );
        assert!(out.is_null());
        assert_eq!(memcg_subscription_next(null_mut(), 0, &mut e), 22);
        assert_eq!(memcg_subscription_cursor(null()), 0);
        assert_eq!(memcg_subscription_drop_reason(null()), 0);
        memcg_subscription_close(null_mut());
        memcg_subscription_destroy(null_mut());
        let mut id = 7u64;
        assert_eq!(
            memcg_events_publish(null_mut(), MEMCG_EVENT_ACTION, null(), c"{}".as_ptr(), &mut id),
            22
        );
        assert_eq!(id, 0);
        assert_eq!(memcg_member_id(null()), 0);
        assert_eq!(memcg_event_type_from_name(null()), -1);
    }
    assert_eq!(MEMCG_EVENT_BIT(MEMCG_EVENT_GAP), 1 << 10);
    assert_eq!(MEMCG_EVENT_ALL, (1 << 11) - 1);
}
