package channel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// closeFlushTimeout bounds the flush of Close and Fail when ctx has no
// deadline.
const closeFlushTimeout = 10 * time.Second

// Writer is the sending end of a channel. Its calls are safe for concurrent
// use and are serialized: frames go out in call order, except that Close
// and Fail do not wait behind a Write blocked for credit (it returns
// [ErrClosed]). A writer that sends nothing for its idle timeout, with no
// call in progress and not [Writer.Busy], ends the stream itself
// ([WithIdleTimeout]).
type Writer struct {
	e     *engine.Engine
	nc    *nats.Conn
	id    string
	subj  string
	ack   string
	ping  string
	codec wire.Codec
	idle  time.Duration
	probe time.Duration
	log   *slog.Logger
	sub   *nats.Subscription // nil for a local writer
	// local is the reader of this process the writer hands its frames to
	// (local.go), or nil: the writer publishes on the bus.
	local *Reader

	// Written by the control subscription, read by Write.
	limit atomic.Uint64 // highest sequence number granted
	// limitBytes is the byte credit granted; 0 until a grant carries one
	// (a reader that sends none puts no byte limit).
	limitBytes atomic.Uint64
	gone       atomic.Bool // the reader cancelled or stopped granting
	// busy counts the owner's Busy sections not yet done; busyEnded is
	// when the last one ended (Unix nanoseconds, 0 before any).
	busy      atomic.Int32
	busyEnded atomic.Int64
	// goneCh is closed once gone is set (Gone).
	goneCh   chan struct{}
	goneOnce sync.Once
	wake     chan struct{} // signalled on every credit or cancel
	// closing leaves stateOpen, and closingCh is closed, on the first
	// Close or Fail (stateClosing) or on the idle timeout (stateExpired,
	// or stateAbandoned when the reader was gone already): a Write waiting
	// for credit gives way to the terminal frame.
	closing   atomic.Uint32
	closingCh chan struct{}

	// sem serializes frames; the fields below are guarded by it.
	sem   chan struct{}
	seq   uint64 // last sequence number sent
	sent  uint64 // payload bytes of the data frames sent
	ended bool   // a terminal frame was sent (or the writer was released)
	timer *time.Timer
	tick  *time.Ticker
	// hdr and msg are reused for data frames after the first: PublishMsg
	// encodes them before it returns.
	hdr nats.Header
	msg nats.Msg

	// The lease: a timer that checks every leaseStep whether the writer
	// has been silent for its idle timeout (checkLease). Guarded by lmu.
	lmu        sync.Mutex
	lease      *time.Timer
	leaseStep  time.Duration
	leaseSeq   uint64    // w.seq at the last check
	quietSince time.Time // no frame sent since (at the latest)
	released   bool      // the lease is stopped and the subscription gone
}

// The states of Writer.closing.
const (
	stateOpen uint32 = iota
	stateClosing
	stateExpired
	stateAbandoned
)

// maxProbeInterval bounds how long a writer waits for credit before it asks
// the reader again.
const maxProbeInterval = 500 * time.Millisecond

// NewWriter returns a writer on channel id (from the reader's [Reader.ID],
// usually received in a function call's payload). It subscribes to the
// channel's control subject and asks the reader for credit at once, so the
// window is usually open by the first Write; it does not wait for the
// answer. An invalid id is an invalid_payload wire error that also matches
// subjects.ErrInvalidID. Options: [WithCodec], [WithIdleTimeout].
func NewWriter(e *engine.Engine, id string, opts ...Option) (*Writer, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: nil engine", engine.ErrInvalidOption)
	}
	subj, err := subjects.ChannelSubject(id)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	o, err := buildOptions(e, opts)
	if err != nil {
		return nil, err
	}
	w := &Writer{
		e:         e,
		nc:        e.Conn(),
		id:        id,
		subj:      subj,
		ack:       subj + ackSuffix,
		ping:      subj + pingSuffix,
		codec:     o.codec,
		idle:      o.idle,
		probe:     max(min(o.idle/4, maxProbeInterval), time.Millisecond),
		log:       e.Logger(),
		wake:      make(chan struct{}, 1),
		goneCh:    make(chan struct{}),
		closingCh: make(chan struct{}),
		sem:       make(chan struct{}, 1),
	}
	w.limit.Store(1) // frame 1 needs no credit
	w.timer = time.NewTimer(o.idle)
	w.timer.Stop()
	w.tick = time.NewTicker(w.probe)
	w.tick.Stop()
	if !w.attachLocal() {
		w.sub, err = w.nc.Subscribe(w.ack, w.onControl)
		if err != nil {
			return nil, wire.FromNATS(err)
		}
		// The subscription goes out before the ping on this connection, so
		// the answer cannot miss it.
		if err := w.askCredit(); err != nil {
			_ = w.sub.Unsubscribe()
			return nil, err
		}
		w.hdr = frameHeader(1, KindData, w.codec.ContentType())
	}
	w.startLease()
	return w, nil
}

// askCredit sends a ping whose answer (credit, cancel, or the server's
// no-responders status when no reader listens) arrives on the ack
// subscription. A local writer has nobody to ask: the reader's grants
// reach it directly.
func (w *Writer) askCredit() error {
	if w.local != nil {
		return nil
	}
	err := w.nc.PublishMsg(&nats.Msg{Subject: w.ping, Reply: w.ack, Header: controlHeader(KindPing, 0, 0)})
	if err != nil {
		return wire.FromNATS(err)
	}
	return nil
}

// ID is the channel id.
func (w *Writer) ID() string { return w.id }

// onControl applies a credit or cancel from the reader, or the server's
// no-responders answer to a ping (nobody reads the channel any more). A
// credit with a reply subject is the reader's liveness probe: a busy
// writer answers it with a keep-alive.
func (w *Writer) onControl(m *nats.Msg) {
	if len(m.Data) == 0 && m.Header.Get(statusHeader) == statusNoResponders {
		w.setGone()
		w.signal()
		return
	}
	kind, credit, bytes, err := parseControl(m.Header)
	if err != nil {
		w.log.Debug("channel: control message ignored", "channel", w.id, "error", err)
		return
	}
	switch kind {
	case KindCredit:
		w.raise(credit, bytes)
		if m.Reply != "" && w.keepingAlive() {
			err := w.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: controlHeader(KindKeepAlive, 0, 0)})
			if err != nil {
				w.log.Debug("channel: keep-alive not sent", "channel", w.id, "error", err)
			}
		}
	case KindCancel:
		w.setGone()
	}
	w.signal()
}

// The status header of the server's no-responders answer.
const (
	statusHeader       = "Status"
	statusNoResponders = "503"
)

// raise lifts the writer's limits to n frames and nb bytes (none when 0);
// credit is cumulative, so a lower or repeated grant changes nothing.
func (w *Writer) raise(n, nb uint64) {
	raiseTo(&w.limit, n)
	raiseTo(&w.limitBytes, nb)
}

func raiseTo(a *atomic.Uint64, n uint64) {
	for {
		old := a.Load()
		if n <= old || a.CompareAndSwap(old, n) {
			return
		}
	}
}

// granted reports whether data frame seq may go: within the frame credit,
// and, once the reader granted bytes, while the bytes sent are below that.
// sem held.
func (w *Writer) granted(seq uint64) bool {
	if seq > w.limit.Load() {
		return false
	}
	lb := w.limitBytes.Load()
	return lb == 0 || w.sent < lb
}

// setGone records that the reader is gone.
func (w *Writer) setGone() {
	w.gone.Store(true)
	w.goneOnce.Do(func() { close(w.goneCh) })
}

// Gone is closed once the writer knows its reader is gone: it cancelled
// (closed the channel, or failed on a gap or timeout), or, over the bus,
// nobody answers the writer's credit requests any more; and once the
// writer ended the stream on its idle timeout. A writer that waits on
// something other than its own Write (an API, a timer) selects on it to
// stop at once; see also [Writer.Sleep].
func (w *Writer) Gone() <-chan struct{} { return w.goneCh }

// Sleep waits d, or less: it returns [ErrReaderGone] as soon as the reader
// is gone ([ErrIdleTimeout] if the writer ended the stream on its idle
// timeout) and ctx's error when ctx ends first. Over the bus it asks the
// reader for credit as often as a writer waiting for credit does, so a
// reader whose process died is noticed (the server's no-responders answer)
// while the writer sleeps, not only at its next Write. Sleeping is silence:
// it does not hold off the writer's idle timeout, unless the writer is
// [Writer.Busy].
func (w *Writer) Sleep(ctx context.Context, d time.Duration) error {
	if w.gone.Load() {
		return w.goneErr()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	var tick <-chan time.Time
	if w.local == nil && d > w.probe {
		tk := time.NewTicker(w.probe)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		select {
		case <-w.goneCh:
			return w.goneErr()
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case <-tick:
			if err := w.askCredit(); err != nil {
				return err
			}
		}
	}
}

// Busy tells the writer that its owner is at work on the next frame and
// bounds that work itself: a call to an API that may think for minutes
// before its next byte, under the caller's own idle timeout and retries.
// Until done is called, silence does not count toward the writer's idle
// timeout, and the writer keeps its reader waiting (package doc,
// "Keep-alive"): the reader's idle timeout then only catches a writer
// that stopped answering (its process is stuck, or an older writer), and
// a writer whose process died is still noticed within seconds. done is
// idempotent; Busy sections may overlap. The owner must bound the work:
// a Busy section nobody ends holds the reader until its context ends.
func (w *Writer) Busy() (done func()) {
	w.busy.Add(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			// Silence counts from the end of the work, not from the
			// lease's last look at it.
			now := time.Now()
			w.lmu.Lock()
			w.quietSince = now
			w.lmu.Unlock()
			w.busyEnded.Store(now.UnixNano())
			w.busy.Add(-1)
		})
	}
}

// keepingAlive reports whether the writer answers its reader's liveness
// probes with a keep-alive: its owner is busy, and it has not ended the
// stream.
func (w *Writer) keepingAlive() bool {
	return w.busy.Load() > 0 && w.closing.Load() == stateOpen && !w.gone.Load()
}

// busyGrace is how much of idle is left since the owner's last Busy
// section ended: a local reader's idle timeout counts from then, as a
// reader over the bus counts from the last keep-alive. 0 when no section
// ended within idle.
func (w *Writer) busyGrace(idle time.Duration) time.Duration {
	end := w.busyEnded.Load()
	if end == 0 {
		return 0
	}
	return max(idle-time.Since(time.Unix(0, end)), 0)
}

func (w *Writer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Write sends one data frame. data is encoded with the writer's codec,
// except []byte and engine.Raw, which are sent as they are (pre-encoded in
// that codec). Write blocks while the reader's credit is used up, until
// credit arrives, ctx ends, or Close or Fail is called; it returns
// [ErrReaderGone] when the reader closed the channel or granted nothing
// for the idle timeout, [ErrClosed] once Close or Fail has been called
// (also to a Write they interrupt), [ErrIdleTimeout] once the writer ended
// the stream on its idle timeout, an invalid_payload wire error for
// data that does not encode or exceeds the server's max payload (nothing
// is sent), and ctx's error when ctx ends first. A failed Write sends
// nothing and uses no sequence number.
func (w *Writer) Write(ctx context.Context, data any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if w.closing.Load() != stateOpen {
		return w.closedErr()
	}
	body, err := w.encode(data)
	if err != nil {
		return err
	}
	if w.local != nil {
		switch data.(type) {
		case []byte, engine.Raw:
			// The caller may reuse its buffer once Write returns, as the
			// bus would allow.
			body = bytes.Clone(body)
		}
	}
	if err := w.lock(ctx); err != nil {
		return err
	}
	defer w.unlock()
	if w.ended || w.closing.Load() != stateOpen {
		return w.closedErr()
	}
	seq := w.seq + 1
	if err := w.awaitCredit(ctx, seq); err != nil {
		return err
	}
	var h nats.Header
	if seq == 1 || w.local != nil {
		// Frame 1 gets trace headers too; a local frame keeps its header.
		h = frameHeader(seq, KindData, w.codec.ContentType())
	} else {
		h = w.hdr
		h[HeaderSeq][0] = strconv.FormatUint(seq, 10)
	}
	if err := w.publish(ctx, seq, h, body); err != nil {
		return err
	}
	w.seq = seq
	w.sent += uint64(len(body))
	return nil
}

// closedErr is the error of a call on a writer that is closing or closed.
func (w *Writer) closedErr() error {
	switch w.closing.Load() {
	case stateExpired:
		return w.idleErr()
	case stateAbandoned:
		return ErrReaderGone
	}
	return ErrClosed
}

// goneErr is the error of a call on a writer whose Gone is closed.
func (w *Writer) goneErr() error {
	if w.closing.Load() == stateExpired {
		return w.idleErr()
	}
	return ErrReaderGone
}

func (w *Writer) idleErr() error {
	return fmt.Errorf("%w: the writer sent nothing for %v and ended the stream", ErrIdleTimeout, w.idle)
}

func (w *Writer) encode(data any) ([]byte, error) {
	switch d := data.(type) {
	case []byte:
		return d, nil
	case engine.Raw:
		return d, nil
	}
	b, err := w.codec.Marshal(data)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "channel frame does not encode")
	}
	return b, nil
}

// lock takes the writer for a Write, unless ctx ends or Close or Fail is
// called first.
func (w *Writer) lock(ctx context.Context) error {
	select {
	case w.sem <- struct{}{}: // a free writer, without a three-way select
		return nil
	default:
	}
	select {
	case w.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-w.closingCh:
		return w.closedErr()
	}
}

func (w *Writer) unlock() { <-w.sem }

// awaitCredit blocks until frame seq is granted. sem held.
func (w *Writer) awaitCredit(ctx context.Context, seq uint64) error {
	if w.gone.Load() {
		return ErrReaderGone
	}
	if w.granted(seq) {
		return nil
	}
	// While it waits, the writer asks the reader for credit now and then:
	// that recovers a lost grant, and the server's no-responders answer
	// reveals a reader that vanished without a cancel.
	w.timer.Reset(w.idle)
	w.tick.Reset(w.probe)
	defer w.timer.Stop()
	defer w.tick.Stop()
	for {
		select {
		case <-w.wake:
		case <-w.tick.C:
			if err := w.askCredit(); err != nil {
				return err
			}
			continue
		case <-ctx.Done():
			return ctx.Err()
		case <-w.closingCh:
			return w.closedErr()
		case <-w.timer.C:
			w.setGone()
			return fmt.Errorf("%w: no credit for %v after frame %d", ErrReaderGone, w.idle, seq-1)
		}
		if w.gone.Load() {
			return ErrReaderGone
		}
		if w.granted(seq) {
			return nil
		}
	}
}

// publish sends one frame; frame 1 also carries ctx's trace context.
func (w *Writer) publish(ctx context.Context, seq uint64, h nats.Header, body []byte) error {
	if seq == 1 {
		w.e.Inject(ctx, h)
	}
	if w.local != nil {
		if limit := w.nc.MaxPayload(); int64(len(body)+wire.HeaderSize(h)) > limit {
			return wire.Errorf(wire.CodeInvalidPayload, "channel frame of %d bytes exceeds the server's max payload of %d bytes", len(body), limit)
		}
		w.deliver(&nats.Msg{Subject: w.subj, Header: h, Data: body})
		return nil
	}
	w.msg = nats.Msg{Subject: w.subj, Header: h, Data: body}
	err := w.nc.PublishMsg(&w.msg)
	w.msg = nats.Msg{}
	if err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			return wire.Errorf(wire.CodeInvalidPayload, "channel frame of %d bytes exceeds the server's max payload of %d bytes", len(body), w.nc.MaxPayload())
		}
		return wire.FromNATS(err)
	}
	return nil
}

// Close ends the stream cleanly: it sends the end frame (which needs no
// credit) and flushes the connection within ctx, so the reader's Next
// returns [ErrEnd] after the last data frame. A Write blocked for credit in
// another goroutine gives way: it returns [ErrClosed], having sent
// nothing. An expired ctx still sends the end frame, without waiting for
// the flush. If the reader is already gone it sends nothing and returns
// [ErrReaderGone]. Close after Close or Fail is a no-op returning nil, so
// `defer w.Close(ctx)` is safe; after the writer ended the stream on its
// idle timeout it returns [ErrIdleTimeout].
func (w *Writer) Close(ctx context.Context) error {
	return w.terminate(ctx, func(seq uint64) (nats.Header, []byte) {
		return frameHeader(seq, KindEnd, ""), nil
	})
}

// Fail ends the stream with err: the reader's Next returns an error
// wrapping [ErrWriterFailed] and err as a *wire.Error (err keeps its code
// if it is one; context errors become canceled or timeout; anything else is
// internal). Like Close, it needs no credit, interrupts a Write waiting
// for credit, flushes, and is a no-op after Close or Fail ([ErrIdleTimeout]
// after the idle timeout ended the stream).
func (w *Writer) Fail(ctx context.Context, err error) error {
	werr := wire.FromNATS(err)
	if werr == nil {
		werr = wire.Errorf(wire.CodeInternal, "writer failed")
	}
	return w.terminate(ctx, func(seq uint64) (nats.Header, []byte) {
		return errorFrame(seq, werr, w.codec, w.nc.MaxPayload())
	})
}

// errorFrame builds an error frame in codec: the wire error envelope and
// the NATS services error headers (so wire.Decode reads it), shortened
// when it would not fit maxPayload.
func errorFrame(seq uint64, werr *wire.Error, codec wire.Codec, maxPayload int64) (nats.Header, []byte) {
	m := wire.ReplyWithin(werr, codec, maxPayload)
	h := frameHeader(seq, KindError, "")
	for k, v := range m.Header {
		h[k] = v
	}
	return h, m.Data
}

// terminate sends a terminal frame once and releases the writer.
func (w *Writer) terminate(ctx context.Context, build func(seq uint64) (nats.Header, []byte)) error {
	if !w.closing.CompareAndSwap(stateOpen, stateClosing) {
		if w.closing.Load() == stateClosing {
			return nil
		}
		return w.closedErr()
	}
	// A Write waiting for credit returns at once; one that is publishing
	// does not block. So the wait for the writer is short, and it does not
	// depend on ctx: the stream always ends and the subscription goes.
	close(w.closingCh)
	w.sem <- struct{}{}
	defer w.unlock()
	w.ended = true
	defer w.release()
	if w.gone.Load() {
		return ErrReaderGone
	}
	seq := w.seq + 1
	h, body := build(seq)
	if err := w.publish(ctx, seq, h, body); err != nil {
		return err
	}
	w.seq = seq
	if w.local != nil {
		return nil // delivered: nothing to flush
	}
	if ctx.Err() != nil {
		// Publishing does not block, so the frame is on its way; the
		// connection's flusher sends it.
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, closeFlushTimeout)
		defer cancel()
	}
	if err := w.nc.FlushWithContext(ctx); err != nil {
		return wire.FromNATS(err)
	}
	return nil
}

// startLease starts the check for a writer left silent: by an owner that
// forgot to Close it, or is stuck. Without it, such a writer would keep
// its subscription until its connection closes.
func (w *Writer) startLease() {
	w.lmu.Lock()
	defer w.lmu.Unlock()
	// A check every eighth of the idle timeout: the writer ends at most
	// that much after its idle timeout, and never before it.
	w.leaseStep = max(w.idle/8, time.Millisecond)
	w.quietSince = time.Now()
	w.lease = time.AfterFunc(w.leaseStep, w.checkLease)
}

// checkLease ends the stream once the writer has sent no frame for its
// idle timeout with no call in progress; otherwise it checks again later.
// It samples the sequence number rather than timing every Write, which
// keeps the clock off the hot path.
func (w *Writer) checkLease() {
	w.lmu.Lock()
	defer w.lmu.Unlock()
	if w.released {
		return
	}
	now := time.Now()
	if w.busy.Load() > 0 {
		// The owner is at work on something it bounds itself (Busy).
		w.quietSince = now
		w.lease.Reset(w.leaseStep)
		return
	}
	select {
	case w.sem <- struct{}{}:
	default:
		// A call is in progress: not silence (a Write waiting for credit
		// is bounded by the idle timeout on its own).
		w.quietSince = now
		w.lease.Reset(w.leaseStep)
		return
	}
	defer w.unlock()
	if w.ended {
		return
	}
	if w.seq != w.leaseSeq {
		// A frame went out since the last check, at the latest now.
		w.leaseSeq, w.quietSince = w.seq, now
	}
	if quiet := now.Sub(w.quietSince); quiet < w.idle {
		w.lease.Reset(min(w.leaseStep, w.idle-quiet))
		return
	}
	w.expire()
}

// expire ends the stream of a writer silent for its idle timeout: the
// reader gets a timeout error frame rather than waiting for its own idle
// timeout, the subscription goes, Gone is closed (an owner stuck on
// something that selects on it is released), and every later call
// returns ErrIdleTimeout. A writer whose reader is gone sends nothing and
// keeps answering ErrReaderGone. sem and lmu held.
func (w *Writer) expire() {
	state := stateExpired
	if w.gone.Load() {
		state = stateAbandoned
	}
	if !w.closing.CompareAndSwap(stateOpen, state) {
		return // Close or Fail is on its way
	}
	close(w.closingCh)
	w.ended = true
	w.log.Warn("channel: writer idle: stream ended (Close or Fail not called)", "channel", w.id, "idle", w.idle, "frames", w.seq)
	w.setGone()
	if state == stateExpired {
		// Published before the subscription goes, so a reader that then
		// finds the writer gone reads the frame first.
		seq := w.seq + 1
		werr := wire.Errorf(wire.CodeTimeout, "channel writer sent nothing for %v and did not end the stream", w.idle)
		h, body := errorFrame(seq, werr, w.codec, w.nc.MaxPayload())
		if err := w.publish(context.Background(), seq, h, body); err != nil {
			w.log.Warn("channel: idle writer's error frame not sent", "channel", w.id, "error", err)
		} else {
			w.seq = seq
		}
	}
	w.releaseLocked()
}

// release stops the lease and drops the subscription, once.
func (w *Writer) release() {
	w.lmu.Lock()
	defer w.lmu.Unlock()
	w.releaseLocked()
}

// releaseLocked is release with lmu held.
func (w *Writer) releaseLocked() {
	if w.released {
		return
	}
	w.released = true
	w.lease.Stop()
	if w.sub != nil {
		_ = w.sub.Unsubscribe()
	}
}
