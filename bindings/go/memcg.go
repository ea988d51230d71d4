// Package memcg is Linux memory-cgroup semantics inside a process, over libmemcg's C API
// (include/memcg/c/memcg.h) with cgo.
//
// Every handle has Close (a second Close returns ErrClosed, a call on a closed handle too) and a
// finalizer that closes it if the program forgot. Controller.Close closes what was made from it;
// every handle made from a controller keeps it alive, so a program that keeps only its groups
// keeps a working controller. A C object is freed only when no call of it is in flight.
// A member closes its reservations before itself; a reservation keeps its member. A handle
// closed while one of its calls runs (from a callback) is freed when that call returns.
// Set-up errors are *OSError (errors.Is(err, syscall.EINVAL)); refusals of the memory path are
// *RefusedError (errors.Is(err, memcg.TimedOut)). Callbacks are Go functions reached through
// runtime/cgo.Handle; a panic or an error they return is caught, counted and given to
// Controller.OnCallbackError, never unwound into C. Every type may be used from any goroutine
// but a Reservation's requests, one goroutine at a time (Cancel and Close from any).
//
// The library is found through pkg-config (memcg-c.pc, installed with the development files).
package memcg

// #cgo pkg-config: memcg-c
// #include <stdlib.h>
// #include <memcg/c/memcg.h>
import "C"

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// LibraryVersion is the loaded library's "MAJOR.MINOR.PATCH".
func LibraryVersion() string { return C.GoString(C.memcg_version_string()) }

// Compatible tells whether the loaded library serves this package (same major, for 0.x the same
// minor, not older than the header it was compiled with).
func Compatible() bool {
	v := uint(C.memcg_version())
	h := uint(C.MEMCG_C_VERSION_NUMBER)
	return v/10000 == h/10000 && (h/10000 != 0 || v/100%100 == h/100%100) && v >= h
}

type controllerState struct {
	handle
	ptr      *C.memcg_controller
	mu       sync.Mutex
	children map[*handle]struct{}
	failures atomic.Int64
	onError  atomic.Value // func(error, string)
}

// Controller is the tree of groups. The handles made from it hold this value, so its finalizer
// runs only once none of them is reachable.
type Controller struct{ *controllerState }

// NewController makes a controller with the default options.
func NewController() (*Controller, error) {
	s := &controllerState{children: map[*handle]struct{}{}}
	if err := check(C.memcg_controller_create(nil, &s.ptr), "controller"); err != nil {
		return nil, err
	}
	s.ready(s.closeChildren, func() { C.memcg_controller_destroy(s.ptr) })
	c := &Controller{s}
	runtime.SetFinalizer(c, func(c *Controller) { _ = c.Close() })
	return c, nil
}

// Close closes every handle made from it, then the controller (when their calls returned).
func (c *Controller) Close() error { return c.close() }

// Closed tells whether Close was called.
func (c *Controller) Closed() bool { return c.isClosed() }

// OnCallbackError sets the function that receives a callback's panic or error (default: none;
// CallbackFailures counts them either way).
func (c *Controller) OnCallbackError(f func(err error, where string)) { c.onError.Store(f) }

// CallbackFailures counts callbacks that panicked or returned an error.
func (c *Controller) CallbackFailures() int64 { return c.failures.Load() }

// OpenHandles counts handles made from it whose C handle is not yet freed.
func (c *Controller) OpenHandles() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.children)
}

func (s *controllerState) closeChildren() {
	s.mu.Lock()
	var kids []*handle
	for h := range s.children {
		kids = append(kids, h)
	}
	s.mu.Unlock()
	for _, rank := range []int{0, 1, 2, 3} { // reservations and servers, listeners, members, groups
		for _, h := range kids {
			if h.rank == rank {
				_ = h.close()
			}
		}
	}
}

// attach counts a child (pinning the controller until the child's C handle is freed).
// The pin and the insertion are one step under mu, which closeChildren's snapshot takes too: a
// child either sees the controller closing or is in the snapshot that Close closes.
func (s *controllerState) attach(h *handle, rank int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.pin(); err != nil {
		return err
	}
	h.rank = rank
	s.children[h] = struct{}{}
	return nil
}

func (s *controllerState) detach(h *handle) {
	s.mu.Lock()
	delete(s.children, h)
	s.mu.Unlock()
	s.unpin()
}

func (s *controllerState) report(err error, where string) {
	s.failures.Add(1)
	if f, ok := s.onError.Load().(func(error, string)); ok && f != nil {
		func() {
			defer func() { _ = recover() }()
			f(err, where)
		}()
	}
}

// NowNS is the controller's clock in nanoseconds, for deadlines (ReserveUntil, GrowUntil).
func (c *Controller) NowNS() (uint64, error) {
	if err := c.pin(); err != nil {
		return 0, err
	}
	defer c.unpin()
	return uint64(C.memcg_controller_now_ns(c.ptr)), nil
}

// Drain gives back every unit pre-charged in the per-CPU stocks, so that memory.current is
// exactly what is charged (0 once everything was released). Writing memory.reclaim drains a
// subtree too, but fails with EAGAIN when nothing was reclaimable.
func (c *Controller) Drain() error {
	if err := c.pin(); err != nil {
		return err
	}
	defer c.unpin()
	return check(C.memcg_controller_drain_stocks(c.ptr), "drain")
}

// FlushStats folds every pending statistic, so that the next memory.stat read is exact.
func (c *Controller) FlushStats() error {
	if err := c.pin(); err != nil {
		return err
	}
	defer c.unpin()
	return check(C.memcg_controller_flush_stats(c.ptr), "flush stats")
}

// OOMLogLastSeq is the sequence number of the latest OOM or preemption report (0 for none).
func (c *Controller) OOMLogLastSeq() (uint64, error) {
	if err := c.pin(); err != nil {
		return 0, err
	}
	defer c.unpin()
	return uint64(C.memcg_oom_log_last_seq(c.ptr)), nil
}

// OOMLog returns the reports with a sequence number above after (0: all the log keeps), oldest
// first, one line each ("oom_kill seq=3 t=1.250s domain=/a victim=q1 ...").
func (c *Controller) OOMLog(after uint64) ([]string, error) {
	if err := c.pin(); err != nil {
		return nil, err
	}
	defer c.unpin()
	text, err := readText("oom log", func(buf *C.char, size C.size_t, n *C.size_t) C.int {
		return C.memcg_oom_log_read(c.ptr, C.uint64_t(after), buf, size, n)
	})
	return lines(text), err
}

func lines(text string) []string {
	if text == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(text, "\n"), "\n")
}

// readText runs a C call that writes a text into a caller's buffer (ERANGE when too small):
// asked for its length, then read, again when it grew in between.
func readText(op string, call func(buf *C.char, size C.size_t, n *C.size_t) C.int) (string, error) {
	for {
		var n C.size_t
		code := call(nil, 0, &n)
		if code != 0 && code != C.int(syscall.ERANGE) {
			return "", check(code, op)
		}
		buf := make([]byte, int(n)+1)
		cbuf := (*C.char)(unsafe.Pointer(&buf[0]))
		code = call(cbuf, C.size_t(len(buf)), &n)
		if code == C.int(syscall.ERANGE) {
			continue // grew in between
		}
		if err := check(code, op); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
}

// cString is C.CString refusing a NUL inside s, which C.CString would cut s at: an
// *OSError with EINVAL (errors.Is(err, syscall.EINVAL)). Free the result with C.free.
func cString(s, op string) (*C.char, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, &OSError{Op: op + ": " + quote(s) + " holds a NUL", Errno: syscall.EINVAL}
	}
	return C.CString(s), nil
}

// Quote is s as the package's error messages show a value (memcg_quote): in double quotes, bytes
// outside printable ASCII escaped, at most 64 bytes of it, then "...". For packages beside this
// one (memcghttp) whose messages quote what a caller gave.
func Quote(s string) string { return quote(s) }

// quote is s for an error message, bounded by the C API (memcg_quote): at most 64 bytes of it,
// then "...".
func quote(s string) string {
	var buf [C.MEMCG_QUOTE_SIZE]C.char
	var n C.size_t
	text := C.CString(s)
	defer C.free(unsafe.Pointer(text))
	if C.memcg_quote(text, C.size_t(len(s)), &buf[0], C.size_t(len(buf)), &n) != 0 {
		return `"?"`
	}
	return C.GoStringN(&buf[0], C.int(n))
}

type groupState struct {
	handle
	ctl *Controller
	ptr *C.memcg_group
}

// Group is a reference to one group; files by name with Read and Write.
type Group struct{ *groupState }

// CreateGroup creates the group at path ("a/b"; the parent must exist).
func (c *Controller) CreateGroup(path string) (*Group, error) { return c.group(path, true) }

// Group returns the online group at path ("/" or "" for the root).
func (c *Controller) Group(path string) (*Group, error) { return c.group(path, false) }

func (c *Controller) group(path string, create bool) (*Group, error) {
	op := "lookup " + path
	if create {
		op = "create " + path
	}
	cpath, err := cString(path, op)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cpath))
	s := &groupState{ctl: c}
	if err := c.attach(&s.handle, 3); err != nil {
		return nil, err
	}
	var code C.int
	if create {
		code = C.memcg_group_create(c.ptr, cpath, &s.ptr)
	} else {
		code = C.memcg_group_lookup(c.ptr, cpath, &s.ptr)
	}
	if err := check(code, op); err != nil {
		c.detach(&s.handle)
		return nil, err
	}
	s.ready(nil, func() {
		C.memcg_group_release(s.ptr)
		s.ctl.detach(&s.handle)
	})
	g := &Group{s}
	runtime.SetFinalizer(g, func(g *Group) { _ = g.Close() })
	return g, nil
}

// RemoveGroup takes the group at path offline (like rmdir).
func (c *Controller) RemoveGroup(path string) error {
	cpath, err := cString(path, "remove "+path)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cpath))
	if err := c.pin(); err != nil {
		return err
	}
	defer c.unpin()
	return check(C.memcg_group_remove(c.ptr, cpath), "remove "+path)
}

// Close releases the reference.
func (g *Group) Close() error { return g.close() }

// Path is the group's path ("" for the root).
func (g *Group) Path() (string, error) {
	if err := g.pin(); err != nil {
		return "", err
	}
	defer g.unpin()
	var n C.size_t
	C.memcg_group_path(g.ptr, nil, 0, &n)
	buf := make([]byte, int(n)+1)
	cbuf := (*C.char)(unsafe.Pointer(&buf[0]))
	if err := check(C.memcg_group_path(g.ptr, cbuf, C.size_t(len(buf)), &n), "path"); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// Read returns the text of file name ("memory.stat", ...).
func (g *Group) Read(name string) (string, error) {
	cname, err := cString(name, "read "+name)
	if err != nil {
		return "", err
	}
	defer C.free(unsafe.Pointer(cname))
	if err := g.pin(); err != nil {
		return "", err
	}
	defer g.unpin()
	return readText("read "+name, func(buf *C.char, size C.size_t, n *C.size_t) C.int {
		return C.memcg_group_read(g.ptr, cname, buf, size, n)
	})
}

// List returns the paths of its online descendants (not itself), a parent before its children,
// siblings in name order. From the root ("/") for the whole tree.
func (g *Group) List() ([]string, error) {
	if err := g.pin(); err != nil {
		return nil, err
	}
	defer g.unpin()
	text, err := readText("list", func(buf *C.char, size C.size_t, n *C.size_t) C.int {
		return C.memcg_group_list(g.ptr, buf, size, n)
	})
	return lines(text), err
}

// Write writes value to file name; a rejected write changes nothing. A NUL inside value is
// EINVAL (the C API refuses it).
func (g *Group) Write(name, value string) error {
	cname, err := cString(name, "write "+name)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cname))
	if err := g.pin(); err != nil {
		return err
	}
	defer g.unpin()
	// C.CString copies every byte of value, a NUL included: the C API sees the whole length.
	cvalue := C.CString(value)
	defer C.free(unsafe.Pointer(cvalue))
	return check(C.memcg_group_write(g.ptr, cname, cvalue, C.size_t(len(value)), 0),
		"write "+name+"="+quote(value))
}

// Key reads one key of a flat-keyed file ("memory.stat", "memory.events"); 0 when absent.
func (g *Group) Key(file, key string) (uint64, error) {
	text, err := g.Read(file)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, nil
}

// Charge flags (MEMCG_CHARGE_*).
const (
	ChargeMayBlock     = uint(C.MEMCG_CHARGE_MAY_BLOCK)
	ChargeNoRetry      = uint(C.MEMCG_CHARGE_NO_RETRY)
	ChargeRetryMayFail = uint(C.MEMCG_CHARGE_RETRY_MAY_FAIL)
	ChargeNoFail       = uint(C.MEMCG_CHARGE_NO_FAIL)
	ChargeHighPrio     = uint(C.MEMCG_CHARGE_HIGH_PRIO)
	ChargeDefault      = uint(C.MEMCG_CHARGE_DEFAULT)
	// ChargeNoWait never sleeps nor reclaims: NoMem at once when the limit holds (for an event
	// loop that must not stall).
	ChargeNoWait = uint(C.MEMCG_CHARGE_NOWAIT)
)

// Charge charges bytes (whole units); forced is true when charged past max.
func (g *Group) Charge(bytes uint64, flags uint) (forced bool, err error) {
	if err := g.pin(); err != nil {
		return false, err
	}
	status := C.memcg_charge(g.ptr, C.uint64_t(bytes), C.uint(flags))
	g.unpin()
	return chargeResult(status, "charge", g.groupState)
}

// Uncharge uncharges bytes charged to this group by Charge.
func (g *Group) Uncharge(bytes uint64) error {
	if err := g.pin(); err != nil {
		return err
	}
	C.memcg_uncharge(g.ptr, C.uint64_t(bytes))
	g.unpin()
	return nil
}

func chargeResult(status C.memcg_charge_status, op string, g *groupState) (bool, error) {
	switch status {
	case C.MEMCG_CHARGE_OK:
		return false, nil
	case C.MEMCG_CHARGE_FORCED:
		return true, nil
	case C.MEMCG_CHARGE_NOMEM:
		return false, refusal(NoMem, op, g)
	default:
		return false, refusal(Invalid, op, g)
	}
}

// refusal builds the error of a refusal; for a limit that held it reads, on the slow path, which
// group on the path has the least room under memory.max.
func refusal(status Status, op string, gs *groupState) error {
	g := &Group{gs}
	path, _ := g.Path()
	e := &RefusedError{Op: op, Status: status, Group: path}
	if !status.IsLimit() || path == "" {
		return e
	}
	c := gs.ctl
	parts := strings.Split(path, "/")
	var best int64
	for i := len(parts); i > 0; i-- {
		at := strings.Join(parts[:i], "/")
		node, err := c.Group(at)
		if err != nil {
			continue
		}
		max, err1 := node.Read("memory.max")
		cur, err2 := node.Read("memory.current")
		_ = node.Close()
		if err1 != nil || err2 != nil {
			continue
		}
		m, err1 := strconv.ParseInt(strings.TrimSpace(max), 10, 64)
		u, err2 := strconv.ParseInt(strings.TrimSpace(cur), 10, 64)
		if err1 != nil || err2 != nil {
			continue // "max": no limit here
		}
		if room := m - u; e.LimitingGroup == "" || room < best {
			best, e.LimitingGroup = room, at
		}
	}
	return e
}

func nanos(d time.Duration) C.uint64_t {
	if d < 0 {
		return 0
	}
	return C.uint64_t(d)
}
