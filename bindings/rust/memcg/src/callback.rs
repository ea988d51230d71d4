//! Callbacks: the C `void* user` is an id in a registry, never a pointer to Rust memory, so
//! that a callback racing with the drop of its handle (memcg_member_destroy does not wait for a
//! kill callback running elsewhere) finds nothing instead of freed memory. The trampoline takes
//! a strong reference to the handle for the call, so a callback that drops the handle's last
//! clone frees it when the callback returns; a panic is caught here and never unwinds into C.
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{null_mut, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use memcg_sys as sys;

use crate::{
    check, cstring, CancelReason, Controller, Counted, Group, Listener, ListenerInner, Member,
    MemberInner, Result,
};

type KillFn = dyn Fn(&Member, CancelReason) + Send + Sync;
type NotifyFn = dyn Fn(&Listener, i32, bool) + Send + Sync;

struct Entry<T: ?Sized, F: ?Sized> {
    handle: Weak<T>,
    f: Arc<F>,
    controller: Controller,
}

type Registry<T, F> = Mutex<BTreeMap<u64, Entry<T, F>>>;
static MEMBERS: Registry<MemberInner, KillFn> = Mutex::new(BTreeMap::new());
static LISTENERS: Registry<ListenerInner, NotifyFn> = Mutex::new(BTreeMap::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

enum Kind {
    Member,
    Listener,
}

/// A registry entry, removed when its handle drops.
pub(crate) struct Registration {
    id: u64,
    kind: Kind,
}

impl Registration {
    /// Removes the entry. The user's closure (and what it owns: another member, a listener)
    /// is dropped after the registry's lock is released, so that its drop may unregister too.
    pub(crate) fn unregister(&self) {
        match self.kind {
            Kind::Member => drop(take(&MEMBERS, self.id)),
            Kind::Listener => drop(take(&LISTENERS, self.id)),
        }
    }
}

/// The entry `id`, out of the registry; the lock is released when this returns.
fn take<T: ?Sized, F: ?Sized>(registry: &Registry<T, F>, id: u64) -> Option<Entry<T, F>> {
    let mut map = lock(registry);
    map.remove(&id)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics under these locks; a poisoned one is still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn report(controller: &Controller, what: &str, payload: Box<dyn std::any::Any + Send>) {
    controller.inner.panics.fetch_add(1, Ordering::Relaxed);
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into());
    eprintln!("memcg: panic in {what} caught at the C boundary: {msg}");
}

unsafe extern "C" fn kill_trampoline(_m: *mut sys::memcg_member, reason: c_int, user: *mut c_void) {
    let id = user as u64;
    let found = lock(&MEMBERS)
        .get(&id)
        .map(|e| (e.handle.upgrade(), e.f.clone(), e.controller.clone()));
    let Some((Some(inner), f, controller)) = found else {
        return;
    };
    let member = Member { inner };
    let reason = match reason {
        sys::MEMCG_CANCEL_OOM_KILL => CancelReason::OomKill,
        sys::MEMCG_CANCEL_PREEMPT => CancelReason::Preempt,
        sys::MEMCG_CANCEL_OPERATOR => CancelReason::Operator,
        _ => CancelReason::Other,
    };
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(&member, reason))) {
        report(
            &controller,
            &format!("the kill callback of {}", member.name()),
            payload,
        );
    }
    // `member` drops here: if the callback dropped every other clone, the C member goes now,
    // which the C API allows from its own kill callback.
}

unsafe extern "C" fn notify_trampoline(
    _l: *mut sys::memcg_listener,
    value: c_int,
    removed: c_int,
    user: *mut c_void,
) {
    let id = user as u64;
    let found = lock(&LISTENERS)
        .get(&id)
        .map(|e| (e.handle.upgrade(), e.f.clone(), e.controller.clone()));
    let Some((Some(inner), f, controller)) = found else {
        return;
    };
    let listener = Listener { inner };
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(&listener, value, removed != 0))) {
        report(&controller, "a listener callback", payload);
    }
}

pub(crate) fn member(
    group: &Group,
    name: &str,
    score_adj: i32,
    on_kill: Option<Box<KillFn>>,
) -> Result<Member> {
    let c = cstring(name, "member name")?;
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let has_callback = on_kill.is_some();
    if let Some(f) = on_kill {
        let entry = Entry {
            handle: Weak::new(),
            f: Arc::from(f),
            controller: group.controller().clone(),
        };
        lock(&MEMBERS).insert(id, entry);
    }
    let mut out = null_mut();
    let fp: sys::memcg_kill_fn = if has_callback {
        Some(kill_trampoline)
    } else {
        None
    };
    // SAFETY: valid group and name; `user` is an id, not a pointer.
    let code = unsafe {
        sys::memcg_member_create(
            group.ptr(),
            c.as_ptr(),
            score_adj,
            fp,
            id as *mut c_void,
            &mut out,
        )
    };
    if let Err(e) = check(code, || format!("member {name}")) {
        drop(take(&MEMBERS, id));
        return Err(e);
    }
    let inner = Arc::new(MemberInner {
        ptr: NonNull::new(out).expect("memcg returned a NULL member"),
        group: group.clone(),
        name: name.to_string(),
        callback: has_callback.then_some(Registration {
            id,
            kind: Kind::Member,
        }),
        reservations: Mutex::new(Vec::new()),
        _count: Counted::new(group.controller()),
    });
    if let Some(e) = lock(&MEMBERS).get_mut(&id) {
        e.handle = Arc::downgrade(&inner);
    }
    Ok(Member { inner })
}

pub(crate) fn listener(
    group: &Group,
    f: Box<NotifyFn>,
    create: impl FnOnce(
        *mut sys::memcg_group,
        sys::memcg_notify_fn,
        *mut c_void,
        *mut *mut sys::memcg_listener,
    ) -> c_int,
) -> Result<Listener> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let entry = Entry {
        handle: Weak::new(),
        f: Arc::from(f),
        controller: group.controller().clone(),
    };
    lock(&LISTENERS).insert(id, entry);
    let mut out = null_mut();
    let code = create(
        group.ptr(),
        Some(notify_trampoline),
        id as *mut c_void,
        &mut out,
    );
    if let Err(e) = check(code, || "listener".into()) {
        drop(take(&LISTENERS, id));
        return Err(e);
    }
    let inner = Arc::new(ListenerInner {
        ptr: NonNull::new(out).expect("memcg returned a NULL listener"),
        group: group.clone(),
        registration: Registration {
            id,
            kind: Kind::Listener,
        },
        _count: Counted::new(group.controller()),
    });
    if let Some(e) = lock(&LISTENERS).get_mut(&id) {
        e.handle = Arc::downgrade(&inner);
    }
    Ok(Listener { inner })
}
