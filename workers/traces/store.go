package traces

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Store is a bounded in-memory index of spans by trace. It holds at most
// [WithMaxSpans] spans and [WithMaxBytes] bytes of them (each span counted
// as its JSON encoding, which is how it is held, plus its group values and
// a fixed overhead); to make room it evicts whole traces, oldest (by the
// arrival of their first span) first, sparing the trace a span is being
// added to. A span whose encoding exceeds [MaxStoredSpanBytes] or nests
// deeper than [MaxStoredSpanDepth] is kept trimmed ([StoreStats.Trimmed]).
// A store opened with [Open] follows [StreamName]; one from [NewStore] is
// filled with [Store.Add]. A Store is safe for concurrent use.
type Store struct {
	maxSpans   int
	maxBytes   int64
	logger     *slog.Logger
	losses     *lossLog
	now        func() time.Time
	maxPayload func() int64 // the bus's max payload, bounding an answer

	mu     sync.RWMutex
	traces map[string]*traceRec
	order  []*traceRec // by first arrival; evicted ones are skipped lazily
	head   int
	spans  int
	bytes  int64
	stats  StoreStats

	// Following the stream (a store from Open). The supervisor alone
	// replaces cc once Open returned; Close stops cc after the
	// supervisor ended.
	js        jetstream.JetStream
	pullBytes int
	check     time.Duration
	cc        jetstream.ConsumeContext
	gen       atomic.Uint64 // of cc: a replaced consume's messages are ignored
	nudge     chan struct{}
	quit      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

type traceRec struct {
	id      string
	spans   []*stored
	ids     map[string]struct{}
	errors  int
	bytes   int64
	evicted bool
}

// stored is a span as the store holds it: its JSON encoding, decoded only
// to answer tree, and the fields the store indexes and sorts by. Holding
// the encoding rather than the decoded attribute maps keeps a span's
// memory what [WithMaxBytes] counts, however many attributes it has.
type stored struct {
	spanID   string
	parentID string
	startNs  int64
	endNs    int64
	isError  bool
	keys     [len(GroupAttributes)]string
	raw      []byte
}

// cost is what a span counts against [WithMaxBytes]: its encoding and the
// index around it, the group values included (held apart from the
// encoding, they are as long again as they are there).
func (st *stored) cost() int64 {
	n := int64(len(st.raw)) + spanOverhead
	for _, k := range st.keys {
		n += int64(len(k))
	}
	return n
}

// spanOverhead approximates the memory of a stored span besides its
// encoding (the struct, its ids, the map entry).
const spanOverhead = 256

// StoreStats counts what a [Store] holds and what it refused.
type StoreStats struct {
	Traces int `json:"traces"`
	Spans  int `json:"spans"`
	// Bytes is what the held spans count against [WithMaxBytes].
	Bytes int64 `json:"bytes"`
	// Received counts the spans handed to the store (decoded or not).
	Received uint64 `json:"received"`
	// EvictedTraces and EvictedSpans count what was evicted for room.
	EvictedTraces uint64 `json:"evicted_traces"`
	EvictedSpans  uint64 `json:"evicted_spans"`
	// Duplicates were already held (same trace and span id).
	Duplicates uint64 `json:"duplicates"`
	// Dropped spans belong to a trace that alone fills the store.
	Dropped uint64 `json:"dropped"`
	// Invalid messages of the stream did not decode as a [Span], or the
	// span ended more than [MaxClockSkew] in the future.
	Invalid uint64 `json:"invalid"`
	// Trimmed spans were over [MaxStoredSpanBytes] or [MaxStoredSpanDepth]
	// and are held without their events, links, resource and other
	// attributes ([Span.Trim]).
	Trimmed uint64 `json:"trimmed"`
	// LastSeq is the stream sequence of the last message consumed.
	LastSeq uint64 `json:"last_seq"`
	// Restarts counts the times the store started following the stream
	// over from its first message: [StreamName] was deleted and created
	// again.
	Restarts uint64 `json:"restarts"`
}

// NewStore returns an empty store that follows nothing (for tests, and to
// feed it spans by hand). Only [WithMaxSpans], [WithMaxBytes] and
// [WithLogger] apply.
func NewStore(opts ...Option) (*Store, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return newStore(o, o.logger), nil
}

func newStore(o options, logger *slog.Logger) *Store {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Store{
		maxSpans: o.maxSpans, maxBytes: o.maxStore, logger: logger, now: time.Now,
		losses:     newLossLog(logger, "spans not stored"),
		maxPayload: func() int64 { return defaultMaxPayload },
		traces:     map[string]*traceRec{},
	}
}

// defaultMaxPayload is the server's default max payload, the answer bound
// of a store that is not on a bus.
const defaultMaxPayload = 1 << 20

// Open creates [StreamName] when missing and returns a store that follows
// it: an ordered consumer replays the stream from its first message (so a
// restarted store rebuilds what the stream still keeps), then receives
// spans as they are published. The consumer pulls ahead at most
// [MinReplayBytes] or two max payloads of messages, whichever is more.
// A stream deleted and created again is followed from its first message
// ([StoreStats.Restarts]); the spans held stay. [Store.Close] stops
// following.
func Open(ctx context.Context, e *engine.Engine, opts ...Option) (*Store, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	s := newStore(o, o.loggerFor(e))
	s.maxPayload = e.Conn().MaxPayload
	s.js, s.pullBytes, s.check = e.JetStream(), replayBytes(e.Conn().MaxPayload()), o.checkEvery
	if _, err := e.EnsureStream(ctx, o.streamConfig(e)); err != nil {
		return nil, err
	}
	// The stream's creation time, asked (EnsureStream's handle may be one
	// cached before a re-creation), before the consumer starts: a stream
	// created again in between is then seen as new.
	created, err := s.streamCreated(ctx)
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "stream %s", StreamName)
	}
	s.nudge, s.quit, s.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	if s.cc, err = s.follow(ctx); err != nil {
		return nil, err
	}
	go s.supervise(created)
	return s, nil
}

// streamCreated asks when the stream was created: a stream deleted and
// created again has the same name and starts again at sequence 1.
func (s *Store) streamCreated(ctx context.Context) (time.Time, error) {
	st, err := s.js.Stream(ctx, StreamName)
	if err != nil {
		return time.Time{}, err
	}
	return st.CachedInfo().Created, nil
}

// follow consumes the stream from its first message on a new ordered
// consumer. A consume error wakes the supervisor.
func (s *Store) follow(ctx context.Context) (jetstream.ConsumeContext, error) {
	gen := s.gen.Load()
	cons, err := s.js.OrderedConsumer(ctx, StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{SubjectPrefix + ">"},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "consumer on %s", StreamName)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if s.gen.Load() == gen {
			s.consume(m)
		}
	},
		jetstream.PullMaxBytes(s.pullBytes),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			s.logger.Debug("span consumer", slog.Any("error", err))
			select {
			case s.nudge <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "consume %s", StreamName)
	}
	return cc, nil
}

const (
	// streamCheckEvery is how often a store checks that its stream is
	// the one it follows, besides when the consume reports an error.
	streamCheckEvery = 30 * time.Second
	// followBase and followMax bound the wait before the next check of a
	// stream that is gone or did not answer, or the next restart of a
	// consume that failed to start: doubling from followBase.
	followBase = 250 * time.Millisecond
	followMax  = 30 * time.Second
	// followAttempt bounds one request of the supervisor.
	followAttempt = 10 * time.Second
)

// supervise checks the stream when the consume reports an error (its
// consumer deleted, the stream gone) and every s.check, until Close. The
// ordered consumer survives a deleted stream by itself, but when the
// stream is created again it resumes after the old stream's last sequence,
// skipping as many messages of the new one; so a stream created since
// (another creation time) is followed over from its first message. A
// stream that is gone is waited for: the exporters create it again.
func (s *Store) supervise(created time.Time) {
	defer close(s.done)
	life, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.quit:
			cancel()
		case <-life.Done():
		}
	}()
	tick := time.NewTicker(s.check)
	defer tick.Stop()
	var delay time.Duration
	for {
		if delay == 0 {
			select {
			case <-s.quit:
				return
			case <-s.nudge:
			case <-tick.C:
			}
		} else {
			select {
			case <-s.quit:
				return
			case <-time.After(delay):
			}
		}
		ctx, cancelReq := context.WithTimeout(life, followAttempt)
		now, err := s.streamCreated(ctx)
		if err == nil && !now.Equal(created) {
			err = s.restart(ctx)
			if err == nil {
				created = now
			}
		}
		cancelReq()
		if life.Err() != nil {
			return
		}
		if err == nil {
			delay = 0
			continue
		}
		delay = min(max(2*delay, followBase), followMax)
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			s.logger.Warn("span stream not checked; will retry", "stream", StreamName, "retry_in", delay, "error", err)
		}
	}
}

// restart replaces the consume with one from the stream's first message.
// The spans held stay (they are the traces they were; eviction ages them
// out), as when the stream is purged.
func (s *Store) restart(ctx context.Context) error {
	old := s.cc
	s.gen.Add(1) // what old still delivers is ignored
	old.Stop()
	select {
	case <-old.Closed():
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	s.stats.LastSeq = 0
	s.mu.Unlock()
	cc, err := s.follow(ctx)
	if err != nil {
		return err
	}
	s.cc = cc
	s.mu.Lock()
	s.stats.Restarts++
	s.mu.Unlock()
	s.logger.Warn("span stream created again; following it from its first message", "stream", StreamName)
	return nil
}

// Bounds of the bytes the stream's consumer pulls ahead of the store
// ([replayBytes]).
const (
	// MinReplayBytes is the least the consumer pulls ahead (8 MiB).
	MinReplayBytes = 8 << 20
	// replayMsgOverhead is what the server counts for a message besides
	// its headers and data: its subject and reply subject, each at most a
	// control line (4 KiB by default).
	replayMsgOverhead = 8 << 10
)

// replayBytes is how many bytes of messages the stream's consumer asks
// for ahead of the store: at least [MinReplayBytes], and room for two of
// the largest messages the bus carries, since a pull whose byte limit is
// smaller than the next message stalls the consumer. nats.go's default
// is 500 messages with no byte limit, which is up to 500 MiB of 1 MiB
// messages held while a store replays a full stream, outside
// [WithMaxBytes].
func replayBytes(maxPayload int64) int {
	return int(max(MinReplayBytes, 2*(maxPayload+replayMsgOverhead)))
}

// consume adds one message of the stream.
func (s *Store) consume(m jetstream.Msg) {
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	spans, invalid, err := DecodeSpans(m.Data())
	if err != nil || invalid > 0 {
		bad := invalid
		if err != nil {
			bad = 1
		}
		s.mu.Lock()
		s.stats.Received += uint64(bad)
		s.stats.Invalid += uint64(bad)
		s.stats.LastSeq = max(s.stats.LastSeq, seq)
		s.mu.Unlock()
		s.losses.note(0, 0, uint64(bad), err)
	}
	for _, sp := range spans {
		s.add(sp, seq)
	}
}

// Close stops following the stream; the spans held stay readable. It is
// idempotent.
func (s *Store) Close(context.Context) error {
	s.closeOnce.Do(func() {
		if s.quit != nil {
			close(s.quit)
			<-s.done
		}
		if s.cc != nil {
			s.cc.Stop()
			<-s.cc.Closed()
		}
	})
	return nil
}

// Add validates sp and adds it; it reports whether the span was added (not
// invalid, a duplicate, or dropped).
func (s *Store) Add(sp Span) bool {
	if err := sp.Validate(); err != nil {
		s.mu.Lock()
		s.stats.Received++
		s.stats.Invalid++
		s.mu.Unlock()
		return false
	}
	return s.add(sp, 0)
}

// MaxClockSkew is how far in the future a span may end: a store refuses
// (as invalid) a span that ends later, which would otherwise head
// group_by, newest first, until evicted.
const MaxClockSkew = time.Hour

func (s *Store) add(sp Span, seq uint64) bool {
	if sp.EndNs > s.now().Add(MaxClockSkew).UnixNano() {
		s.mu.Lock()
		s.stats.Received++
		s.stats.Invalid++
		s.stats.LastSeq = max(s.stats.LastSeq, seq)
		s.mu.Unlock()
		return false
	}
	st, trimmed, err := newStored(sp)
	if err != nil {
		s.mu.Lock()
		s.stats.Received++
		s.stats.Invalid++
		s.stats.LastSeq = max(s.stats.LastSeq, seq)
		s.mu.Unlock()
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Received++
	s.stats.LastSeq = max(s.stats.LastSeq, seq)
	t := s.traces[sp.TraceID]
	if t != nil {
		if _, dup := t.ids[sp.SpanID]; dup {
			s.stats.Duplicates++
			return false
		}
	}
	cost := st.cost()
	for s.spans >= s.maxSpans || s.bytes+cost > s.maxBytes {
		if !s.evictOldest(t) {
			s.stats.Dropped++
			return false
		}
	}
	if trimmed {
		s.stats.Trimmed++
	}
	if t == nil {
		t = &traceRec{id: sp.TraceID, ids: map[string]struct{}{}}
		s.traces[sp.TraceID] = t
		s.order = append(s.order, t)
	}
	t.spans = append(t.spans, st)
	t.ids[sp.SpanID] = struct{}{}
	if st.isError {
		t.errors++
	}
	t.bytes += cost
	s.spans++
	s.bytes += cost
	return true
}

// newStored encodes sp (valid) as the store holds it, trimmed when its
// encoding is over [MaxStoredSpanBytes] or nests deeper than
// [MaxStoredSpanDepth].
func newStored(sp Span) (st *stored, trimmed bool, err error) {
	raw, err := wire.MarshalJSON(&sp)
	if err != nil {
		return nil, false, err
	}
	if len(raw) > MaxStoredSpanBytes || jsonDepth(raw) > MaxStoredSpanDepth {
		sp = sp.Trim(len(raw))
		if raw, err = wire.MarshalJSON(&sp); err != nil {
			return nil, false, err
		}
		trimmed = true
	}
	st = &stored{
		spanID: sp.SpanID, parentID: sp.ParentSpanID, startNs: sp.StartNs, endNs: sp.EndNs,
		isError: sp.Status == StatusError, raw: raw,
	}
	for i, a := range GroupAttributes {
		st.keys[i], _ = sp.StringAttribute(a)
	}
	return st, trimmed, nil
}

// evictOldest evicts the oldest trace other than keep; false when there is
// none.
func (s *Store) evictOldest(keep *traceRec) bool {
	for i := s.head; i < len(s.order); i++ {
		t := s.order[i]
		if t.evicted || t == keep {
			continue
		}
		t.evicted = true
		delete(s.traces, t.id)
		s.spans -= len(t.spans)
		s.bytes -= t.bytes
		s.stats.EvictedTraces++
		s.stats.EvictedSpans += uint64(len(t.spans))
		// The record may stay in the order behind an older live trace
		// until that one goes: it must not keep its spans meanwhile.
		t.spans, t.ids = nil, nil
		s.compact()
		return true
	}
	return false
}

// compact drops evicted traces from the front of the order, and rebuilds
// it when most of it is dead.
func (s *Store) compact() {
	for s.head < len(s.order) && s.order[s.head].evicted {
		s.order[s.head] = nil
		s.head++
	}
	if s.head > 1024 && s.head > len(s.order)/2 {
		live := make([]*traceRec, 0, len(s.order)-s.head)
		for _, t := range s.order[s.head:] {
			if !t.evicted {
				live = append(live, t)
			}
		}
		s.order, s.head = live, 0
	}
}

// Stats returns the store's counters.
func (s *Store) Stats() StoreStats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := s.stats
	st.Traces, st.Spans, st.Bytes = len(s.traces), s.spans, s.bytes
	return st
}

// answerRoom is what an answer leaves of the bus's max payload for the
// headers and the fields around its list.
const answerRoom = 8 << 10

// answerLimit is how many bytes the list of an answer may take.
func (s *Store) answerLimit() int {
	return max(int(s.maxPayload())-answerRoom, 4<<10)
}

// groupAcc accumulates one group.
type groupAcc struct {
	g       Group
	lastRec *traceRec
	traces  []traceSeen
	firstNs int64
	lastNs  int64
}

type traceSeen struct {
	id     string
	lastNs int64
}

// GroupBy groups the spans holding req.Attribute by its value (spans
// without it are skipped), newest group first. req must be valid
// ([GroupByRequest.Validate]); an invalid one is an invalid_payload error.
// The groups' JSON stays within the bus's max payload: groups that do not
// fit are left out and the answer is truncated.
func (s *Store) GroupBy(req GroupByRequest) (GroupByResponse, error) {
	if err := req.Validate(); err != nil {
		return GroupByResponse{}, err
	}
	idx := attrIndex(req.Attribute)
	limit := req.Limit
	if limit == 0 {
		limit = DefaultGroupLimit
	}
	sinceNs := req.SinceMs * 1e6 // Validate bounds SinceMs so this does not overflow
	accs := map[string]*groupAcc{}

	s.mu.RLock()
	for _, t := range s.traces {
		for _, sp := range t.spans {
			v := sp.keys[idx]
			if v == "" || sp.endNs < sinceNs {
				continue
			}
			a := accs[v]
			if a == nil {
				a = &groupAcc{g: Group{Value: v}, firstNs: sp.startNs, lastNs: sp.endNs}
				accs[v] = a
			}
			a.g.SpanCount++
			if sp.isError {
				a.g.ErrorCount++
			}
			a.firstNs = min(a.firstNs, sp.startNs)
			a.lastNs = max(a.lastNs, sp.endNs)
			if a.lastRec != t {
				a.lastRec = t
				a.traces = append(a.traces, traceSeen{id: t.id, lastNs: sp.endNs})
			} else if n := len(a.traces) - 1; sp.endNs > a.traces[n].lastNs {
				a.traces[n].lastNs = sp.endNs
			}
		}
	}
	s.mu.RUnlock()

	groups := make([]*groupAcc, 0, len(accs))
	for _, a := range accs {
		groups = append(groups, a)
	}
	slices.SortFunc(groups, func(x, y *groupAcc) int {
		if c := cmp.Compare(y.lastNs, x.lastNs); c != 0 {
			return c
		}
		return cmp.Compare(x.g.Value, y.g.Value)
	})
	resp := GroupByResponse{Groups: make([]Group, 0, min(limit, len(groups)))}
	if len(groups) > limit {
		groups, resp.Truncated = groups[:limit], true
	}
	room := s.answerLimit()
	for _, a := range groups {
		slices.SortFunc(a.traces, func(x, y traceSeen) int {
			if c := cmp.Compare(y.lastNs, x.lastNs); c != 0 {
				return c
			}
			return cmp.Compare(x.id, y.id)
		})
		g := a.g
		g.TraceCount = len(a.traces)
		n := min(len(a.traces), MaxGroupTraceIDs)
		g.TraceIDs = make([]string, n)
		for i := range n {
			g.TraceIDs[i] = a.traces[i].id
		}
		g.FirstSeenMs, g.LastSeenMs = a.firstNs/1e6, a.lastNs/1e6
		g.DurationMs = g.LastSeenMs - g.FirstSeenMs
		// Measured, not estimated: a value of control characters takes
		// six bytes of JSON per byte.
		b, err := wire.MarshalJSON(&g)
		if err != nil {
			return GroupByResponse{}, wire.Wrap(wire.CodeInternal, err, "encode group")
		}
		if room -= len(b) + 1; room < 0 {
			resp.Truncated = true
			break
		}
		resp.Groups = append(resp.Groups, g)
	}
	return resp, nil
}

// Tree returns the spans of traceID as a tree: every span under its
// parent, children by start time; a span whose parent is not held is a
// root flagged missing_parent. The tree holds the earliest spans (by
// start) that fit within [MaxTreeSpans] and the bus's max payload; it is
// truncated when there are more. An invalid id is invalid_payload, an
// unknown trace not_found.
func (s *Store) Tree(traceID string) (TreeResponse, error) {
	req := TreeRequest{TraceID: traceID}
	if err := req.Validate(); err != nil {
		return TreeResponse{}, err
	}
	s.mu.RLock()
	t := s.traces[req.TraceID]
	var spans []*stored
	var errs int
	if t != nil {
		spans, errs = slices.Clone(t.spans), t.errors
	}
	s.mu.RUnlock()
	if t == nil {
		return TreeResponse{}, wire.Errorf(wire.CodeNotFound, "trace %s is not in the store", req.TraceID)
	}
	return buildTree(req.TraceID, spans, errs, s.answerLimit())
}

// nodeOverhead bounds what a tree node adds to its span's JSON
// (missing_parent, the children array, a comma).
const nodeOverhead = 48

// answerSize is what sp (raw in JSON) takes of an answer in the larger
// of the codecs a caller may ask for: msgpack writes a float as nine
// bytes however short its decimal form ("0.1,": four), so a span of
// float attributes is twice as large in a Go caller's answer as in JSON.
func answerSize(raw []byte, sp *Span) (int, error) {
	b, err := wire.Msgpack.Marshal(sp)
	if err != nil {
		return 0, err
	}
	return max(len(raw), len(b)), nil
}

// buildTree links spans (owned by the caller) into a tree of at most
// limit bytes of spans.
func buildTree(traceID string, spans []*stored, errs int, limit int) (TreeResponse, error) {
	resp := TreeResponse{TraceID: traceID, SpanCount: len(spans), ErrorCount: errs}
	slices.SortStableFunc(spans, func(x, y *stored) int {
		if c := cmp.Compare(x.startNs, y.startNs); c != 0 {
			return c
		}
		return cmp.Compare(x.spanID, y.spanID)
	})
	if len(spans) > 0 {
		resp.StartMs = spans[0].startNs / 1e6
		var end int64
		for _, sp := range spans {
			end = max(end, sp.endNs)
		}
		resp.DurationMs = end/1e6 - resp.StartMs
	}
	if len(spans) > MaxTreeSpans {
		spans, resp.Truncated = spans[:MaxTreeSpans], true
	}
	// The earliest spans that fit the answer, at least one: a stored span
	// is at most MaxStoredSpanBytes.
	nodes := make(map[string]*TreeNode, len(spans))
	all := make([]*TreeNode, 0, len(spans))
	size := 0
	for i, sp := range spans {
		n := &TreeNode{}
		if err := unmarshalSpan(sp.raw, &n.Span); err != nil {
			return TreeResponse{}, wire.Wrap(wire.CodeInternal, err, "decode stored span %s", sp.spanID)
		}
		sz, err := answerSize(sp.raw, &n.Span)
		if err != nil {
			return TreeResponse{}, wire.Wrap(wire.CodeInternal, err, "encode stored span %s", sp.spanID)
		}
		if size += sz + nodeOverhead; size > limit && i > 0 {
			resp.Truncated = true
			break
		}
		all = append(all, n)
		nodes[sp.spanID] = n
	}
	// Link in start order, so children come out sorted.
	for _, n := range all {
		switch p := nodes[n.ParentSpanID]; {
		case n.ParentSpanID == "":
			resp.Spans = append(resp.Spans, n)
		case p == nil:
			n.MissingParent = true
			resp.Spans = append(resp.Spans, n)
		default:
			p.Children = append(p.Children, n)
		}
	}
	// Spans not reachable from a root hang in a parent loop, or below one
	// (only bad data makes one): cut each loop at its earliest span, which
	// becomes a root; the spans below the loop stay under their parents.
	seen := make(map[*TreeNode]bool, len(all))
	mark := func(root *TreeNode) {
		stack := []*TreeNode{root}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[n] {
				continue
			}
			seen[n] = true
			stack = append(stack, n.Children...)
		}
	}
	for _, r := range resp.Spans {
		mark(r)
	}
	var pos map[*TreeNode]int // a node's index in all (by start), made for the first loop
	for _, n := range all {
		if seen[n] {
			continue
		}
		if pos == nil {
			pos = make(map[*TreeNode]int, len(all))
			for i, x := range all {
				pos[x] = i
			}
		}
		// Every span up from n has its parent in nodes and unseen: climb
		// until a span repeats, which is on the loop, then go round the
		// loop for its earliest span.
		climbed := map[*TreeNode]bool{}
		x := n
		for !climbed[x] {
			climbed[x] = true
			x = nodes[x.ParentSpanID]
		}
		first := x
		for y := nodes[x.ParentSpanID]; y != x; y = nodes[y.ParentSpanID] {
			if pos[y] < pos[first] {
				first = y
			}
		}
		p := nodes[first.ParentSpanID]
		p.Children = slices.DeleteFunc(p.Children, func(c *TreeNode) bool { return c == first })
		first.MissingParent = true
		resp.Spans = append(resp.Spans, first)
		mark(first)
	}
	resp.Spans = detachDeep(resp.Spans)
	slices.SortStableFunc(resp.Spans, func(x, y *TreeNode) int { return cmp.Compare(x.StartNs, y.StartNs) })
	return resp, nil
}

// detachDeep returns roots with the children of every span [MaxTreeDepth]
// levels down (a root is level 1) moved to the roots, flagged detached,
// and so on below them: each level of the tree nests the answer's JSON
// twice (a node and its children), and decoders stop at a depth (a
// msgpack reply's at 256, Go's JSON at 10,000) that a trace thousands of
// spans deep went past.
func detachDeep(roots []*TreeNode) []*TreeNode {
	type at struct {
		n     *TreeNode
		level int
	}
	stack := make([]at, 0, len(roots))
	for _, r := range roots {
		stack = append(stack, at{r, 1})
	}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if x.level < MaxTreeDepth {
			for _, c := range x.n.Children {
				stack = append(stack, at{c, x.level + 1})
			}
			continue
		}
		for _, c := range x.n.Children {
			c.Detached = true
			roots = append(roots, c)
			stack = append(stack, at{c, 1})
		}
		x.n.Children = nil
	}
	return roots
}
