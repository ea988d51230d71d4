package memcg

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// expect returns the next event of s of type typ about group, skipping others; it fails the
// test when none comes within 5 s.
func expect(t *testing.T, s *Subscription, typ EventType, group string) Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		e, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %s of %q: %v", typ, group, err)
		}
		if e.Type == typ && e.Group == group {
			return e
		}
	}
}

// nothing checks that s has no event ready.
func nothing(t *testing.T, s *Subscription) {
	t.Helper()
	if e, err := s.NextFor(0); err != ErrNoEvent {
		t.Errorf("unexpected: %+v, %v", e, err)
	}
}

func TestEventsFiltersAndResume(t *testing.T) {
	ctl, _ := setup(t)
	all := must(ctl.Subscribe(SubscribeOptions{}))
	underA := must(ctl.Subscribe(SubscribeOptions{Subtree: "t/a"}))
	kinds := must(ctl.Subscribe(SubscribeOptions{Subtree: "/", Types: []EventType{EventMemory}}))
	nothing(t, all)

	start := time.Now()
	a := must(ctl.CreateGroup("t/a"))
	b := must(ctl.CreateGroup("t/b"))
	x := must(ctl.CreateGroup("t/a/x"))
	first := expect(t, all, EventGroupCreated, "t/a")
	if at := first.Time(); at.Before(start.Add(-time.Second)) || time.Since(at) < -time.Second {
		t.Errorf("time %v, started at %v", first.Time(), start)
	}
	if first.Payload != "{}" {
		t.Errorf("payload %q", first.Payload)
	}
	if e := expect(t, all, EventGroupCreated, "t/b"); e.ID <= first.ID {
		t.Errorf("id %d after %d", e.ID, first.ID)
	}
	expect(t, all, EventGroupCreated, "t/a/x")

	// The subtree: t/a and t/a/x, never t/b.
	if e := expect(t, underA, EventGroupCreated, "t/a"); e.ID != first.ID {
		t.Errorf("id %d, the stream gave %d", e.ID, first.ID)
	}
	expect(t, underA, EventGroupCreated, "t/a/x")
	nothing(t, underA)

	// memory.events: a charge that meets memory.max raises "max"; the type filter lets that
	// through and no group creation.
	const mayFail = ChargeMayBlock | ChargeRetryMayFail
	noErr(t, x.Write("memory.max", "64K"))
	must(x.Charge(48*KiB, mayFail))
	if _, err := x.Charge(48*KiB, mayFail); !errors.Is(err, NoMem) {
		t.Fatalf("second charge: %v", err)
	}
	noErr(t, x.Uncharge(48*KiB))
	e := expect(t, kinds, EventMemory, "t/a/x")
	if !strings.Contains(e.Payload, `"counter":"max"`) {
		t.Errorf("payload %q", e.Payload)
	}
	if n := must(x.Key("memory.events", "max")); n < 1 {
		t.Errorf("memory.events max %d", n)
	}

	// Resume after the first event: the ring still holds the rest.
	resumed := must(ctl.Subscribe(SubscribeOptions{AfterID: first.ID}))
	e = expect(t, resumed, EventGroupCreated, "t/b")
	if resumed.Cursor() != e.ID {
		t.Errorf("cursor %d after %d", resumed.Cursor(), e.ID)
	}

	// The program's own events.
	id := must(ctl.Publish(EventAction, "t/a", `{"what":"drain"}`))
	if id == 0 {
		t.Fatal("publish gave no id")
	}
	e = expect(t, underA, EventAction, "t/a")
	if e.ID != id || e.Payload != `{"what":"drain"}` {
		t.Errorf("published %d, got %+v", id, e)
	}

	// Removal.
	noErr(t, x.Close())
	noErr(t, ctl.RemoveGroup("t/a/x"))
	expect(t, all, EventGroupRemoved, "t/a/x")
	expect(t, underA, EventGroupRemoved, "t/a/x")

	if n := ctl.OpenHandles(); n != 7 { // t, t/a, t/b, four subscriptions
		t.Errorf("%d handles, want 7", n)
	}
	noErr(t, a.Close())
	noErr(t, b.Close())
	noErr(t, all.Close())
	if err := all.Close(); err != ErrClosed {
		t.Errorf("second close: %v", err)
	}
	if _, err := all.NextFor(0); err != ErrClosed {
		t.Errorf("next after close: %v", err)
	}
	if n := ctl.OpenHandles(); n != 4 {
		t.Errorf("%d handles after three closes, want 4", n)
	}
}

func TestPublishChecksItsArguments(t *testing.T) {
	ctl, _ := setup(t)
	// Nothing follows the events yet: nothing is recorded.
	if id, err := ctl.Publish(EventAction, "", `{}`); id != 0 || err != nil {
		t.Errorf("with no subscriber: %d, %v", id, err)
	}
	s := must(ctl.Subscribe(SubscribeOptions{}))
	for _, bad := range []string{"", "not json", "{bad}", `{"a":1}` + "\n", ` {"a":1}`,
		"{\"a\":\n1}", `["a"]`, "{\"a\":\"\x00\"}"} {
		if _, err := ctl.Publish(EventAction, "t", bad); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("payload %q: %v", bad, err)
		}
	}
	for _, typ := range []EventType{-1, 11, 99} {
		if _, err := ctl.Publish(typ, "t", `{}`); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("type %d: %v", typ, err)
		}
	}
	if _, err := ctl.Publish(EventAction, "absent", `{}`); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("absent group: %v", err)
	}
	if _, err := ctl.Publish(EventAction, "t\x00x", `{}`); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("NUL in the path: %v", err)
	}
	nothing(t, s) // none of them was published
	id := must(ctl.Publish(EventBudget, "/", `{"target":1}`))
	if e := expect(t, s, EventBudget, "/"); e.ID != id {
		t.Errorf("id %d, published %d", e.ID, id)
	}
}

func TestLaggingSubscriberIsDropped(t *testing.T) {
	ctl, _ := setup(t)
	slow := must(ctl.Subscribe(SubscribeOptions{MaxLag: 8}))
	var last uint64
	for i := 0; i < 64; i++ {
		last = must(ctl.Publish(EventAction, "t", `{"i":1}`))
	}
	var err error
	for i := 0; i < 100 && err == nil; i++ { // dropped at its next take, or by the notifier
		_, err = slow.NextFor(10 * time.Millisecond)
		if err == ErrNoEvent {
			err = nil
		}
	}
	var dropped *DroppedError
	if !errors.As(err, &dropped) || !errors.Is(err, ErrDropped) || !errors.Is(err, DropLagging) ||
		dropped.Reason != DropLagging {
		t.Fatalf("not dropped as lagging: %v", err)
	}
	if slow.DropReason() != DropLagging || dropped.Cursor != slow.Cursor() {
		t.Errorf("reason %v, cursor %d, error's %d", slow.DropReason(), slow.Cursor(), dropped.Cursor)
	}
	if _, err := slow.NextFor(0); !errors.Is(err, DropLagging) {
		t.Errorf("next after the drop: %v", err)
	}
	if !strings.Contains(err.Error(), "lagging") {
		t.Errorf("message %q", err)
	}
	// Resubscribing after its cursor loses nothing the ring holds: every event up to the last.
	again := must(ctl.Subscribe(SubscribeOptions{AfterID: dropped.Cursor}))
	want := dropped.Cursor + 1
	for {
		e, err := again.NextFor(0)
		if err == ErrNoEvent {
			break
		}
		noErr(t, err)
		if e.ID != want || e.Type != EventAction {
			t.Fatalf("event %+v, want id %d", e, want)
		}
		want++
	}
	if want != last+1 {
		t.Errorf("resumed up to %d, last published %d", want-1, last)
	}
	noErr(t, slow.Close())
	if slow.DropReason() != DropLagging {
		t.Errorf("reason after close %v", slow.DropReason())
	}
}

func TestCloseWakesNext(t *testing.T) {
	ctl, _ := setup(t)
	s := must(ctl.Subscribe(SubscribeOptions{}))
	got := make(chan error, 1)
	go func() {
		_, err := s.Next(context.Background())
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	noErr(t, s.Close())
	select {
	case err := <-got:
		if err != ErrClosed {
			t.Errorf("next: %v", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("woken after %v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wake Next")
	}
	if n := ctl.OpenHandles(); n != 1 {
		t.Errorf("%d handles, want 1", n)
	}
}

func TestControllerCloseWakesNext(t *testing.T) {
	ctl := must(NewController())
	s := must(ctl.Subscribe(SubscribeOptions{}))
	got := make(chan error, 1)
	go func() {
		_, err := s.Next(context.Background())
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	noErr(t, ctl.Close())
	select {
	case err := <-got:
		if err != ErrClosed {
			t.Errorf("next: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Controller.Close did not wake Next")
	}
	if !s.Closed() || ctl.OpenHandles() != 0 {
		t.Errorf("closed %v, %d handles", s.Closed(), ctl.OpenHandles())
	}
	if _, err := ctl.Subscribe(SubscribeOptions{}); err != ErrClosed {
		t.Errorf("subscribe on a closed controller: %v", err)
	}
}

func TestNextWithContextKeepsTheSubscription(t *testing.T) {
	ctl, _ := setup(t)
	s := must(ctl.Subscribe(SubscribeOptions{Types: []EventType{EventAction}}))
	// A deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	start := time.Now()
	_, err := s.Next(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("deadline: %v after %v", err, time.Since(start))
	}
	// A cancel, seen within a slice of the wait.
	ctx, cancel = context.WithCancel(context.Background())
	go func() { time.Sleep(30 * time.Millisecond); cancel() }()
	start = time.Now()
	_, err = s.Next(ctx)
	if err != context.Canceled || time.Since(start) > 2*time.Second {
		t.Errorf("cancel: %v after %v", err, time.Since(start))
	}
	if _, err := s.Next(ctx); err != context.Canceled {
		t.Errorf("done context: %v", err)
	}
	// The subscription still follows.
	id := must(ctl.Publish(EventAction, "t", `{}`))
	if e := expect(t, s, EventAction, "t"); e.ID != id {
		t.Errorf("id %d, published %d", e.ID, id)
	}
	if s.Closed() || s.DropReason() != NotDropped {
		t.Errorf("closed %v, dropped %v", s.Closed(), s.DropReason())
	}
}

func TestOneNextAtATime(t *testing.T) {
	ctl, _ := setup(t)
	s := must(ctl.Subscribe(SubscribeOptions{}))
	first := make(chan Event, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e, err := s.Next(ctx)
		if err != nil {
			t.Error(err)
		}
		first <- e
	}()
	time.Sleep(30 * time.Millisecond)
	// The first holds the turn: a second waits for it within its own bounds, and a look at
	// the cursor and the drop reason does not wait at all.
	if _, err := s.NextFor(30 * time.Millisecond); err != ErrNoEvent {
		t.Errorf("second next: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	if _, err := s.Next(ctx); err != context.DeadlineExceeded {
		t.Errorf("second next with a context: %v", err)
	}
	cancel()
	before := s.Cursor()
	if s.DropReason() != NotDropped {
		t.Error("dropped")
	}
	id := must(ctl.Publish(EventAction, "t", `{}`))
	select {
	case e := <-first:
		if e.ID != id || s.Cursor() != id || before >= id {
			t.Errorf("event %+v, cursor %d then %d", e, before, s.Cursor())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting Next got nothing")
	}
}

// Close, Cursor and DropReason racing Next on other goroutines (go test -race): nothing is
// freed under a Next, and each Next ends with an event or ErrClosed.
func TestCloseRacingNext(t *testing.T) {
	ctl, _ := setup(t)
	for round := 0; round < 50; round++ {
		s := must(ctl.Subscribe(SubscribeOptions{}))
		var wg sync.WaitGroup
		for i := 0; i < 3; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					_, err := s.NextFor(time.Second)
					if err == ErrClosed {
						return
					}
					if err != nil && err != ErrNoEvent {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				_ = s.Cursor()
				_ = s.DropReason()
				_, _ = ctl.Publish(EventAction, "t", `{}`)
			}
		}()
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		noErr(t, s.Close())
		wg.Wait()
	}
	if n := ctl.OpenHandles(); n != 1 {
		t.Errorf("%d handles, want 1", n)
	}
}

func TestSubscribeRefusesBadArguments(t *testing.T) {
	ctl, _ := setup(t)
	for _, opts := range []SubscribeOptions{
		{Types: []EventType{EventOOM, 42}},
		{Types: []EventType{-1}},
		{Types: []EventType{11}},
		{Subtree: "../x"},
		{Subtree: "a b"},
		{Subtree: "t\x00x"},
		{MaxLag: -1},
	} {
		if _, err := ctl.Subscribe(opts); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%+v: %v", opts, err)
		}
	}
	if n := ctl.OpenHandles(); n != 1 {
		t.Errorf("%d handles after the refusals, want 1", n)
	}
	s := must(ctl.Subscribe(SubscribeOptions{}))
	if _, err := s.NextFor(-time.Millisecond); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("negative timeout: %v", err)
	}
	for name, want := range map[string]EventType{"oom": EventOOM, "gap": EventGap,
		"memory_event": EventMemory, "group_created": EventGroupCreated} {
		if got, err := ParseEventType(name); got != want || err != nil {
			t.Errorf("%q: %v, %v", name, got, err)
		}
	}
	for _, bad := range []string{"Oom", "", "oom\x00", "unknown"} {
		if _, err := ParseEventType(bad); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	for v, want := range map[interface{ String() string }]string{
		EventGroupCreated: "group_created", EventAction: "action", EventType(11): "EventType(11)",
		EventType(-1): "EventType(-1)", DropLagging: "lagging", DropOverrun: "overrun",
		NotDropped: "none", DropReason(4): "DropReason(4)",
	} {
		if got := v.String(); got != want {
			t.Errorf("%v: %q, want %q", v, got, want)
		}
	}
}

func TestMemberID(t *testing.T) {
	_, top := setup(t)
	m1 := must(NewMember(top, "m1", 0, nil))
	m2 := must(NewMember(top, "m2", 0, nil))
	id := m1.ID()
	if id == 0 || m2.ID() == 0 || m2.ID() == id {
		t.Errorf("ids %d, %d", id, m2.ID())
	}
	noErr(t, m1.Close())
	if m1.ID() != id {
		t.Errorf("id after close %d", m1.ID())
	}
	m3 := must(NewMember(top, "m3", 0, nil))
	if m3.ID() == id || m3.ID() == m2.ID() {
		t.Errorf("an id reused: %d", m3.ID())
	}
}
