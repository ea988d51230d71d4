//! memcg's C API (memcg/c/memcg.h) from Rust, with hand-written declarations: a tenant group
//! with a limit, a charge, memory.stat, a reservation that waits with a deadline, and an OOM
//! kill delivered to a Rust callback that destroys its own member.
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::ptr::null_mut;

#[repr(C)]
struct Controller(u8);
#[repr(C)]
struct Group(u8);
#[repr(C)]
struct Member(u8);
#[repr(C)]
struct Reservation(u8);

type KillFn = extern "C" fn(*mut Member, c_int, *mut c_void);

extern "C" {
    fn memcg_version() -> c_uint;
    fn memcg_errno_name(code: c_int) -> *const c_char;
    fn memcg_controller_create(options: *const c_void, out: *mut *mut Controller) -> c_int;
    fn memcg_controller_destroy(c: *mut Controller) -> c_int;
    fn memcg_controller_now_ns(c: *const Controller) -> u64;
    fn memcg_group_create(c: *mut Controller, path: *const c_char, out: *mut *mut Group) -> c_int;
    fn memcg_group_release(g: *mut Group);
    fn memcg_group_read(g: *mut Group, name: *const c_char, buf: *mut c_char, size: usize,
                        len: *mut usize) -> c_int;
    fn memcg_group_write(g: *mut Group, name: *const c_char, text: *const c_char, len: usize,
                         nonblocking: c_int) -> c_int;
    fn memcg_charge(g: *mut Group, bytes: u64, flags: c_uint) -> c_int;
    fn memcg_uncharge(g: *mut Group, bytes: u64);
    fn memcg_member_create(g: *mut Group, name: *const c_char, score_adj: c_int,
                           on_kill: Option<KillFn>, user: *mut c_void,
                           out: *mut *mut Member) -> c_int;
    fn memcg_member_destroy(m: *mut Member);
    fn memcg_member_charge(m: *mut Member, bytes: u64, flags: c_uint) -> c_int;
    fn memcg_reservation_create(g: *mut Group, m: *mut Member, oom_policy: c_int,
                                priority: c_int, out: *mut *mut Reservation) -> c_int;
    fn memcg_reservation_destroy(r: *mut Reservation);
    fn memcg_reserve_until(r: *mut Reservation, total: u64, deadline_ns: u64) -> c_int;
    fn memcg_reserve_status_name(status: c_int) -> *const c_char;
}

const MAY_BLOCK: c_uint = 1;
const EEXIST: c_int = 17;

fn name(s: *const c_char) -> String {
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

fn check(code: c_int, what: &str) {
    if code != 0 {
        panic!("{what}: {}", name(unsafe { memcg_errno_name(code) }));
    }
}

fn read(g: *mut Group, file: &CStr) -> String {
    let mut len = 0usize;
    unsafe { memcg_group_read(g, file.as_ptr(), null_mut(), 0, &mut len) };
    let mut buf = vec![0 as c_char; len + 1];
    check(unsafe { memcg_group_read(g, file.as_ptr(), buf.as_mut_ptr(), buf.len(), null_mut()) },
          "read");
    name(buf.as_ptr())
}

fn stat(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

extern "C" fn on_kill(member: *mut Member, reason: c_int, user: *mut c_void) {
    let kills = unsafe { &mut *(user as *mut u32) };
    *kills += 1;
    println!("rust: member killed (reason {reason}), destroying it");
    unsafe { memcg_member_destroy(member) };
}

fn main() {
    let v = unsafe { memcg_version() };
    println!("rust: memcg {}.{}.{}", v / 10000, v / 100 % 100, v % 100);
    let mut ctl = null_mut();
    check(unsafe { memcg_controller_create(std::ptr::null(), &mut ctl) }, "controller");
    let mut g = null_mut();
    check(unsafe { memcg_group_create(ctl, c"tenant".as_ptr(), &mut g) }, "group");
    assert_eq!(unsafe { memcg_group_create(ctl, c"tenant".as_ptr(), null_mut()) }, EEXIST);
    let max = c"512K";
    check(unsafe { memcg_group_write(g, c"memory.max".as_ptr(), max.as_ptr(), 4, 0) }, "max");

    assert_eq!(unsafe { memcg_charge(g, 100 << 10, MAY_BLOCK) }, 0);
    let anon = stat(&read(g, c"memory.stat"), "anon");
    println!("rust: charged 102400, memory.stat anon={anon}");
    assert!(anon >= 100 << 10);

    // A reservation that fits the limit but not what is free waits until its deadline.
    let mut r = null_mut();
    check(unsafe { memcg_reservation_create(g, null_mut(), 0, -1, &mut r) }, "reservation");
    let deadline = unsafe { memcg_controller_now_ns(ctl) } + 20_000_000;
    let status = unsafe { memcg_reserve_until(r, 450 << 10, deadline) };
    println!("rust: reserve 450K next to 100K under a 512K max: {}",
             name(unsafe { memcg_reserve_status_name(status) }));
    assert_eq!(status, 4); // MEMCG_RESERVE_TIMED_OUT
    unsafe { memcg_reservation_destroy(r) };
    unsafe { memcg_uncharge(g, 100 << 10) };

    // An OOM kill: the victim's callback destroys it; the other member's charges then fit.
    let mut kills: u32 = 0;
    let (mut victim, mut other) = (null_mut(), null_mut());
    check(unsafe { memcg_member_create(g, c"victim".as_ptr(), 500, Some(on_kill),
                                       &mut kills as *mut u32 as *mut c_void, &mut victim) },
          "member");
    check(unsafe { memcg_member_create(g, c"other".as_ptr(), 0, None, null_mut(), &mut other) },
          "member");
    assert_eq!(unsafe { memcg_member_charge(victim, 400 << 10, MAY_BLOCK) }, 0);
    for _ in 0..4 {
        assert_eq!(unsafe { memcg_member_charge(other, 32 << 10, MAY_BLOCK) }, 0);
    }
    let oom_kill = stat(&read(g, c"memory.events"), "oom_kill");
    println!("rust: killed={kills} oom_kill={oom_kill}");
    assert_eq!((kills, oom_kill), (1, 1));
    unsafe { memcg_member_destroy(other) };
    unsafe { memcg_group_release(g) };
    check(unsafe { memcg_controller_destroy(ctl) }, "destroy");
    println!("rust: ok");
}
