package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/nats-io/nats.go/jetstream"
)

// ActorName is the name of the placement actor on every member.
const ActorName = "iii-placement"

// cacheSize bounds the owner cache of [Lookup.Get].
const cacheSize = 4096

// Lookup is a cluster.IdentityLookup whose truth is a JetStream KV bucket:
// a grain is owned by the member that claimed its key, stays there until it
// stops (passivation, drain, shutdown) or its member leaves the topology,
// and is then claimed again by a survivor. Build it with [New], hand it to
// cluster.Configure; the cluster calls Setup, Get, RemovePid and Shutdown.
type Lookup struct {
	opts options
	kv   jetstream.KeyValue
	log  *slog.Logger

	// Set once by Setup, before any other goroutine can see them.
	system    *actor.ActorSystem
	cluster   *cluster.Cluster
	self      record // this member
	placement *actor.PID
	sub       *eventstream.Subscription

	topo  atomic.Pointer[topology]
	local atomic.Int64

	cacheMu sync.Mutex
	cache   map[string]string // key → owner member id, a hint only

	quiet     chan struct{} // closed by the placement actor once drained/stopped and empty
	drainOnce sync.Once
	stopOnce  sync.Once
}

var _ cluster.IdentityLookup = (*Lookup)(nil)

// New binds the ownership bucket (creating it if needed: history 1, file
// storage) and returns a lookup for one cluster member or client. It blocks
// for at most the activation timeout.
func New(js jetstream.JetStream, opts ...Option) (*Lookup, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if js == nil {
		return nil, fmt.Errorf("placement: nil JetStream")
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.activationTimeout)
	defer cancel()
	kv, err := js.KeyValue(ctx, o.bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:         o.bucket,
			Description:    "iii grain ownership: <kind>.<identity> = owner member",
			History:        1,
			Storage:        jetstream.FileStorage,
			Replicas:       o.replicas,
			LimitMarkerTTL: markerTTL,
		})
		if errors.Is(err, jetstream.ErrBucketExists) { // another member was first
			kv, err = js.KeyValue(ctx, o.bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("placement: bucket %s: %w", o.bucket, err)
	}
	return &Lookup{
		opts:  o,
		kv:    kv,
		log:   o.logger,
		cache: make(map[string]string),
		quiet: make(chan struct{}),
	}, nil
}

// Setup is called by cluster.StartMember / StartClient. A member (not a
// client) starts its placement actor; both follow the topology.
func (l *Lookup) Setup(c *cluster.Cluster, _ []string, isClient bool) {
	l.cluster = c
	l.system = c.ActorSystem
	l.self = record{Member: c.ActorSystem.ID, Address: c.ActorSystem.Address()}
	if !isClient {
		pid, err := l.system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor {
			return newPlacementActor(l)
		}), ActorName)
		if err != nil {
			l.log.Error("placement actor not started", slog.Any("error", err))
		} else {
			l.placement = pid
		}
	}
	l.sub = l.system.EventStream.Subscribe(func(ev any) {
		if t, ok := ev.(*cluster.ClusterTopology); ok {
			l.topo.Store(newTopology(t.Members))
		}
	})
}

// Get returns the PID of the grain's one activation, activating it if it
// has none: the owner named in the bucket if it is a live member, otherwise
// the member rendezvous hashing picks among those accepting the kind, which
// claims the key before it spawns. Get retries lost claims and refusals
// within the activation timeout and returns nil on failure (the cluster's
// Request then retries).
func (l *Lookup) Get(ci *cluster.ClusterIdentity) *actor.PID {
	if ci == nil || l.system == nil {
		return nil
	}
	key := Key(ci.Kind, ci.Identity)
	deadline := time.Now().Add(l.opts.activationTimeout)
	var refused map[string]bool
	fresh := false
	for wait := time.Duration(0); ; wait = min(max(2*wait, time.Millisecond), 50*time.Millisecond) {
		if wait > 0 {
			if time.Until(deadline) < wait {
				break
			}
			time.Sleep(wait)
		}
		topo := l.topo.Load()
		target, err := l.target(topo, ci.Kind, ci.Identity, key, fresh, refused, deadline)
		if err != nil {
			l.log.Warn("placement: owner not readable", slog.String("key", key), slog.Any("error", err))
			fresh = true
			continue
		}
		if target == nil {
			// Nobody can take it now (every candidate refused, or no
			// topology yet): start over after a pause.
			refused, fresh = nil, true
			continue
		}
		pid := l.activate(target, ci, time.Until(deadline))
		if pid != nil {
			l.remember(key, target.Id)
			return pid
		}
		l.forget(key)
		if refused == nil {
			refused = make(map[string]bool)
		}
		refused[target.Id] = true
		fresh = true
		if time.Now().After(deadline) {
			break
		}
	}
	l.log.Debug("placement: no activation", slog.String("key", key))
	return nil
}

// target decides which member to ask: the live owner if there is one,
// else the rendezvous pick among accepting members that did not refuse.
func (l *Lookup) target(topo *topology, kind, identity, key string, fresh bool, refused map[string]bool, deadline time.Time) (*cluster.Member, error) {
	owner := ""
	if !fresh {
		owner = l.cached(key)
	}
	if topo.member(owner) == nil { // no cached owner, or it left: ask the bucket
		owner = ""
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		e, err := l.kv.Get(ctx, key)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return nil, err
		default:
			if r, err := decodeRecord(e.Value()); err == nil {
				owner = r.Member
			}
		}
	}
	if m := topo.member(owner); m != nil {
		// A live owner that refused is releasing the key (drain): wait for
		// the release rather than race it.
		if refused[owner] {
			return nil, nil
		}
		return m, nil
	}
	var prefer func(string) bool
	if l.opts.preferred != nil {
		prefer = func(memberID string) bool { return l.opts.preferred(memberID, kind, identity) }
	}
	return topo.pick(kind, key, l.opts.accepting, refused, prefer), nil
}

// activate asks member m's placement actor for the grain's PID.
func (l *Lookup) activate(m *cluster.Member, ci *cluster.ClusterIdentity, timeout time.Duration) *actor.PID {
	if timeout <= 0 {
		return nil
	}
	to := actor.NewPID(m.Address(), ActorName)
	res, err := l.system.Root.RequestFuture(to, &cluster.ActivationRequest{ClusterIdentity: ci}, timeout).Result()
	if err != nil {
		l.log.Debug("placement: activation request failed", slog.String("member", m.Id), slog.Any("error", err))
		return nil
	}
	if r, ok := res.(*cluster.ActivationResponse); ok && !r.Failed {
		return r.Pid
	}
	return nil
}

// RemovePid forgets a PID the cluster found dead.
func (l *Lookup) RemovePid(ci *cluster.ClusterIdentity, pid *actor.PID) {
	if ci == nil {
		return
	}
	l.forget(Key(ci.Kind, ci.Identity))
	if l.cluster != nil && pid != nil {
		l.cluster.PidCache.RemoveByValue(ci.Identity, ci.Kind, pid)
	}
}

// Drain stops this member taking new activations, sends the drain message
// (see [WithDrainMessage]) to every local grain and waits until all of them
// stopped and released their keys, or ctx ends. Grains then re-activate on
// other members at their next call. There is no undo: drain precedes
// shutdown.
func (l *Lookup) Drain(ctx context.Context) error {
	if l.placement == nil {
		return ErrNotMember
	}
	l.drainOnce.Do(func() { l.system.Root.Send(l.placement, drainCmd{}) })
	select {
	case <-l.quiet:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("placement: drain: %d grains still active: %w", l.Local(), ctx.Err())
	}
}

// Shutdown poisons the local grains, releases their keys and stops the
// placement actor; it waits at most twice the activation timeout. The
// cluster calls it on a graceful shutdown (twice: it is idempotent).
func (l *Lookup) Shutdown() {
	l.stopOnce.Do(func() {
		if l.sub != nil {
			l.system.EventStream.Unsubscribe(l.sub)
		}
		if l.placement == nil {
			return
		}
		l.system.Root.Send(l.placement, stopCmd{})
		select {
		case <-l.quiet:
		case <-time.After(2 * l.opts.activationTimeout):
			l.log.Warn("placement: shutdown with grains still active", slog.Int("grains", l.Local()))
		}
		if err := l.system.Root.StopFuture(l.placement).Wait(); err != nil {
			l.log.Warn("placement: actor stop", slog.Any("error", err))
		}
	})
}

// Local returns the number of grains activated on this member.
func (l *Lookup) Local() int { return int(l.local.Load()) }

func (l *Lookup) cached(key string) string {
	l.cacheMu.Lock()
	defer l.cacheMu.Unlock()
	return l.cache[key]
}

func (l *Lookup) remember(key, member string) {
	l.cacheMu.Lock()
	defer l.cacheMu.Unlock()
	if _, ok := l.cache[key]; !ok && len(l.cache) >= cacheSize {
		for k := range l.cache { // evict one arbitrary entry
			delete(l.cache, k)
			break
		}
	}
	l.cache[key] = member
}

func (l *Lookup) forget(key string) {
	l.cacheMu.Lock()
	defer l.cacheMu.Unlock()
	delete(l.cache, key)
}
