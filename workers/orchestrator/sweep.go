package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/subjects"
)

// staleScan finds the sessions the periodic sweep must look at without
// reading every turn record each time. It follows every copy of the
// turn-state bucket from the last revision it saw, headers only, and
// remembers each session written since and when, unless the write was a
// settled record ([HeaderSettled]) or a delete. The sweep loads only the
// sessions whose last write is older than its stale interval, and forgets
// one whose record it found settled until the record is written again. An idle node therefore does no work per sweep, where reading
// every record cost memory and CPU in proportion to all sessions ever
// run (docs/PERFORMANCE.md, "The periodic sweep").
//
// It is used by the sweep goroutine only; the mutex keeps tests honest.
type staleScan struct {
	turns sessionKV

	mu      sync.Mutex
	cursor  map[string]uint64    // by region ("" the primary copy): last revision seen
	written map[string]time.Time // by session: its record's last write (server time)
}

// follow reads what was written to every copy of the bucket since the last
// call (the first call reads each key's latest write).
func (s *staleScan) follow(ctx context.Context) error {
	regions, err := s.turns.regions(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range regions {
		if err := s.followCopy(ctx, r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *staleScan) followCopy(ctx context.Context, region string) error {
	kv, err := s.turns.copyOf(ctx, region)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.cursor == nil {
		s.cursor, s.written = map[string]uint64{}, map[string]time.Time{}
	}
	from := s.cursor[region]
	s.mu.Unlock()
	stream, err := s.turns.e.JetStream().Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		return err
	}
	// A pass makes its own consumer; the server drops it soon after
	// (not after the default 5 min: one pass every 10 s would keep ~30).
	cfg := jetstream.OrderedConsumerConfig{HeadersOnly: true, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy, InactiveThreshold: 30 * time.Second}
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from+1
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return err
	}
	if cons.CachedInfo().NumPending == 0 {
		return nil
	}
	// A pass ends where the stream ended when it began, so writes that
	// keep coming cannot hold it: they are the next pass's.
	last := stream.CachedInfo().State.LastSeq
	prefix := "$KV." + kv.Bucket() + "."
	// One iterator, so the pass uses one server consumer (an ordered
	// consumer's every Fetch makes a new one).
	it, err := cons.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		// What was pending may have gone (a key updated again, limits):
		// a pass that hears nothing for a while ends, and the next one
		// goes on from the cursor.
		nctx, cancel := context.WithTimeout(ctx, passIdle)
		m, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if nctx.Err() != nil {
				return nil
			}
			return err
		}
		md, err := m.Metadata()
		if err != nil {
			continue
		}
		s.saw(region, strings.TrimPrefix(m.Subject(), prefix), md, m.Headers())
		if md.NumPending == 0 || md.Sequence.Stream >= last {
			return nil
		}
	}
}

// passIdle ends a sweep pass that receives nothing for that long.
const passIdle = 2 * time.Second

// saw records one write of sid's record: a deleted or settled record is
// forgotten, any other is due once it is old enough.
func (s *staleScan) saw(region, sid string, md *jetstream.MsgMetadata, hdr nats.Header) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cursor[region] = max(s.cursor[region], md.Sequence.Stream)
	op := hdr.Get(kvOperation)
	if op == "DEL" || op == "PURGE" || hdr.Get(HeaderSettled) != "" {
		delete(s.written, sid)
		return
	}
	s.written[sid] = md.Timestamp
}

// kvOperation is the header of a KV delete or purge marker.
const kvOperation = "KV-Operation"

// due lists the sessions last written before cutoff, in order.
func (s *staleScan) due(cutoff time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for sid, at := range s.written {
		if at.Before(cutoff) {
			out = append(out, sid)
		}
	}
	slices.Sort(out)
	return out
}

// settled forgets sid until its record is written again.
func (s *staleScan) settled(sid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.written, sid)
}

// tracked is the number of sessions remembered.
func (s *staleScan) tracked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.written)
}

// settledRecord reports whether rec needs no wake: its run ended or waits
// on a human, and nothing is left to publish.
func settledRecord(rec turn.Record) bool {
	return (rec.State.Terminal() || rec.State == agent.StateFunctionAwaitingApproval) && len(rec.Outbox) == 0
}

// foreignRecord says why rec, stored under key, cannot be a record this
// package wrote (another client put it there): it names another session
// or none, or a parked call no approval key can name. The sweeps skip such
// a record; waking it would fail on its session id, and a sweep that
// failed on it would stop the node's start (`nats kv put iii-turn-state x
// '{}'`) or every later sweep.
func foreignRecord(key string, rec turn.Record) error {
	if rec.SessionID != key {
		return fmt.Errorf("record of session %q stored under key %q", rec.SessionID, key)
	}
	if err := agent.ValidateSessionID(rec.SessionID); err != nil {
		return err
	}
	for _, p := range rec.AwaitingApproval {
		if _, err := subjects.ApprovalKey(rec.SessionID, p.FunctionCallID); err != nil {
			return err
		}
	}
	return nil
}

// resweep wakes the mid-flight sessions whose records are older than stale.
// A copy of the bucket that cannot be followed now is followed from where
// it was at the next sweep; the sessions already known are still checked.
func (o *Orchestrator) resweep(ctx context.Context, stale time.Duration) (int, error) {
	ferr := o.scan.follow(ctx)
	st := o.store()
	now := time.Now()
	cutoff := now.Add(-stale)
	why := "sweep:" + strconv.FormatInt(now.Unix()/int64(max(stale/time.Second, 1)), 36)
	n := 0
	for _, sid := range o.scan.due(cutoff) {
		rec, _, err := st.Load(ctx, sid)
		switch {
		case errors.Is(err, session.ErrNoRecord):
			o.scan.settled(sid)
			continue
		case errors.Is(err, session.ErrCorruptRecord):
			// Forgotten until written again (a reset, a new run):
			// reading it at every sweep would not change it.
			o.logger.Warn("turn record not swept: it does not decode", "key", sid, "error", err)
			o.scan.settled(sid)
			continue
		case err != nil:
			continue // looked at again next time
		case settledRecord(rec):
			o.scan.settled(sid)
			continue
		case rec.UpdatedAtMs > cutoff.UnixMilli():
			continue
		}
		if err := foreignRecord(sid, rec); err != nil {
			// Another client's value: forgotten until written again,
			// rather than failing this sweep and every one after it.
			o.logger.Warn("turn record not swept: not a session's record", "key", sid, "error", err)
			o.scan.settled(sid)
			continue
		}
		if err := o.enqueueWake(ctx, rec, why); err != nil {
			return n, err
		}
		n++
	}
	return n, ferr
}
