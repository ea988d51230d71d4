package memcg

import "sync"

// handle is the life of one C handle: calls pin it; Close marks it closed at once (later calls
// get ErrClosed) and the C handle is freed when the last pin goes, so that no C object is freed
// while a call of it is in flight on any goroutine. A callback closing the handle whose call is
// running (a kill callback closing the member whose charge ran the OOM killer) frees nothing
// under that call, and neither does a Close racing a call on another goroutine (Member.Close
// against Reservation.Cancel: the reservation is freed when Cancel returns).
type handle struct {
	mu      sync.Mutex
	pins    int
	closing bool
	freed   bool
	free    func() // frees the C handle; set once it exists (ready)
	onClose func() // runs once at Close, before the free (a member closes its reservations)
	// Order of Controller.Close: 0 reservations and attached objects (an HTTP server), 1
	// listeners and subscriptions, 2 members, 3 groups.
	rank int
}

func (h *handle) pin() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing || h.free == nil {
		return ErrClosed
	}
	h.pins++
	return nil
}

func (h *handle) unpin() {
	h.mu.Lock()
	h.pins--
	run := h.pins == 0 && h.closing && !h.freed && h.free != nil
	if run {
		h.freed = true
	}
	h.mu.Unlock()
	if run {
		h.free()
	}
}

// ready records how to free the C handle once it exists. A Close that came while it was being
// made (Controller.Close closing its children) frees it now: nothing else would.
func (h *handle) ready(onClose, free func()) {
	h.mu.Lock()
	h.onClose = onClose
	h.free = free
	run := h.closing && h.pins == 0 && !h.freed
	if run {
		h.freed = true
	}
	h.mu.Unlock()
	if run {
		free()
	}
}

func (h *handle) close() error {
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		return ErrClosed
	}
	h.closing = true
	onClose := h.onClose
	// Pinned while onClose runs: it may use the C handle (a subscription's close wakes its
	// waiting Next), which a call returning meanwhile must not free under it.
	h.pins++
	h.mu.Unlock()
	if onClose != nil {
		onClose()
	}
	h.unpin()
	return nil
}

func (h *handle) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closing
}
