//! The service calls (drain, statistics, the group list, the OOM log, scores, grow until an
//! Instant, charges that never sleep), text refused or bounded, user destructors run outside
//! the registry's lock, and a kill callback giving back reservations other threads own.
use memcg::*;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

fn current(g: &Group) -> u64 {
    g.read("memory.current").unwrap().trim().parse().unwrap()
}

/// Runs `f` on a thread; fails if it has not returned within `secs` (a deadlock).
fn within(secs: u64, what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what}: not done after {secs} s (deadlock)"));
}

#[test]
fn drain_makes_current_zero() {
    let ctl = Controller::new().unwrap();
    let top = ctl.create_group("t").unwrap();
    let g = ctl.create_group("t/a").unwrap();
    {
        let m = Member::new(&g, "m", 0).unwrap();
        let mut r = Reservation::on_member(&m, OomPolicy::Kernel, Priority::Default).unwrap();
        r.reserve(256 * KIB).unwrap();
        g.charge(8 * KIB, flags::DEFAULT).unwrap();
        g.uncharge(8 * KIB);
    }
    assert_ne!(current(&top), 0, "the stock was not used");
    ctl.drain().unwrap();
    assert_eq!(current(&top), 0);
    assert_eq!(current(&g), 0);
    // memory.reclaim drains too, but answers EAGAIN when nothing was reclaimable.
    g.charge(8 * KIB, flags::DEFAULT).unwrap();
    g.uncharge(8 * KIB);
    assert_eq!(
        g.write("memory.reclaim", "1M").unwrap_err().code(),
        Some(11)
    );
    assert_eq!(current(&g), 0);
}

#[test]
fn flush_stats_list_and_score() {
    let ctl = Controller::new().unwrap();
    let top = ctl.create_group("t").unwrap();
    let b = ctl.create_group("t/b").unwrap();
    let a = ctl.create_group("t/a").unwrap();
    ctl.create_group("t/a/x").unwrap();
    assert_eq!(top.list().unwrap(), ["t/a", "t/a/x", "t/b"]);
    assert_eq!(
        ctl.group("/").unwrap().list().unwrap(),
        ["t", "t/a", "t/a/x", "t/b"]
    );
    assert!(b.list().unwrap().is_empty());
    a.charge(64 * KIB, flags::DEFAULT).unwrap();
    ctl.flush_stats().unwrap();
    assert_eq!(a.key("memory.stat", "anon").unwrap(), 64 * KIB);
    a.uncharge(64 * KIB);
    let m = Member::new(&b, "m", 100).unwrap();
    assert_eq!(m.score_adj(), 100);
    m.set_score_adj(-1000).unwrap();
    assert_eq!(m.score_adj(), -1000);
    assert_eq!(m.set_score_adj(1001).unwrap_err().code(), Some(22));
    assert_eq!(m.score_adj(), -1000);
    ctl.remove_group("t/a/x").unwrap();
    assert_eq!(top.list().unwrap(), ["t/a", "t/b"]);
}

#[test]
fn oom_log() {
    let ctl = Controller::new().unwrap();
    let g = ctl.create_group("t").unwrap();
    g.write("memory.max", "1M").unwrap();
    assert_eq!(ctl.oom_log_last_seq(), 0);
    assert!(ctl.oom_log(0).unwrap().is_empty());
    let slot: Arc<Mutex<Option<Member>>> = Arc::default();
    let s = slot.clone();
    let victim = Member::with_kill(&g, "victim", 1000, move |_, _| {
        s.lock().unwrap().take();
    })
    .unwrap();
    victim.charge(768 * KIB, flags::DEFAULT).unwrap();
    *slot.lock().unwrap() = Some(victim);
    let other = Member::new(&g, "other", 0).unwrap();
    let mut r = Reservation::on_member(&other, OomPolicy::Pieces, Priority::Default).unwrap();
    r.reserve(512 * KIB).unwrap();
    let seq = ctl.oom_log_last_seq();
    let log = ctl.oom_log(0).unwrap();
    assert!(seq > 0);
    assert!(log.last().unwrap().contains("victim=victim"), "{log:?}");
    assert!(ctl.oom_log(seq).unwrap().is_empty());
}

#[test]
fn grow_until_an_instant_and_nowait() {
    let ctl = Controller::new().unwrap();
    let g = ctl.create_group("t").unwrap();
    g.write("memory.max", "1M").unwrap();
    let mut r = Reservation::on_group(&g, OomPolicy::Never, Priority::Default).unwrap();
    g.charge(512 * KIB, flags::DEFAULT).unwrap();
    r.grow_until(256 * KIB, Instant::now() + Duration::from_secs(1))
        .unwrap();
    let start = Instant::now();
    // Would fit were the charge given back: waits, then times out.
    let e = r
        .grow_until(512 * KIB, start + Duration::from_millis(50))
        .unwrap_err();
    assert_eq!(e.status(), Some(Status::TimedOut));
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(40) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    let start = Instant::now();
    let e = g.charge(512 * KIB, flags::NOWAIT).unwrap_err();
    assert_eq!(e.status(), Some(Status::NoMem));
    assert!(start.elapsed() < Duration::from_secs(1));
    r.release();
    g.uncharge(512 * KIB);
    g.charge(64 * KIB, flags::NOWAIT).unwrap();
    g.uncharge(64 * KIB);
}

#[test]
fn nul_refused_and_messages_bounded() {
    let ctl = Controller::new().unwrap();
    let g = ctl.create_group("t").unwrap();
    g.write("memory.max", "1G").unwrap();
    assert!(matches!(
        g.write("memory.max", "1\0G"),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(g.read("memory.max").unwrap(), "1073741824\n");
    assert!(matches!(
        ctl.create_group("evil\0suffix"),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(ctl.group("evil").unwrap_err().code(), Some(2));
    let e = g.write("memory.max", &"7".repeat(1 << 20)).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.len() < 300 && msg.contains("\"..."),
        "{} bytes: {:.300}",
        msg.len(),
        msg
    );
    let e = g
        .write("memory.max", &format!("{}\0", "7".repeat(1 << 20)))
        .unwrap_err();
    assert!(e.to_string().len() < 300);
}

/// A kill closure that owns another member: dropping the first drops the closure, whose drop
/// unregisters the second. The old code dropped the closure under the registry's lock: the
/// second unregister locked it again on the same thread.
#[test]
fn a_kill_closure_owning_a_member_is_dropped_outside_the_lock() {
    let ctl = Controller::new().unwrap();
    let g = ctl.create_group("t").unwrap();
    let inner = Member::with_kill(&g, "inner", 0, |_, _| {}).unwrap();
    let outer = Member::with_kill(&g, "outer", 0, move |_, _| {
        let _ = inner.name();
    })
    .unwrap();
    within(
        10,
        "dropping a member whose closure owns a member",
        move || drop(outer),
    );
    // Listeners likewise: a listener whose closure owns a member and another listener.
    let m = Member::with_kill(&g, "m", 0, |_, _| {}).unwrap();
    let l1 = g.watch_events(false, |_, _, _| {}).unwrap();
    let l2 = g
        .watch_events(false, move |_, _, _| {
            let _ = (m.name(), l1.delivered());
        })
        .unwrap();
    within(
        10,
        "dropping a listener whose closure owns handles",
        move || drop(l2),
    );
    assert_eq!(ctl.open_handles(), 1);
}

/// The kill callback of a member whose reservations other threads own gives their memory back
/// (Member::release_reservations): the charge that ran the killer then fits, and the owners'
/// next requests are cancelled.
#[test]
fn a_kill_callback_releases_reservations_other_threads_own() {
    let ctl = Controller::new().unwrap();
    let g = ctl.create_group("t").unwrap();
    g.write("memory.max", "2M").unwrap();
    let kills = Arc::new(AtomicU32::new(0));
    let k = kills.clone();
    let victim = Member::with_kill(&g, "victim", 1000, move |m, _| {
        k.fetch_add(1, Ordering::SeqCst);
        m.release_reservations();
    })
    .unwrap();
    // Two threads own a reservation of the victim each (1.5 MiB of the 2 MiB) and keep them
    // until the kill is over.
    let (held_tx, held_rx) = mpsc::channel();
    let mut go = Vec::new();
    let owners: Vec<_> = (0..2)
        .map(|_| {
            let (victim, held_tx) = (victim.clone(), held_tx.clone());
            let (go_tx, go_rx) = mpsc::channel::<()>();
            go.push(go_tx);
            std::thread::spawn(move || {
                let mut r =
                    Reservation::on_member(&victim, OomPolicy::Kernel, Priority::Default).unwrap();
                r.reserve(768 * KIB).unwrap();
                held_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                // Given back by the kill callback on the other thread; cancelled from now on.
                let after = (r.bytes(), r.reserve(4 * KIB).map_err(|e| e.status()));
                drop(r);
                after
            })
        })
        .collect();
    for _ in 0..2 {
        held_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    }
    let other = Member::new(&g, "other", 0).unwrap();
    let mut r = Reservation::on_member(&other, OomPolicy::Pieces, Priority::Default).unwrap();
    r.reserve(MIB).unwrap(); // runs the OOM killer: the victim's callback releases
    assert_eq!(kills.load(Ordering::SeqCst), 1);
    for tx in go {
        tx.send(()).unwrap();
    }
    for t in owners {
        assert_eq!(t.join().unwrap(), (0, Err(Some(Status::Cancelled))));
    }
    assert_eq!(victim.charged(), 0);
    drop((r, victim, other));
    ctl.drain().unwrap();
    assert_eq!(current(&g), 0);
}

/// A request running on its owner's thread when the kill callback releases: what it holds goes
/// back when that request returns.
#[test]
fn a_release_during_a_running_request_applies_when_it_returns() {
    let ctl = Controller::new().unwrap();
    let g = ctl.create_group("t").unwrap();
    g.write("memory.max", "1M").unwrap();
    let victim = Member::new(&g, "victim", 0).unwrap();
    let mut waiting = Reservation::on_member(&victim, OomPolicy::Never, Priority::Default).unwrap();
    waiting.reserve(512 * KIB).unwrap();
    let filler = Member::new(&g, "filler", 0).unwrap();
    filler.charge(512 * KIB, flags::DEFAULT).unwrap();
    let v = victim.clone();
    let t = std::thread::spawn(move || {
        // Waits for room that only the release gives.
        let e = waiting
            .reserve_for(768 * KIB, Duration::from_secs(10))
            .unwrap_err();
        (e.status(), waiting)
    });
    std::thread::sleep(Duration::from_millis(50));
    v.release_reservations();
    let (status, waiting) = t.join().unwrap();
    assert_eq!(status, Some(Status::Cancelled));
    assert_eq!(waiting.bytes(), 0);
    assert_eq!(victim.charged(), 0);
    filler.uncharge(512 * KIB);
    drop((waiting, victim, filler, v));
    ctl.drain().unwrap();
    assert_eq!(current(&g), 0);
}
