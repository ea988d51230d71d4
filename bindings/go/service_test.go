package memcg

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func current(t *testing.T, g *Group) string {
	t.Helper()
	return strings.TrimSpace(must(g.Read("memory.current")))
}

// After everything is released memory.current holds the per-CPU stock until Drain.
func TestDrainMakesCurrentZero(t *testing.T) {
	ctl, top := setup(t)
	g := must(ctl.CreateGroup("t/a"))
	m := must(NewMember(g, "m", 0, nil))
	r := must(m.Reservation(OOMKernel, PriorityDefault))
	must(r.Reserve(256 * KiB))
	must(g.Charge(8*KiB, ChargeDefault))
	noErr(t, g.Uncharge(8*KiB))
	noErr(t, r.Close())
	noErr(t, m.Close())
	if cur := current(t, top); cur == "0" {
		t.Fatal("memory.current 0 before Drain: the stock was not used")
	}
	noErr(t, ctl.Drain())
	if cur := current(t, top); cur != "0" {
		t.Errorf("memory.current %s after Drain", cur)
	}
	if cur := current(t, g); cur != "0" {
		t.Errorf("t/a memory.current %s after Drain", cur)
	}
	// memory.reclaim drains too, but says EAGAIN when nothing was reclaimable.
	must(g.Charge(8*KiB, ChargeDefault))
	noErr(t, g.Uncharge(8*KiB))
	if err := g.Write("memory.reclaim", "1M"); !errors.Is(err, syscall.EAGAIN) {
		t.Errorf("memory.reclaim with nothing reclaimable: %v", err)
	}
	if cur := current(t, g); cur != "0" {
		t.Errorf("memory.current %s after memory.reclaim", cur)
	}
}

func TestFlushStatsListAndScore(t *testing.T) {
	ctl, top := setup(t)
	b := must(ctl.CreateGroup("t/b"))
	a := must(ctl.CreateGroup("t/a"))
	must(ctl.CreateGroup("t/a/x"))
	if got := strings.Join(must(top.List()), ","); got != "t/a,t/a/x,t/b" {
		t.Errorf("list %q", got)
	}
	root := must(ctl.Group("/"))
	if got := strings.Join(must(root.List()), ","); got != "t,t/a,t/a/x,t/b" {
		t.Errorf("list from the root %q", got)
	}
	if got := must(b.List()); len(got) != 0 {
		t.Errorf("list of a leaf %q", got)
	}
	must(a.Charge(64*KiB, ChargeDefault))
	noErr(t, ctl.FlushStats())
	if anon := must(a.Key("memory.stat", "anon")); anon != 64*KiB {
		t.Errorf("anon %d after FlushStats", anon)
	}
	noErr(t, a.Uncharge(64*KiB))
	noErr(t, ctl.FlushStats())
	if anon := must(a.Key("memory.stat", "anon")); anon != 0 {
		t.Errorf("anon %d after the uncharge and FlushStats", anon)
	}
	m := must(NewMember(b, "m", 100, nil))
	if s := must(m.ScoreAdj()); s != 100 {
		t.Errorf("score %d", s)
	}
	noErr(t, m.SetScoreAdj(-1000))
	if s := must(m.ScoreAdj()); s != -1000 {
		t.Errorf("score %d", s)
	}
	if err := m.SetScoreAdj(1001); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("score 1001: %v", err)
	}
	noErr(t, ctl.RemoveGroup("t/a/x"))
	if got := strings.Join(must(top.List()), ","); got != "t/a,t/b" {
		t.Errorf("list after remove %q", got)
	}
}

func TestOOMLog(t *testing.T) {
	ctl, _ := setup(t)
	g := must(ctl.CreateGroup("t/a"))
	noErr(t, g.Write("memory.max", "1M"))
	if seq := must(ctl.OOMLogLastSeq()); seq != 0 {
		t.Errorf("seq %d before any kill", seq)
	}
	victim := must(NewMember(g, "victim", 1000, func(m *Member, _ CancelReason) error {
		return m.Close()
	}))
	if err := crowd(t, victim, g); err != nil {
		t.Fatal(err)
	}
	seq := must(ctl.OOMLogLastSeq())
	log := must(ctl.OOMLog(0))
	if seq == 0 || len(log) == 0 || !strings.Contains(log[len(log)-1], "victim=victim") {
		t.Errorf("seq %d, log %q", seq, log)
	}
	if later := must(ctl.OOMLog(seq)); len(later) != 0 {
		t.Errorf("log after the last seq %q", later)
	}
}

func TestGrowUntilAndNoWait(t *testing.T) {
	ctl, _ := setup(t)
	g := must(ctl.CreateGroup("t/a"))
	noErr(t, g.Write("memory.max", "1M"))
	r := must(NewReservation(g, OOMNever, PriorityDefault))
	must(g.Charge(512*KiB, ChargeDefault))
	now := must(ctl.NowNS())
	must(r.GrowUntil(256*KiB, now+uint64(time.Second)))
	start := time.Now()
	now = must(ctl.NowNS())
	// Would fit were the charge given back: waits, then times out.
	if _, err := r.GrowUntil(512*KiB, now+uint64(50*time.Millisecond)); !errors.Is(err, TimedOut) {
		t.Errorf("grow past max: %v", err)
	}
	if waited := time.Since(start); waited < 40*time.Millisecond || waited > 5*time.Second {
		t.Errorf("waited %v for a 50 ms deadline", waited)
	}
	// NoWait: refused at once at the limit, where a blocking charge would reclaim and retry.
	start = time.Now()
	if _, err := g.Charge(512*KiB, ChargeNoWait); !errors.Is(err, NoMem) {
		t.Errorf("nowait charge: %v", err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("a nowait charge took %v", waited)
	}
	noErr(t, r.Close())
	noErr(t, g.Uncharge(512*KiB))
	must(g.Charge(64*KiB, ChargeNoWait))
	noErr(t, g.Uncharge(64*KiB))
}

func TestNULRefused(t *testing.T) {
	ctl, _ := setup(t)
	if _, err := ctl.CreateGroup("t/evil\x00suffix"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("create with NUL: %v", err)
	}
	if _, err := ctl.Group("t/evil"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("t/evil was created: %v", err)
	}
	g := must(ctl.CreateGroup("t/a"))
	noErr(t, g.Write("memory.max", "1G"))
	if err := g.Write("memory.max", "1\x00G"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("write with NUL: %v", err)
	}
	if v := must(g.Read("memory.max")); v != "1073741824\n" {
		t.Errorf("memory.max %q after a refused write", v)
	}
	if _, err := g.Read("memory.max\x00x"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("read with NUL: %v", err)
	}
	if _, err := NewMember(g, "m\x00", 0, nil); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("member with NUL: %v", err)
	}
	if err := ctl.RemoveGroup("t/a\x00"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("remove with NUL: %v", err)
	}
}

func TestErrorMessagesCapped(t *testing.T) {
	ctl, _ := setup(t)
	g := must(ctl.CreateGroup("t/a"))
	err := g.Write("memory.max", strings.Repeat("7", 1<<20))
	if err == nil {
		t.Fatal("1 MiB of digits accepted")
	}
	if msg := err.Error(); len(msg) > 200 || !strings.Contains(msg, `"...`) {
		t.Errorf("message of %d bytes: %.300s", len(msg), msg)
	}
}

// Cancel on one goroutine, the member's Close on another: the reservation is freed when
// Cancel returns, never under it (the old Close freed it at once: SIGSEGV or a hang).
func TestCancelRacingMemberClose(t *testing.T) {
	ctl, _ := setup(t)
	g := must(ctl.CreateGroup("t/a"))
	for i := 0; i < 2000; i++ {
		m := must(NewMember(g, "m", 0, nil))
		r := must(m.Reservation(OOMKernel, PriorityDefault))
		must(r.Reserve(4 * KiB))
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				if err := r.Cancel(); err != nil && err != ErrClosed {
					t.Error(err)
				}
				_, _ = r.Bytes()
			}
		}()
		go func() {
			defer wg.Done()
			_ = m.Close()
		}()
		wg.Wait()
		if !r.Closed() {
			t.Fatal("the member's Close left its reservation open")
		}
	}
	if n := ctl.OpenHandles(); n != 2 {
		t.Errorf("%d handles left, want 2 (the groups)", n)
	}
}

// Controller.Close racing the creation of groups and reservations: every handle made is freed,
// the controller too (the old code leaked a handle whose Close came while it was being made).
func TestControllerCloseRacingCreation(t *testing.T) {
	for i := 0; i < 50; i++ {
		ctl := must(NewController())
		top := must(ctl.CreateGroup("t"))
		m := must(NewMember(top, "m", 0, nil))
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				if g, err := ctl.Group("t"); err == nil {
					_ = g
				}
				if r, err := m.Reservation(OOMKernel, PriorityDefault); err == nil {
					_ = r
				}
			}
		}()
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i%5) * 20 * time.Microsecond)
			_ = ctl.Close()
		}()
		wg.Wait()
		if n := ctl.OpenHandles(); n != 0 {
			t.Fatalf("round %d: %d handles left after Close", i, n)
		}
		ctl.handle.mu.Lock()
		pins, freed := ctl.pins, ctl.freed
		ctl.handle.mu.Unlock()
		if pins != 0 || !freed {
			t.Fatalf("round %d: controller not freed (pins %d)", i, pins)
		}
	}
}

func groupsOnly(t *testing.T) (*Group, *Group) {
	ctl := must(NewController())
	a := must(ctl.CreateGroup("a"))
	b := must(ctl.CreateGroup("a/b"))
	return a, b
}

// A program that keeps only its groups: the controller's finalizer must not close them.
func TestFinalizerKeepsControllerOfLiveGroups(t *testing.T) {
	a, b := groupsOnly(t)
	for i := 0; i < 5; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	noErr(t, b.Write("memory.max", "1M"))
	must(b.Charge(4*KiB, ChargeDefault))
	noErr(t, b.Uncharge(4*KiB))
	if p := must(a.Path()); p != "a" {
		t.Errorf("path %q", p)
	}
	ctl := a.ctl
	noErr(t, a.Close())
	noErr(t, b.Close())
	noErr(t, ctl.Close())
}

func TestReserveContext(t *testing.T) {
	ctl, _ := setup(t)
	g := must(ctl.CreateGroup("t/a"))
	noErr(t, g.Write("memory.max", "1M"))
	r := must(NewReservation(g, OOMNever, PriorityDefault))
	must(g.Charge(512*KiB, ChargeDefault))
	defer func() { noErr(t, g.Uncharge(512*KiB)) }()
	must(r.ReserveContext(context.Background(), 256*KiB))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// Each growth would fit were the charge given back: it waits.
	if _, err := r.GrowContext(ctx, 512*KiB); !errors.Is(err, TimedOut) ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline: %v", err)
	}
	// A timeout is not a cancel: the reservation still grows.
	must(r.Grow(64 * KiB))
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		time.Sleep(30 * time.Millisecond)
		cancel()
	}()
	start := time.Now()
	if _, err := r.GrowContext(ctx, 256*KiB); !errors.Is(err, Cancelled) ||
		!errors.Is(err, context.Canceled) {
		t.Errorf("cancel: %v", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("the cancel took %v", waited)
	}
	if _, err := r.ReserveContext(ctx, 4*KiB); !errors.Is(err, Cancelled) {
		t.Errorf("after the cancel: %v", err)
	}
	noErr(t, r.Close())
}

func TestEnumStrings(t *testing.T) {
	for v, want := range map[interface{ String() string }]string{
		OOMKill: "oom-kill", Preempt: "preempt", Other: "other", CancelReason(7): "CancelReason(7)",
		OOMKernel: "kernel", OOMPieces: "pieces", OOMNever: "never",
		PriorityDefault: "default", PriorityHigh: "high",
		TimedOut: "timed-out", NeverFits: "never-fits",
	} {
		if got := v.String(); got != want {
			t.Errorf("%v: %q, want %q", v, got, want)
		}
	}
}

// A reservation made while its member closes is closed with it (none left open).
func TestMemberCloseRacingReservationCreation(t *testing.T) {
	ctl, _ := setup(t)
	g := must(ctl.CreateGroup("t/a"))
	for i := 0; i < 50; i++ {
		m := must(NewMember(g, "m", 0, nil))
		var made []*Reservation
		done := make(chan struct{})
		go func() {
			defer close(done)
			for j := 0; j < 50; j++ {
				if r, err := m.Reservation(OOMKernel, PriorityDefault); err == nil {
					made = append(made, r)
				}
			}
		}()
		time.Sleep(time.Duration(i%5) * 20 * time.Microsecond)
		noErr(t, m.Close())
		<-done
		for _, r := range made {
			if !r.Closed() {
				t.Fatalf("round %d: a reservation of the closed member is open", i)
			}
		}
		if n := ctl.OpenHandles(); n != 2 {
			t.Fatalf("round %d: %d handles, want 2", i, n)
		}
	}
}
