package memcg

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"context"
	"runtime"
	"runtime/cgo"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// CancelReason is why a kill callback runs.
type CancelReason int

// The reasons (memcg_cancel_reason).
const (
	OOMKill CancelReason = 0 // the OOM killer chose the member: release its memory
	Preempt CancelReason = 1 // a waiting charge of a higher class asks for memory back
	Other   CancelReason = 2 // a reason this package does not know yet
	// Operator: someone outside the process killed the member or asked for memory back
	// (memcg::http actions, the process budget); Killed tells which.
	Operator CancelReason = 3
)

func (r CancelReason) String() string {
	switch r {
	case OOMKill:
		return "oom-kill"
	case Preempt:
		return "preempt"
	case Other:
		return "other"
	case Operator:
		return "operator"
	}
	return "CancelReason(" + strconv.Itoa(int(r)) + ")"
}

// KillFunc runs on the goroutine (thread) that ran the OOM killer. It may Close the member.
type KillFunc func(m *Member, reason CancelReason) error

type memberState struct {
	handle
	ctl          *Controller
	group        *Group
	ptr          *C.memcg_member
	name         string
	id           uint64
	cb           cgo.Handle
	mu           sync.Mutex
	reservations map[*reservationState]struct{}
}

// Member is something the OOM killer may kill.
type Member struct{ *memberState }

type killEntry struct {
	state *memberState
	fn    KillFunc
}

// NewMember joins group with scoreAdj (-1000 immune .. 1000); onKill may be nil.
func NewMember(g *Group, name string, scoreAdj int, onKill KillFunc) (*Member, error) {
	if g == nil {
		return nil, ErrClosed
	}
	cname, err := cString(name, "member "+name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cname))
	s := &memberState{ctl: g.ctl, group: g, name: name, reservations: map[*reservationState]struct{}{}}
	if err := g.pin(); err != nil {
		return nil, err
	}
	defer g.unpin()
	if err := g.ctl.attach(&s.handle, 2); err != nil {
		return nil, err
	}
	if onKill != nil {
		s.cb = cgo.NewHandle(&killEntry{state: s, fn: onKill})
	}
	code := C.memcg_go_member_create(g.ptr, cname, C.int(scoreAdj), C.uintptr_t(s.cb), &s.ptr)
	if err := check(code, "member "+name); err != nil {
		if s.cb != 0 {
			s.cb.Delete()
		}
		g.ctl.detach(&s.handle)
		return nil, err
	}
	s.id = uint64(C.memcg_member_id(s.ptr))
	s.ready(s.closeReservations, s.destroy)
	m := &Member{s}
	runtime.SetFinalizer(m, func(m *Member) { _ = m.Close() })
	return m, nil
}

func (s *memberState) closeReservations() {
	s.mu.Lock()
	var rs []*reservationState
	for r := range s.reservations {
		rs = append(rs, r)
	}
	s.mu.Unlock()
	for _, r := range rs {
		_ = r.close()
	}
}

// destroy runs once no call pins the member. Its reservations were closed by Close, and one
// made while Close ran (its creation pinned the member) is closed now; one that a call on
// another goroutine still pins (Cancel, Shrink, Bytes) is freed when that call returns, after
// this: the C API keeps a member alive while reservations are bound to it.
func (s *memberState) destroy() {
	s.closeReservations()
	C.memcg_member_destroy(s.ptr)
	if s.cb != 0 {
		s.cb.Delete() // a kill callback racing with this finds no handle and returns
	}
	s.ctl.detach(&s.handle)
}

// Close gives its charges back and leaves the group, after closing its reservations; from its
// own kill callback during its own call, when that call returns.
func (m *Member) Close() error { return m.close() }

// Closed tells whether Close was called.
func (m *Member) Closed() bool { return m.isClosed() }

// Name is its name.
func (m *Member) Name() string { return m.name }

// ID is its id in the controller (never reused), the one GET /v1/members lists and
// POST /v1/members/<id>/kill takes (docs/http.md); also after Close.
func (m *Member) ID() uint64 { return m.id }

// Charge charges bytes for this member (counted in its badness).
func (m *Member) Charge(bytes uint64, flags uint) (bool, error) {
	if err := m.pin(); err != nil {
		return false, err
	}
	status := C.memcg_member_charge(m.ptr, C.uint64_t(bytes), C.uint(flags))
	m.unpin()
	return chargeResult(status, "charge of "+m.name, m.group.groupState)
}

// Uncharge uncharges up to what it holds and returns the bytes uncharged.
func (m *Member) Uncharge(bytes uint64) (uint64, error) {
	if err := m.pin(); err != nil {
		return 0, err
	}
	defer m.unpin()
	return uint64(C.memcg_member_uncharge(m.ptr, C.uint64_t(bytes))), nil
}

// SetScoreAdj changes its oom_score_adj (-1000 immune .. 1000); the next OOM decision sees it.
func (m *Member) SetScoreAdj(scoreAdj int) error {
	if scoreAdj < -1000 || scoreAdj > 1000 {
		return &OSError{Op: "score_adj " + strconv.Itoa(scoreAdj), Errno: syscall.EINVAL}
	}
	if err := m.pin(); err != nil {
		return err
	}
	defer m.unpin()
	return check(C.memcg_member_set_score_adj(m.ptr, C.int(scoreAdj)),
		"score_adj "+strconv.Itoa(scoreAdj))
}

// ScoreAdj is its oom_score_adj now.
func (m *Member) ScoreAdj() (int, error) {
	if err := m.pin(); err != nil {
		return 0, err
	}
	defer m.unpin()
	return int(C.memcg_member_score_adj(m.ptr)), nil
}

// Killed tells whether the OOM killer killed it.
func (m *Member) Killed() (bool, error) {
	if err := m.pin(); err != nil {
		return false, err
	}
	defer m.unpin()
	return C.memcg_member_killed(m.ptr) != 0, nil
}

// OOMPolicy is what a reservation that does not fit may do.
type OOMPolicy int

// The policies (MEMCG_OOM_*).
const (
	OOMKernel OOMPolicy = 0 // one charge; over 32 KiB never OOM-kills
	OOMPieces OOMPolicy = 1 // 32 KiB pieces: every request is OOM-eligible
	OOMNever  OOMPolicy = 2 // reclaim and retries only
)

func (p OOMPolicy) String() string {
	switch p {
	case OOMKernel:
		return "kernel"
	case OOMPieces:
		return "pieces"
	case OOMNever:
		return "never"
	}
	return "OOMPolicy(" + strconv.Itoa(int(p)) + ")"
}

// Priority is a waiting class.
type Priority int

// The classes (MEMCG_PRIORITY_*).
const (
	PriorityDefault Priority = -1
	PriorityLow     Priority = 0
	PriorityNormal  Priority = 1
	PriorityHigh    Priority = 2
)

func (p Priority) String() string {
	switch p {
	case PriorityDefault:
		return "default"
	case PriorityLow:
		return "low"
	case PriorityNormal:
		return "normal"
	case PriorityHigh:
		return "high"
	}
	return "Priority(" + strconv.Itoa(int(p)) + ")"
}

type reservationState struct {
	handle
	ctl    *Controller
	group  *Group
	member *Member // kept: the member outlives its reservations
	ptr    *C.memcg_reservation
}

// Reservation is bytes held for one query or job; Close gives them back.
type Reservation struct{ *reservationState }

// NewReservation makes a reservation on group.
func NewReservation(g *Group, oom OOMPolicy, prio Priority) (*Reservation, error) {
	if g == nil {
		return nil, ErrClosed
	}
	return newReservation(g, nil, oom, prio)
}

// Reservation makes a reservation charged to this member.
func (m *Member) Reservation(oom OOMPolicy, prio Priority) (*Reservation, error) {
	return newReservation(m.group, m, oom, prio)
}

func newReservation(g *Group, m *Member, oom OOMPolicy, prio Priority) (*Reservation, error) {
	s := &reservationState{ctl: g.ctl, group: g, member: m}
	owner := &g.handle
	if m != nil {
		owner = &m.handle
	}
	if err := owner.pin(); err != nil {
		return nil, err
	}
	defer owner.unpin()
	if err := g.ctl.attach(&s.handle, 0); err != nil {
		return nil, err
	}
	var code C.int
	if m != nil {
		code = C.memcg_reservation_create(nil, m.ptr, C.int(oom), C.int(prio), &s.ptr)
	} else {
		code = C.memcg_reservation_create(g.ptr, nil, C.int(oom), C.int(prio), &s.ptr)
	}
	if err := check(code, "reservation"); err != nil {
		g.ctl.detach(&s.handle)
		return nil, err
	}
	if m != nil { // under the member's pin: before its Close can list them
		m.mu.Lock()
		m.reservations[s] = struct{}{}
		m.mu.Unlock()
	}
	s.ready(nil, func() {
		C.memcg_reservation_destroy(s.ptr)
		if m != nil {
			m.mu.Lock()
			delete(m.reservations, s)
			m.mu.Unlock()
		}
		s.ctl.detach(&s.handle)
	})
	r := &Reservation{s}
	runtime.SetFinalizer(r, func(r *Reservation) { _ = r.Close() })
	return r, nil
}

// Close gives everything back and frees it.
func (r *Reservation) Close() error { return r.close() }

// Closed tells whether Close was called.
func (r *Reservation) Closed() bool { return r.isClosed() }

// begin pins the reservation and its member for one request; end unpins them.
func (r *Reservation) begin() error {
	if err := r.pin(); err != nil {
		return err
	}
	if r.member != nil {
		if err := r.member.pin(); err != nil {
			r.unpin()
			return err
		}
	}
	return nil
}

func (r *Reservation) end(status C.memcg_reserve_status, op string) (bool, error) {
	if r.member != nil {
		r.member.unpin()
	}
	r.unpin()
	switch status {
	case C.MEMCG_RESERVE_OK:
		return false, nil
	case C.MEMCG_RESERVE_FORCED:
		return true, nil
	}
	return false, refusal(Status(status), op, r.group.groupState)
}

// Reserve makes it hold total bytes (may OOM-kill, per its policy); forced past max if true.
func (r *Reservation) Reserve(total uint64) (bool, error) {
	if err := r.begin(); err != nil {
		return false, err
	}
	return r.end(C.memcg_reserve(r.ptr, C.uint64_t(total)), "reserve")
}

// ReserveFor is Reserve waiting up to timeout for room (never OOM-kills).
func (r *Reservation) ReserveFor(total uint64, timeout time.Duration) (bool, error) {
	if err := r.begin(); err != nil {
		return false, err
	}
	return r.end(C.memcg_reserve_for(r.ptr, C.uint64_t(total), nanos(timeout)), "reserve")
}

// ReserveUntil is Reserve with a deadline on Controller.NowNS.
func (r *Reservation) ReserveUntil(total, deadlineNS uint64) (bool, error) {
	if err := r.begin(); err != nil {
		return false, err
	}
	return r.end(C.memcg_reserve_until(r.ptr, C.uint64_t(total), C.uint64_t(deadlineNS)), "reserve")
}

// ReserveContext is Reserve waiting for room (never OOM-kills) until ctx is done: its deadline
// is the request's, and a cancelled ctx cancels the reservation as Cancel does (every later
// request fails with Cancelled too). The error then matches both the Status and ctx.Err()
// (errors.Is(err, context.Canceled)).
func (r *Reservation) ReserveContext(ctx context.Context, total uint64) (bool, error) {
	return r.withContext(ctx, "reserve", func(deadline C.uint64_t) C.memcg_reserve_status {
		return C.memcg_reserve_until(r.ptr, C.uint64_t(total), deadline)
	})
}

// GrowFor adds bytes, waiting up to timeout for room (never OOM-kills).
func (r *Reservation) GrowFor(bytes uint64, timeout time.Duration) (bool, error) {
	if err := r.begin(); err != nil {
		return false, err
	}
	return r.end(C.memcg_reservation_grow_for(r.ptr, C.uint64_t(bytes), nanos(timeout)), "grow")
}

// GrowUntil adds bytes, waiting until deadlineNS on Controller.NowNS at most: a query whose
// requests share one deadline passes it to each.
func (r *Reservation) GrowUntil(bytes, deadlineNS uint64) (bool, error) {
	if err := r.begin(); err != nil {
		return false, err
	}
	return r.end(C.memcg_reservation_grow_until(r.ptr, C.uint64_t(bytes), C.uint64_t(deadlineNS)),
		"grow")
}

// GrowContext is GrowUntil with ctx's deadline, cancelled with ctx as ReserveContext is.
func (r *Reservation) GrowContext(ctx context.Context, bytes uint64) (bool, error) {
	return r.withContext(ctx, "grow", func(deadline C.uint64_t) C.memcg_reserve_status {
		return C.memcg_reservation_grow_until(r.ptr, C.uint64_t(bytes), deadline)
	})
}

// withContext runs a waiting request with ctx's deadline on the controller's clock; a
// goroutine cancels the reservation if ctx is cancelled meanwhile (Go 1.19 has no
// context.AfterFunc), and is done before the request returns. An expired deadline is the C call's own timeout, never a cancel.
func (r *Reservation) withContext(ctx context.Context, op string,
	request func(deadline C.uint64_t) C.memcg_reserve_status) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, &RefusedError{Op: op, Status: contextStatus(err), Context: err}
	}
	if err := r.begin(); err != nil {
		return false, err
	}
	// No deadline: about 146 years, far from the clock's overflow.
	now := uint64(C.memcg_controller_now_ns(r.ctl.ptr))
	deadline := C.uint64_t(now + 1<<62)
	at, hasDeadline := ctx.Deadline()
	if hasDeadline {
		deadline = C.uint64_t(now + uint64(nanos(time.Until(at))))
	}
	stop := make(chan struct{})
	// The watcher is waited for before the request returns: a Cancel still in flight holds a
	// pin, and a Close right after the request would otherwise free the reservation late.
	watched := make(chan struct{})
	if ctx.Done() != nil {
		go func() {
			defer close(watched)
			select {
			case <-ctx.Done():
				if ctx.Err() == context.Canceled {
					_ = r.Cancel()
				}
			case <-stop:
			}
		}()
	} else {
		close(watched)
	}
	status := request(deadline)
	close(stop)
	<-watched
	forced, err := r.end(status, op)
	if e, ok := err.(*RefusedError); ok {
		switch {
		case e.Status == TimedOut && hasDeadline:
			// The context's deadline, on the controller's clock: it may pass there a moment
			// before the context's own timer fires.
			e.Context = context.DeadlineExceeded
		case e.Status == Cancelled && ctx.Err() != nil:
			e.Context = ctx.Err()
		}
	}
	return forced, err
}

func contextStatus(err error) Status {
	if err == context.DeadlineExceeded {
		return TimedOut
	}
	return Cancelled
}

// Grow adds bytes.
func (r *Reservation) Grow(bytes uint64) (bool, error) {
	if err := r.begin(); err != nil {
		return false, err
	}
	return r.end(C.memcg_reservation_grow(r.ptr, C.uint64_t(bytes)), "grow")
}

// Shrink gives back bytes (at most what it holds).
func (r *Reservation) Shrink(bytes uint64) error {
	if err := r.pin(); err != nil {
		return err
	}
	C.memcg_reservation_shrink(r.ptr, C.uint64_t(bytes))
	r.unpin()
	return nil
}

// Bytes is what it holds.
func (r *Reservation) Bytes() (uint64, error) {
	if err := r.pin(); err != nil {
		return 0, err
	}
	defer r.unpin()
	return uint64(C.memcg_reservation_bytes(r.ptr)), nil
}

// Cancel makes its waiting request and every later one fail with Cancelled. Any goroutine.
func (r *Reservation) Cancel() error {
	if err := r.pin(); err != nil {
		return err
	}
	defer r.unpin()
	C.memcg_reservation_cancel(r.ptr)
	return nil
}
