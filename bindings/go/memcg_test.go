package memcg

import (
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
)

// must returns v, or panics with err (which fails the test).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// setup makes a controller with group "t"; the cleanup checks every counter is back to 0.
func setup(t *testing.T) (*Controller, *Group) {
	if !Compatible() {
		t.Fatalf("library %s does not serve this package", LibraryVersion())
	}
	ctl := must(NewController())
	top := must(ctl.CreateGroup("t"))
	t.Cleanup(func() {
		// What the test left open goes first (what a deferred Close would do), then the checks.
		ctl.mu.Lock()
		var left []*handle
		for h := range ctl.children {
			if h != &top.handle {
				left = append(left, h)
			}
		}
		ctl.mu.Unlock()
		for _, rank := range []int{0, 1, 2, 3} {
			for _, h := range left {
				if h.rank == rank {
					_ = h.close()
				}
			}
		}
		if anon := must(top.Key("memory.stat", "anon")); anon != 0 {
			t.Errorf("anon %d after the test", anon)
		}
		if err := ctl.Drain(); err != nil { // the per-CPU stocks
			t.Error(err)
		}
		if cur := must(top.Key("memory.stat", "anon")); cur != 0 {
			t.Errorf("anon %d", cur)
		}
		text := must(top.Read("memory.current"))
		if strings.TrimSpace(text) != "0" {
			t.Errorf("memory.current %q after draining", text)
		}
		if err := ctl.Close(); err != nil {
			t.Error(err)
		}
		if n := ctl.OpenHandles(); n != 0 {
			t.Errorf("%d handles left", n)
		}
	})
	return ctl, top
}

func TestFilesAndMalformedValues(t *testing.T) {
	ctl, _ := setup(t)
	g := must(ctl.CreateGroup("t/a"))
	if err := g.Write("memory.max", "512M"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"lots", "-1", "1Q", "", "1M 2M"} {
		err := g.Write("memory.max", bad)
		if !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ERANGE) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if v := must(g.Read("memory.max")); v != "536870912\n" {
		t.Errorf("memory.max %q", v)
	}
	if _, err := g.Read("memory.nonsense"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("unknown file: %v", err)
	}
	if p := must(g.Path()); p != "t/a" {
		t.Errorf("path %q", p)
	}
}

func TestSetUpErrorsAndClosedHandles(t *testing.T) {
	ctl, top := setup(t)
	if _, err := ctl.CreateGroup("t"); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("EEXIST: %v", err)
	}
	if _, err := ctl.Group("absent"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("ENOENT: %v", err)
	}
	if err := ctl.RemoveGroup("/"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("remove root: %v", err)
	}
	if _, err := NewMember(top, "m", 1001, nil); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("score: %v", err)
	}
	if _, err := NewMember(nil, "m", 0, nil); err != ErrClosed {
		t.Errorf("nil group: %v", err)
	}
	nop := func(*Listener, int, bool) error { return nil }
	if _, err := top.WatchPressure("sideways", nop); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("pressure args: %v", err)
	}
	g := must(ctl.CreateGroup("t/a"))
	m := must(NewMember(g, "m", 0, nil))
	r := must(m.Reservation(OOMKernel, PriorityDefault))
	must(r.Reserve(64 * KiB))
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if !r.Closed() {
		t.Error("the member's close left its reservation open")
	}
	if err := m.Close(); err != ErrClosed {
		t.Errorf("double close: %v", err)
	}
	if _, err := r.Grow(1); err != ErrClosed {
		t.Errorf("grow after close: %v", err)
	}
	if _, err := m.Reservation(OOMKernel, PriorityDefault); err != ErrClosed {
		t.Errorf("reservation of a closed member: %v", err)
	}
	if _, err := m.Charge(1, ChargeDefault); err != ErrClosed {
		t.Errorf("charge of a closed member: %v", err)
	}
	_ = g.Close()
	if _, err := g.Read("memory.max"); err != ErrClosed {
		t.Errorf("read of a closed group: %v", err)
	}
	if n := ctl.OpenHandles(); n != 1 {
		t.Errorf("%d handles, want 1", n)
	}
}

func TestRefusals(t *testing.T) {
	ctl, top := setup(t)
	noErr(t, top.Write("memory.max", "1M"))
	child := must(ctl.CreateGroup("t/c"))
	noErr(t, child.Write("memory.max", "4M"))
	r := must(NewReservation(child, OOMKernel, PriorityDefault))
	_, err := r.Reserve(2 * MiB)
	var re *RefusedError
	if !errors.As(err, &re) || re.Status != NeverFits || re.Group != "t/c" || re.LimitingGroup != "t" {
		t.Fatalf("never-fits: %#v", err)
	}
	must(r.Reserve(768 * KiB))
	other := must(NewReservation(child, OOMNever, PriorityDefault))
	if _, err := other.ReserveFor(512*KiB, 50*time.Millisecond); !errors.Is(err, TimedOut) {
		t.Errorf("timed out: %v", err)
	}
	now := must(ctl.NowNS())
	if _, err := other.ReserveUntil(512*KiB, now+50e6); !errors.Is(err, TimedOut) {
		t.Errorf("deadline: %v", err)
	}
	if _, err := child.Charge(512*KiB, ChargeDefault); !errors.Is(err, NoMem) {
		t.Errorf("charge: %v", err)
	}
	if _, err := r.Reserve(^uint64(0)); !errors.Is(err, Invalid) {
		t.Errorf("huge: %v", err)
	}
	cancelled := make(chan struct{})
	go func() {
		defer close(cancelled)
		time.Sleep(50 * time.Millisecond)
		_ = other.Cancel()
	}()
	start := time.Now()
	_, err = other.ReserveFor(512*KiB, 10*time.Second)
	if !errors.Is(err, Cancelled) || time.Since(start) > 5*time.Second {
		t.Errorf("cancel: %v after %v", err, time.Since(start))
	}
	// The request may return before Cancel does, which still pins the reservation: the
	// cleanup's count of open handles would see it.
	<-cancelled
}

// crowd fills g (1 MiB) with the victim's charge, then reserves as another member.
func crowd(t *testing.T, victim *Member, g *Group) error {
	must(victim.Charge(768*KiB, ChargeDefault))
	other := must(NewMember(g, "other", 0, nil))
	r := must(other.Reservation(OOMPieces, PriorityDefault))
	_, err := r.Reserve(512 * KiB)
	return err
}

func TestKillCallbackPanicsAndErrors(t *testing.T) {
	for _, mode := range []string{"panic", "error"} {
		t.Run(mode, func(t *testing.T) {
			ctl, _ := setup(t)
			var reported []string
			ctl.OnCallbackError(func(err error, where string) {
				reported = append(reported, where+": "+err.Error())
			})
			g := must(ctl.CreateGroup("t/a"))
			noErr(t, g.Write("memory.max", "1M"))
			calls := 0
			victim := must(NewMember(g, "victim", 1000, func(m *Member, _ CancelReason) error {
				calls++ // on the charging goroutine
				if mode == "panic" {
					panic("boom in " + m.Name())
				}
				return errors.New("refused by " + m.Name())
			}))
			if err := crowd(t, victim, g); err == nil {
				t.Error("the victim kept its memory; the request should fail")
			}
			// One report per call (a victim keeping its memory may be chosen again).
			if !must(victim.Killed()) || calls < 1 || ctl.CallbackFailures() != int64(calls) ||
				len(reported) != calls || !strings.Contains(reported[0], "victim") {
				t.Errorf("failures %d, reported %q", ctl.CallbackFailures(), reported)
			}
		})
	}
}

func TestKillCallbackClosingItsMember(t *testing.T) {
	ctl, _ := setup(t)
	g := must(ctl.CreateGroup("t/a"))
	noErr(t, g.Write("memory.max", "1M"))
	closeIt := func(m *Member, _ CancelReason) error { return m.Close() }
	victim := must(NewMember(g, "victim", 1000, closeIt))
	held := must(victim.Reservation(OOMKernel, PriorityDefault))
	if err := crowd(t, victim, g); err != nil {
		t.Fatal(err)
	}
	if !victim.Closed() || !held.Closed() {
		t.Error("not closed")
	}
}

func TestKillCallbackClosingTheMemberWhoseCallRuns(t *testing.T) {
	ctl, _ := setup(t)
	g := must(ctl.CreateGroup("t/a"))
	noErr(t, g.Write("memory.max", "1M"))
	var kills atomic.Int32
	runaway := must(NewMember(g, "runaway", 1000, func(m *Member, _ CancelReason) error {
		kills.Add(1)
		return m.Close()
	}))
	must(runaway.Charge(512*KiB, ChargeDefault))
	r := must(runaway.Reservation(OOMPieces, PriorityDefault))
	_, err := r.Reserve(768 * KiB)
	if !errors.Is(err, Killed) && !errors.Is(err, NoMem) {
		t.Errorf("reserve: %v", err)
	}
	if kills.Load() != 1 || !runaway.Closed() || !r.Closed() {
		t.Errorf("kills %d", kills.Load())
	}
	if n := ctl.OpenHandles(); n != 2 {
		t.Errorf("%d handles, want 2 (the member and its reservation freed)", n)
	}
}

func TestListenerClosingItselfAndFailing(t *testing.T) {
	ctl, _ := setup(t)
	g := must(ctl.CreateGroup("t/a"))
	noErr(t, g.Write("memory.max", "256K"))
	got := make(chan int, 16)
	l := must(g.WatchEvents(false, func(l *Listener, v int, _ bool) error {
		got <- v
		return l.Close()
	}))
	must(g.WatchEvents(false, func(*Listener, int, bool) error { panic("listener fails") }))
	if _, err := g.Charge(MiB, ChargeDefault); !errors.Is(err, NoMem) {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification")
	}
	deadline := time.Now().Add(5 * time.Second)
	for ctl.CallbackFailures() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !l.Closed() || ctl.CallbackFailures() < 1 {
		t.Errorf("closed %v, failures %d", l.Closed(), ctl.CallbackFailures())
	}
	if _, err := l.Delivered(); err != ErrClosed {
		t.Errorf("delivered after close: %v", err)
	}
}

func TestServiceWithARunaway(t *testing.T) {
	ctl, top := setup(t)
	noErr(t, top.Write("memory.max", "16M"))
	var tenants []*Group
	for _, n := range []string{"0", "1", "2", "3"} {
		g := must(ctl.CreateGroup("t/" + n))
		noErr(t, g.Write("memory.max", "6M"))
		tenants = append(tenants, g)
	}
	var killed atomic.Bool
	runaway := must(NewMember(tenants[0], "runaway", 1000, func(m *Member, _ CancelReason) error {
		killed.Store(true)
		return m.Close()
	}))
	grab := must(runaway.Reservation(OOMNever, PriorityDefault))
	var wg sync.WaitGroup
	wg.Add(9)
	go func() {
		defer wg.Done()
		stop := time.Now().Add(30 * time.Second)
		for !killed.Load() && time.Now().Before(stop) {
			if _, err := grab.Grow(256 * KiB); errors.Is(err, Killed) || err == ErrClosed {
				return
			} else if err != nil {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	for i := 0; i < 8; i++ {
		go func(i int) {
			defer wg.Done()
			me, err := NewMember(tenants[i%4], "w", 0, nil)
			if err != nil {
				t.Error(err)
				return
			}
			defer me.Close()
			// At least 30 requests, and on until the runaway is killed (bounded).
			stop := time.Now().Add(30 * time.Second)
			for j := 0; j < 30 || (!killed.Load() && time.Now().Before(stop)); j++ {
				r, err := me.Reservation(OOMPieces, PriorityDefault)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = r.ReserveFor(512*KiB, 200*time.Millisecond)
				_, _ = r.Grow(MiB) // may run the OOM killer
				_ = r.Close()
			}
		}(i)
	}
	wg.Wait()
	if !killed.Load() || !runaway.Closed() {
		t.Error("the runaway was not killed")
	}
	if n := must(tenants[0].Key("memory.events", "oom_kill")); n < 1 {
		t.Errorf("oom_kill %d", n)
	}
	if ctl.CallbackFailures() != 0 {
		t.Errorf("%d callback failures", ctl.CallbackFailures())
	}
}

// The README's service is example_service_test.go, verbatim.
func TestReadmeHoldsTheServiceExample(t *testing.T) {
	readme := string(must(os.ReadFile("README.md")))
	example := string(must(os.ReadFile("example_service_test.go")))
	if !strings.Contains(readme, "```go\n"+example+"```") {
		t.Error("README.md's service example differs from example_service_test.go")
	}
}
