package memcg

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"runtime"
	"runtime/cgo"
	"sync"
	"time"
	"unsafe"
)

// CancelReason is why a kill callback runs.
type CancelReason int

// The reasons (memcg_cancel_reason).
const (
	OomKill CancelReason = 0 // the OOM killer chose the member: release its memory
	Preempt CancelReason = 1 // a waiting charge of a higher class asks for memory back
	Other   CancelReason = 2
	// Operator: someone outside the process killed the member or asked for memory back
	// (memcg::http actions, the process budget); Killed tells which.
	Operator CancelReason = 3
)

// KillFunc runs on the goroutine (thread) that ran the OOM killer. It may Close the member.
type KillFunc func(m *Member, reason CancelReason) error

type memberState struct {
	handle
	ctl          *controllerState
	group        *Group
	ptr          *C.memcg_member
	name         string
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
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	code := C.memcg_go_member_create(g.ptr, cname, C.int(scoreAdj), C.uintptr_t(s.cb), &s.ptr)
	if err := check(code, "member "+name); err != nil {
		if s.cb != 0 {
			s.cb.Delete()
		}
		g.ctl.detach(&s.handle)
		return nil, err
	}
	s.onClose = s.closeReservations
	s.free = s.destroy
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

func (s *memberState) destroy() {
	// Reservations first: their calls pin this member, so none runs now.
	s.mu.Lock()
	var rs []*reservationState
	for r := range s.reservations {
		rs = append(rs, r)
	}
	s.mu.Unlock()
	for _, r := range rs {
		r.forceFree()
	}
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

// Killed tells whether the OOM killer killed it.
func (m *Member) Killed() (bool, error) {
	if err := m.pin(); err != nil {
		return false, err
	}
	defer m.unpin()
	return C.memcg_member_killed(m.ptr) != 0, nil
}

// OomPolicy is what a reservation that does not fit may do.
type OomPolicy int

// The policies (MEMCG_OOM_*).
const (
	OomKernel OomPolicy = 0 // one charge; over 32 KiB never OOM-kills
	OomPieces OomPolicy = 1 // 32 KiB pieces: every request is OOM-eligible
	OomNever  OomPolicy = 2 // reclaim and retries only
)

// Priority is a waiting class.
type Priority int

// The classes (MEMCG_PRIORITY_*).
const (
	PriorityDefault Priority = -1
	PriorityLow     Priority = 0
	PriorityNormal  Priority = 1
	PriorityHigh    Priority = 2
)

type reservationState struct {
	handle
	ctl    *controllerState
	group  *Group
	member *Member // kept: the member outlives its reservations
	ptr    *C.memcg_reservation
}

// Reservation is bytes held for one query or job; Close gives them back.
type Reservation struct{ *reservationState }

// NewReservation makes a reservation on group.
func NewReservation(g *Group, oom OomPolicy, prio Priority) (*Reservation, error) {
	if g == nil {
		return nil, ErrClosed
	}
	return newReservation(g, nil, oom, prio)
}

// Reservation makes a reservation charged to this member.
func (m *Member) Reservation(oom OomPolicy, prio Priority) (*Reservation, error) {
	return newReservation(m.group, m, oom, prio)
}

func newReservation(g *Group, m *Member, oom OomPolicy, prio Priority) (*Reservation, error) {
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
	s.free = func() {
		C.memcg_reservation_destroy(s.ptr)
		if m != nil {
			m.mu.Lock()
			delete(m.reservations, s)
			m.mu.Unlock()
		}
		s.ctl.detach(&s.handle)
	}
	if m != nil { // under the member's pin: before its Close can list them
		m.mu.Lock()
		m.reservations[s] = struct{}{}
		m.mu.Unlock()
	}
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

// ReserveUntil is Reserve with a deadline on Controller.NowNs.
func (r *Reservation) ReserveUntil(total, deadlineNs uint64) (bool, error) {
	if err := r.begin(); err != nil {
		return false, err
	}
	return r.end(C.memcg_reserve_until(r.ptr, C.uint64_t(total), C.uint64_t(deadlineNs)), "reserve")
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
