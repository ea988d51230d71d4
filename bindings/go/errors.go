package memcg

// #include <memcg/c/memcg.h>
import "C"

import (
	"errors"
	"fmt"
	"syscall"
)

// ErrClosed is returned by every call on a closed handle, and by a second Close.
var ErrClosed = errors.New("memcg: handle is closed")

// OSError is a failed set-up call: the C API's errno (errors.Is(err, syscall.EINVAL) works);
// nothing changed.
type OSError struct {
	Op    string
	Errno syscall.Errno
}

func (e *OSError) Error() string {
	return fmt.Sprintf("memcg: %s: %s", e.Op, C.GoString(C.memcg_errno_name(C.int(e.Errno))))
}

// Unwrap gives the errno.
func (e *OSError) Unwrap() error { return e.Errno }

func check(code C.int, op string) error {
	if code == 0 {
		return nil
	}
	return &OSError{Op: op, Errno: syscall.Errno(code)}
}

// Status is why the memory path refused a request; each is an error value for errors.Is.
type Status int

// The refusals (memcg_reserve_status; NoMem and Invalid also for charges).
const (
	NoMem       Status = 2
	NoMemCostly Status = 3
	TimedOut    Status = 4
	Cancelled   Status = 5
	Killed      Status = 6
	Removed     Status = 7
	Invalid     Status = 8
	NeverFits   Status = 9
	Refused     Status = 100
)

func (s Status) Error() string {
	return "memcg: " + s.String()
}

// String is the C API's name of the status ("nomem", "timed-out", "never-fits", ...).
func (s Status) String() string {
	return C.GoString(C.memcg_reserve_status_name(C.int(s)))
}

// IsLimit tells whether a limit held (the refusal then names the limiting group).
func (s Status) IsLimit() bool {
	return s == NoMem || s == NoMemCostly || s == TimedOut || s == NeverFits
}

// RefusedError is a refusal: its Status (errors.Is(err, memcg.TimedOut)), the group the request
// was made on and the group on its path with the least room under memory.max, read at the
// refusal ("" when no limit refused).
type RefusedError struct {
	Op            string
	Status        Status
	Group         string
	LimitingGroup string
	// Context is ctx.Err() when a context ended the request (ReserveContext, GrowContext):
	// errors.Is(err, context.Canceled) then holds too.
	Context error
}

func (e *RefusedError) Error() string {
	name := C.GoString(C.memcg_reserve_status_name(C.int(e.Status)))
	s := fmt.Sprintf("memcg: %s: %s in %q", e.Op, name, e.Group)
	if e.LimitingGroup != "" || e.Status.IsLimit() {
		s += fmt.Sprintf(" (limit of %q)", e.LimitingGroup)
	}
	return s
}

// Unwrap gives the Status.
func (e *RefusedError) Unwrap() error { return e.Status }

// Is matches the context's error too, when a context ended the request.
func (e *RefusedError) Is(target error) bool {
	return e.Context != nil && errors.Is(e.Context, target)
}
