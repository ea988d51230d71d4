package memcg

import (
	"syscall"
	"unsafe"
)

type attachedState struct {
	handle
	ctl *Controller
}

// Attached is a C object that a package beside this one made from a controller
// (example.org/memcg/memcghttp's Server, a memcg_server*): a handle of the controller as the
// others are. It counts in OpenHandles, Controller.Close closes it first (a server stops
// before the members its actions reach), and the controller's C handle is freed after it. It
// has no finalizer: the handle that wraps it has one.
type Attached struct{ *attachedState }

// Attach is for packages beside this one that wrap a C object the library makes from a
// controller; a program has no use for it. create gets the controller's memcg_controller*,
// valid while the result is open, and returns the function that frees the object, or an
// error (nothing attached then). The object is freed at Close, once no Pin holds it.
func (c *Controller) Attach(create func(unsafe.Pointer) (func(), error)) (*Attached, error) {
	if create == nil {
		return nil, &OSError{Op: "attach: no create function", Errno: syscall.EINVAL}
	}
	s := &attachedState{ctl: c}
	// Rank 0: closed with the reservations, before listeners, members and groups.
	if err := c.attach(&s.handle, 0); err != nil {
		return nil, err
	}
	made := false
	defer func() {
		if !made { // an error, or create panicked
			c.detach(&s.handle)
		}
	}()
	free, err := create(unsafe.Pointer(c.ptr))
	if err == nil && free == nil {
		err = &OSError{Op: "attach: no free function", Errno: syscall.EINVAL}
	}
	if err != nil {
		return nil, err
	}
	made = true
	s.ready(nil, func() {
		free()
		s.ctl.detach(&s.handle)
	})
	return &Attached{s}, nil
}

// Pin keeps the object from being freed until Unpin: each call of it runs pinned. ErrClosed
// after Close.
func (a *Attached) Pin() error { return a.pin() }

// Unpin ends a Pin; the last one after Close frees the object.
func (a *Attached) Unpin() { a.unpin() }

// Close marks it closed (later Pins get ErrClosed) and frees it when no Pin holds it.
func (a *Attached) Close() error { return a.close() }

// Closed tells whether Close was called.
func (a *Attached) Closed() bool { return a.isClosed() }
