package placement

import (
	"context"
	"errors"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/nats-io/nats.go/jetstream"
)

// Messages of the placement actor to itself (local only, never on the wire).
type (
	drainCmd struct{}
	stopCmd  struct{}
	// claimed reports a claim: rev > 0 when this member now owns the key.
	claimed struct {
		key string
		rev uint64
	}
	// released reports that a key's release is done (or failed).
	released struct{ key string }
)

type grainState int

const (
	claiming  grainState = iota // KV claim in flight; requests wait
	active                      // spawned; requests get pid
	releasing                   // stopped; KV release in flight; requests wait
)

// grain is the placement actor's view of one identity.
type grain struct {
	ci      *cluster.ClusterIdentity
	state   grainState
	pid     *actor.PID
	rev     uint64       // revision of our claim: the fencing token
	waiters []*actor.PID // senders of ActivationRequests awaiting an answer
}

// placementActor owns every local activation. KV operations run on
// goroutines and report back as messages, so the mailbox never blocks on
// JetStream and concurrent requests for one identity wait on one claim.
type placementActor struct {
	l        *Lookup
	grains   map[string]*grain // by key
	byPID    map[string]string // PID.Id → key (PIDs compared by id, never by pointer)
	draining bool              // Drain or Shutdown: no new activations
	stopping bool              // Shutdown: poison what is left
	quiet    bool              // l.quiet closed
}

func newPlacementActor(l *Lookup) *placementActor {
	return &placementActor{l: l, grains: map[string]*grain{}, byPID: map[string]string{}}
}

// Receive implements actor.Actor.
func (p *placementActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *cluster.ActivationRequest:
		p.onActivation(ctx, msg)
	case claimed:
		p.onClaimed(ctx, msg)
	case *actor.Terminated:
		p.onTerminated(ctx, msg)
	case released:
		p.onReleased(ctx, msg)
	case drainCmd:
		p.onDrain(ctx, false)
	case stopCmd:
		p.onDrain(ctx, true)
	}
}

func (p *placementActor) onActivation(ctx actor.Context, req *cluster.ActivationRequest) {
	ci := req.GetClusterIdentity()
	if ci == nil {
		p.refuse(ctx, ctx.Sender())
		return
	}
	if _, ok := p.l.cluster.TryGetClusterKind(ci.Kind); !ok {
		p.refuse(ctx, ctx.Sender())
		return
	}
	key := Key(ci.Kind, ci.Identity)
	g := p.grains[key]
	switch {
	case g == nil && p.draining:
		p.refuse(ctx, ctx.Sender())
		// A key of ours with no activation (a release that failed) would
		// keep callers coming back here: let it go.
		go p.l.releaseIfMine(key)
	case g == nil:
		p.grains[key] = &grain{ci: ci, state: claiming, waiters: []*actor.PID{ctx.Sender()}}
		p.claim(ctx, key)
	case g.state == active:
		p.answer(ctx, ctx.Sender(), g.pid)
	default: // claiming, or releasing before claiming again
		g.waiters = append(g.waiters, ctx.Sender())
	}
}

func (p *placementActor) claim(ctx actor.Context, key string) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	go func() {
		rev := p.l.claim(key)
		root.Send(self, claimed{key: key, rev: rev})
	}()
}

func (p *placementActor) release(ctx actor.Context, key string, rev uint64) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	go func() {
		p.l.release(key, rev)
		root.Send(self, released{key: key})
	}()
}

func (p *placementActor) onClaimed(ctx actor.Context, msg claimed) {
	g := p.grains[msg.key]
	if g == nil || g.state != claiming {
		return // cannot happen: a claim is only started for a claiming grain
	}
	waiters := g.waiters
	g.waiters = nil
	switch {
	case msg.rev == 0: // lost or failed: the caller re-reads the owner
		delete(p.grains, msg.key)
		p.refuseAll(ctx, waiters)
		p.checkQuiet()
	case p.draining:
		g.state, g.rev = releasing, msg.rev
		p.refuseAll(ctx, waiters)
		p.release(ctx, msg.key, msg.rev)
	default:
		kind, _ := p.l.cluster.TryGetClusterKind(g.ci.Kind)
		pid := ctx.SpawnPrefix(cluster.WithClusterIdentity(kind.Props, g.ci), g.ci.AsKey())
		kind.Inc()
		g.state, g.pid, g.rev = active, pid, msg.rev
		p.byPID[pid.Id] = msg.key
		p.l.local.Add(1)
		for _, w := range waiters {
			p.answer(ctx, w, pid)
		}
	}
}

func (p *placementActor) onTerminated(ctx actor.Context, msg *actor.Terminated) {
	if msg.Who == nil {
		return
	}
	key, ok := p.byPID[msg.Who.Id]
	if !ok {
		return
	}
	delete(p.byPID, msg.Who.Id)
	g := p.grains[key]
	if kind, ok := p.l.cluster.TryGetClusterKind(g.ci.Kind); ok {
		kind.Dec()
	}
	p.l.local.Add(-1)
	g.state, g.pid = releasing, nil
	p.release(ctx, key, g.rev)
}

func (p *placementActor) onReleased(ctx actor.Context, msg released) {
	g := p.grains[msg.key]
	if g == nil || g.state != releasing {
		return
	}
	if len(g.waiters) > 0 && !p.draining {
		// Calls arrived while the old activation was going away.
		g.state, g.rev = claiming, 0
		p.claim(ctx, msg.key)
		return
	}
	delete(p.grains, msg.key)
	p.refuseAll(ctx, g.waiters)
	p.checkQuiet()
}

func (p *placementActor) onDrain(ctx actor.Context, stop bool) {
	first := !p.draining
	p.draining = true
	if stop && !p.stopping {
		p.stopping = true
		for _, g := range p.grains {
			if g.state == active {
				ctx.Poison(g.pid)
			}
		}
	} else if first && !stop {
		for _, g := range p.grains {
			if g.state != active {
				continue
			}
			if f := p.l.opts.drainMessage; f != nil {
				ctx.Send(g.pid, f())
			} else {
				ctx.Poison(g.pid)
			}
		}
	}
	for _, g := range p.grains { // nobody will be served here any more
		p.refuseAll(ctx, g.waiters)
		g.waiters = nil
	}
	p.checkQuiet()
}

func (p *placementActor) checkQuiet() {
	if p.draining && !p.quiet && len(p.grains) == 0 {
		p.quiet = true
		close(p.l.quiet)
	}
}

func (p *placementActor) answer(ctx actor.Context, to, pid *actor.PID) {
	if to != nil {
		ctx.Send(to, &cluster.ActivationResponse{Pid: pid})
	}
}

func (p *placementActor) refuse(ctx actor.Context, to *actor.PID) {
	if to != nil {
		ctx.Send(to, &cluster.ActivationResponse{Failed: true})
	}
}

func (p *placementActor) refuseAll(ctx actor.Context, to []*actor.PID) {
	for _, w := range to {
		p.refuse(ctx, w)
	}
}

// claim makes this member the owner of key and returns the revision of its
// claim, or 0 when the key belongs to another live member (or on error).
// A missing key is created (tried first: it is the common case, a new or
// passivated grain); a key whose owner left the topology (crash, expired
// membership) or is this member is taken over by compare-and-set on the
// revision read, so of two claimants exactly one wins.
func (l *Lookup) claim(key string) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.activationTimeout)
	defer cancel()
	val := l.self.encode()
	rev, err := l.kv.Create(ctx, key, val)
	if errors.Is(err, jetstream.ErrKeyExists) {
		var e jetstream.KeyValueEntry
		e, err = l.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound): // released meanwhile
			rev, err = l.kv.Create(ctx, key, val)
		case err != nil:
		default:
			r, derr := decodeRecord(e.Value())
			topo := l.topo.Load()
			if topo == nil || derr == nil && r.Member != l.self.Member && topo.member(r.Member) != nil {
				return 0 // a live owner, or no topology yet to tell
			}
			rev, err = l.kv.Update(ctx, key, val, e.Revision())
			if err == nil && derr == nil && r.Member != l.self.Member {
				l.log.Info("placement: grain taken over", slog.String("key", key), slog.String("from", r.Member))
			}
		}
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return 0 // another member won the race
	case err != nil:
		l.log.Warn("placement: claim failed", slog.String("key", key), slog.Any("error", err))
		return 0
	}
	return rev
}

// release removes our claim on key, only if it is still the one at rev: a
// survivor that took the key over is never touched.
func (l *Lookup) release(key string, rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.activationTimeout)
	defer cancel()
	err := l.kv.Purge(ctx, key, jetstream.LastRevision(rev), jetstream.PurgeTTL(markerTTL))
	if apiErr := (*jetstream.APIError)(nil); errors.As(err, &apiErr) && apiErr.ErrorCode == codeTTLDisabled {
		// A bucket created without per-message TTLs (by hand, or by an
		// older build) refuses the marker's TTL: purge without it (the
		// marker then stays, one per key, as History 1 keeps it).
		err = l.kv.Purge(ctx, key, jetstream.LastRevision(rev))
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyExists):
		l.log.Info("placement: key already taken over", slog.String("key", key))
	case err != nil:
		l.log.Warn("placement: release failed", slog.String("key", key), slog.Any("error", err))
	}
}

// releaseIfMine releases key if this member owns it.
func (l *Lookup) releaseIfMine(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.activationTimeout)
	defer cancel()
	e, err := l.kv.Get(ctx, key)
	if err != nil {
		return
	}
	if r, err := decodeRecord(e.Value()); err == nil && r.Member == l.self.Member {
		l.release(key, e.Revision())
	}
}

// codeTTLDisabled is JetStream's "per-message TTL is disabled" (nats-server
// JSMessageTTLDisabledErr).
const codeTTLDisabled jetstream.ErrorCode = 10166
