package memcg

import "sync"

// handle is the life of one C handle: calls pin it; Close marks it closed at once (later calls
// get ErrClosed) and the C handle is freed when the last pin goes. So a callback closing the
// handle whose call is running (a kill callback closing the member whose charge ran the OOM
// killer) frees nothing under that call.
type handle struct {
	mu      sync.Mutex
	pins    int
	closing bool
	freed   bool
	free    func() // frees the C handle; set once it exists
	onClose func() // runs once at Close, before the free (a member closes its reservations)
	rank    int    // order of Controller.Close: reservations, listeners, members, groups
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
	run := h.pins == 0 && h.closing && !h.freed
	if run {
		h.freed = true
	}
	h.mu.Unlock()
	if run {
		h.free()
	}
}

func (h *handle) close() error {
	h.mu.Lock()
	if h.closing || h.free == nil {
		h.mu.Unlock()
		return ErrClosed
	}
	h.closing = true
	h.mu.Unlock()
	if h.onClose != nil {
		h.onClose()
	}
	h.mu.Lock()
	run := h.pins == 0 && !h.freed
	if run {
		h.freed = true
	}
	h.mu.Unlock()
	if run {
		h.free()
	}
	return nil
}

// forceFree frees a handle that no call can use any more (a reservation of a member being
// freed: its calls pin the member, which has no pin left).
func (h *handle) forceFree() {
	h.mu.Lock()
	h.closing = true
	run := !h.freed && h.free != nil
	if run {
		h.freed = true
	}
	h.mu.Unlock()
	if run {
		h.free()
	}
}

func (h *handle) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closing
}
