//! The safe crate against the built library: bad input, every callback case, a service with a
//! runaway; at the end of each test no charge and no handle is left.
use memcg::*;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// memory.current once the per-CPU stocks are given back.
fn drained(g: &Group) -> u64 {
    g.controller().drain().unwrap();
    g.read("memory.current").unwrap().trim().parse().unwrap()
}

fn setup() -> (Controller, Group) {
    assert!(
        compatible(),
        "library {} does not serve this crate",
        library_version()
    );
    let ctl = Controller::new().unwrap();
    let top = ctl.create_group("t").unwrap();
    (ctl, top)
}

fn finish(ctl: Controller, top: Group) {
    assert_eq!(top.key("memory.stat", "anon").unwrap(), 0);
    assert_eq!(drained(&top), 0);
    drop(top);
    assert_eq!(ctl.open_handles(), 0);
}

#[test]
fn files_by_name_and_malformed_values() {
    let (ctl, top) = setup();
    let g = ctl.create_group("t/a").unwrap();
    g.write("memory.max", "512M").unwrap();
    assert_eq!(g.read("memory.max").unwrap(), format!("{}\n", 512 * MIB));
    for bad in ["lots", "-1", "1Q", "", "1M 2M"] {
        let e = g.write("memory.max", bad).unwrap_err();
        assert!(matches!(e.code(), Some(22) | Some(34)), "{bad}: {e}");
    }
    assert_eq!(g.read("memory.max").unwrap(), format!("{}\n", 512 * MIB));
    assert_eq!(g.read("memory.nonsense").unwrap_err().code(), Some(2));
    assert!(matches!(
        g.read("memory.max\0x"),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(g.path(), "t/a");
    drop(g);
    finish(ctl, top);
}

#[test]
fn set_up_errors_change_nothing() {
    let (ctl, top) = setup();
    assert_eq!(ctl.create_group("t").unwrap_err().code(), Some(17));
    assert_eq!(ctl.create_group("nope/x").unwrap_err().code(), Some(2));
    assert_eq!(ctl.group("absent").unwrap_err().code(), Some(2));
    assert_eq!(ctl.remove_group("/").unwrap_err().code(), Some(22));
    assert_eq!(Member::new(&top, "m", 1001).unwrap_err().code(), Some(22));
    assert_eq!(
        top.watch_pressure("sideways", |_, _, _| {})
            .unwrap_err()
            .code(),
        Some(22)
    );
    assert_eq!(ctl.open_handles(), 1);
    finish(ctl, top);
}

#[test]
fn null_handles_through_the_sys_crate() {
    use memcg_sys::*;
    use std::ptr::{null, null_mut};
    // SAFETY: the C API checks every handle for NULL; this is what the safe crate never sends.
    unsafe {
        assert_eq!(
            memcg_group_create(null_mut(), c"x".as_ptr(), null_mut()),
            22
        );
        assert_eq!(
            memcg_charge(null_mut(), 1, MEMCG_CHARGE_DEFAULT),
            MEMCG_CHARGE_INVALID
        );
        assert_eq!(memcg_reserve(null_mut(), 1), MEMCG_RESERVE_INVALID);
        assert_eq!(memcg_member_killed(null()), 0);
        assert_eq!(memcg_controller_destroy(null_mut()), 0);
        memcg_member_destroy(null_mut());
        memcg_reservation_destroy(null_mut());
        memcg_group_release(null_mut());
    }
}

#[test]
fn refusals_name_status_and_limiting_group() {
    let (ctl, top) = setup();
    top.write("memory.max", "1M").unwrap();
    let child = ctl.create_group("t/c").unwrap();
    child.write("memory.max", "4M").unwrap();
    let mut r = Reservation::on_group(&child, OomPolicy::Kernel, Priority::Default).unwrap();
    let e = r.reserve(2 * MIB).unwrap_err();
    assert_eq!(e.status(), Some(Status::NeverFits));
    assert_eq!(
        e,
        Error::Refused {
            status: Status::NeverFits,
            group: "t/c".into(),
            limiting_group: Some("t".into())
        }
    );
    r.reserve(768 * KIB).unwrap();
    let mut other = Reservation::on_group(&child, OomPolicy::Never, Priority::Default).unwrap();
    assert_eq!(
        other
            .reserve_for(512 * KIB, Duration::from_millis(50))
            .unwrap_err()
            .status(),
        Some(Status::TimedOut)
    );
    let deadline = Instant::now() + Duration::from_millis(50);
    assert_eq!(
        other
            .reserve_until(512 * KIB, deadline)
            .unwrap_err()
            .status(),
        Some(Status::TimedOut)
    );
    let e = child.charge(512 * KIB, flags::DEFAULT).unwrap_err();
    assert_eq!(e.status(), Some(Status::NoMem));
    assert!(e.to_string().contains("limit of t"), "{e}");
    assert_eq!(
        r.reserve(u64::MAX).unwrap_err().status(),
        Some(Status::Invalid)
    );
    assert_eq!(r.bytes(), 768 * KIB);
    // Cancel from another thread ends a wait at once.
    let canceller = other.canceller();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        canceller.cancel();
    });
    let started = Instant::now();
    let e = other
        .reserve_for(512 * KIB, Duration::from_secs(10))
        .unwrap_err();
    assert_eq!(e.status(), Some(Status::Cancelled));
    assert!(started.elapsed() < Duration::from_secs(5));
    t.join().unwrap();
    drop((r, other, child));
    finish(ctl, top);
}

/// Fills `g` (1 MiB) with the victim's charge, then reserves as another member.
fn crowd(victim: &Member, g: &Group) -> Result<Reservation> {
    victim.charge(768 * KIB, flags::DEFAULT).unwrap();
    let other = Member::new(g, "other", 0)?;
    let mut r = Reservation::on_member(&other, OomPolicy::Pieces, Priority::Default)?;
    r.reserve(512 * KIB)?;
    Ok(r)
}

#[test]
fn a_panicking_kill_callback_is_caught() {
    let (ctl, top) = setup();
    let g = ctl.create_group("t/a").unwrap();
    g.write("memory.max", "1M").unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let victim = Member::with_kill(&g, "victim", 1000, move |m, _| {
        c.fetch_add(1, Ordering::Relaxed);
        panic!("boom in {}", m.name())
    })
    .unwrap();
    assert!(crowd(&victim, &g).is_err()); // the victim kept its memory
    assert!(victim.killed());
    // One per call (a victim keeping its memory may be chosen again).
    let calls = u64::from(calls.load(Ordering::Relaxed));
    assert!(calls >= 1);
    assert_eq!(ctl.callback_panics(), calls);
    drop((victim, g));
    finish(ctl, top);
}

#[test]
fn a_kill_callback_dropping_its_member() {
    let (ctl, top) = setup();
    let g = ctl.create_group("t/a").unwrap();
    g.write("memory.max", "1M").unwrap();
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
    r.reserve(512 * KIB).unwrap(); // the victim's memory went back during the call
    assert!(slot.lock().unwrap().is_none());
    assert_eq!(r.bytes(), 512 * KIB);
    drop((r, other, g));
    finish(ctl, top);
}

#[test]
fn a_kill_callback_dropping_the_member_whose_call_runs() {
    let (ctl, top) = setup();
    let g = ctl.create_group("t/a").unwrap();
    g.write("memory.max", "1M").unwrap();
    let slot: Arc<Mutex<Option<Member>>> = Arc::default();
    let kills = Arc::new(AtomicU32::new(0));
    let (s, k) = (slot.clone(), kills.clone());
    let runaway = Member::with_kill(&g, "runaway", 1000, move |_, _| {
        k.fetch_add(1, Ordering::Relaxed);
        s.lock().unwrap().take();
    })
    .unwrap();
    runaway.charge(512 * KIB, flags::DEFAULT).unwrap();
    let mut r = Reservation::on_member(&runaway, OomPolicy::Pieces, Priority::Default).unwrap();
    *slot.lock().unwrap() = Some(runaway); // the reservation holds the other reference
    let e = r.reserve(768 * KIB).unwrap_err();
    assert!(
        matches!(e.status(), Some(Status::Killed | Status::NoMem)),
        "{e}"
    );
    assert_eq!(kills.load(Ordering::Relaxed), 1);
    assert!(slot.lock().unwrap().is_none());
    assert_eq!(ctl.open_handles(), 4); // t, t/a, r and the member it keeps
    drop(r); // the member goes with its last reservation
    assert_eq!(ctl.open_handles(), 2);
    drop(g);
    finish(ctl, top);
}

#[test]
fn listeners_dropping_themselves_and_panicking() {
    let (ctl, top) = setup();
    let g = ctl.create_group("t/a").unwrap();
    g.write("memory.max", "256K").unwrap();
    let slot: Arc<Mutex<Option<Listener>>> = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel();
    let s = slot.clone();
    let tx2 = tx.clone();
    let l = g
        .watch_events(false, move |_, value, _| {
            s.lock().unwrap().take();
            tx.send(value).ok();
        })
        .unwrap();
    *slot.lock().unwrap() = Some(l);
    let panicking = g
        .watch_events(false, move |_, _, _| {
            tx2.send(-1).ok();
            panic!("listener fails");
        })
        .unwrap();
    assert!(g.charge(MIB, flags::DEFAULT).is_err()); // a "max" event
    let mut got = vec![
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
    ];
    got.sort();
    assert_eq!(got, vec![-1, 0]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while ctl.callback_panics() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(ctl.callback_panics() >= 1); // one per notification it got
    assert!(slot.lock().unwrap().is_none());
    drop((panicking, g));
    finish(ctl, top);
}

#[test]
fn drop_order_does_not_matter() {
    let ctl = Controller::new().unwrap();
    let g = ctl.create_group("a").unwrap();
    let m = Member::new(&g, "m", 0).unwrap();
    let mut r = Reservation::on_member(&m, OomPolicy::Kernel, Priority::Default).unwrap();
    r.reserve(MIB).unwrap();
    drop(ctl); // the handles keep the controller
    drop(g);
    drop(m); // the reservation keeps the member
    assert_eq!(r.bytes(), MIB);
    drop(r);
}

#[test]
fn threads_and_a_runaway_that_is_killed() {
    let (ctl, top) = setup();
    top.write("memory.max", "16M").unwrap();
    let tenants: Vec<Group> = (0..4)
        .map(|i| {
            let t = ctl.create_group(&format!("t/{i}")).unwrap();
            t.write("memory.max", "6M").unwrap();
            t
        })
        .collect();
    let killed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let slot: Arc<Mutex<Option<Member>>> = Arc::default();
    let (k, s) = (killed.clone(), slot.clone());
    let runaway = Member::with_kill(&tenants[0], "runaway", 1000, move |_, _| {
        s.lock().unwrap().take();
        k.store(true, Ordering::SeqCst);
    })
    .unwrap();
    let mut grab = Reservation::on_member(&runaway, OomPolicy::Never, Priority::Default).unwrap();
    *slot.lock().unwrap() = Some(runaway);
    let k = killed.clone();
    let mut threads = vec![std::thread::spawn(move || {
        let stop = Instant::now() + Duration::from_secs(30);
        while !k.load(Ordering::SeqCst) && Instant::now() < stop {
            match grab.grow(256 * KIB) {
                Ok(_) => {}
                Err(e) if e.status() == Some(Status::Killed) => break,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    })];
    for i in 0..8 {
        let tenant = tenants[i % 4].clone();
        let k = killed.clone();
        threads.push(std::thread::spawn(move || {
            let me = Member::new(&tenant, &format!("w{i}"), 0).unwrap();
            // At least 30 requests, and on until the runaway is killed (bounded).
            let stop = Instant::now() + Duration::from_secs(30);
            let mut n = 0;
            while n < 30 || (!k.load(Ordering::SeqCst) && Instant::now() < stop) {
                n += 1;
                let mut r =
                    Reservation::on_member(&me, OomPolicy::Pieces, Priority::Default).unwrap();
                let _ = r.reserve_for(512 * KIB, Duration::from_millis(200));
                let _ = r.grow(MIB); // may run the OOM killer
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    assert!(killed.load(Ordering::SeqCst));
    assert!(slot.lock().unwrap().is_none());
    assert!(tenants[0].key("memory.events", "oom_kill").unwrap() >= 1);
    assert_eq!(ctl.callback_panics(), 0);
    drop(tenants);
    finish(ctl, top);
}
