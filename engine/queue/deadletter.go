package queue

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Headers a dead letter carries besides the original message's own
// (Content-Type, Iii-Function-Id, trace context). Iii-Enqueued-At and
// Iii-Redrives also travel on a redriven queue message.
const (
	// HeaderQueue names the queue the message was dead-lettered from.
	HeaderQueue = "Iii-Queue"
	// HeaderErrorCode is the catalog code of the last delivery's error.
	HeaderErrorCode = "Iii-Error-Code"
	// HeaderErrorMessage is the last delivery's error message (one line,
	// at most [MaxErrorMessage] bytes).
	HeaderErrorMessage = "Iii-Error-Message"
	// HeaderDeliveries is how many deliveries the message had.
	HeaderDeliveries = "Iii-Deliveries"
	// HeaderEnqueuedAt is when the message was first enqueued (RFC 3339,
	// UTC), kept across redrives.
	HeaderEnqueuedAt = "Iii-Enqueued-At"
	// HeaderDeadLetteredAt is when it was dead-lettered (RFC 3339, UTC).
	HeaderDeadLetteredAt = "Iii-Dead-Lettered-At"
	// HeaderQueueSeq is its sequence in stream III_QUEUE.
	HeaderQueueSeq = "Iii-Queue-Seq"
	// HeaderOriginalMsgID keeps the producer's Nats-Msg-Id (dedup id):
	// the dead letter and a redriven message get their own ids.
	HeaderOriginalMsgID = "Iii-Original-Msg-Id"
	// HeaderRedrives counts how often the message was redriven.
	HeaderRedrives = "Iii-Redrives"
	// HeaderBodyObject, on a dead letter without a body, names the object
	// of bucket [DLQBodiesBucket] that keeps the body: the dead letter
	// would not fit the max payload with it.
	HeaderBodyObject = "Iii-Body-Object"
	// HeaderBodySize is the size in bytes of a body kept as an object.
	HeaderBodySize = "Iii-Body-Size"
)

// DLQBodiesBucket is the JetStream object store (stream
// OBJ_III_DLQ_BODIES, created on first use) that keeps the body of a
// message whose dead letter would not fit the max payload even without
// its error message — one a client published onto iii.queue.<name> close
// to the limit, or one stored before the max payload was lowered. Its
// objects are named "<queue>/<queue seq>" and expire with the dead
// letters (30 days).
const DLQBodiesBucket = "III_DLQ_BODIES"

// MaxErrorMessage bounds the error message kept in a dead letter's header.
const MaxErrorMessage = 1024

// dlqOnly are the headers a dead letter adds and a redrive removes.
var dlqOnly = []string{HeaderQueue, HeaderErrorCode, HeaderErrorMessage, HeaderDeliveries, HeaderDeadLetteredAt, HeaderQueueSeq,
	HeaderBodyObject, HeaderBodySize}

// DeadLetter is one message in the dead-letter subject of a queue.
type DeadLetter struct {
	// Sequence is the message's sequence in stream III_DLQ: the handle for
	// [WithRedriveSequence].
	Sequence     uint64    `json:"sequence"`
	Queue        string    `json:"queue"`
	FunctionID   string    `json:"function_id"`
	ErrorCode    wire.Code `json:"error_code"`
	ErrorMessage string    `json:"error_message"`
	Deliveries   int       `json:"deliveries"`
	Redrives     int       `json:"redrives,omitempty"`
	EnqueuedAt   time.Time `json:"enqueued_at"`
	DeadAt       time.Time `json:"dead_lettered_at"`
	ContentType  string    `json:"content_type"`
	// Data is the payload decoded with its codec (nil if it does not
	// decode); Body is the payload as stored.
	Data any `json:"data"`
	// DataOmitted says queue::dead_letters left Data out because the
	// dead letter would not fit its answer otherwise; the body is still
	// in stream III_DLQ at Sequence.
	DataOmitted bool `json:"data_omitted,omitempty"`
	// BodyObject, when set, names the object of bucket
	// [DLQBodiesBucket] that keeps the body, BodySize bytes: the dead
	// letter itself has none, since it would not fit the max payload
	// with it. Such a dead letter cannot be redriven.
	BodyObject string      `json:"body_object,omitempty"`
	BodySize   int         `json:"body_size,omitempty"`
	Body       []byte      `json:"-"`
	Header     nats.Header `json:"-"`
}

// dlqMsgID is the Nats-Msg-Id of the dead letter of queue message seq, so
// that dead-lettering the same message twice (a crash between the publish
// and the ack) stores it once.
func dlqMsgID(queue string, seq uint64) string {
	return "iii-dlq-" + queue + "-" + strconv.FormatUint(seq, 10)
}

// redriveMsgID is the Nats-Msg-Id of the redrive of dead letter seq, so
// that a redrive retried after a crash between publish and delete enqueues
// it once (within the queue stream's duplicate window).
func redriveMsgID(queue string, seq uint64) string {
	return "iii-redrive-" + queue + "-" + strconv.FormatUint(seq, 10)
}

// copyHeader copies h without the Nats-* headers, which JetStream would
// interpret on the next publish (dedup ids, expectations, TTLs).
func copyHeader(h nats.Header, extra int) nats.Header {
	out := make(nats.Header, len(h)+extra)
	for k, v := range h {
		if len(k) >= 5 && strings.EqualFold(k[:5], "Nats-") {
			continue
		}
		out[k] = append([]string(nil), v...)
	}
	return out
}

// headerValue makes s a safe one-line header value of at most
// MaxErrorMessage bytes, cut at a rune boundary.
func headerValue(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || r < 0x20 && r != '\t' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > MaxErrorMessage {
		cut := MaxErrorMessage
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return strings.TrimSpace(s)
}

const timeLayout = time.RFC3339Nano

// deadLetterMsg builds the dead letter of a queue message: the original
// body and headers plus the Iii-* dead-letter headers.
func deadLetterMsg(queue string, data []byte, hdr nats.Header, md *jetstream.MsgMetadata, fnID string, we *wire.Error, now time.Time) *nats.Msg {
	subj, _ := subjects.DLQSubject(queue)
	h := copyHeader(hdr, len(dlqOnly)+3)
	// A redriven message's id is the redrive's, not its producer's: one
	// the producer gave is kept from the first dead letter on.
	if id := hdr.Get(nats.MsgIdHdr); id != "" && h.Get(HeaderOriginalMsgID) == "" && h.Get(HeaderRedrives) == "" {
		h.Set(HeaderOriginalMsgID, headerValue(id))
	}
	h.Set(HeaderQueue, queue)
	if fnID != "" {
		h.Set(engine.HeaderFunctionID, headerValue(fnID))
	}
	h.Set(HeaderErrorCode, string(we.Code))
	h.Set(HeaderErrorMessage, headerValue(we.Message))
	h.Set(HeaderDeliveries, strconv.FormatUint(md.NumDelivered, 10))
	if _, err := time.Parse(timeLayout, h.Get(HeaderEnqueuedAt)); err != nil {
		h.Set(HeaderEnqueuedAt, md.Timestamp.UTC().Format(timeLayout))
	}
	h.Set(HeaderDeadLetteredAt, now.UTC().Format(timeLayout))
	h.Set(HeaderQueueSeq, strconv.FormatUint(md.Sequence.Stream, 10))
	h.Set(nats.MsgIdHdr, dlqMsgID(queue, md.Sequence.Stream))
	return &nats.Msg{Subject: subj, Data: data, Header: h}
}

// fitDeadLetter cuts the error message of dead letter m, down to nothing,
// until m fits max (the server's max payload, headers counted). A dead
// letter is its message plus its headers, so a message near the max
// payload that failed with a long error would otherwise never be stored
// and stay on its queue, retried for ever. It reports whether m fits.
func fitDeadLetter(m *nats.Msg, max int64) bool {
	over := int64(len(m.Data)+wire.HeaderSize(m.Header)) - max
	if over <= 0 {
		return true
	}
	msg := m.Header.Get(HeaderErrorMessage)
	if keep := int64(len(msg)) - over; keep > 0 {
		cut := int(keep)
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		if cut > 0 {
			m.Header.Set(HeaderErrorMessage, msg[:cut])
			return true
		}
	}
	m.Header.Del(HeaderErrorMessage)
	return int64(len(m.Data)+wire.HeaderSize(m.Header)) <= max
}

// bodyObjectName names the object that keeps the body of queue message
// seq when its dead letter cannot carry it.
func bodyObjectName(queue string, seq uint64) string {
	return queue + "/" + strconv.FormatUint(seq, 10)
}

// bodyElsewhere makes dead letter m, which does not fit max with its body,
// one without: its headers say where the body is kept (object of
// [DLQBodiesBucket]) and how large it is, and its error message errMsg is
// put back, cut to fit. It reports whether m fits now.
func bodyElsewhere(m *nats.Msg, errMsg, object string, max int64) bool {
	m.Header.Set(HeaderBodyObject, object)
	m.Header.Set(HeaderBodySize, strconv.Itoa(len(m.Data)))
	m.Data = nil
	m.Header.Set(HeaderErrorMessage, headerValue(errMsg))
	return fitDeadLetter(m, max)
}

// keepBody stores data, the body of a queue message whose dead letter
// cannot carry it, as object name of [DLQBodiesBucket], creating the
// bucket on first use. A body stored again under the same name (a
// redelivery after a crash) replaces the first.
func keepBody(ctx context.Context, e *engine.Engine, name string, data []byte, h nats.Header) error {
	js := e.JetStream()
	obs, err := js.ObjectStore(ctx, DLQBodiesBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      DLQBodiesBucket,
			Description: "iii dead letters' bodies too large for their dead letter",
			TTL:         engine.DLQStreamConfig(e.Replicas()).MaxAge,
			Storage:     jetstream.FileStorage,
			Replicas:    e.Replicas(),
		})
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			obs, err = js.ObjectStore(ctx, DLQBodiesBucket)
		}
	}
	if err != nil {
		return err
	}
	// Each chunk is a message: keep them well under the max payload.
	chunk := min(e.Conn().MaxPayload()/2, 128<<10)
	meta := jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(chunk)}}
	if ct := h.Get(wire.HeaderContentType); ct != "" {
		meta.Headers = nats.Header{wire.HeaderContentType: []string{ct}}
	}
	_, err = obs.Put(ctx, meta, bytes.NewReader(data))
	return err
}

// clockMargin widens the dead-letter lookup of [hasDeadLetter] for clock
// differences between the servers that stored the message and its dead
// letter.
const clockMargin = time.Minute

// hasDeadLetter reports whether queue message md already has a dead letter
// in stream III_DLQ (header Iii-Queue-Seq). It reads the queue's dead
// letters stored since the message was enqueued, headers only: no dead
// letter of it can be older.
func hasDeadLetter(ctx context.Context, js jetstream.JetStream, queue string, md *jetstream.MsgMetadata) (bool, error) {
	subj, err := subjects.DLQSubject(queue)
	if err != nil {
		return false, err
	}
	s, err := js.Stream(ctx, subjects.DLQStream)
	if err != nil {
		return false, err
	}
	want, found := strconv.FormatUint(md.Sequence.Stream, 10), false
	_, err = engine.ScanHeaders(ctx, s, subj, md.Timestamp.Add(-clockMargin), func(m jetstream.Msg, _ *jetstream.MsgMetadata) bool {
		found = m.Headers().Get(HeaderQueueSeq) == want
		return !found
	})
	return found, err
}

// parseDeadLetter reads a stored dead letter. Missing or malformed headers
// leave their fields zero; it never fails.
func parseDeadLetter(seq uint64, data []byte, h nats.Header) DeadLetter {
	dl := DeadLetter{
		Sequence:     seq,
		Queue:        h.Get(HeaderQueue),
		FunctionID:   h.Get(engine.HeaderFunctionID),
		ErrorCode:    wire.Code(h.Get(HeaderErrorCode)),
		ErrorMessage: h.Get(HeaderErrorMessage),
		ContentType:  h.Get(wire.HeaderContentType),
		BodyObject:   h.Get(HeaderBodyObject),
		Body:         data,
		Header:       h,
	}
	if n, err := strconv.Atoi(h.Get(HeaderBodySize)); err == nil && n >= 0 {
		dl.BodySize = n
	}
	if n, err := strconv.Atoi(h.Get(HeaderDeliveries)); err == nil && n >= 0 {
		dl.Deliveries = n
	}
	if n, err := strconv.Atoi(h.Get(HeaderRedrives)); err == nil && n >= 0 {
		dl.Redrives = n
	}
	if t, err := time.Parse(timeLayout, h.Get(HeaderEnqueuedAt)); err == nil {
		dl.EnqueuedAt = t
	}
	if t, err := time.Parse(timeLayout, h.Get(HeaderDeadLetteredAt)); err == nil {
		dl.DeadAt = t
	}
	var v any
	if len(data) > 0 && wire.ForContentType(dl.ContentType).Unmarshal(data, &v) == nil {
		dl.Data = v
	}
	return dl
}

// redriveMsg builds the queue message that puts dead letter dl back.
func redriveMsg(queue string, dl *jetstream.RawStreamMsg) *nats.Msg {
	subj, _ := subjects.QueueSubject(queue)
	h := copyHeader(dl.Header, 2)
	for _, k := range dlqOnly {
		h.Del(k)
	}
	n, err := strconv.Atoi(dl.Header.Get(HeaderRedrives))
	if err != nil || n < 0 || n >= 1<<30 {
		n = 0
	}
	h.Set(HeaderRedrives, strconv.Itoa(n+1))
	h.Set(nats.MsgIdHdr, redriveMsgID(queue, dl.Sequence))
	return &nats.Msg{Subject: subj, Data: dl.Data, Header: h}
}

// deadLetterRoom is what the dead letter of queue message m adds to m's
// headers at most, its error message aside (cut to fit).
func deadLetterRoom(queue string, m *nats.Msg) int {
	end := time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC) // the longest time
	md := &jetstream.MsgMetadata{NumDelivered: math.MaxUint64, Sequence: jetstream.SequencePair{Stream: math.MaxUint64}, Timestamp: end}
	dl := deadLetterMsg(queue, nil, m.Header, md, m.Header.Get(engine.HeaderFunctionID), &wire.Error{Code: longestCode}, end)
	dl.Header.Del(HeaderErrorMessage)
	return max(0, wire.HeaderSize(dl.Header)-wire.HeaderSize(m.Header))
}

// longestCode is the longest catalog code, for [deadLetterRoom].
var longestCode = func() wire.Code {
	var c wire.Code
	for _, ent := range wire.Catalog {
		if len(ent.Code) > len(c) {
			c = ent.Code
		}
	}
	return c
}()

// MaxDeadLetters bounds one [DeadLetters] listing.
const MaxDeadLetters = 1000

// DeadLetters lists up to limit (1..[MaxDeadLetters]) dead letters of queue
// name, oldest first.
func DeadLetters(ctx context.Context, e *engine.Engine, name string, limit int) ([]DeadLetter, error) {
	subj, err := subjects.DLQSubject(name)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	if limit < 1 || limit > MaxDeadLetters {
		return nil, wire.Errorf(wire.CodeInvalidPayload, "limit %d must be 1..%d", limit, MaxDeadLetters)
	}
	out, _, err := listDeadLetters(ctx, e, name, subj, 0, limit, nil)
	return out, err
}

// listDeadLetters reads up to limit dead letters on subj with a sequence
// after after, oldest first. admit, when not nil, may change a dead letter
// and refuses the one that does not fit; truncated says it refused one.
func listDeadLetters(ctx context.Context, e *engine.Engine, name, subj string, after uint64, limit int, admit func(*DeadLetter) bool) (out []DeadLetter, truncated bool, err error) {
	dlq, err := e.EnsureStream(ctx, engine.DLQStreamConfig(e.Replicas()))
	if err != nil {
		return nil, false, err
	}
	out = []DeadLetter{}
	for seq := after + 1; len(out) < limit && seq != 0; {
		m, err := dlq.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, false, wire.Wrap(wire.CodeUnavailable, err, "read dead letters of %q", name)
		}
		dl := parseDeadLetter(m.Sequence, m.Data, m.Header)
		if admit != nil && !admit(&dl) {
			return out, true, nil
		}
		out = append(out, dl)
		seq = m.Sequence + 1
	}
	return out, false, nil
}

// RedriveResult is what one [Redrive] did.
type RedriveResult struct {
	// Redriven dead letters were moved back onto the queue.
	Redriven int `json:"redriven"`
	// Skipped dead letters were left in stream III_DLQ because the queue
	// message they would become does not fit the max payload with the
	// headers of its call and its dead letter (or the queue stream's max
	// message size), or their body is not in them: see [Redrive].
	Skipped int `json:"skipped,omitempty"`
}

// Redrive moves dead letters of queue name back onto the queue, oldest
// first, and says how many it moved and skipped. Each is published
// (Nats-Msg-Id "iii-redrive-<queue>-<dlq seq>") and acked by JetStream
// before it is deleted from the dead-letter stream, so a crash in between
// never loses it, and a retried Redrive within the queue stream's
// duplicate window (2 minutes) does not enqueue it twice. A retry later
// than that does: the queue stream is a work queue, so a redriven message
// that was already consumed leaves no trace to look up, and JetStream
// cannot publish to one stream and delete from another atomically; only
// a longer Duplicates window on III_QUEUE widens the guarantee. A
// redriven message starts with fresh deliveries and keeps its first
// enqueue time. Dead letters that arrive while Redrive runs (a message
// that fails again at once) are left for the next call.
//
// A dead letter whose queue message would not fit the max payload, or
// the queue stream's max message size, or would not leave room under the
// max payload for the headers its call and its next dead letter add (as
// [engine.Engine.Enqueue] requires, engine.QueueHeaderRoom), stays where
// it is, logged and counted in [RedriveResult.Skipped], and Redrive goes
// on with the next: no retry can store it, or it would fail its first
// delivery as invalid_payload, and it stopped every later dead letter of
// its queue. So is a dead letter whose body is kept in [DLQBodiesBucket]:
// it did not fit a message. The consumer's own dead letters of enqueued
// messages always fit; a client that published one straight onto
// iii.dlq.<name> or a message onto iii.queue.<name>, or a max payload
// lowered since, makes one that does not. Headers are not trimmed to make
// it fit.
//
// With [WithRedriveSequence] a missing sequence is not_found, and a dead
// letter that does not fit is a permanent invalid_payload. Other
// JetStream failures are unavailable; the dead letters before them stay
// moved, and the result returned with the error counts them.
func Redrive(ctx context.Context, e *engine.Engine, name string, opts ...RedriveOption) (RedriveResult, error) {
	var res RedriveResult
	var o redriveOptions
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return res, err
		}
	}
	subj, err := subjects.DLQSubject(name)
	if err != nil {
		return res, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	if _, err := e.EnsureStream(ctx, engine.QueueStreamConfig(e.Replicas())); err != nil {
		return res, err
	}
	dlq, err := e.EnsureStream(ctx, engine.DLQStreamConfig(e.Replicas()))
	if err != nil {
		return res, err
	}
	info, err := dlq.Info(ctx)
	if err != nil {
		return res, wire.Wrap(wire.CodeUnavailable, err, "dead letters of %q", name)
	}
	last := info.State.LastSeq

	if o.sequence != 0 {
		m, err := dlq.GetMsg(ctx, o.sequence)
		if errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && m.Subject != subj {
			return res, wire.Errorf(wire.CodeNotFound, "queue %q has no dead letter %d", name, o.sequence)
		}
		if err != nil {
			return res, wire.Wrap(wire.CodeUnavailable, err, "dead letter %d of %q", o.sequence, name)
		}
		moved, err := redriveOne(ctx, e, dlq, name, m)
		if errors.Is(err, wire.ErrInvalidPayload) {
			res.Skipped = 1
		}
		if err != nil || !moved {
			return res, err
		}
		res.Redriven = 1
		return res, nil
	}

	for seq := uint64(1); seq <= last && (o.limit == 0 || res.Redriven < o.limit); {
		m, err := dlq.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return res, wire.Wrap(wire.CodeUnavailable, err, "read dead letters of %q", name)
		}
		if m.Sequence > last {
			break
		}
		moved, err := redriveOne(ctx, e, dlq, name, m)
		switch {
		case errors.Is(err, wire.ErrInvalidPayload):
			res.Skipped++
			e.Logger().Error("dead letter cannot be redriven; left in the dead-letter stream",
				"queue", name, "dlq_seq", m.Sequence, "error", err)
		case err != nil:
			return res, err
		case moved:
			res.Redriven++
		}
		seq = m.Sequence + 1
	}
	return res, nil
}

// redriveOne moves one dead letter; moved is false when a concurrent
// Redrive deleted it first. Its only invalid_payload, permanent, is a
// dead letter that does not fit: no retry stores it.
func redriveOne(ctx context.Context, e *engine.Engine, dlq jetstream.Stream, name string, m *jetstream.RawStreamMsg) (moved bool, err error) {
	if obj := m.Header.Get(HeaderBodyObject); obj != "" {
		return false, wire.Errorf(wire.CodeInvalidPayload, "dead letter %d of %q has no body (object %q of bucket %s keeps it, too large for a dead letter): it cannot be redriven",
			m.Sequence, name, obj, DLQBodiesBucket).Permanent()
	}
	out := redriveMsg(name, m)
	size, max := len(out.Data)+wire.HeaderSize(out.Header), e.Conn().MaxPayload()
	tooLarge := func(limit string) error {
		return wire.Errorf(wire.CodeInvalidPayload, "dead letter %d of %q is %d bytes as a queue message, over %s: it cannot be redriven",
			m.Sequence, name, size, limit).Permanent()
	}
	if int64(size) > max {
		return false, tooLarge("the max payload " + strconv.FormatInt(max, 10))
	}
	// As Enqueue does (engine.QueueHeaderRoom): a message without room for
	// its call's headers fails its first delivery as invalid_payload, and
	// one without room for its dead letter's cannot be dead-lettered with
	// its body.
	if room := engine.CallHeaderRoom(out.Header) + deadLetterRoom(name, out); int64(size+room) > max {
		return false, wire.Errorf(wire.CodeInvalidPayload, "dead letter %d of %q is %d bytes as a queue message, leaving no room under the max payload %d for the %d bytes of headers its call and its dead letter add: it cannot be redriven",
			m.Sequence, name, size, max, room).Permanent()
	}
	if _, err := e.JetStream().PublishMsg(ctx, out); err != nil {
		var apiErr *jetstream.APIError
		if errors.Is(err, nats.ErrMaxPayload) {
			return false, tooLarge("the max payload")
		}
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
			return false, tooLarge("the max message size of stream " + subjects.QueueStream)
		}
		return false, wire.Wrap(wire.CodeUnavailable, err, "redrive dead letter %d of %q", m.Sequence, name)
	}
	if err := dlq.DeleteMsg(ctx, m.Sequence); err != nil {
		// Already gone means a concurrent Redrive moved it; its publish
		// had the same Nats-Msg-Id, so the queue holds it once.
		if _, gerr := dlq.GetMsg(ctx, m.Sequence); errors.Is(gerr, jetstream.ErrMsgNotFound) {
			return false, nil
		}
		return false, wire.Wrap(wire.CodeUnavailable, err, "delete dead letter %d of %q", m.Sequence, name)
	}
	return true, nil
}
