package orchestrator

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/cluster/membership"
	"github.com/iii-on-nats/iii/cluster/placement"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Settings of a clustered orchestrator (`iii up --cluster` sets them).
const (
	// SettingCluster names the proto.actor cluster of session grains;
	// set, the orchestrator's grain host joins it (membership and grain
	// ownership in JetStream KV), so the nodes share the sessions.
	SettingCluster = "cluster"
	// SettingActorListen is the grain remote's host:port (default
	// 127.0.0.1:0: a free port on loopback).
	SettingActorListen = "actor_listen"
	// SettingActorAdvertise is the address other nodes dial ("" = the
	// listen address).
	SettingActorAdvertise = "actor_advertise"
	// SettingMemberTTL is how long a member that stopped heartbeating
	// stays a member: the time to detect a dead node (default 5s).
	SettingMemberTTL = "member_ttl"
	// SettingDrainTimeout bounds the hand-off of the grains at shutdown
	// (default 10s).
	SettingDrainTimeout = "drain_timeout"
	// SettingNode is this node's name, shown in the membership entry.
	SettingNode = "node"
)

// clusterSettings is what the settings above configure.
type clusterSettings struct {
	name, listen, advertise, node string
	memberTTL                     time.Duration
}

// clusterOption builds the grain host's cluster membership: a membership
// provider and a placement lookup over JetStream KV.
func (o *Orchestrator) clusterOption() (session.Option, <-chan struct{}, error) {
	cs := o.clusterCfg
	js := o.e.JetStream()
	meta := map[string]string{"node": cs.node}
	if r := o.e.Region(); r != "" {
		meta[metaRegion] = r
	}
	mopts := []membership.Option{membership.WithReplicas(o.e.Replicas()), membership.WithLogger(o.logger), membership.WithMeta(meta)}
	if cs.memberTTL > 0 {
		hb := max(cs.memberTTL/5, 100*time.Millisecond)
		mopts = append(mopts, membership.WithTTL(cs.memberTTL), membership.WithHeartbeat(hb))
	}
	prov, err := membership.New(js, mopts...)
	if err != nil {
		return nil, nil, wire.Wrap(wire.CodeUnavailable, err, "cluster membership")
	}
	look, err := placement.New(js, placement.WithReplicas(o.e.Replicas()), placement.WithLogger(o.logger),
		placement.WithAccepting(prov.Accepting), placement.WithDrainMessage(session.DrainMessage),
		placement.WithPreferred(inHomeRegion(prov.MetaOf)))
	if err != nil {
		return nil, nil, wire.Wrap(wire.CodeUnavailable, err, "grain placement")
	}
	nc := o.e.Conn()
	return session.WithCluster(session.Cluster{
		Name:      cs.name,
		Provider:  prov,
		Lookup:    look,
		Listen:    cs.listen,
		Advertise: cs.advertise,
		Publish:   func(subject string, body []byte) error { return nc.Publish(subject, body) },
		Drain:     drainMember(o.logger, prov.Drain, look.Drain),
	}), prov.Expelled(), nil
}

// drainMember is the cluster's drain: mark the member entry draining, then
// hand the grains off. An entry that cannot be marked (a put that timed
// out, a member being expelled) must not skip the hand-off, or Close would
// abandon the grains' calls in flight as a crash does: this member's
// placement refuses new grains either way, and the others stop placing
// here when the entry expires.
func drainMember(log *slog.Logger, mark, handOff func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		merr := mark(ctx)
		if merr != nil {
			log.Warn("membership entry not marked draining; handing the grains off anyway", "error", merr)
		}
		if err := handOff(ctx); err != nil {
			return errors.Join(err, merr)
		}
		return nil
	}
}

// metaRegion is the membership meta key of a member's region.
const metaRegion = "region"

// inHomeRegion is the grain placement preference: a session homed in a
// region ("<region>.<name>") is activated on a member of that region while
// one takes grains; other grains have no preference.
func inHomeRegion(metaOf func(memberID, key string) (string, bool)) func(memberID, kind, identity string) bool {
	return func(memberID, _, identity string) bool {
		home := subjects.SessionRegion(identity)
		if home == "" {
			return false
		}
		r, _ := metaOf(memberID, metaRegion)
		return r == home
	}
}

// rejoinWhen replaces the grain host when this node is dropped from the
// grain cluster: it was cut off from NATS for longer than the member TTL,
// the others presumed it dead, took over its sessions, and proto.actor
// blocks its member id for good. The new host is a new member (a new
// actor system and id); what the old grains still try to write loses its
// compare-and-set.
func (o *Orchestrator) rejoinWhen(expelled <-chan struct{}) {
	select {
	case <-expelled:
	case <-o.stop:
		return
	}
	o.logger.Error("this node was dropped from the grain cluster; rejoining as a new member")
	for backoff := time.Second; ; backoff = min(2*backoff, 30*time.Second) {
		select {
		case <-o.stop:
			return
		default:
		}
		host, err := o.newHost()
		if err == nil {
			old := o.host.Swap(host)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = old.Close(ctx)
			select {
			case <-o.stop: // Close ran meanwhile and closed the old host
				_ = host.Close(ctx)
			default:
			}
			cancel()
			o.logger.Info("rejoined the grain cluster", "member", host.MemberID())
			return
		}
		o.logger.Warn("rejoining the grain cluster failed; retrying", "error", err, "in", backoff)
		select {
		case <-o.stop:
			return
		case <-time.After(backoff):
		}
	}
}
