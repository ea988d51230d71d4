package memcg

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"fmt"
	"runtime"
	"runtime/cgo"
	"unsafe"
)

// lookup returns the value of a cgo handle, or nil when it was deleted meanwhile (a callback
// racing with the Close of its handle on another goroutine).
func lookup(user unsafe.Pointer) (v any) {
	defer func() {
		if recover() != nil {
			v = nil
		}
	}()
	return cgo.Handle(uintptr(user)).Value()
}

// call runs a callback so that nothing unwinds into C: a panic or a returned error is counted
// and reported to the controller.
func call(ctl *Controller, where string, fn func() error) {
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		err = fn()
	}()
	if err != nil {
		ctl.report(err, where)
	}
}

//export memcgGoKill
func memcgGoKill(_ *C.memcg_member, reason C.int, user unsafe.Pointer) {
	e, _ := lookup(user).(*killEntry)
	if e == nil || e.state.pin() != nil {
		return // closed: no callback
	}
	// Pinned for the callback: a Close from inside it frees the member when the callback and
	// the call that ran the killer return.
	defer e.state.unpin()
	r := CancelReason(reason)
	if r != OOMKill && r != Preempt && r != Operator {
		r = Other
	}
	call(e.state.ctl, "kill callback of "+e.state.name, func() error {
		return e.fn(&Member{e.state}, r)
	})
}

// NotifyFunc receives a notification; it may Close the listener.
type NotifyFunc func(l *Listener, value int, removed bool) error

type listenerState struct {
	handle
	ctl *Controller
	ptr *C.memcg_listener
	cb  cgo.Handle
	fn  NotifyFunc
}

// Listener is a notification registration.
type Listener struct{ *listenerState }

//export memcgGoNotify
func memcgGoNotify(_ *C.memcg_listener, value, removed C.int, user unsafe.Pointer) {
	s, _ := lookup(user).(*listenerState)
	if s == nil || s.pin() != nil {
		return
	}
	defer s.unpin()
	call(s.ctl, "listener callback", func() error {
		return s.fn(&Listener{s}, int(value), removed != 0)
	})
}

// WatchEvents calls fn on changes of memory.events (memory.events.local when local).
func (g *Group) WatchEvents(local bool, fn NotifyFunc) (*Listener, error) {
	l := 0
	if local {
		l = 1
	}
	return g.listen(fn, "events listener", func(s *listenerState) C.int {
		return C.memcg_go_listener_events(g.ptr, C.int(l), C.uintptr_t(s.cb), &s.ptr)
	})
}

// WatchPressure registers for vmpressure notifications (args "low", "medium,hierarchy", ...).
func (g *Group) WatchPressure(args string, fn NotifyFunc) (*Listener, error) {
	cargs, err := cString(args, "pressure listener "+args)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cargs))
	return g.listen(fn, "pressure listener "+args, func(s *listenerState) C.int {
		return C.memcg_go_listener_vmpressure(g.ptr, cargs, C.uintptr_t(s.cb), &s.ptr)
	})
}

func (g *Group) listen(fn NotifyFunc, op string,
	create func(*listenerState) C.int) (*Listener, error) {
	if fn == nil {
		return nil, &OSError{Op: op, Errno: 22}
	}
	if err := g.pin(); err != nil {
		return nil, err
	}
	defer g.unpin()
	s := &listenerState{ctl: g.ctl, fn: fn}
	if err := g.ctl.attach(&s.handle, 1); err != nil {
		return nil, err
	}
	s.cb = cgo.NewHandle(s)
	if err := check(create(s), op); err != nil {
		s.cb.Delete()
		g.ctl.detach(&s.handle)
		return nil, err
	}
	s.ready(nil, func() {
		C.memcg_listener_destroy(s.ptr)
		s.cb.Delete()
		s.ctl.detach(&s.handle)
	})
	l := &Listener{s}
	runtime.SetFinalizer(l, func(l *Listener) { _ = l.Close() })
	return l, nil
}

// Close unregisters it: when it returns the callback does not run again (from inside the
// callback, once the callback returns).
func (l *Listener) Close() error { return l.close() }

// Closed tells whether Close was called.
func (l *Listener) Closed() bool { return l.isClosed() }

// Delivered counts the notifications delivered so far.
func (l *Listener) Delivered() (uint64, error) {
	if err := l.pin(); err != nil {
		return 0, err
	}
	defer l.unpin()
	return uint64(C.memcg_listener_delivered(l.ptr)), nil
}
