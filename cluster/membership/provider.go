package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster/region"
	"github.com/iii-on-nats/iii/engine"
)

// Provider is a proto.actor cluster provider whose membership lives in a
// JetStream KV bucket. Create it with [New], hand it to cluster.Configure,
// and let the cluster call StartMember/StartClient and Shutdown.
type Provider struct {
	js   jetstream.JetStream
	opts options
	log  *slog.Logger

	mu       sync.Mutex // guards the fields below
	state    int
	kv       jetstream.KeyValue
	key      string // own entry's key; "" for a client
	self     Entry  // own entry (member only)
	view     *view
	cancel   context.CancelFunc
	watcher  jetstream.KeyWatcher
	synced   chan struct{} // closed after the watch's initial values
	expelled chan struct{}
	rewrite  chan struct{} // asks the heartbeat loop to write at once
	ttl      time.Duration // the bucket's
	putWait  time.Duration

	// writeMu serialises the writes of the own entry, so that no heartbeat
	// lands after the graceful delete. writing is false once heartbeats
	// must stop.
	writeMu sync.Mutex
	writing bool

	wg sync.WaitGroup
}

const (
	stateIdle = iota
	stateStarting
	stateRunning
	stateStopped
)

// var _ guards the interface at compile time.
var _ cluster.ClusterProvider = (*Provider)(nil)

// New returns a provider that keeps its members in a KV bucket of js.
// Nothing touches NATS until StartMember or StartClient.
func New(js jetstream.JetStream, opts ...Option) (*Provider, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", ErrInvalidOption)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return &Provider{js: js, opts: o, log: o.logger, expelled: make(chan struct{}), rewrite: make(chan struct{}, 1)}, nil
}

// StartMember registers c's member: it writes the entry
// "<c.Config.Name>.<member id>" at once and every heartbeat, and watches
// the cluster's entries, publishing the live set to c.MemberList. It
// returns when the first topology is published.
func (p *Provider) StartMember(c *cluster.Cluster) error {
	if err := validateClusterName(c.Config.Name); err != nil {
		return err
	}
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return fmt.Errorf("membership: member address: %w", err)
	}
	kinds := c.GetClusterKinds()
	slices.Sort(kinds)
	self := Entry{
		ID:      c.ActorSystem.ID,
		Host:    host,
		Port:    port,
		Kinds:   kinds,
		Status:  StatusUp,
		Started: time.Now().UTC(),
	}
	return p.start(c.Config.Name, &self, c.MemberList.UpdateClusterTopology)
}

// StartClient watches the cluster's entries and publishes the live set to
// c.MemberList, without registering c.
func (p *Provider) StartClient(c *cluster.Cluster) error {
	if err := validateClusterName(c.Config.Name); err != nil {
		return err
	}
	return p.start(c.Config.Name, nil, c.MemberList.UpdateClusterTopology)
}

// start runs a member (self != nil; its Meta defaults to WithMeta's) or a
// client. publish receives every topology change: proto.actor's
// MemberList.UpdateClusterTopology in production, a recorder in tests.
func (p *Provider) start(clusterName string, self *Entry, publish func(cluster.Members)) (err error) {
	if err := validateClusterName(clusterName); err != nil {
		return err
	}
	var key string
	if self != nil {
		s := self.clone()
		if s.Meta == nil {
			s.Meta = maps.Clone(p.opts.meta)
		}
		self = &s
		if key, err = Key(clusterName, self.ID); err != nil {
			return err
		}
		if _, err := self.encode(); err != nil {
			return err
		}
	}
	p.mu.Lock()
	if p.state != stateIdle {
		p.mu.Unlock()
		return ErrAlreadyStarted
	}
	p.state = stateStarting
	p.mu.Unlock()
	defer func() {
		if err != nil {
			p.mu.Lock()
			p.state = stateIdle
			p.mu.Unlock()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	kv, ttl, err := p.bucket(ctx, p.opts.ttl)
	if err != nil {
		return err
	}
	heartbeat := p.opts.heartbeat
	if ttl < 3*heartbeat {
		heartbeat = ttl / 3
		p.log.Warn("membership: bucket TTL is short for the heartbeat; heartbeating faster",
			"bucket", p.opts.bucket, "ttl", ttl, "heartbeat", heartbeat)
	}

	p.mu.Lock()
	p.kv = kv
	p.key = key
	p.ttl = ttl
	p.putWait = ttl / 3
	p.view = newView(clusterName, "", ttl)
	p.synced = make(chan struct{})
	if self != nil {
		p.self = self.clone()
		p.view.self = self.ID
	}
	p.mu.Unlock()

	if self != nil {
		p.writeMu.Lock()
		p.writing = true
		p.writeMu.Unlock()
		// The first entry is tried again while the bucket's stream has no
		// leader to answer (a cluster whose nodes restart one after
		// another): that failed the node's start (TestClusterChaos).
		if err := engine.Retry(ctx, bucketAttempt, p.writeSelf, func(err error) bool {
			return engine.TransientJS(err) || errors.Is(err, jetstream.ErrNoStreamResponse)
		}); err != nil {
			return err
		}
	}
	wctx, wcancel := context.WithCancel(context.Background())
	filter := clusterName + ".*"
	w, err := p.openWatch(wctx, kv, filter)
	if err != nil {
		wcancel()
		p.abandon(self != nil)
		return fmt.Errorf("membership: watch %s: %w", p.opts.bucket, err)
	}
	p.mu.Lock()
	p.cancel = wcancel
	p.watcher = w
	p.state = stateRunning
	synced := p.synced
	p.mu.Unlock()

	p.wg.Add(1)
	go p.watch(wctx, filter, w, publish)
	if self != nil {
		p.wg.Add(1)
		go p.heartbeat(wctx, heartbeat)
	}
	select {
	case <-synced:
		p.log.Debug("membership: started", "cluster", clusterName, "member", key, "ttl", ttl, "heartbeat", heartbeat)
		return nil
	case <-ctx.Done():
		_ = p.stop(self != nil)
		p.mu.Lock()
		p.state = stateIdle
		p.mu.Unlock()
		return fmt.Errorf("membership: initial members of %s: %w", p.opts.bucket, ctx.Err())
	}
}

// abandon undoes the first write of a start that failed later.
func (p *Provider) abandon(member bool) {
	p.writeMu.Lock()
	p.writing = false
	p.writeMu.Unlock()
	if member {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		_ = p.kv.Delete(ctx, p.key)
	}
}

// MetaMemberTTL is the membership bucket's metadata key that holds the
// member TTL of the cluster (a Go duration), set by the provider that
// creates the bucket. Every member and client sweeps with it, whatever its
// own [WithTTL]: members that judged each other by different lifetimes
// would sweep the ones that heartbeat slower than they expect.
const MetaMemberTTL = "iii.member_ttl"

// openBucket is one try of [Provider.bucket]: open or create the bucket
// (for member lifetime ttl) and read its status.
func (p *Provider) openBucket(ctx context.Context, ttl time.Duration) (jetstream.KeyValue, jetstream.KeyValueStatus, error) {
	name := p.opts.bucket
	b, err := p.js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		b, err = p.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:         name,
			Description:    "iii cluster membership (cluster/membership)",
			History:        1,
			TTL:            bucketTTL(ttl),
			LimitMarkerTTL: bucketTTL(ttl),
			Storage:        jetstream.MemoryStorage,
			Replicas:       p.opts.replicas,
			Metadata: map[string]string{
				// Every member writes its entry again each heartbeat: a
				// region takeover may replace a bucket re-created
				// meanwhile.
				region.MetaRewritten: "membership heartbeats",
				MetaMemberTTL:        ttl.String(),
			},
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			// Another member created it in the meantime.
			b, err = p.js.KeyValue(ctx, name)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	st, err := b.Status(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("status: %w", err)
	}
	return b, st, nil
}

// bucket opens the membership bucket, creating it for member lifetime ttl
// if missing, and returns the cluster's member TTL: the one the bucket
// holds ([MetaMemberTTL]; the first creator's wins), else ttl (a bucket
// made by hand or by an older build). A cluster still forming answers
// nothing or "not ready" for a while: each try is bounded (bucketAttempt)
// and tried again, until ctx ends, while the error is one that goes away
// by itself (engine.TransientJS).
func (p *Provider) bucket(ctx context.Context, ttl time.Duration) (jetstream.KeyValue, time.Duration, error) {
	name := p.opts.bucket
	var (
		kv     jetstream.KeyValue
		st     jetstream.KeyValueStatus
		warned bool
	)
	err := engine.Retry(ctx, bucketAttempt, func(ctx context.Context) error {
		var err error
		kv, st, err = p.openBucket(ctx, ttl)
		if err != nil && !warned && engine.TransientJS(err) {
			warned = true
			p.log.Warn("membership: JetStream is not ready yet (a cluster still forming?); trying again", "bucket", name, "error", err)
		}
		return err
	}, engine.TransientJS)
	if err != nil {
		return nil, 0, fmt.Errorf("membership: bucket %s: %w", name, err)
	}
	if s, ok := st.Metadata()[MetaMemberTTL]; ok {
		d, err := time.ParseDuration(s)
		switch {
		case err != nil || d < MinTTL:
			p.log.Warn("membership: the bucket's member TTL is not valid; using the configured one",
				"bucket", name, "value", s, "member_ttl", ttl)
		case d != ttl:
			p.log.Info("membership: the bucket's member TTL wins over the configured one",
				"bucket", name, "member_ttl", d, "configured", ttl)
			ttl = d
		}
	}
	if t := st.TTL(); t > 0 && t < 3*ttl {
		p.log.Warn("membership: the bucket's TTL is short: a NATS outage longer than it drops every member",
			"bucket", name, "bucket_ttl", t, "member_ttl", ttl)
	}
	return kv, ttl, nil
}

// bucketTTL is the membership bucket's own TTL for member lifetime ttl. A
// crashed member is detected by the view's sweep after ttl, measured in
// server time between puts; the bucket's expiry only collects entries
// nobody swept. It is long on purpose: the stream leader expires entries
// by its clock, and after an election (the node holding the leader died)
// it would expire every member whose heartbeats could not land meanwhile.
func bucketTTL(ttl time.Duration) time.Duration {
	return max(12*ttl, time.Minute)
}

// writeSelf puts the own entry; ctx bounds it (p.putWait if it has no
// deadline).
func (p *Provider) writeSelf(ctx context.Context) error {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	if !p.writing {
		return nil
	}
	p.mu.Lock()
	e, key, kv, wait := p.self.clone(), p.key, p.kv, p.putWait
	p.mu.Unlock()
	data, err := e.encode()
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	if _, err := kv.Put(ctx, key, data); err != nil {
		return fmt.Errorf("membership: put %s: %w", key, err)
	}
	return nil
}

// heartbeat rewrites the own entry every interval until ctx ends. A failed
// put is logged and retried at the next tick: the entry lives for a TTL,
// so a few misses are harmless.
func (p *Provider) heartbeat(ctx context.Context, interval time.Duration) {
	defer p.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.rewrite: // the bucket expired the own entry
		case <-t.C:
		}
		err := p.writeSelf(ctx)
		if err == nil || ctx.Err() != nil {
			continue
		}
		p.log.Warn("membership: heartbeat failed", "key", p.key, "error", err)
		// The bucket may be gone (memory storage does not survive a
		// restart of a single NATS server; a put then times out retrying
		// "no responders"): look it up, create it again if so, and put at
		// once.
		p.recreate(ctx)
	}
}

// recreate opens (creating if missing) the bucket again and rewrites the
// own entry at once.
func (p *Provider) recreate(ctx context.Context) {
	bctx, cancel := context.WithTimeout(ctx, p.putWait)
	defer cancel()
	p.mu.Lock()
	old, ttl := p.kv, p.ttl
	p.mu.Unlock()
	if _, err := old.Status(bctx); !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return // there, or NATS unreachable: the next tick tries again
	}
	// Created again with the member TTL this member runs with, so that
	// members that start later agree with the running ones.
	kv, _, err := p.bucket(bctx, ttl)
	if err != nil {
		p.log.Warn("membership: bucket not recreated", "bucket", p.opts.bucket, "error", err)
		return
	}
	p.mu.Lock()
	p.kv = kv
	p.mu.Unlock()
	if err := p.writeSelf(bctx); err != nil {
		p.log.Warn("membership: heartbeat failed", "key", p.key, "error", err)
		return
	}
	p.log.Info("membership: bucket recreated", "bucket", p.opts.bucket)
}

// openWatch watches the entries of filter in kv. The watch is opened
// again as soon as the connection reconnects (engine.WatchKV): the server
// reconnected to may have lost the watch's consumer, which nats.go alone
// notices only after ≈ 20 s of missed heartbeats, and the view would lag
// joins, leaves and draining marks that long. It resumes after the last
// update seen, so a member that left meanwhile is seen to leave.
func (p *Provider) openWatch(ctx context.Context, kv jetstream.KeyValue, filter string) (jetstream.KeyWatcher, error) {
	return engine.WatchKV(ctx, p.js.Conn(), kv, engine.KVWatchConfig{Keys: []string{filter}})
}

// watch folds the watcher's updates into the view and publishes the live
// set after the initial values and whenever members join or leave, until
// ctx ends.
//
// A watch that ends by itself (the bucket was lost or created again in a
// restart of a single NATS server) is replaced by a new one at once. One
// that falls silent for a TTL is replaced too: a live member's own
// heartbeats alone arrive every heartbeat, so silence means the watch is
// broken without a reconnect to tell (the node holding its consumer died
// while the connection's server stayed up). The new watch's initial
// values refresh the view; a member missing from them is not dropped for
// that (the stale sweep or an expiry marker does it).
func (p *Provider) watch(ctx context.Context, filter string, w jetstream.KeyWatcher, publish func(cluster.Members)) {
	defer p.wg.Done()
	p.mu.Lock()
	silence := p.ttl
	p.mu.Unlock()
	idle := time.NewTimer(silence)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			drain(w)
			return
		case u, ok := <-w.Updates():
			if ok {
				idle.Reset(silence)
				if u == nil {
					p.complete(ctx)
				}
				p.handle(u, publish)
				continue
			}
			if ctx.Err() != nil {
				return // stopped
			}
			var reason error
			if kw, isKV := w.(*engine.KVWatch); isKV {
				reason = kw.Err()
			}
			p.log.Warn("membership: watch ended; watching again", "bucket", p.opts.bucket, "error", reason)
		case <-idle.C:
			// Expected for a client of a cluster with no members.
			level := slog.LevelWarn
			if len(p.Members()) == 0 {
				level = slog.LevelDebug
			}
			p.log.Log(ctx, level, "membership: watch silent for a TTL; watching again", "bucket", p.opts.bucket, "ttl", silence)
		}
		if w = p.rewatch(ctx, filter, w); w == nil {
			return
		}
		idle.Reset(silence)
	}
}

// complete folds into the view the live entries that the first watch's
// initial values missed: keys rewritten as the watch began can come after
// its "initial values done" marker (see liveEntries), and a first
// topology without a live member would let placement take over that
// member's grains. Later watches need none: a member missing from their
// initial values is not dropped for that. A read that fails is logged, and
// a member it missed joins with its next heartbeat. Called on the watch's
// goroutine, the view's only writer.
func (p *Provider) complete(ctx context.Context) {
	p.mu.Lock()
	if p.view.synced || p.state == stateStopped {
		p.mu.Unlock()
		return
	}
	kv, v := p.kv, p.view
	known := make(map[string]bool, len(v.members)+len(v.gone))
	for id := range v.members {
		known[v.prefix+id] = true
	}
	for id := range v.gone {
		known[v.prefix+id] = true
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	kves, err := liveEntries(ctx, p.js, kv, p.opts.bucket, strings.TrimSuffix(v.prefix, "."), func(key string) bool { return known[key] })
	if err != nil {
		p.log.Warn("membership: first members not completed; a member being rewritten joins with its next heartbeat", "bucket", p.opts.bucket, "error", err)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, kve := range kves {
		if _, err := v.applyRev(kve.Key(), jetstream.KeyValuePut, kve.Value(), kve.Created(), kve.Revision()); err != nil {
			p.log.Warn("membership: ignoring entry", "key", kve.Key(), "error", err)
		}
	}
}

// drain reads a stopped watcher until it closes, so that its delivery
// goroutine, which may be blocked on the full channel, can end.
func drain(w jetstream.KeyWatcher) {
	for range w.Updates() {
	}
}

// rewatchBackoff is the first pause between tries of [Provider.rewatch];
// it doubles up to a third of the TTL. A bucket lost in a restart is back
// as soon as a member's heartbeat has created it again.
const rewatchBackoff = 100 * time.Millisecond

// rewatch replaces watcher old by a new one, retrying with backoff; nil
// when ctx ends first.
func (p *Provider) rewatch(ctx context.Context, filter string, old jetstream.KeyWatcher) jetstream.KeyWatcher {
	_ = old.Stop()
	go drain(old)
	pause := rewatchBackoff
	for {
		p.mu.Lock()
		kv, most := p.kv, p.ttl/3
		p.mu.Unlock()
		w, err := p.openWatch(ctx, kv, filter)
		if err == nil {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.state == stateStopped {
				// stop() already stopped the previous watcher.
				_ = w.Stop()
				go drain(w)
				return nil
			}
			p.watcher = w
			return w
		}
		if ctx.Err() != nil {
			return nil
		}
		p.log.Warn("membership: watch failed", "bucket", p.opts.bucket, "error", err, "retry_in", pause)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		pause = min(2*pause, max(most, rewatchBackoff))
	}
}

// handle folds one update (nil: the end of the initial values) into the
// view, then publishes and reacts to an expulsion as needed.
func (p *Provider) handle(u jetstream.KeyValueEntry, publish func(cluster.Members)) {
	p.mu.Lock()
	if p.state == stateStopped {
		p.mu.Unlock()
		return
	}
	var c change
	first := false
	if u == nil {
		first = !p.view.synced
		p.view.synced = true
	} else {
		cu, err := p.view.applyRev(u.Key(), u.Operation(), u.Value(), u.Created(), u.Revision())
		if err != nil {
			p.log.Warn("membership: ignoring entry", "key", u.Key(), "error", err)
		}
		c.merge(cu)
		c.merge(p.view.sweep())
	}
	var members cluster.Members
	publishNow := p.view.synced && (first || c.topology)
	if publishNow {
		members = p.view.topology()
	}
	synced := p.synced
	p.mu.Unlock()

	if c.selfGone {
		p.expel()
	} else if c.selfExpired {
		p.log.Warn("membership: own entry expired (its heartbeats could not land for the bucket's TTL); writing it again", "key", p.key)
		select {
		case p.rewrite <- struct{}{}:
		default:
		}
	}
	if len(c.swept) > 0 {
		p.deleteSwept(c.swept)
	}
	if publishNow {
		// Outside p.mu: proto.actor publishes the topology on the event
		// stream, whose subscribers may call Accepting.
		publish(members)
	}
	if first {
		close(synced)
	}
}

// expel reacts to the own entry going away while running: the others have
// dropped this member and proto.actor blocks its id for good, so
// heartbeats stop (a zombie entry would only mislead `iii cluster members`)
// and Expelled is closed. The node must restart with a new ActorSystem.
func (p *Provider) expel() {
	p.writeMu.Lock()
	p.writing = false
	p.writeMu.Unlock()
	select {
	case <-p.expelled:
	default:
		close(p.expelled)
		p.log.Error("membership: own entry was deleted; this member is out of the cluster for good, restart it with a new actor system", "key", p.key)
	}
}

// Shutdown stops heartbeats and the watch; graceful also deletes the own
// entry, so the other members drop this one at once instead of after a
// TTL. It is idempotent.
//
// cluster.Cluster.Shutdown calls it only when graceful: after
// Cluster.Shutdown(false) call Provider.Shutdown(false) yourself, or the
// heartbeats go on.
func (p *Provider) Shutdown(graceful bool) error {
	return p.stop(graceful)
}

// stop ends heartbeats and the watch, then deletes the own entry if asked
// (and if it is a member).
func (p *Provider) stop(deleteEntry bool) error {
	p.mu.Lock()
	if p.state != stateRunning {
		p.mu.Unlock()
		return nil
	}
	p.state = stateStopped
	cancel, w, kv, key := p.cancel, p.watcher, p.kv, p.key
	p.mu.Unlock()

	p.writeMu.Lock() // waits for a put in flight
	p.writing = false
	p.writeMu.Unlock()
	cancel()
	_ = w.Stop() // the watch goroutine drains it
	p.wg.Wait()
	if !deleteEntry || key == "" {
		return nil
	}
	ctx, cancelDel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancelDel()
	if err := kv.Delete(ctx, key); err != nil {
		return fmt.Errorf("membership: delete %s: %w", key, err)
	}
	return nil
}

// Drain marks the own entry "draining": the member stays in the topology
// and keeps hosting its grains, but [Provider.Accepting] reports false for
// it, so placement puts no new grains there. It returns once the entry is
// written; a ctx without deadline is bounded by a third of the TTL.
func (p *Provider) Drain(ctx context.Context) error {
	p.mu.Lock()
	if p.state != stateRunning || p.key == "" {
		p.mu.Unlock()
		return ErrNotRunning
	}
	p.self.Status = StatusDraining
	if m, ok := p.view.members[p.self.ID]; ok {
		// This member's own placement stops at once; the others follow
		// when the write reaches them.
		m.Status = StatusDraining
	}
	p.mu.Unlock()
	select {
	case <-p.expelled:
		return ErrExpelled
	default:
	}
	return p.writeSelf(ctx)
}

// Accepting reports whether member memberID is live, up (not draining) and
// hosts kind, in this provider's current view.
func (p *Provider) Accepting(memberID, kind string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.view != nil && p.view.synced && p.view.accepting(memberID, kind)
}

// MetaOf is the value of key in the meta ([WithMeta]) of live member
// memberID, and whether the member is known. Fast and safe for concurrent
// use (placement calls it per pick).
func (p *Provider) MetaOf(memberID, key string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.view == nil {
		return "", false
	}
	m, ok := p.view.members[memberID]
	if !ok {
		return "", false
	}
	return m.Meta[key], true
}

// Members is the current live view (draining members included), sorted by
// id. It never reads proto.actor's member list.
func (p *Provider) Members() []Entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.view == nil {
		return nil
	}
	return p.view.entries()
}

// Expelled is closed when this member's own entry is deleted while it
// runs (another member swept it: it was cut off while the others
// heartbeat, or someone deleted it; an expiry by the bucket's TTL does
// not count, the entry is written again). The other members have then dropped it, and proto.actor
// never lets the same member id back: shut the cluster down and start a
// new ActorSystem. For a client it is never closed.
func (p *Provider) Expelled() <-chan struct{} { return p.expelled }

// deleteSwept deletes the keys of members the sweep dropped (a member
// does; a client only watches), each only if it was not written since.
func (p *Provider) deleteSwept(swept map[string]uint64) {
	p.mu.Lock()
	kv, member, prefix := p.kv, p.view.self != "", p.view.prefix
	p.mu.Unlock()
	if !member || kv == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for id, rev := range swept {
			var opts []jetstream.KVDeleteOpt
			if rev > 0 {
				opts = append(opts, jetstream.LastRevision(rev))
			}
			if err := kv.Delete(ctx, prefix+id, opts...); err == nil {
				p.log.Info("membership: member presumed dead, entry deleted", "member", id)
			}
		}
	}()
}
