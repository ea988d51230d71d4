package memcg

import (
	"errors"
	"syscall"
	"testing"
	"unsafe"
)

func TestAttach(t *testing.T) {
	ctl := must(NewController())
	defer ctl.Close()
	g := must(ctl.CreateGroup("g"))
	if _, err := ctl.Attach(nil); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("no create: %v", err)
	}
	refused := errors.New("refused")
	fails := func(unsafe.Pointer) (func(), error) { return nil, refused }
	if _, err := ctl.Attach(fails); err != refused {
		t.Errorf("create's error: %v", err)
	}
	noFree := func(unsafe.Pointer) (func(), error) { return nil, nil }
	if _, err := ctl.Attach(noFree); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("no free: %v", err)
	}
	func() {
		defer func() { _ = recover() }()
		_, _ = ctl.Attach(func(unsafe.Pointer) (func(), error) { panic("create fails") })
	}()
	if n := ctl.OpenHandles(); n != 1 {
		t.Fatalf("%d handles after the refusals, want 1", n)
	}

	var got unsafe.Pointer
	freed := 0
	a := must(ctl.Attach(func(p unsafe.Pointer) (func(), error) {
		got = p
		return func() { freed++ }, nil
	}))
	if got != unsafe.Pointer(ctl.ptr) {
		t.Errorf("pointer %p, controller %p", got, ctl.ptr)
	}
	groupOpenAtFree := false
	must(ctl.Attach(func(unsafe.Pointer) (func(), error) {
		return func() { groupOpenAtFree = !g.isClosed() }, nil
	}))
	if n := ctl.OpenHandles(); n != 3 {
		t.Errorf("%d handles, want 3", n)
	}
	// A call in flight holds one past the close; the other is freed before the groups.
	noErr(t, a.Pin())
	noErr(t, ctl.Close())
	if !groupOpenAtFree {
		t.Error("freed after the groups")
	}
	if !a.Closed() || freed != 0 {
		t.Errorf("closed %v, freed %d under a pin", a.Closed(), freed)
	}
	if err := a.Pin(); err != ErrClosed {
		t.Errorf("pin after close: %v", err)
	}
	if n := ctl.OpenHandles(); n != 1 {
		t.Errorf("%d handles, want the pinned one", n)
	}
	a.Unpin()
	if freed != 1 {
		t.Errorf("freed %d times", freed)
	}
	if err := a.Close(); err != ErrClosed {
		t.Errorf("second close: %v", err)
	}
	if n := ctl.OpenHandles(); n != 0 {
		t.Errorf("%d handles", n)
	}
}
