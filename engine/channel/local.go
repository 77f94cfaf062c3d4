package channel

import (
	"sync"

	"github.com/nats-io/nats.go"
)

// Local channels: see the package doc, "Local writers".

// localKey names a reader open in this process: the server its engine's
// connection was on when it opened, and the channel id.
type localKey struct{ server, id string }

// readers are this process's open readers whose engines have local calls
// on.
var readers = struct {
	mu sync.Mutex
	m  map[localKey]*Reader
}{m: map[localKey]*Reader{}}

// register lists r for local writers, when its engine has local calls on.
func (r *Reader) register() {
	if !r.e.LocalCalls() {
		return
	}
	server := r.nc.ConnectedServerId()
	if server == "" {
		return
	}
	r.key = localKey{server, r.id}
	readers.mu.Lock()
	readers.m[r.key] = r
	readers.mu.Unlock()
}

// deregister withdraws r from local writers.
func (r *Reader) deregister() {
	if r.key.id == "" {
		return
	}
	readers.mu.Lock()
	if readers.m[r.key] == r {
		delete(readers.m, r.key)
	}
	readers.mu.Unlock()
}

// attachLocal attaches w to the reader of its channel open in this
// process, on the server w's engine is connected to, when both engines
// have local calls on. It reports false when there is none (or another
// writer attached first): w then goes over the bus.
func (w *Writer) attachLocal() bool {
	if !w.e.LocalCalls() {
		return false
	}
	server := w.nc.ConnectedServerId()
	if server == "" {
		return false
	}
	readers.mu.Lock()
	r := readers.m[localKey{server, w.id}]
	readers.mu.Unlock()
	if r == nil || !r.lw.CompareAndSwap(nil, w) {
		return false
	}
	w.local = r
	r.attached.Store(true)
	// The writer knows the window from here on: frame 1 needs no grant.
	r.answered.Store(true)
	// Grants and a cancel from now on reach w directly (Reader.grant,
	// Reader.cancel); those made before are read here.
	w.credit(r.granted.Load(), r.grantedBytes.Load())
	if r.cancelled.Load() {
		w.setGone()
	}
	return true
}

// credit raises w's limits to n frames and nb bytes and wakes it: a grant
// from a local reader.
func (w *Writer) credit(n, nb uint64) {
	w.raise(n, nb)
	w.signal()
}

// deliver hands one frame to the local reader. The reader's buffer holds
// a window and more, so a writer that waits for credit always finds room;
// a frame that does not fit is lost and the reader sees the gap, as on
// the bus.
func (w *Writer) deliver(m *nats.Msg) {
	select {
	case w.local.ch <- m:
	default:
		w.log.Warn("channel: local frame dropped: the reader's buffer is full", "channel", w.id)
	}
}
