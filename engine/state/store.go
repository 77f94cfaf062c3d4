package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// KV protocol names: a bucket B is the stream "KV_B" whose subjects are
// "$KV.B.<key>"; a delete is a message with header KV-Operation: DEL.
const (
	kvStreamPrefix  = "KV_"
	kvSubjectPrefix = "$KV."
	kvOpHeader      = "KV-Operation"
	kvOpDelete      = "DEL"
	kvOpPurge       = "PURGE"
)

// HeaderPrevRevision is set on every write the store makes: the revision
// of the value it replaced, or 0 when the key did not exist (never written,
// or deleted). State triggers read it to tell created from updated and to
// find the old value without scanning the key's history. Writes made by
// other clients lack it; triggers then fall back to the key's history.
const HeaderPrevRevision = "Iii-Prev-Revision"

// Store is the state primitive: JSON values under (scope, key) in one
// JetStream KV bucket, with compare-and-set writes. It is safe for
// concurrent use; any number of Stores (in any number of processes) may
// share the bucket.
type Store struct {
	e      *engine.Engine
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	stream jetstream.Stream
	opts   options
	// subjPrefix is "$KV.<bucket>.", the subject prefix of every key.
	subjPrefix string
	// index keeps the sorted keys of the scopes being paged through.
	index indexCache
}

// New opens the state bucket, creating it (file storage, the engine's
// replica count, [DefaultHistory] revisions per key) when it is missing.
func New(ctx context.Context, e *engine.Engine, opts ...Option) (*Store, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: nil engine", engine.ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	s := &Store{e: e, js: e.JetStream(), opts: o, subjPrefix: kvSubjectPrefix + o.bucket + "."}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	kv, err := e.EnsureKV(ctx, jetstream.KeyValueConfig{
		Bucket:      o.bucket,
		Description: "iii state: JSON values by <scope>.<key>",
		History:     uint8(o.history),
		Storage:     jetstream.FileStorage,
		Replicas:    e.Replicas(),
	})
	if err != nil {
		return nil, err
	}
	st, err := s.js.Stream(ctx, kvStreamPrefix+o.bucket)
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "state bucket stream")
	}
	s.kv, s.stream = kv, st
	return s, nil
}

// Bucket is the KV bucket's name.
func (s *Store) Bucket() string { return s.opts.bucket }

// KeyValue is the underlying KV bucket, for watchers and tools.
func (s *Store) KeyValue() jetstream.KeyValue { return s.kv }

// MaxValueSize is the largest JSON encoding of a value the store accepts
// right now (it follows the server's max payload).
func (s *Store) MaxValueSize() int {
	n := int(s.e.Conn().MaxPayload()-payloadHeadroom) / 2
	if s.opts.maxValueSize > 0 && s.opts.maxValueSize < n {
		n = s.opts.maxValueSize
	}
	return max(n, 1)
}

func (s *Store) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.opts.timeout)
}

// kvKey validates scope and key and maps them onto the KV key.
func kvKey(scope, key string) (string, error) {
	k, err := subjects.StateKVKey(scope, key)
	if err != nil {
		return "", wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	return k, nil
}

// entry is the latest message of one key.
type entry struct {
	rev    uint64 // last sequence on the key's subject (a delete marker too); 0 if none
	exists bool   // the latest message is a value, not a delete marker
	value  any    // decoded value when exists
	raw    []byte // stored bytes when exists
}

// read fetches the latest message of kvkey with a direct get, sent again
// when unanswered in its attempt ([engine.RetryRead]: a replica that died,
// a stream electing its leader) rather than waiting out ctx's deadline.
func (s *Store) read(ctx context.Context, kvkey string) (entry, error) {
	var m *jetstream.RawStreamMsg
	err := engine.RetryRead(ctx, func(ctx context.Context) (err error) {
		m, err = s.stream.GetLastMsgForSubject(ctx, s.subjPrefix+kvkey)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return entry{}, nil
	}
	if err != nil {
		return entry{}, unavailable(ctx, err, "read")
	}
	if isDeleteMarker(m.Header) {
		return entry{rev: m.Sequence}, nil
	}
	return entry{rev: m.Sequence, exists: true, value: decodeValue(m.Data), raw: m.Data}, nil
}

// isDeleteMarker reports whether a KV message is a delete, a purge or a
// server limit marker rather than a value.
func isDeleteMarker(h nats.Header) bool {
	if len(h) == 0 {
		return false
	}
	if op := h.Get(kvOpHeader); op == kvOpDelete || op == kvOpPurge {
		return true
	}
	return h.Get(jetstream.MarkerReasonHeader) != ""
}

// errConflict reports a lost compare-and-set; the write loops retry it.
var errConflict = errors.New("state: revision changed")

// write publishes data (or a delete marker when del) on kvkey if the key's
// last revision is still cur.rev.
func (s *Store) write(ctx context.Context, kvkey string, data []byte, del bool, cur entry) (uint64, error) {
	msg := &nats.Msg{Subject: s.subjPrefix + kvkey, Data: data, Header: make(nats.Header, 4)}
	if del {
		msg.Header.Set(kvOpHeader, kvOpDelete)
	}
	prev := uint64(0)
	if cur.exists {
		prev = cur.rev
	}
	msg.Header.Set(HeaderPrevRevision, strconv.FormatUint(prev, 10))
	s.e.Inject(ctx, msg.Header)
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(cur.rev))
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return 0, errConflict
		}
		return 0, unavailable(ctx, err, "write")
	}
	return ack.Sequence, nil
}

// unavailable maps a JetStream failure onto the catalog: the caller's own
// deadline or cancellation keeps its code.
func unavailable(ctx context.Context, err error, what string) *wire.Error {
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return wire.Wrap(wire.CodeCanceled, err, "state %s", what)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return wire.Wrap(wire.CodeTimeout, err, "state %s", what)
	}
	return wire.Wrap(wire.CodeUnavailable, err, "state %s", what)
}

// casLoop runs one read-compute-write attempt until it does not conflict,
// sleeping a short jittered backoff between attempts.
func (s *Store) casLoop(ctx context.Context, kvkey string, attempt func(cur entry) error) error {
	for i := 0; ; i++ {
		cur, err := s.read(ctx, kvkey)
		if err != nil {
			return err
		}
		err = attempt(cur)
		if !errors.Is(err, errConflict) {
			return err
		}
		if i+1 >= s.opts.maxRetries {
			return wire.Wrap(wire.CodeConflict, ErrContention, "%d attempts on %q", i+1, kvkey)
		}
		// Jittered backoff, 0..min(2^i, 64) ms: the writer that won is done
		// with the key, so a short pause mostly avoids meeting the next one.
		d := time.Duration(rand.Int64N(int64(min(1<<min(i, 6), 64)) * int64(time.Millisecond)))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return unavailable(ctx, ctx.Err(), "write")
		case <-t.C:
		}
	}
}

// encodeChecked encodes v and enforces the size limit.
func (s *Store) encodeChecked(v any) ([]byte, error) {
	b, err := encodeValue(v)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	if max := s.MaxValueSize(); len(b) > max {
		return nil, wire.Wrap(wire.CodeInvalidPayload, ErrValueTooLarge, "%d bytes of JSON, at most %d", len(b), max).
			WithDetails(map[string]any{"size": len(b), "max_value_size": max})
	}
	if d := jsonDepth(b); d > maxValueDepth {
		return nil, wire.Wrap(wire.CodeInvalidPayload, ErrInvalidValue, "arrays and objects nested %d deep, at most %d", d, maxValueDepth)
	}
	return b, nil
}

// msgpackSlack is how many bytes a value's msgpack encoding may exceed
// the size limit by: a long string's or array's msgpack header takes up to
// 5 bytes where JSON's quotes or brackets take 2, which the reply's
// headroom holds.
const msgpackSlack = 8

// checkMsgpack refuses a value (in the decoded shape, as replies carry
// it) whose msgpack encoding is larger than the size limit allows: a
// float takes 9 bytes in msgpack and as few as 4 in a JSON array ("0.1,"),
// so a value under the JSON limit could still make every msgpack reply
// that carries it exceed the max payload. Only floats grow, at most 3
// times (a lone "0.1"), so a value whose JSON is under a third of the
// limit is not encoded again.
func (s *Store) checkMsgpack(v any, jsonSize int) error {
	max := s.MaxValueSize()
	if jsonSize*3 <= max {
		return nil
	}
	b, err := wire.Msgpack.Marshal(v)
	if err != nil {
		return wire.Wrap(wire.CodeInvalidPayload, fmt.Errorf("%w: %v", ErrInvalidValue, err), "")
	}
	if len(b) > max+msgpackSlack {
		return wire.Wrap(wire.CodeInvalidPayload, ErrValueTooLarge, "%d bytes of msgpack (%d of JSON), at most %d", len(b), jsonSize, max).
			WithDetails(map[string]any{"size": len(b), "max_value_size": max})
	}
	return nil
}

// Get returns the value of key in scope and its revision. A missing key is
// an error matching wire.ErrNotFound (the state::get function answers
// {value: null, revision: 0} instead). A value stored as JSON null is
// found: nil with its revision.
func (s *Store) Get(ctx context.Context, scope, key string) (value any, revision uint64, err error) {
	kvkey, err := kvKey(scope, key)
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	cur, err := s.read(ctx, kvkey)
	if err != nil {
		return nil, 0, err
	}
	if !cur.exists {
		return nil, 0, wire.Errorf(wire.CodeNotFound, "state %s/%s does not exist", scope, key)
	}
	return cur.value, cur.rev, nil
}

// GetInto decodes the value of key in scope into dst (a pointer, as for
// json.Unmarshal) straight from the stored JSON, so typed callers keep
// integer precision, and returns its revision. A missing key is an error
// matching wire.ErrNotFound; a stored value that does not decode into dst
// is invalid_payload.
func (s *Store) GetInto(ctx context.Context, scope, key string, dst any) (revision uint64, err error) {
	kvkey, err := kvKey(scope, key)
	if err != nil {
		return 0, err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	cur, err := s.read(ctx, kvkey)
	if err != nil {
		return 0, err
	}
	if !cur.exists {
		return 0, wire.Errorf(wire.CodeNotFound, "state %s/%s does not exist", scope, key)
	}
	if err := json.Unmarshal(cur.raw, dst); err != nil {
		return 0, wire.Wrap(wire.CodeInvalidPayload, err, "state %s/%s does not decode into %T", scope, key, dst)
	}
	return cur.rev, nil
}

// Set stores value (any Go value with a JSON encoding) under key in scope
// and returns the value it replaced (nil if none) and the stored value as
// it reads back (decoded JSON). The write is a compare-and-set against the
// revision read, so old is exactly the value replaced. A value whose JSON
// holds a number beyond float64's range (a json.Number, a MarshalJSON) is
// invalid_payload, as a JSON caller's would be.
func (s *Store) Set(ctx context.Context, scope, key string, value any) (oldValue, newValue any, err error) {
	kvkey, err := kvKey(scope, key)
	if err != nil {
		return nil, nil, err
	}
	data, err := s.encodeChecked(value)
	if err != nil {
		return nil, nil, err
	}
	newV, ok := decodeJSON(data)
	if !ok { // a json.Number or a MarshalJSON past float64's range
		return nil, nil, wire.Wrap(wire.CodeInvalidPayload, ErrInvalidValue, "a number is beyond float64's range")
	}
	if err := s.checkMsgpack(newV, len(data)); err != nil {
		return nil, nil, err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	err = s.casLoop(ctx, kvkey, func(cur entry) error {
		if _, err := s.write(ctx, kvkey, data, false, cur); err != nil {
			return err
		}
		oldValue = cur.value
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return oldValue, newV, nil
}

// Update applies ops atomically to the value of key in scope (a missing key
// counts as null) and returns the value before and after. It reads the
// value, applies the ops and writes the result only if the key's revision
// is unchanged, retrying on a concurrent write (up to [WithMaxRetries]
// attempts, then conflict). An op that fails writes nothing. An update that
// leaves the value as it was writes nothing either (no new revision, no
// trigger event).
func (s *Store) Update(ctx context.Context, scope, key string, ops []Op) (oldValue, newValue any, err error) {
	kvkey, err := kvKey(scope, key)
	if err != nil {
		return nil, nil, err
	}
	if err := validateOps(ops); err != nil {
		return nil, nil, err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	err = s.casLoop(ctx, kvkey, func(cur entry) error {
		next, err := Apply(cur.value, ops)
		if err != nil {
			return err
		}
		data, err := s.encodeChecked(next)
		if err != nil {
			return err
		}
		if err := s.checkMsgpack(next, len(data)); err != nil {
			return err
		}
		if !unchanged(cur, next, data) {
			if _, err := s.write(ctx, kvkey, data, false, cur); err != nil {
				return err
			}
		}
		oldValue, newValue = cur.value, next
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return oldValue, newValue, nil
}

// unchanged reports whether writing data would leave the value as it is:
// a missing key stays missing when the result is null.
func unchanged(cur entry, next any, data []byte) bool {
	if !cur.exists {
		return next == nil
	}
	was, err := encodeValue(cur.value)
	return err == nil && string(was) == string(data)
}

// Delete removes key from scope and returns the value it had (nil, and no
// write, when the key does not exist). The delete is a compare-and-set
// against the revision read, so old is exact.
func (s *Store) Delete(ctx context.Context, scope, key string) (oldValue any, err error) {
	kvkey, err := kvKey(scope, key)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	err = s.casLoop(ctx, kvkey, func(cur entry) error {
		oldValue = nil
		if !cur.exists {
			return nil
		}
		if _, err := s.write(ctx, kvkey, nil, true, cur); err != nil {
			return err
		}
		oldValue = cur.value
		return nil
	})
	if err != nil {
		return nil, err
	}
	return oldValue, nil
}

// Item is one key of a [Store.List].
type Item struct {
	Key      string `json:"key"`
	Value    any    `json:"value"`
	Revision uint64 `json:"revision"`
	// ValueUnavailable is set, and Value is null, in a state::list reply
	// when the value alone would not fit in one message (only possible for
	// values written by foreign clients). [Store.List] never sets it.
	ValueUnavailable bool `json:"value_unavailable,omitempty"`
}

// List returns the keys of scope under prefix with their values, sorted by
// key. prefix is "" (the whole scope), a key ("users": that key and every
// key below it, "users/…"), or a key ending in '/' ("users/": only the keys
// below it). Deleted keys are left out. List reads a consistent snapshot of
// each key but not of the scope as a whole.
func (s *Store) List(ctx context.Context, scope, prefix string) ([]Item, error) {
	filters, err := keyFilters(scope, prefix)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	w, err := s.kv.WatchFiltered(ctx, filters, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, unavailable(ctx, err, "list")
	}
	defer func() { _ = w.Stop() }()
	var items []Item
	for {
		select {
		case <-ctx.Done():
			return nil, unavailable(ctx, ctx.Err(), "list")
		case e, ok := <-w.Updates():
			if !ok {
				return nil, wire.Errorf(wire.CodeUnavailable, "state list: watcher closed")
			}
			if e == nil { // every current value delivered
				slices.SortFunc(items, func(a, b Item) int { return strings.Compare(a.Key, b.Key) })
				return items, nil
			}
			sc, key, err := subjects.SplitStateKVKey(e.Key())
			if err != nil || sc != scope {
				continue // written by a foreign client under a key we cannot map
			}
			items = append(items, Item{Key: key, Value: decodeValue(e.Value()), Revision: e.Revision()})
		}
	}
}
