package orchestrator

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// writeAttempt bounds one attempt of a record write or an event publish.
const writeAttempt = 5 * time.Second

// store keeps turn records in KV as JSON.
type store struct {
	kvs sessionKV
	// leader reads records from the bucket's stream leader: with replicas,
	// a KV get (a direct get) may be answered by a replica that lags the
	// last write, and a compare-and-set on what it returned is fenced.
	leader bool
}

// store is the turn-record store, with leader reads when the node's
// streams are replicated.
func (o *Orchestrator) store() store { return store{kvs: o.turns, leader: o.e.Replicas() > 1} }

func (s store) Load(ctx context.Context, sid string) (turn.Record, uint64, error) {
	kv, err := s.kvs.of(ctx, sid)
	if err != nil {
		return turn.Record{}, 0, err
	}
	var (
		data []byte
		rev  uint64
	)
	if s.leader {
		data, rev, err = s.leaderGet(ctx, kv.Bucket(), sid)
	} else {
		var ent jetstream.KeyValueEntry
		if ent, err = kv.Get(ctx, sid); err == nil {
			data, rev = ent.Value(), ent.Revision()
		}
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return turn.Record{}, 0, session.ErrNoRecord
	}
	if err != nil {
		return turn.Record{}, 0, err
	}
	var rec turn.Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return turn.Record{}, 0, fmt.Errorf("turn record of %s does not decode (another client wrote it, or a newer version; `nats kv del %s %s` resets the session's turn state): %w: %w",
			sid, kv.Bucket(), sid, session.ErrCorruptRecord, err)
	}
	return rec, rev, nil
}

// recordErr codes an error of reading or writing a turn record: a record
// that does not decode is internal (trying again cannot help; the error
// says how to reset it), anything else unavailable.
func recordErr(err error, format string, args ...any) error {
	if errors.Is(err, session.ErrCorruptRecord) {
		return wire.Wrap(wire.CodeInternal, err, format, args...)
	}
	return wire.Wrap(wire.CodeUnavailable, err, format, args...)
}

// HeaderSettled marks a turn record written settled (settledRecord): the
// periodic sweep skips it without reading it.
const HeaderSettled = "Iii-Settled"

// update is kv.Update(key, data, rev), and marks the write HeaderSettled
// when settled: the same message on the bucket's subject a KV update
// publishes, with one more header.
func (s store) update(ctx context.Context, kv jetstream.KeyValue, key string, data []byte, rev uint64, settled bool) (uint64, error) {
	if !settled {
		return kv.Update(ctx, key, data, rev)
	}
	msg := &nats.Msg{Subject: "$KV." + kv.Bucket() + "." + key, Data: data, Header: nats.Header{HeaderSettled: []string{"1"}}}
	ack, err := s.kvs.e.JetStream().PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(rev))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// leaderGet reads key's value and revision in bucket from the stream
// leader; a deleted or purged key is jetstream.ErrKeyNotFound.
func (s store) leaderGet(ctx context.Context, bucket, key string) ([]byte, uint64, error) {
	m, err := s.kvs.e.LeaderGet(ctx, "KV_"+bucket, engine.LeaderGet{LastBySubject: "$KV." + bucket + "." + key})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, jetstream.ErrKeyNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	if op := m.Header.Get(kvOperation); op == "DEL" || op == "PURGE" {
		return nil, 0, jetstream.ErrKeyNotFound
	}
	return m.Data, m.Sequence, nil
}

// recordRoom is what a record write leaves of the server's max payload
// for the message's subject and headers.
const recordRoom = 1024

func (s store) Write(ctx context.Context, rec turn.Record, rev uint64) (uint64, error) {
	data, err := wire.MarshalJSON(rec)
	if err != nil {
		return 0, err
	}
	if limit := s.kvs.e.Conn().MaxPayload(); int64(len(data))+recordRoom > limit {
		return 0, fmt.Errorf("%w: the turn record is %d bytes, and the server takes %d in a message", session.ErrUnstorable, len(data), limit)
	}
	kv, err := s.kvs.of(ctx, rec.SessionID)
	if err != nil {
		return 0, err
	}
	var n uint64
	attempts := 0
	err = engine.Retry(ctx, writeAttempt, func(ctx context.Context) error {
		attempts++
		var err error
		if rev == 0 {
			n, err = kv.Create(ctx, rec.SessionID, data)
		} else {
			n, err = s.update(ctx, kv, rec.SessionID, data, rev, settledRecord(rec))
		}
		if errors.Is(err, jetstream.ErrKeyExists) || isWrongSeq(err) {
			// An earlier attempt that timed out may have landed: then
			// the record holds exactly these bytes.
			if attempts > 1 {
				if e, gerr := kv.Get(ctx, rec.SessionID); gerr == nil && bytes.Equal(e.Value(), data) {
					n = e.Revision()
					return nil
				}
			}
			return fmt.Errorf("%w: %v", session.ErrFenced, err)
		}
		return err
	}, func(err error) bool { return !errors.Is(err, session.ErrFenced) })
	return n, err
}

func isWrongSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// publisher publishes events asynchronously and waits for their acks per
// session in one batch (Flush).
type publisher struct {
	e       *engine.Engine
	js      jetstream.JetStream
	metrics *metrics

	mu      sync.Mutex
	pending map[string][]pubAck
	seq     map[string]uint64
}

// pubAck is one asynchronous publish of an event.
type pubAck struct {
	f  jetstream.PubAckFuture
	at time.Time // when it was published
	// err is its failure, once settled has seen it: the future's error
	// channel answers once.
	err error
}

var (
	_ session.Events          = (*publisher)(nil)
	_ session.SequencedEvents = (*publisher)(nil)
	_ session.Forgetter       = (*publisher)(nil)
	_ session.StoredEvents    = (*publisher)(nil)
	_ session.Store           = store{}
	_ session.Inbox           = inbox{}
	_ session.Model           = model{}
	_ session.Functions       = functions{}
	_ session.Approvals       = approvals{}
)

func newPublisher(e *engine.Engine) *publisher {
	return &publisher{e: e, js: e.JetStream(), pending: map[string][]pubAck{}, seq: map[string]uint64{}}
}

func (p *publisher) publish(sid, subj, id string, data []byte) error {
	msg := &nats.Msg{Subject: subj, Data: data, Header: nats.Header{}}
	msg.Header.Set(wire.HeaderContentType, wire.ContentJSON)
	f, err := p.js.PublishMsgAsync(msg, jetstream.WithMsgID(id))
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.pending[sid] = append(p.pending[sid], pubAck{f: f, at: time.Now()})
	p.mu.Unlock()
	return nil
}

// nextSeq numbers a session's events, continuing from the last event in the
// stream when the process has not seen the session yet. It never guesses:
// when the stream cannot be read, it fails, and the grain tries again.
func (p *publisher) nextSeq(ctx context.Context, sid string) (uint64, error) {
	p.mu.Lock()
	n, ok := p.seq[sid]
	p.mu.Unlock()
	if !ok {
		m, err := p.lastEvent(ctx, sid)
		if err != nil {
			return 0, err
		}
		if m != nil {
			var ev agent.Event
			if err := json.Unmarshal(m.Data, &ev); err != nil {
				return 0, fmt.Errorf("last event of %s: %w", sid, err)
			}
			n = ev.Seq
		}
	}
	n++
	p.mu.Lock()
	if cur := p.seq[sid]; cur >= n {
		n = cur + 1
	}
	p.seq[sid] = n
	p.mu.Unlock()
	return n, nil
}

// replayMargin is how long before the event stream's duplicate window
// ends a replay stops trusting it, and how far before a record's write a
// replay looks for what it stored: the outbox's carried events were
// published before the record was written, at most session.MaxCarryAge
// (5 s) before (the grain waits for older ones rather than carrying
// them, as it does for a publish that failed: session.ErrUndelivered),
// and the clocks of the node that wrote it and of the server may differ.
// A minute until stop 28.
const replayMargin = 2 * session.MaxCarryAge

// StoredEvents implements [session.StoredEvents]. While the stream's
// duplicate window covers the record's write (less replayMargin) it
// answers none: every event is published again and the stream drops the
// copies. Later it reads the message ids of sid's events stored since the
// record was written (less replayMargin, for the carried events and the
// clocks) and answers those of ids among them. Every one is looked up:
// events go out asynchronously, and one whose publish failed (Flush
// publishes it again) may sit before one that was stored when the
// process died.
func (p *publisher) StoredEvents(ctx context.Context, sid string, ids []string, writtenMs int64) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	// The stream is cached after a session's first event: a replay soon
	// after a crash, and every run start, read nothing here.
	if p.windowCovers(ctx, sid, time.UnixMilli(writtenMs)) {
		return nil, nil
	}
	have, err := p.storedSince(ctx, sid, time.UnixMilli(writtenMs).Add(-replayMargin))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, id := range ids {
		if have["ev:"+sid+":"+id] {
			out = append(out, id)
		}
	}
	return out, nil
}

// windowCovers reports whether the event stream's duplicate window still
// holds what was published at t, give or take replayMargin. The stream is
// cached after a session's first event: a replay soon after a crash, and
// every run start, read nothing here.
func (p *publisher) windowCovers(ctx context.Context, sid string, t time.Time) bool {
	s, err := p.e.SessionStream(ctx, subjects.EventStream, sid)
	if err != nil {
		return false
	}
	window := s.CachedInfo().Config.Duplicates
	return window > replayMargin && time.Since(t) < window-replayMargin
}

// storedSince returns the message ids of sid's events stored at since or
// later, up to the last one stored when it is called; nil when there are
// none. It reads headers only, from an ordered consumer deleted once
// the read is done.
func (p *publisher) storedSince(ctx context.Context, sid string, since time.Time) (map[string]bool, error) {
	last, err := p.lastEvent(ctx, sid)
	if err != nil || last == nil || last.Time.Before(since) {
		return nil, err
	}
	subj, err := subjects.EventSubject(sid)
	if err != nil {
		return nil, err
	}
	var have map[string]bool
	err = engine.Retry(ctx, writeAttempt, func(actx context.Context) error {
		have = map[string]bool{}
		s, err := p.e.SessionStream(actx, subjects.EventStream, sid)
		if err != nil {
			return err
		}
		n, err := engine.ScanHeaders(actx, s, subj, since, func(m jetstream.Msg, md *jetstream.MsgMetadata) bool {
			have[m.Headers().Get(jetstream.MsgIDHeader)] = true
			return md.Sequence.Stream < last.Sequence
		})
		if err == nil && n == 0 {
			return fmt.Errorf("no event of %s stored since %s, though the last one is", sid, since.UTC().Format(time.RFC3339Nano))
		}
		return err
	}, always)
	if err != nil {
		return nil, fmt.Errorf("read the events of %s stored since the record: %w", sid, err)
	}
	return have, nil
}

// lastEvent reads the last event stored for sid, nil when there is none,
// retrying what a retry can fix.
func (p *publisher) lastEvent(ctx context.Context, sid string) (*jetstream.RawStreamMsg, error) {
	subj, err := subjects.EventSubject(sid)
	if err != nil {
		return nil, err
	}
	var last *jetstream.RawStreamMsg
	err = engine.Retry(ctx, writeAttempt, func(actx context.Context) error {
		last = nil
		s, err := p.e.SessionStream(actx, subjects.EventStream, sid)
		if err != nil {
			return err
		}
		m, err := s.GetLastMsgForSubject(actx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		last = m
		return nil
	}, always)
	if err != nil {
		return nil, fmt.Errorf("read the last event of %s: %w", sid, err)
	}
	return last, nil
}

// Forget drops sid's cached event sequence (the grain passivated); the
// next activation reads it from the stream again.
func (p *publisher) Forget(sid string) {
	p.metrics.forget(sid)
	p.resetSeq(sid)
}

// Resequence implements session.SequencedEvents: the grain's record moved
// under it, so another process may have emitted events of sid. Not
// Forget: a reload keeps the step metrics.
func (p *publisher) Resequence(sid string) { p.resetSeq(sid) }

// resetSeq drops sid's cached event sequence: the next event reads it from
// the stream, where another process may have moved it.
func (p *publisher) resetSeq(sid string) {
	p.mu.Lock()
	delete(p.seq, sid)
	p.mu.Unlock()
}

func (p *publisher) Emit(ctx context.Context, ev agent.Event, id string) error {
	subj, err := subjects.EventSubject(ev.SessionID)
	if err != nil {
		return err
	}
	p.metrics.observe(ctx, ev)
	if ev.Seq, err = p.nextSeq(ctx, ev.SessionID); err != nil {
		return err
	}
	if ev.TS == 0 {
		ev.TS = time.Now().UnixMilli()
	}
	data, err := wire.MarshalJSON(ev)
	if err != nil {
		return err
	}
	return p.publish(ev.SessionID, subj, "ev:"+ev.SessionID+":"+id, data)
}

func (p *publisher) Flush(ctx context.Context, sid string) error {
	p.mu.Lock()
	fs := p.pending[sid]
	delete(p.pending, sid)
	p.mu.Unlock()
	var stored map[string]bool // read once, when a failure is older than the window
	for _, a := range fs {
		err := a.err
		if err == nil {
			select {
			case <-a.f.Ok():
				continue
			case err = <-a.f.Err():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		msg := a.f.Msg()
		id := msg.Header.Get(jetstream.MsgIDHeader)
		// A publish whose answer was lost may have been stored. Within
		// the stream's duplicate window its message id makes a copy
		// harmless; past it, look it up first.
		if !p.windowCovers(ctx, sid, a.at) {
			if stored == nil {
				have, serr := p.storedSince(ctx, sid, a.at.Add(-replayMargin))
				if serr != nil {
					return fmt.Errorf("publish %s: %w", msg.Subject, errors.Join(err, serr))
				}
				stored = have
				if stored == nil {
					stored = map[string]bool{}
				}
			}
			if stored[id] {
				continue
			}
		}
		// Publish it again until it is stored or ctx ends.
		if rerr := engine.Retry(ctx, writeAttempt, func(ctx context.Context) error {
			_, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(id))
			return err
		}, always); rerr != nil {
			return fmt.Errorf("publish %s: %w", msg.Subject, errors.Join(err, rerr))
		}
	}
	return nil
}

// settled drops sid's acknowledged publishes and reports whether none is
// left, and whether one of those left failed. A publish that failed stays
// for Flush, which publishes it again.
func (p *publisher) settled(sid string) (done, failed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fs := p.pending[sid]
	n := 0
	for _, a := range fs {
		if a.err == nil {
			select {
			case <-a.f.Ok():
				continue
			default:
			}
			select {
			case a.err = <-a.f.Err():
			default:
			}
		}
		failed = failed || a.err != nil
		fs[n] = a
		n++
	}
	clear(fs[n:])
	if n == 0 {
		delete(p.pending, sid)
		return true, false
	}
	p.pending[sid] = fs[:n]
	return false, failed
}

// model streams a provider through a channel, with the run's tools, and
// prices the call (and holds it in the run's budgets) around it.
type model struct {
	e       *engine.Engine
	pub     *publisher
	history *history
	logger  *slog.Logger
	spend   *spend
	tools   *toolList
	// coalesce bounds message_update batching (SPEC: ~60 ms / 4 KiB).
	coalesce time.Duration
	// timeout bounds one attempt of a model call (default modelTimeout).
	timeout time.Duration
	// sent makes a call carry only the messages added since the last
	// one, where the provider keeps transcripts (nil: always whole).
	sent *sentTranscripts
}

// Forget drops what was sent for sid's transcript (its grain passivated).
func (m model) Forget(sid string) { m.sent.Forget(sid) }

// modelTimeout bounds one model call (a long answer streams for minutes).
const modelTimeout = 15 * time.Minute

// modelLookup bounds the catalog lookups before a model call.
const modelLookup = 10 * time.Second

// modelAttempts bounds the tries of a model call that fails transiently;
// modelAttach is how long a provider may take to attach to the channel.
const (
	modelAttempts = 3
	modelAttach   = 15 * time.Second
)

func (m model) Stream(ctx context.Context, req session.ModelRequest) turn.Input {
	preq := agent.ProviderRequest{
		SystemPrompt: req.System, Model: req.Model, Messages: req.Messages, SessionID: req.SessionID,
		MaxTokens: req.Run.MaxTokens, ThinkingLevel: req.Run.ThinkingLevel,
	}
	// The lookups before the call are bounded on their own: a request
	// lost with a node that died is never answered.
	lctx, lcancel := context.WithTimeout(ctx, modelLookup)
	defer lcancel()
	if m.tools != nil {
		preq.Tools = m.tools.offered(lctx, req.Run)
	}
	var (
		info  agent.Model
		known bool
	)
	if m.spend != nil {
		var err error
		if info, known, err = m.spend.model(lctx, req.Provider, req.Model); err != nil && budgeted(req.Run) {
			return turn.ModelFailed{Kind: agent.ErrorTransient, Message: "the model catalog did not answer, so the call could not be priced for its budget: " + err.Error()}
		}
	}
	compacted := m.fitWindow(ctx, req, &preq, info, known)
	resID := ""
	if m.spend != nil && budgeted(req.Run) {
		// No call of a budgeted run before its reservation, and no
		// reservation before the record that goes on to the call is
		// written (ModelRequest.Committed).
		if !req.WaitCommitted(ctx) {
			return turn.ModelFailed{Kind: agent.ErrorTransient, Message: "aborted"}
		}
		base := fmt.Sprintf("%s-%d", req.RunID, req.Step) // a reservation id is an id: [A-Za-z0-9_-]
		id, held, stop := m.spend.reserve(ctx, req, base, estimate(info, req, preq.Tools), known)
		if stop != nil {
			return stop
		}
		if held {
			resID = id
		}
	}
	sctx, span := startModelSpan(ctx, m.e, req)
	hist := req.HistoryID
	if compacted {
		hist = "" // this call's transcript is not the grain's history
	}
	in := m.attempt(sctx, req, preq, hist)
	// A transient failure (the provider's node died, the stream broke) is
	// tried again, a few times with backoff; the restarted stream's first
	// update replaces what a client saw of the broken one.
	for attempt, backoff := 1, time.Second; attempt < modelAttempts; attempt, backoff = attempt+1, 2*backoff {
		f, ok := in.(turn.ModelFailed)
		if !ok || f.Kind != agent.ErrorTransient || ctx.Err() != nil {
			break
		}
		m.logger.WarnContext(ctx, "model call failed; trying again", "session_id", req.SessionID, "provider", req.Provider, "error", f.Message, "attempt", attempt)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		if ctx.Err() != nil {
			break
		}
		in = m.attempt(sctx, req, preq, hist)
	}
	var usage *agent.Usage
	switch out := in.(type) {
	case turn.ModelDone:
		usage = out.Message.Usage
	case turn.ModelFailed:
		if out.Partial != nil {
			usage = out.Partial.Usage
		}
	}
	var cost float64
	if usage != nil && known {
		cost = info.Pricing.Cost(*usage)
		usage.CostUSD = cost
	}
	endModelSpan(span, in, usage, known)
	m.pub.metrics.model(ctx, req.Provider, req.Model, usage)
	if resID != "" {
		m.spend.settle(ctx, resID, cost)
	}
	// The grain takes the outcome only once the record is written; a
	// call whose record was not is cancelled.
	req.WaitCommitted(ctx)
	return in
}

// attempt makes one model call: a continuation of the transcript the
// provider keeps where it can ([sentTranscripts]), the whole transcript
// again at once when the provider refused the continuation (evicted, or
// another instance of the provider got the call).
func (m model) attempt(ctx context.Context, req session.ModelRequest, preq agent.ProviderRequest, hist string) turn.Input {
	fn := "provider::" + req.Provider + "::stream"
	all := preq.Messages
	cont := m.sent.prepare(req.SessionID, hist, fn, all, &preq)
	in, out := m.stream(ctx, req, preq)
	if cont && out.refused {
		m.logger.DebugContext(ctx, "provider refused a transcript continuation; sending the whole transcript", "session_id", req.SessionID, "provider", req.Provider)
		m.sent.Forget(req.SessionID)
		m.sent.prepare(req.SessionID, hist, fn, all, &preq)
		in, out = m.stream(ctx, req, preq)
	}
	if preq.Transcript != nil && out.kept == preq.Transcript.ID {
		m.sent.kept(req.SessionID, out.kept, len(all))
	}
	return in
}

// streamOutcome is what one provider call answered besides the model's
// events: the transcript it kept, or that the call itself failed before
// any event (refused: a continuation is then sent whole).
type streamOutcome struct {
	kept    string
	refused bool
}

func (m model) stream(ctx context.Context, req session.ModelRequest, preq agent.ProviderRequest) (turn.Input, streamOutcome) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(m.timeout, modelTimeout))
	defer cancel()
	// A provider attaches (pings the channel) as soon as it has the call;
	// one that does not within modelAttach lost the call with its node.
	// The channel subscribes on the bus only if the call goes there: a
	// provider of this process writes to it directly (channel package
	// doc, "Local writers").
	r, err := channel.Open(ctx, m.e, channel.WithAttachTimeout(modelAttach), channel.WithLocalFirst())
	if err != nil {
		return turn.ModelFailed{Kind: agent.ErrorTransient, Message: "open channel: " + err.Error()}, streamOutcome{}
	}
	defer r.Close()
	fnID := "provider::" + req.Provider + "::stream"
	// The call's answer: the stop reason (the events say it too) and the
	// transcript the provider kept.
	var answer struct {
		TranscriptKept string `json:"transcript_kept"`
	}
	callErr := make(chan error, 1)
	m.e.Go(func() {
		preq.Channel = r.ID()
		preq.EventBatches = true
		err := m.e.Trigger(engine.BeforeBus(ctx, r.Subscribe), fnID, preq, &answer)
		if err != nil {
			_ = r.Close() // unblock Next
		}
		callErr <- err
	})
	events := 0 // model events read
	// failedCall is the outcome of a provider call that answered an error.
	failedCall := func(cerr error) (turn.Input, streamOutcome) {
		return providerCallFailed(req.Provider, cerr), streamOutcome{refused: events == 0}
	}

	var (
		final   *agent.Message
		failed  *turn.ModelFailed
		buf     strings.Builder
		full    strings.Builder // all text so far, for an abort's partial
		lastPub = time.Now()
		updates int
		// attempt keeps a restarted stream's updates apart from those of
		// the stream a crash interrupted.
		attempt = nuid.Next()
	)
	flush := func() {
		// No event before the record that goes on to this call is
		// written and its own events delivered (ModelRequest.Committed).
		if buf.Len() == 0 || !req.WaitCommitted(ctx) {
			return
		}
		updates++
		ev := agent.Event{Type: agent.EventMessageUpdate, SessionID: req.SessionID, Delta: buf.String(), TS: time.Now().UnixMilli()}
		if updates == 1 {
			// The first update of a stream carries the message so far: a
			// client drops what an earlier, interrupted stream of this step
			// sent.
			ev.Partial = &agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text(buf.String())}}
		}
		_ = m.pub.Emit(ctx, ev, fmt.Sprintf("%s:%d:%s:u%d", req.RunID, req.Step, attempt, updates))
		buf.Reset()
		lastPub = time.Now()
	}
	for final == nil && failed == nil {
		f, err := r.Next(ctx)
		if err != nil {
			if errors.Is(err, channel.ErrEnd) {
				break
			}
			if ctx.Err() != nil {
				// Aborted: hand back what was streamed, so it is kept.
				failed := turn.ModelFailed{Kind: agent.ErrorTransient, Message: "aborted"}
				if full.Len() > 0 {
					failed.Partial = &agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text(full.String())},
						Model: req.Model, Provider: req.Provider, Timestamp: time.Now().UnixMilli()}
				}
				return failed, streamOutcome{}
			}
			// A call that failed closes the channel before it answers:
			// give the answer a moment, it says why.
			select {
			case cerr := <-callErr:
				if cerr != nil {
					return failedCall(cerr)
				}
			case <-time.After(250 * time.Millisecond):
			}
			return turn.ModelFailed{Kind: agent.ErrorTransient, Message: "provider stream: " + err.Error()}, streamOutcome{}
		}
		evs, err := decodeModelEvents(f)
		if err != nil {
			return turn.ModelFailed{Kind: agent.ErrorPermanent, Message: "provider sent an undecodable event: " + err.Error()}, streamOutcome{}
		}
		for i := range evs {
			ev := &evs[i]
			if final != nil || failed != nil {
				break // nothing follows done or error
			}
			events++
			switch ev.Type {
			case agent.ModelTextDelta:
				buf.WriteString(ev.Delta)
				full.WriteString(ev.Delta)
				if buf.Len() >= 4096 || time.Since(lastPub) >= m.coalesce {
					flush()
				}
			case agent.ModelDone:
				final = ev.Message
			case agent.ModelError:
				failed = &turn.ModelFailed{Kind: ev.Kind, Message: ev.Error, Partial: ev.Message}
			}
		}
	}
	flush()
	cerr := <-callErr
	if cerr != nil && final == nil && failed == nil {
		return failedCall(cerr)
	}
	out := streamOutcome{}
	if cerr == nil {
		out.kept = answer.TranscriptKept
	}
	if failed != nil {
		return *failed, out
	}
	if final == nil {
		return turn.ModelFailed{Kind: agent.ErrorTransient, Message: "provider stream ended without a message"}, out
	}
	if n := countCalls(final); n > MaxCallsPerAnswer {
		// Refused before any of them runs: the answer, its results and
		// their events would not fit the turn record, which failed the
		// run after every call had run.
		return turn.ModelFailed{Kind: agent.ErrorPermanent, Message: fmt.Sprintf(
			"the model asked for %d function calls in one answer; at most %d run at once", n, MaxCallsPerAnswer)}, out
	}
	return turn.ModelDone{Message: *final}, out
}

// MaxCallsPerAnswer bounds the function calls of one model answer. An
// answer asking for more fails the run before any call runs: the record
// holds the answer, every call's result (each keeps at least 2 KiB of
// the result bound) and their undelivered events, in one NATS message.
const MaxCallsPerAnswer = 64

// countCalls is the number of function calls m asks for.
func countCalls(m *agent.Message) int {
	n := 0
	for _, c := range m.Content {
		if c.Type == agent.ContentFunctionCall {
			n++
		}
	}
	return n
}

// decodeModelEvents decodes a provider's channel frame: one model event,
// or an array of them (agent.ProviderRequest.EventBatches). The slice is
// new per frame: the done event's message is kept.
func decodeModelEvents(f channel.Frame) ([]agent.ModelEvent, error) {
	if isArray(f) {
		var evs []agent.ModelEvent
		if err := f.Decode(&evs); err != nil {
			return nil, err
		}
		return evs, nil
	}
	var ev agent.ModelEvent
	if err := f.Decode(&ev); err != nil {
		return nil, err
	}
	return []agent.ModelEvent{ev}, nil
}

// isArray reports whether f's body is an array (msgpack or JSON).
func isArray(f channel.Frame) bool {
	if len(f.Data) == 0 {
		return false
	}
	b := f.Data[0]
	if f.Codec != nil && f.Codec.ContentType() == wire.Msgpack.ContentType() {
		return b&0xf0 == 0x90 || b == 0xdc || b == 0xdd // fixarray, array 16, array 32
	}
	for _, c := range f.Data {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '['
	}
	return false
}

func providerCallFailed(provider string, err error) turn.Input {
	if errors.Is(err, wire.ErrFunctionNotFound) {
		// run::start refused a provider nobody serves; no responders now
		// means its workers went away mid-run (a node died, a restart):
		// worth the retries of a transient failure.
		return turn.ModelFailed{Kind: agent.ErrorTransient, Message: fmt.Sprintf("provider %q: no worker answered (none is registered now)", provider)}
	}
	we := wire.From(err)
	kind := agent.ErrorPermanent
	if we.Retryable {
		kind = agent.ErrorTransient
	}
	return turn.ModelFailed{Kind: kind, Message: "provider call failed: " + we.Error()}
}

// toResult reads a reply as a FunctionResult when it has that shape, and
// otherwise wraps it as text content with the value in details.
func toResult(codec wire.Codec, reply []byte) agent.FunctionResult {
	var v any
	unmarshal := codec.Unmarshal
	if codec.ContentType() == wire.ContentJSON && len(bytes.TrimSpace(reply)) > 0 {
		unmarshal = agent.UnmarshalJSONExact // an int64 id in the reply reaches the model unrounded
	}
	if err := unmarshal(reply, &v); err != nil {
		return agent.FunctionResult{Content: []agent.Content{{Type: agent.ContentText, Text: string(reply)}}}
	}
	if m, ok := v.(map[string]any); ok {
		if _, has := m["content"]; has {
			var fr agent.FunctionResult
			if codec.Unmarshal(reply, &fr) == nil && len(fr.Content) > 0 {
				fr, _ = fr.Finite()
				return fr
			}
		}
	}
	// A msgpack reply's NaN and infinities become strings: the record,
	// the events and the transcript are JSON, which has none (the record
	// could not be written, and the call read as interrupted).
	v, _ = agent.FiniteNumbers(v)
	// The model reads the text: markup and code in a reply stay as they
	// are, not "\u003c" escapes.
	text, _ := wire.MarshalJSON(v)
	details, _ := v.(map[string]any)
	if details == nil {
		details = map[string]any{"value": v}
	}
	return agent.FunctionResult{Content: []agent.Content{{Type: agent.ContentText, Text: string(text)}}, Details: details}
}

// recoverWait bounds how long recovery waits for a function's worker to
// (re)appear in the catalog before treating it as not idempotent: after a
// node restart, tool workers reconnect a moment after the orchestrator.
const recoverWait = 5 * time.Second

func (f functions) Idempotent(ctx context.Context, fn string) bool {
	deadline := time.Now().Add(recoverWait)
	for {
		if info, ok := f.catalog.current(ctx, fn); ok {
			return info.Idempotent
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false // unknown: the safe side is "do not re-run"
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// catalogCache remembers the live catalog for a while (discovery costs a
// quiet period on the bus).
type catalogCache struct {
	e   *engine.Engine
	ttl time.Duration

	mu       sync.Mutex
	at       time.Time
	byID     map[string]engine.FunctionInfo
	err      error         // of the last discovery
	inflight chan struct{} // closed when the discovery in flight ends
}

// lookup finds id in the catalog. A miss refreshes the catalog at most
// once per ttl, and concurrent misses share one discovery: a burst of
// lookups must not fan out a burst of $SRV.INFO rounds, whose replies then
// come too late for the discovery's quiet period.
func (c *catalogCache) lookup(ctx context.Context, id string) (engine.FunctionInfo, bool) {
	c.mu.Lock()
	info, ok := c.byID[id]
	fresh := time.Since(c.at) < c.ttl
	c.mu.Unlock()
	if ok || fresh {
		return info, ok
	}
	m, _ := c.discover(ctx)
	info, ok = m[id]
	return info, ok
}

// current is lookup for a decision that must not rest on an entry older
// than ttl: whether a call runs without a human (approval mode auto) or
// runs again after a crash (idempotency). A function re-registered with
// other metadata kept its old entry in this process until a miss or a
// run::start refreshed the catalog; a node with no run starting meanwhile
// kept it for good. A discovery that fails answers unknown (the safe
// side).
func (c *catalogCache) current(ctx context.Context, id string) (engine.FunctionInfo, bool) {
	c.mu.Lock()
	info, ok := c.byID[id]
	fresh := time.Since(c.at) < c.ttl
	c.mu.Unlock()
	if fresh {
		return info, ok
	}
	m, err := c.discover(ctx)
	if err != nil {
		return engine.FunctionInfo{}, false
	}
	info, ok = m[id]
	return info, ok
}

// functions is the whole catalog, discovered again unless a discovery
// ended within fresh (one run::start just made, say): the tool list and
// the lookups share the quiet period a discovery waits for.
func (c *catalogCache) functions(ctx context.Context, fresh time.Duration) (map[string]engine.FunctionInfo, error) {
	c.mu.Lock()
	m, at := c.byID, c.at
	c.mu.Unlock()
	if !at.IsZero() && time.Since(at) < fresh {
		return m, nil
	}
	return c.discover(ctx)
}

// discover runs one discovery, or waits for the one in flight, and
// returns the catalog it found (the one before when it failed).
func (c *catalogCache) discover(ctx context.Context) (map[string]engine.FunctionInfo, error) {
	c.mu.Lock()
	if ch := c.inflight; ch != nil {
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.byID, c.err
	}
	ch := make(chan struct{})
	c.inflight = ch
	c.mu.Unlock()
	fns, err := c.e.FunctionsList(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight, c.err = nil, err
	close(ch)
	if err != nil {
		return c.byID, err
	}
	m := make(map[string]engine.FunctionInfo, len(fns))
	for _, f := range fns {
		m[f.ID] = f
	}
	c.byID, c.at = m, time.Now()
	return m, nil
}
