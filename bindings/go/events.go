package memcg

// #include <stdlib.h>
// #include <memcg/c/memcg.h>
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// EventType is what an event reports (memcg_event_type).
type EventType int

// The types; String gives the stream's `event:` field ("memory_event", "group_created", ...).
const (
	EventMemory       EventType = C.MEMCG_EVENT_MEMORY_EVENT // a memory.events counter went up
	EventVMPressure   EventType = C.MEMCG_EVENT_VMPRESSURE   // a reclaim root's level changed
	EventPSITrigger   EventType = C.MEMCG_EVENT_PSI_TRIGGER  // a PSI trigger fired
	EventOOM          EventType = C.MEMCG_EVENT_OOM          // an OOM report
	EventPreempt      EventType = C.MEMCG_EVENT_PREEMPT      // a preemption report
	EventBudget       EventType = C.MEMCG_EVENT_BUDGET       // the process budget's progress
	EventGroupCreated EventType = C.MEMCG_EVENT_GROUP_CREATED
	EventGroupRemoved EventType = C.MEMCG_EVENT_GROUP_REMOVED
	EventWrite        EventType = C.MEMCG_EVENT_WRITE  // a group file written over HTTP
	EventAction       EventType = C.MEMCG_EVENT_ACTION // an operator's action applied
	// EventGap: events asked for that the ring no longer holds; sent whatever the filter.
	EventGap EventType = C.MEMCG_EVENT_GAP
)

func (t EventType) String() string {
	if t < EventMemory || t > EventGap {
		return "EventType(" + strconv.Itoa(int(t)) + ")"
	}
	return C.GoString(C.memcg_event_type_name(C.int(t)))
}

// ParseEventType reads a type's name back ("oom" is EventOOM); EINVAL for any other text.
func ParseEventType(name string) (EventType, error) {
	if strings.IndexByte(name, 0) < 0 {
		cname := C.CString(name)
		t := C.memcg_event_type_from_name(cname)
		C.free(unsafe.Pointer(cname))
		if t >= 0 {
			return EventType(t), nil
		}
	}
	return 0, &OSError{Op: "event type " + quote(name), Errno: syscall.EINVAL}
}

// Event is one event of the controller's stream.
type Event struct {
	ID      uint64    // resume after it (SubscribeOptions.AfterID)
	Type    EventType //
	TimeNS  uint64    // wall clock, nanoseconds since the epoch
	Group   string    // the group's path: "/" for the root, "a/b" below it
	Payload string    // one JSON object on one line (docs/http.md gives each type's)
}

// Time is TimeNS as a time.
func (e Event) Time() time.Time { return time.Unix(0, int64(e.TimeNS)) }

// DropReason is why the library dropped a subscription; each is an error value for errors.Is.
type DropReason int

// The reasons (memcg_drop_reason).
const (
	NotDropped  DropReason = C.MEMCG_DROP_NONE
	DropLagging DropReason = C.MEMCG_DROP_LAGGING // fell more than MaxLag events behind
	DropOverrun DropReason = C.MEMCG_DROP_OVERRUN // the ring overwrote an event it had not taken
	DropClosed  DropReason = C.MEMCG_DROP_CLOSED  // the controller's event bus went away
)

// String is the C API's name ("lagging", ...).
func (r DropReason) String() string {
	if r < NotDropped || r > DropClosed {
		return "DropReason(" + strconv.Itoa(int(r)) + ")"
	}
	return C.GoString(C.memcg_drop_reason_name(C.int(r)))
}

func (r DropReason) Error() string { return "memcg: subscription dropped: " + r.String() }

// ErrDropped matches every *DroppedError (errors.Is(err, memcg.ErrDropped)).
var ErrDropped = errors.New("memcg: subscription dropped")

// ErrNoEvent is NextFor's answer when no event came in time.
var ErrNoEvent = errors.New("memcg: no event in time")

// DroppedError is Next's answer once the library dropped the subscription: every later Next
// gives it too. Subscribe again with AfterID: Cursor, which loses nothing the ring still holds
// (an event it no longer holds comes as a gap event).
type DroppedError struct {
	Reason DropReason
	Cursor uint64
}

func (e *DroppedError) Error() string {
	return fmt.Sprintf("memcg: subscription dropped (%s): resume after %d", e.Reason, e.Cursor)
}

// Unwrap gives the reason (errors.Is(err, memcg.DropLagging)).
func (e *DroppedError) Unwrap() error { return e.Reason }

// Is matches ErrDropped.
func (e *DroppedError) Is(target error) bool { return target == ErrDropped }

// SubscribeOptions says which events a subscription gets; the zero value is every event from
// now on.
type SubscribeOptions struct {
	// Subtree: the events of this group and its descendants ("tenants/a"); "" or "/" for every
	// group.
	Subtree string
	// Types: only these (a gap event comes whatever they are); none for every type.
	Types []EventType
	// AfterID: resume after this event's id (Cursor, or Event.ID); 0 for the events from now
	// on. An id the ring (the last 4096 events) no longer holds gives a gap event first.
	AfterID uint64
	// MaxLag: how many events it may fall behind before it is dropped with DropLagging; 0 for
	// the ring's capacity.
	MaxLag int
}

type subscriptionState struct {
	handle
	ctl *Controller
	ptr *C.memcg_subscription
	// turn: one Next at a time (the C API's rule), waited for with the caller's context.
	turn chan struct{}
	// memcg_subscription_cursor must not run beside a Next: its value as of the last one.
	cursor atomic.Uint64
	drop   atomic.Int32 // the drop reason, kept for after the C handle is freed
}

// Subscription is a cursor into the controller's event stream. Next, one goroutine at a time
// (a second waits its turn); Cursor, DropReason and Close from any.
type Subscription struct{ *subscriptionState }

// Subscribe follows the controller's events (the ones GET /v1/events serves). The library
// keeps nothing for it beyond the shared ring: one that falls MaxLag events behind is dropped
// (Next then gives a *DroppedError). EINVAL for a subtree that is not a group path, a negative
// MaxLag or an unknown type; EAGAIN at the library's 1024 subscriptions.
func (c *Controller) Subscribe(opts SubscribeOptions) (*Subscription, error) {
	op := "subscribe " + quote(opts.Subtree)
	var types C.uint32_t
	for _, t := range opts.Types {
		if t < EventMemory || t > EventGap {
			return nil, &OSError{Op: op + ": event type " + t.String(), Errno: syscall.EINVAL}
		}
		types |= 1 << uint(t)
	}
	if len(opts.Types) == 0 {
		types = C.MEMCG_EVENT_ALL
	}
	if opts.MaxLag < 0 {
		return nil, &OSError{Op: op + ": max lag " + strconv.Itoa(opts.MaxLag), Errno: syscall.EINVAL}
	}
	subtree, err := cString(opts.Subtree, op)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(subtree))
	s := &subscriptionState{ctl: c, turn: make(chan struct{}, 1)}
	if err := c.attach(&s.handle, 1); err != nil {
		return nil, err
	}
	code := C.memcg_subscribe(c.ptr, subtree, types, C.uint64_t(opts.AfterID),
		C.size_t(opts.MaxLag), &s.ptr)
	if err := check(code, op); err != nil {
		c.detach(&s.handle)
		return nil, err
	}
	s.cursor.Store(uint64(C.memcg_subscription_cursor(s.ptr)))
	s.ready(func() {
		// Wakes a Next waiting in C; the C handle is freed once it returned.
		C.memcg_subscription_close(s.ptr)
		s.drop.Store(int32(C.memcg_subscription_drop_reason(s.ptr)))
	}, func() {
		C.memcg_subscription_destroy(s.ptr)
		s.ctl.detach(&s.handle)
	})
	sub := &Subscription{s}
	runtime.SetFinalizer(sub, func(sub *Subscription) { _ = sub.Close() })
	return sub, nil
}

// Close unsubscribes; a Next waiting on another goroutine returns ErrClosed at once.
func (s *Subscription) Close() error { return s.close() }

// Closed tells whether Close was called.
func (s *Subscription) Closed() bool { return s.isClosed() }

// Cursor is the id of the last event taken or passed over by the filter, as of the last Next:
// subscribe again with AfterID: Cursor to lose nothing. Also after a drop and after Close.
func (s *Subscription) Cursor() uint64 { return s.cursor.Load() }

// DropReason tells whether, and why, the library dropped it (NotDropped while it follows).
func (s *Subscription) DropReason() DropReason {
	if s.pin() != nil {
		return DropReason(s.drop.Load())
	}
	defer s.unpin()
	r := int32(C.memcg_subscription_drop_reason(s.ptr))
	s.drop.Store(r)
	return DropReason(r)
}

// Next waits for the next event until ctx is done: then ctx.Err() (errors.Is(err,
// context.DeadlineExceeded)), and the subscription stays as it was. ctx's deadline is the
// wait's; a cancel is seen within 50 ms. A *DroppedError once the library dropped it
// (errors.Is(err, memcg.ErrDropped)); ErrClosed after Close, also a Close during the wait.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	if ctx == nil {
		return Event{}, &OSError{Op: "next: no context", Errno: syscall.EINVAL}
	}
	if err := ctx.Err(); err != nil {
		return Event{}, err
	}
	deadline, _ := ctx.Deadline()
	e, err := s.next(ctx.Done(), deadline)
	if err == errDone {
		if err = ctx.Err(); err == nil {
			// The deadline passed in C a moment before the context's timer fired.
			err = context.DeadlineExceeded
		}
	}
	return e, err
}

// NextFor is Next waiting up to timeout (0: only look): ErrNoEvent when none came.
func (s *Subscription) NextFor(timeout time.Duration) (Event, error) {
	if timeout < 0 {
		return Event{}, &OSError{Op: "next: timeout " + timeout.String(), Errno: syscall.EINVAL}
	}
	e, err := s.next(nil, time.Now().Add(timeout))
	if err == errDone {
		err = ErrNoEvent
	}
	return e, err
}

// errDone is next's "done or past the deadline"; its callers give their own error.
var errDone = errors.New("done")

const (
	// nextSlice bounds one wait in C while a context may be cancelled: the C call can only be
	// woken by closing the subscription, which a cancelled wait must not do.
	nextSlice = 50 * time.Millisecond
	// The C call's longest wait.
	maxWait = time.Duration(1<<31) * time.Millisecond
)

// next takes the turn, then waits in C until an event, done, the deadline (zero: none), a drop
// or a Close.
func (s *Subscription) next(done <-chan struct{}, deadline time.Time) (Event, error) {
	select {
	case s.turn <- struct{}{}:
	default:
		var expired <-chan time.Time
		if !deadline.IsZero() {
			t := time.NewTimer(time.Until(deadline))
			defer t.Stop()
			expired = t.C
		}
		select {
		case s.turn <- struct{}{}:
		case <-done:
			return Event{}, errDone
		case <-expired:
			return Event{}, errDone
		}
	}
	defer func() { <-s.turn }()
	if err := s.pin(); err != nil {
		return Event{}, err
	}
	defer s.unpin()
	for {
		wait := maxWait
		if !deadline.IsZero() {
			if wait = time.Until(deadline); wait < 0 {
				wait = 0
			}
		}
		if done != nil && wait > nextSlice {
			wait = nextSlice
		}
		// Whole milliseconds, rounded up: a wait shorter than one still waits.
		ms := (wait + time.Millisecond - 1) / time.Millisecond
		var e C.memcg_event
		e.size = C.sizeof_memcg_event // what this package knows of the struct
		code := C.memcg_subscription_next(s.ptr, C.int64_t(ms), &e)
		s.cursor.Store(uint64(C.memcg_subscription_cursor(s.ptr)))
		switch code {
		case 0:
			// The strings are the subscription's until the next call: copied now.
			return Event{ID: uint64(e.id), Type: EventType(e._type), TimeNS: uint64(e.time_ns),
				Group: C.GoString(e.group), Payload: C.GoString(e.payload)}, nil
		case C.int(syscall.EAGAIN):
			select {
			case <-done:
				return Event{}, errDone
			default:
			}
			if !deadline.IsZero() && !time.Now().Before(deadline) {
				return Event{}, errDone
			}
		case C.int(syscall.ECONNABORTED):
			r := int32(C.memcg_subscription_drop_reason(s.ptr))
			s.drop.Store(r)
			return Event{}, &DroppedError{Reason: DropReason(r), Cursor: s.cursor.Load()}
		case C.int(syscall.EBADF):
			return Event{}, ErrClosed // closed during the wait
		default:
			return Event{}, check(code, "next")
		}
	}
}

// Publish appends an event of the program's own (EventAction, EventBudget, ...) about the
// group at path ("" or "/" for the root; it must be online) with payload, one JSON object on
// one line. Returns its id; 0 while nothing follows the events (no subscription, no HTTP
// server): the library records nothing then. EINVAL for an unknown type or a payload that is
// not one object on one line, ENOENT for no such group, ENOMEM when the library had no memory
// for it.
func (c *Controller) Publish(t EventType, group, payload string) (uint64, error) {
	op := "publish " + t.String() + " about " + quote(group)
	if t < EventMemory || t > EventGap {
		return 0, &OSError{Op: op, Errno: syscall.EINVAL}
	}
	// The library checks only the braces and the line: a malformed object would reach every
	// subscriber and every stream.
	if !strings.HasPrefix(payload, "{") || !strings.HasSuffix(payload, "}") ||
		strings.ContainsAny(payload, "\r\n") || !json.Valid([]byte(payload)) {
		return 0, &OSError{Op: op + ": payload " + quote(payload) + " is not one JSON object on one line",
			Errno: syscall.EINVAL}
	}
	cgroup, err := cString(group, op)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(cgroup))
	if err := c.pin(); err != nil {
		return 0, err
	}
	defer c.unpin()
	cpayload := C.CString(payload)
	defer C.free(unsafe.Pointer(cpayload))
	var id C.uint64_t
	if err := check(C.memcg_events_publish(c.ptr, C.int(t), cgroup, cpayload, &id), op); err != nil {
		return 0, err
	}
	return uint64(id), nil
}
