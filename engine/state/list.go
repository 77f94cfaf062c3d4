package state

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Paging a scope (state::list with after) must not read the whole scope
// for every page: JetStream can list a filter's subjects from its
// in-memory subject index, but not in key order from a given key, and the
// keys sort differently from their escaped subjects anyway. So a page goes
// through a keyIndex, the sorted keys of one filter, which the store keeps
// between pages and brings up to date from the messages written since it
// was built; only the page's own keys are then read, with batch direct
// gets (multi_last), which also read them all at one stream sequence.
const (
	// maxIndexes and maxIndexKeys bound the key indexes a store keeps;
	// the least recently used go first. A filter with more keys than
	// maxIndexKeys is indexed for each page and not kept.
	maxIndexes   = 64
	maxIndexKeys = 1 << 20
	// indexIdle drops an index nobody paged through for that long.
	indexIdle = 5 * time.Minute
	// maxIndexCatchUp is how many new messages under the filter an index
	// reads one by one to catch up before it is rebuilt instead.
	maxIndexCatchUp = 32
	// listBatch is how many keys a page reads at once when its limit does
	// not say (the batch doubles up to maxListBatch as the page goes on;
	// the server answers at most 1024 subjects in one batch direct get).
	listBatch    = 64
	maxListBatch = 1024
)

// indexKey is one key of a keyIndex and its full subject.
type indexKey struct{ key, subj string }

// keyIndex is every key of a scope under one KV key filter that the stream
// held up to sequence seq, sorted by key. Once built it is never modified
// (an update makes a new one), so pages can share it. Keys deleted since
// are still in it: a page skips them when it reads their values.
type keyIndex struct {
	filter  string // full subject filter, "$KV.<bucket>.<scope>.>"
	created time.Time
	seq     uint64
	keys    []indexKey
	used    time.Time // guarded by indexCache.mu
}

// indexCache holds a store's key indexes by filter.
type indexCache struct {
	mu sync.Mutex
	m  map[string]*keyIndex
}

func (c *indexCache) get(filter string) *keyIndex {
	c.mu.Lock()
	defer c.mu.Unlock()
	ix := c.m[filter]
	if ix != nil {
		ix.used = time.Now()
	}
	return ix
}

func (c *indexCache) put(ix *keyIndex) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.m == nil {
		c.m = make(map[string]*keyIndex)
	}
	delete(c.m, ix.filter)
	total := 0
	for f, x := range c.m {
		if now.Sub(x.used) > indexIdle {
			delete(c.m, f)
			continue
		}
		total += len(x.keys)
	}
	if len(ix.keys) > maxIndexKeys {
		return
	}
	for len(c.m) >= maxIndexes || total+len(ix.keys) > maxIndexKeys {
		var oldest *keyIndex
		for _, x := range c.m {
			if oldest == nil || x.used.Before(oldest.used) {
				oldest = x
			}
		}
		delete(c.m, oldest.filter)
		total -= len(oldest.keys)
	}
	ix.used = now
	c.m[ix.filter] = ix
}

// keyIndex returns an up-to-date index of filter (relative to the bucket)
// in scope: one stream info request when nothing was written under the
// filter since the last page, a few direct gets when little was.
func (s *Store) keyIndex(ctx context.Context, scope, filter string) (*keyIndex, error) {
	filter = s.subjPrefix + filter
	info, err := s.stream.Info(ctx)
	if err != nil {
		return nil, unavailable(ctx, err, "list")
	}
	if ix := s.index.get(filter); ix != nil && ix.created.Equal(info.Created) && ix.seq <= info.State.LastSeq {
		if ix.seq == info.State.LastSeq {
			return ix, nil
		}
		next, err := s.catchUp(ctx, scope, ix)
		if err != nil {
			return nil, err
		}
		if next != nil {
			s.index.put(next)
			return next, nil
		}
	}
	// First page, too much written since, or the stream was recreated.
	// Every message up to info's last sequence was stored before the
	// subjects are listed, so each of their subjects is in the list.
	st, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, unavailable(ctx, err, "list")
	}
	ix := &keyIndex{filter: filter, created: info.Created, seq: info.State.LastSeq,
		keys: make([]indexKey, 0, len(st.State.Subjects))}
	for subj := range st.State.Subjects {
		if k, ok := s.subjectKey(scope, subj); ok {
			ix.keys = append(ix.keys, indexKey{key: k, subj: subj})
		}
	}
	slices.SortFunc(ix.keys, func(a, b indexKey) int { return strings.Compare(a.key, b.key) })
	s.index.put(ix)
	return ix, nil
}

// catchUp reads the messages under ix's filter written after ix.seq and
// returns ix with their keys added, or nil when there are more than
// maxIndexCatchUp of them.
func (s *Store) catchUp(ctx context.Context, scope string, ix *keyIndex) (*keyIndex, error) {
	from := ix.seq + 1
	var added []indexKey
	for n := 0; ; n++ {
		m, err := s.stream.GetMsg(ctx, from, jetstream.WithGetMsgSubject(ix.filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, unavailable(ctx, err, "list")
		}
		if n == maxIndexCatchUp {
			return nil, nil
		}
		from = m.Sequence + 1
		k, ok := s.subjectKey(scope, m.Subject)
		if !ok {
			continue
		}
		if _, found := slices.BinarySearchFunc(ix.keys, k, cmpIndexKey); found {
			continue
		}
		if !slices.ContainsFunc(added, func(a indexKey) bool { return a.key == k }) {
			added = append(added, indexKey{key: k, subj: m.Subject})
		}
	}
	// Every message under the filter before from has been seen: a later
	// one gets a sequence of at least from.
	next := &keyIndex{filter: ix.filter, created: ix.created, seq: from - 1, keys: ix.keys}
	if len(added) > 0 {
		next.keys = make([]indexKey, 0, len(ix.keys)+len(added))
		next.keys = append(append(next.keys, ix.keys...), added...)
		slices.SortFunc(next.keys, func(a, b indexKey) int { return strings.Compare(a.key, b.key) })
	}
	return next, nil
}

func cmpIndexKey(a indexKey, key string) int { return strings.Compare(a.key, key) }

// subjectKey maps a full subject onto its key in scope; ok is false for a
// subject written by a foreign client that maps onto no key of scope.
func (s *Store) subjectKey(scope, subj string) (key string, ok bool) {
	sc, key, err := subjects.SplitStateKVKey(strings.TrimPrefix(subj, s.subjPrefix))
	return key, err == nil && sc == scope
}

// rawItem is one key read by scan, its value still as stored.
type rawItem struct {
	key  string
	rev  uint64
	data []byte
	own  bool // written by a Store (it carries [HeaderPrevRevision]): compact JSON
}

// scan calls yield with the items of scope under prefix (as [Store.List]
// means it) whose key sorts after after, in key order, until yield
// returns false. Values are read batch by batch, the first batch of at
// most batch keys, each batch bounded by what is left of budget (the bytes
// of values the caller expects to take), so a page reads about the values
// it holds, not every value of the batch.
func (s *Store) scan(ctx context.Context, scope, prefix, after string, batch, budget int, yield func(rawItem) bool) error {
	filters, err := keyFilters(scope, prefix)
	if err != nil {
		return err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	below := filters[len(filters)-1]
	var exact []indexKey
	if len(filters) == 2 && prefix > after {
		// The key prefix itself sorts before every key below it.
		exact = []indexKey{{key: prefix, subj: s.subjPrefix + filters[0]}}
	}
	ix, err := s.keyIndex(ctx, scope, below)
	if err != nil {
		return err
	}
	i, found := slices.BinarySearchFunc(ix.keys, after, cmpIndexKey)
	if found {
		i++
	}
	batch = min(max(batch, 1), maxListBatch)
	for _, keys := range [][]indexKey{exact, ix.keys[i:]} {
		for len(keys) > 0 {
			n := min(batch, len(keys))
			items, err := s.readItems(ctx, keys[:n], max(budget, minReadBytes))
			if err != nil {
				return err
			}
			for _, it := range items {
				if it == nil {
					continue
				}
				budget -= len(it.data)
				if !yield(*it) {
					return nil
				}
			}
			keys = keys[len(items):]
			batch = min(batch*2, maxListBatch)
		}
	}
	return nil
}

// minReadBytes is the least max_bytes of a batch read: a page that takes
// more than its caller expected reads on in steps of at least this.
const minReadBytes = 64 << 10

// readItems reads the latest values of keys (at most [maxListBatch]) with
// batch direct gets (multi_last), all at one stream sequence, and returns
// those of a prefix of keys (at least one key), nil for a key that is
// missing or deleted: every key when their values take at most budget
// bytes, else about as many as budget holds ([Store.readPrefix]).
func (s *Store) readItems(ctx context.Context, keys []indexKey, budget int) ([]*rawItem, error) {
	req := multiLastRequest{MultiLast: make([]string, len(keys)), MaxBytes: budget}
	for i, k := range keys {
		req.MultiLast[i] = k.subj
	}
	found := make(map[string]*nats.Msg, len(keys))
	last, pending, upTo, err := s.multiLast(ctx, req, found)
	if err != nil {
		return nil, err
	}
	n := len(keys)
	if pending > 0 && last > 0 {
		if n, err = s.readPrefix(ctx, keys, budget, upTo, found); err != nil {
			return nil, err
		}
	}
	items := make([]*rawItem, n)
	for i, k := range keys[:n] {
		m := found[k.subj]
		if m == nil || isDeleteMarker(m.Header) {
			continue
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return nil, wire.Errorf(wire.CodeUnavailable, "state list: direct get reply without a sequence")
		}
		items[i] = &rawItem{key: k.key, rev: seq, data: m.Data, own: m.Header.Get(HeaderPrevRevision) != ""}
	}
	return items, nil
}

// readPrefix goes on after a batch read of keys that max_bytes cut short:
// their values take more than budget, and the server sent the first of
// them in stream order, not key order. It reads the keys not read yet in
// key order, at sequence upTo, a chunk at a time sized by the mean value
// seen so far, until the values of a prefix of keys reach budget (a page
// takes no more) or every key is read, and returns that prefix's length.
// Each request resolves at least one key, and reads about what is left
// of budget: a page costs about its own values, whatever order the keys
// were written in, not every value of the batch.
func (s *Store) readPrefix(ctx context.Context, keys []indexKey, budget int, upTo uint64, found map[string]*nats.Msg) (int, error) {
	empty := make(map[string]bool) // keys a complete read found nothing for
	n, sum := 0, 0
	for {
		for ; n < len(keys); n++ {
			m, ok := found[keys[n].subj]
			if !ok && !empty[keys[n].subj] {
				break
			}
			if m != nil {
				sum += len(m.Data)
			}
			if sum >= budget {
				return n + 1, nil
			}
		}
		if n == len(keys) {
			return n, nil
		}
		seen := 0
		for _, m := range found {
			seen += len(m.Data)
		}
		mean := max(seen/max(len(found), 1), 1)
		want := max((budget-sum+mean-1)/mean, 1)
		req := multiLastRequest{UpToSeq: upTo, MaxBytes: max(budget-sum, 1)}
		for _, k := range keys[n:] {
			if len(req.MultiLast) == want {
				break
			}
			if _, ok := found[k.subj]; !ok && !empty[k.subj] {
				req.MultiLast = append(req.MultiLast, k.subj)
			}
		}
		last, pending, _, err := s.multiLast(ctx, req, found)
		if err != nil {
			return 0, err
		}
		if pending == 0 || last == 0 { // complete: a key not sent holds nothing
			for _, subj := range req.MultiLast {
				if _, ok := found[subj]; !ok {
					empty[subj] = true
				}
			}
		}
	}
}

// multiLastRequest is the JSON request of a batch direct get of the
// latest message of each of several subjects.
type multiLastRequest struct {
	MultiLast []string `json:"multi_last"`
	UpToSeq   uint64   `json:"up_to_seq,omitempty"`
	MaxBytes  int      `json:"max_bytes"`
}

// multiLast runs one batch direct get and adds the messages it returns to
// found by subject. last is the sequence of the last message, pending how
// many the server left out, upTo the sequence the batch was read at. The
// reply is collected by a callback subscription and used once complete.
func (s *Store) multiLast(ctx context.Context, req multiLastRequest, found map[string]*nats.Msg) (last, pending, upTo uint64, err error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, 0, 0, wire.Wrap(wire.CodeInternal, err, "state list request")
	}
	got, end, err := engine.DirectGetBatch(ctx, s.e.Conn(), kvStreamPrefix+s.opts.bucket, body)
	if err != nil {
		return 0, 0, 0, unavailable(ctx, err, "list")
	}
	pending, upTo = end.Pending, end.UpToSeq
	for _, m := range got {
		found[m.Header.Get(jetstream.SubjectHeader)] = m
		if seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64); err == nil {
			last = max(last, seq)
		}
	}
	return last, pending, upTo, nil
}

// keyFilters are the KV key filters (relative to the bucket) of prefix in
// scope, with the meaning [Store.List] documents: the exact key, when
// prefix is one, then the filter of every key below prefix.
func keyFilters(scope, prefix string) ([]string, error) {
	if err := subjects.ValidateID("scope", scope); err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	below, err := subjects.StatePrefixFilter(scope, prefix)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "prefix")
	}
	if prefix == "" || strings.HasSuffix(prefix, "/") {
		return []string{below}, nil
	}
	exact, err := subjects.StateKVKey(scope, prefix)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "prefix")
	}
	return []string{exact, below}, nil
}
