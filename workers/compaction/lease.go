package compaction

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/iii-on-nats/iii/engine/wire"
)

// releaseTimeout bounds the release of a lease (after the compaction's
// context may have ended).
const releaseTimeout = 5 * time.Second

// leases takes, renews, releases and waits for the per-session leases of
// [LeaseBucket]. A lease is a key created with a per-key TTL: Create
// fails when the key exists, so one holder at a time; a holder that
// crashes stops renewing and the server removes the key when its TTL runs
// out.
type leases struct {
	kv      jetstream.KeyValue
	js      jetstream.JetStream
	subject string // the bucket's subject prefix, "$KV.<bucket>."
	ttl     time.Duration
	poll    time.Duration
	log     *slog.Logger
}

// leaseValue is a lease's value: who holds it and why, for operators.
type leaseValue struct {
	Owner     string `json:"owner"`
	Reason    Reason `json:"reason,omitempty"`
	StartedAt int64  `json:"started_at_ms"`
}

// lease is a held lease.
type lease struct {
	ls    *leases
	key   string
	owner string
	value []byte

	mu  sync.Mutex
	rev uint64

	stop chan struct{}
	done chan struct{}
}

// acquireAttempts bounds the Creates of one acquire that fail while the
// key turns out free when read.
const acquireAttempts = 5

// acquire takes the lease of key. When another holder has it, it answers
// a nil lease and the holder's lease value (its owner token for
// [leases.wait], its start).
func (ls *leases) acquire(ctx context.Context, key string, reason Reason) (*lease, leaseValue, error) {
	owner := nuid.Next()
	value, err := json.Marshal(leaseValue{Owner: owner, Reason: reason, StartedAt: time.Now().UnixMilli()})
	if err != nil {
		return nil, leaseValue{}, wire.Wrap(wire.CodeInternal, err, "encode lease")
	}
	for attempt := 1; ; attempt++ {
		rev, err := ls.kv.Create(ctx, key, value, jetstream.KeyTTL(ls.ttl))
		if err == nil {
			return &lease{ls: ls, key: key, owner: owner, value: value, rev: rev}, leaseValue{}, nil
		}
		if !keyExists(err) {
			return nil, leaseValue{}, busErr(ctx, err, "take the compaction lease of %s", key)
		}
		holder, held, err := ls.holder(ctx, key)
		if err != nil {
			return nil, leaseValue{}, err
		}
		if held {
			return nil, holder, nil
		}
		// Released between Create and Get, or (in a replicated bucket)
		// another Create still in flight that the read does not show
		// yet: try again in a moment.
		if attempt == acquireAttempts {
			return nil, leaseValue{}, wire.Errorf(wire.CodeUnavailable, "the compaction lease of %s keeps changing hands", key)
		}
		t := time.NewTimer(ls.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, leaseValue{}, busErr(ctx, ctx.Err(), "take the compaction lease of %s", key)
		case <-t.C:
		}
	}
}

// keyExists reports whether a Create failed because someone else wrote
// the key first. Create wraps [jetstream.ErrKeyExists] around its first
// attempt's failure only: over a key whose last entry is a delete or
// purge marker (every released or expired lease, for a minute) it
// retries at the marker's revision and answers that attempt's "wrong
// last sequence" as it is, which a replicated bucket reports as code
// 10164, not the 10071 ErrKeyExists matches.
func keyExists(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// holder reads key's lease; held is false when there is none.
func (ls *leases) holder(ctx context.Context, key string) (v leaseValue, held bool, err error) {
	e, err := ls.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return leaseValue{}, false, nil
	}
	if err != nil {
		return leaseValue{}, false, busErr(ctx, err, "read the compaction lease of %s", key)
	}
	_ = json.Unmarshal(e.Value(), &v) // a foreign value is still a lease
	return v, true, nil
}

// wait returns once the lease that owner held on key is gone: released,
// expired, or taken by someone else (which means owner's compaction
// ended). It watches the key and, in case an update is missed, reads it
// every poll interval.
func (ls *leases) wait(ctx context.Context, key, owner string) error {
	w, err := ls.kv.Watch(ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		return busErr(ctx, err, "watch the compaction lease of %s", key)
	}
	defer func() { _ = w.Stop() }()
	updates := w.Updates()
	tick := time.NewTicker(ls.poll)
	defer tick.Stop()
	for {
		cur, held, err := ls.holder(ctx, key)
		switch {
		case err == nil && (!held || cur.Owner != owner):
			return nil
		case err != nil && ctx.Err() != nil:
			return err
		}
		select {
		case <-ctx.Done():
			return busErr(ctx, ctx.Err(), "wait for the compaction of %s", key)
		case _, ok := <-updates:
			if !ok {
				updates = nil
			}
		case <-tick.C:
		}
	}
}

// hold renews the lease every third of its TTL until release, and
// returns a context derived from ctx that ends, with a conflict wrapping
// [ErrLeaseLost], when the lease can no longer be confirmed: another
// holder has it, it is gone, or no renewal succeeded for a whole TTL.
func (l *lease) hold(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(l.done)
		tick := time.NewTicker(l.ls.ttl / 3)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-l.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			ok, lost := l.renew(ctx)
			switch {
			case ok:
				last = time.Now()
			case lost || time.Since(last) >= l.ls.ttl:
				l.ls.log.Warn("compaction lease lost", slog.String("session_id", l.key))
				cancel(wire.Wrap(wire.CodeConflict, ErrLeaseLost, "session %s", l.key))
				return
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// renew extends the lease's TTL: a publish of the same value on the key's
// subject, expecting the revision it holds. lost is set when the key is
// gone or someone else's.
func (l *lease) renew(ctx context.Context) (ok, lost bool) {
	ctx, cancel := context.WithTimeout(ctx, l.ls.ttl/3)
	defer cancel()
	l.mu.Lock()
	rev := l.rev
	l.mu.Unlock()
	msg := nats.NewMsg(l.ls.subject + l.key)
	msg.Data = l.value
	ack, err := l.ls.js.PublishMsg(ctx, msg,
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(l.ls.ttl))
	if err == nil {
		l.mu.Lock()
		l.rev = ack.Sequence
		l.mu.Unlock()
		return true, false
	}
	cur, held, herr := l.ls.holder(ctx, l.key)
	if herr != nil {
		return false, false // unknown: retry at the next tick
	}
	return false, !held || cur.Owner != l.owner
}

// release stops the renewals and purges the key, if it is still this
// lease's revision; the purge marker itself expires. A lease that expired
// or was lost is left alone.
func (l *lease) release(ctx context.Context) {
	if l.stop != nil {
		close(l.stop)
		<-l.done
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	l.mu.Lock()
	rev := l.rev
	l.mu.Unlock()
	if err := l.ls.kv.Purge(ctx, l.key, jetstream.LastRevision(rev), jetstream.PurgeTTL(leaseMarkerTTL)); err != nil {
		l.ls.log.Debug("compaction lease not released", slog.String("session_id", l.key), slog.Any("error", err))
	}
}
