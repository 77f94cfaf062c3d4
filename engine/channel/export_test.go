package channel

// FramesPending is how many frames r's client holds for its frame
// subscription ahead of onFrame (or in it): 0 once every frame received
// so far was queued for Next or dropped.
func FramesPending(r *Reader) int {
	r.smu.Lock()
	defer r.smu.Unlock()
	if r.bus == nil {
		return 0
	}
	n, _, err := r.bus.sub.Pending()
	if err != nil {
		return 0
	}
	return n
}
