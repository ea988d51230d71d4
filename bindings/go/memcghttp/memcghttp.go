// Package memcghttp starts memcg's HTTP endpoint (docs/http.md: /metrics, the groups' files,
// the pages, the event stream and, with writes allowed behind a token, the writes and the
// actions on members) for a controller of package memcg, over the C API of
// include/memcg/c/http.h.
//
// It is a package of its own because its library, libmemcg_http (pkg-config memcg-c-http),
// needs libmicrohttpd, which package memcg does not: a program that imports only memcg links
// only libmemcg.
package memcghttp

// #cgo pkg-config: memcg-c-http
// #include <stdlib.h>
// #include <memcg/c/http.h>
import "C"

import (
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"example.org/memcg"
)

// Options are the server's options by name, as text: the names of memcg_server_set
// (include/memcg/c/http.h), which are those of the C++ ServerOptions, a duration's unit in its
// name. The ones a service sets most:
//
//	"address"        "127.0.0.1" (the default)
//	"port"           "0" (the default): a free one, Port tells which
//	"threads"        the worker threads
//	"allow_writes"   "1" or "true": the writes and the actions (kill, preempt, the budget)
//	"token"          the bearer token writes and actions need over TCP
//	"token_name"     what the audit records calls the token
//	"unix_socket"    a path: serve there too (mode 0600); "unix_allowed_uids" who may write
//	"read_timeout_ms", "event_stream_lag", "max_event_streams", ...
type Options map[string]string

// Server is memcg's HTTP endpoint for one controller; it counts as one of the controller's
// handles (Controller.OpenHandles), and Controller.Close stops and frees it first. A started
// server stays reachable, and so does its controller, until Stop or Close, as a running
// net/http server would. Every method may be called from any goroutine.
type Server struct {
	c *memcg.Attached
	// ptr is set before c is returned by Attach and never changes.
	ptr *C.memcg_server
}

// started holds the started servers by their C handle, so that the finalizer of one the
// program forgot does not stop it. Only the C handle is the key: the function that frees it
// is reachable from the controller and must not keep the Server reachable.
var started sync.Map

// NewServer makes a stopped server for ctl with opts (the defaults for the others). EINVAL
// for an unknown name or a value not of the option's form, naming it (nothing is made then);
// the ranges are checked by Start.
func NewServer(ctl *memcg.Controller, opts Options) (*Server, error) {
	if ctl == nil {
		return nil, memcg.ErrClosed
	}
	// In name order: the same option is named first by every run.
	names := make([]string, 0, len(opts))
	for name := range opts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := checkText(name, opts[name]); err != nil {
			return nil, err
		}
	}
	s := &Server{}
	c, err := ctl.Attach(func(ctlPtr unsafe.Pointer) (func(), error) {
		var ptr *C.memcg_server
		if code := C.memcg_server_create((*C.memcg_controller)(ctlPtr), &ptr); code != 0 {
			return nil, &memcg.OSError{Op: "http server", Errno: syscall.Errno(code)}
		}
		for _, name := range names {
			if err := set(ptr, name, opts[name]); err != nil {
				C.memcg_server_destroy(ptr)
				return nil, err
			}
		}
		s.ptr = ptr
		return func() {
			C.memcg_server_destroy(ptr)
			started.Delete(ptr) // closed by Close or by Controller.Close
		}, nil
	})
	if err != nil {
		return nil, err
	}
	s.c = c
	runtime.SetFinalizer(s, func(s *Server) { _ = s.Close() })
	return s, nil
}

// checkText refuses a NUL inside a name or a value, which C would cut it at.
func checkText(name, value string) error {
	if strings.IndexByte(name, 0) >= 0 || strings.IndexByte(value, 0) >= 0 {
		return &memcg.OSError{Op: "http option " + memcg.Quote(name) + ": holds a NUL",
			Errno: syscall.EINVAL}
	}
	return nil
}

func set(ptr *C.memcg_server, name, value string) error {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	cvalue := C.CString(value)
	defer C.free(unsafe.Pointer(cvalue))
	if code := C.memcg_server_set(ptr, cname, cvalue); code != 0 {
		op := "http option " + memcg.Quote(name) + "=" + memcg.Quote(value)
		if name == "token" {
			op = "http option \"token\"" // never in a message
		}
		return &memcg.OSError{Op: op, Errno: syscall.Errno(code)}
	}
	return nil
}

// Set changes option name for the next Start. EINVAL as NewServer, EBUSY while it runs,
// ErrClosed after Close.
func (s *Server) Set(name, value string) error {
	if err := checkText(name, value); err != nil {
		return err
	}
	if err := s.c.Pin(); err != nil {
		return err
	}
	defer s.c.Unpin()
	return set(s.ptr, name, value)
}

// Start serves on background threads. An *memcg.OSError otherwise, with the library's message
// (errors.Is(err, syscall.EINVAL) for an option out of range, which the message names, or
// writes allowed without a token or a Unix socket; EALREADY when running; EADDRINUSE);
// a failed Start leaves it stopped, and it may be started again.
func (s *Server) Start() error {
	if err := s.c.Pin(); err != nil {
		return err
	}
	defer s.c.Unpin()
	var msg [512]C.char
	if code := C.memcg_server_start(s.ptr, &msg[0], C.size_t(len(msg))); code != 0 {
		return &memcg.OSError{Op: "start http server: " + C.GoString(&msg[0]),
			Errno: syscall.Errno(code)}
	}
	started.Store(s.ptr, s)
	return nil
}

// Port is the port bound while it runs (the chosen one for port 0), else 0.
func (s *Server) Port() int {
	if s.c.Pin() != nil {
		return 0
	}
	defer s.c.Unpin()
	return int(C.memcg_server_port(s.ptr))
}

// Running tells whether it is started and listening (false also for a moment while a lost
// listening socket is bound again).
func (s *Server) Running() bool {
	if s.c.Pin() != nil {
		return false
	}
	defer s.c.Unpin()
	return C.memcg_server_running(s.ptr) != 0
}

// Stop stops accepting, closes the connections (the event streams end) and joins the
// threads, within read_timeout_ms plus a second. Start may start it again. A callback that
// the server runs (a member's kill callback during an action) must not call the server's
// methods nor close the controller: Stop waits for the callback while holding what they need.
func (s *Server) Stop() {
	if s.c.Pin() != nil {
		return
	}
	defer s.c.Unpin()
	C.memcg_server_stop(s.ptr)
	started.Delete(s.ptr)
}

// Close stops it and frees it; ErrClosed the second time.
func (s *Server) Close() error { return s.c.Close() }

// Closed tells whether Close was called, or Controller.Close closed it.
func (s *Server) Closed() bool { return s.c.Closed() }
