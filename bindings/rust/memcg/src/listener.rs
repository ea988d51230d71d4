//! Listeners: memory.events and vmpressure notifications to closures.
use std::ptr::NonNull;
use std::sync::Arc;

use memcg_sys as sys;

use crate::{callback, Controller, Counted, Group, Reservation};

// ---- listeners ------------------------------------------------------------------------------

pub(crate) struct ListenerInner {
    pub(crate) ptr: NonNull<sys::memcg_listener>,
    #[allow(dead_code)] // keeps the group referenced for the listener's life
    pub(crate) group: Group,
    pub(crate) registration: callback::Registration,
    pub(crate) _count: Counted,
}
// SAFETY: a listener may be used from any thread; the callback is Send + Sync.
unsafe impl Send for ListenerInner {}
unsafe impl Sync for ListenerInner {}

impl Drop for ListenerInner {
    fn drop(&mut self) {
        self.registration.unregister();
        // SAFETY: made once, destroyed once. From inside its own callback this does not wait.
        unsafe { sys::memcg_listener_destroy(self.ptr.as_ptr()) }
    }
}

/// A notification registration; dropping the last clone unregisters it.
#[derive(Clone)]
pub struct Listener {
    pub(crate) inner: Arc<ListenerInner>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Listener(delivered {})", self.delivered())
    }
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reservation({} bytes)", self.bytes())
    }
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Controller({} handles)", self.open_handles())
    }
}

impl Listener {
    /// Notifications delivered so far.
    pub fn delivered(&self) -> u64 {
        // SAFETY: valid listener.
        unsafe { sys::memcg_listener_delivered(self.inner.ptr.as_ptr()) }
    }

    /// True once its group was removed.
    pub fn removed(&self) -> bool {
        // SAFETY: valid listener.
        unsafe { sys::memcg_listener_removed(self.inner.ptr.as_ptr()) != 0 }
    }
}
