//! The HTTP endpoint (feature `http`, over libmemcg_http's `include/memcg/c/http.h`): /metrics,
//! the groups' files, the pages, the event stream and, with writes allowed behind a token or a
//! Unix socket's uids, the writes and the operator's actions. docs/http.md describes every
//! endpoint.
use std::ffi::{c_char, CString};
use std::ptr::{null_mut, NonNull};

use memcg_sys as sys;

use crate::{check, cstring, libc_eio, quote, Controller, Counted, Error, Result};

/// A start's message: the C API cuts it to the buffer.
const MESSAGE_SIZE: usize = 1024;

/// An HTTP server for a controller, stopped until [`Server::start`]. Options are set by name
/// as text ([`Server::set`]): `address`, `port`, `threads`, `allow_writes`, `token`,
/// `unix_socket`, ... (the list in http.h). It keeps its controller alive; dropping it stops
/// it (joining its threads: never drop it from a callback that runs on them, a kill callback
/// an action runs included). `Send + Sync`: the C API serializes the calls of one server.
pub struct Server {
    ptr: NonNull<sys::memcg_server>,
    count: Counted,
}
// SAFETY: every call of the C server takes its mutex; port and running only read.
unsafe impl Send for Server {}
unsafe impl Sync for Server {}

impl Server {
    /// A stopped server for `controller` with the default options: 127.0.0.1, a free port,
    /// writes and actions off.
    pub fn new(controller: &Controller) -> Result<Server> {
        let mut out = null_mut();
        // SAFETY: valid controller and out pointer.
        check(
            unsafe { sys::memcg_server_create(controller.ptr(), &mut out) },
            || "server".into(),
        )?;
        let ptr = NonNull::new(out).ok_or_else(|| Error::os(libc_eio(), "server"))?;
        Ok(Server {
            ptr,
            count: Counted::new(controller),
        })
    }

    /// The controller it serves.
    pub fn controller(&self) -> &Controller {
        &self.count.0
    }

    /// Sets option `name` to `value` for the next start ("port" "9464", "allow_writes" "1",
    /// "read_timeout_ms" "2000"); chains. [`Error::Os`] EINVAL for an unknown name or a value
    /// not of the option's form (ranges are checked by start), EBUSY while running; nothing
    /// changes then. The token's value never appears in an error.
    pub fn set(&self, name: &str, value: &str) -> Result<&Server> {
        let shown = || {
            if name.contains("token") && name != "token_name" {
                format!("server option {name}")
            } else {
                format!("server option {name}={}", quote(value))
            }
        };
        let n = cstring(name, "server option")?;
        let v = CString::new(value)
            .map_err(|_| Error::InvalidArgument(format!("{} holds a NUL", shown())))?;
        // SAFETY: valid server; NUL-terminated strings.
        check(
            unsafe { sys::memcg_server_set(self.ptr.as_ptr(), n.as_ptr(), v.as_ptr()) },
            shown,
        )?;
        Ok(self)
    }

    /// Starts serving on background threads. [`Error::Os`] with the library's message: EINVAL
    /// for an option out of range (named) or writes allowed without a token or a Unix socket,
    /// EALREADY when running, EADDRINUSE (or the bind's errno), ... It stays stopped then and
    /// may be started again.
    pub fn start(&self) -> Result<()> {
        let mut message = [0u8; MESSAGE_SIZE];
        // SAFETY: valid server; the buffer holds MESSAGE_SIZE bytes.
        let code = unsafe {
            sys::memcg_server_start(
                self.ptr.as_ptr(),
                message.as_mut_ptr().cast::<c_char>(),
                message.len(),
            )
        };
        check(code, || {
            let end = message.iter().position(|&b| b == 0).unwrap_or(0);
            format!("server start: {}", String::from_utf8_lossy(&message[..end]))
        })
    }

    /// The port bound while running (the chosen one for port 0), else 0.
    pub fn port(&self) -> u16 {
        // SAFETY: valid server.
        u16::try_from(unsafe { sys::memcg_server_port(self.ptr.as_ptr()) }).unwrap_or(0)
    }

    /// True while started and listening.
    pub fn running(&self) -> bool {
        // SAFETY: valid server.
        unsafe { sys::memcg_server_running(self.ptr.as_ptr()) != 0 }
    }

    /// Stops accepting, closes the connections and joins the threads (within read_timeout_ms
    /// plus a second). Does nothing when stopped; it may be started again.
    pub fn stop(&self) {
        // SAFETY: valid server.
        unsafe { sys::memcg_server_stop(self.ptr.as_ptr()) }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: made by memcg_server_create, destroyed once (it stops first); the controller
        // (in `count`) is released after.
        unsafe { sys::memcg_server_destroy(self.ptr.as_ptr()) }
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.running() {
            write!(f, "Server(port {})", self.port())
        } else {
            f.write_str("Server(stopped)")
        }
    }
}
