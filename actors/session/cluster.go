package session

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Kind is the proto.actor cluster kind of session grains; a grain's
// identity is its session id.
const Kind = "session"

// Cluster makes a [Host] one member of a proto.actor cluster
// ([WithCluster]): session grains are placed by the cluster's identity
// lookup, so a session has one activation cluster-wide whichever member
// received its step, and a member that dies has its sessions re-activated
// on the survivors at their next (redelivered) step.
type Cluster struct {
	// Name is the proto.actor cluster name (members with the same name
	// and membership store form one cluster).
	Name string
	// Provider keeps the membership (cluster/membership: JetStream KV).
	Provider cluster.ClusterProvider
	// Lookup places grains (cluster/placement: ownership in JetStream KV).
	Lookup cluster.IdentityLookup
	// Listen is the host:port of the member's remote (gRPC) listener;
	// port 0 picks a free one. Default "127.0.0.1:0".
	Listen string
	// Advertise is the host:port other members dial ("" = Listen's
	// actual address).
	Advertise string
	// Publish sends a JetStream acknowledgement body ("+ACK", "+WPI",
	// "-NAK ...") to a step's reply subject: the grain acks a step that
	// another member received. Required.
	Publish func(subject string, body []byte) error
	// Drain, when set, is called first by [Host.Drain]: it marks this
	// member as taking no new grains and hands the local ones off
	// (placement sends each the message of [DrainMessage]).
	Drain func(ctx context.Context) error
	// RequestTimeout bounds one grain request (default 10 s).
	RequestTimeout time.Duration
	// Forwarders bounds the wakes being handed to grains at once
	// (default 256).
	Forwarders int
}

// WithCluster runs the host as a member of a proto.actor cluster.
func WithCluster(c Cluster) Option {
	return func(o *options) error {
		if c.Name == "" || c.Provider == nil || c.Lookup == nil || c.Publish == nil {
			return fmt.Errorf("%w: cluster needs a name, a provider, a lookup and a publish function", ErrInvalidOption)
		}
		if c.Listen == "" {
			c.Listen = "127.0.0.1:0"
		}
		if _, _, err := splitListen(c.Listen); err != nil {
			return fmt.Errorf("%w: cluster listen: %v", ErrInvalidOption, err)
		}
		if c.RequestTimeout <= 0 {
			c.RequestTimeout = 10 * time.Second
		}
		if c.Forwarders <= 0 {
			c.Forwarders = 256
		}
		o.cluster = &c
		return nil
	}
}

func splitListen(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	return host, port, nil
}

// drainMsg asks a grain to stop at its next checkpoint: it finishes the
// model call or function calls in flight, records them, gives its wakes
// back and stops, so another member resumes the session with nothing
// interrupted.
type drainMsg struct{}

// DrainMessage is what a placement lookup sends a session grain to hand it
// off (placement.WithDrainMessage).
func DrainMessage() any { return &drainMsg{} }

// envelope is a grain request that may cross members (proto.actor's
// remote needs proto messages: it travels msgpack-encoded inside a
// wrapperspb.BytesValue).
type envelope struct {
	Op     string `msgpack:"op"` // "wake" | "abort"
	Step   uint64 `msgpack:"step,omitempty"`
	Reply  string `msgpack:"reply,omitempty"`
	Reason string `msgpack:"reason,omitempty"`
}

// answer is a grain's reply to an envelope.
type answer struct {
	Accepted bool   `msgpack:"accepted,omitempty"`
	Aborted  bool   `msgpack:"aborted,omitempty"`
	State    string `msgpack:"state,omitempty"`
	Error    string `msgpack:"error,omitempty"`
	// Corrupt: Error wraps ErrCorruptRecord.
	Corrupt bool `msgpack:"corrupt,omitempty"`
}

// err is a's error, nil when it has none: a remote grain's error keeps
// its text and whether it wraps ErrCorruptRecord.
func (a answer) err() error {
	if a.Error == "" {
		return nil
	}
	return remoteError{msg: a.Error, corrupt: a.Corrupt}
}

// remoteError is an error a grain on another member answered.
type remoteError struct {
	msg     string
	corrupt bool
}

func (e remoteError) Error() string { return e.msg }

func (e remoteError) Is(target error) bool { return e.corrupt && target == ErrCorruptRecord }

const (
	opWake  = "wake"
	opAbort = "abort"
)

// pack encodes an envelope or an answer (plain structs of strings and
// numbers: encoding cannot fail; if it did, the receiver would answer a
// decode error).
func pack(v any) *wrapperspb.BytesValue {
	b, _ := msgpack.Marshal(v)
	return &wrapperspb.BytesValue{Value: b}
}

// startCluster joins the cluster as a member hosting Kind.
func (h *Host) startCluster() (err error) {
	// proto.actor panics when the provider or the remote cannot start
	// (docs/UPSTREAM.md): that is an error here.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("session: join cluster %s: %v", h.opts.cluster.Name, r)
		}
	}()
	cc := h.opts.cluster
	host, port, _ := splitListen(cc.Listen)
	ropts := []remote.ConfigOption{}
	if cc.Advertise != "" {
		ropts = append(ropts, remote.WithAdvertisedHost(cc.Advertise))
	}
	kind := cluster.NewKind(Kind, actor.PropsFromProducer(func() actor.Actor { return &grain{host: h} }, actor.WithDispatcher(h.dispatcher)))
	cfg := cluster.Configure(cc.Name, cc.Provider, cc.Lookup, remote.Configure(host, port, ropts...),
		cluster.WithKinds(kind), cluster.WithRequestTimeout(cc.RequestTimeout))
	h.cluster = cluster.New(h.system, cfg)
	h.forwarders = make(chan struct{}, cc.Forwarders)
	h.cluster.StartMember()
	return nil
}

// Address is the member's remote address ("" when not clustered).
func (h *Host) Address() string {
	if h.cluster == nil {
		return ""
	}
	return h.system.Address()
}

// MemberID is the member's proto.actor id ("" when not clustered).
func (h *Host) MemberID() string {
	if h.cluster == nil {
		return ""
	}
	return h.system.ID
}

// clusterRequest sends env to sid's grain wherever it lives and decodes
// the answer.
func (h *Host) clusterRequest(ctx context.Context, sid string, env envelope) (answer, error) {
	timeout := h.opts.cluster.RequestTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	res, err := h.cluster.Request(sid, Kind, pack(env),
		cluster.WithTimeout(timeout), cluster.WithRetryCount(8),
		// Upstream's default backoff sleeps i*i*50 nanoseconds
		// (docs/UPSTREAM.md): give the lookup time to settle.
		cluster.WithRetryAction(func(i int) int {
			i++
			time.Sleep(time.Duration(i) * 50 * time.Millisecond)
			return i
		}))
	if err != nil {
		return answer{}, err
	}
	bv, ok := res.(*wrapperspb.BytesValue)
	if !ok {
		return answer{}, fmt.Errorf("session: grain %s answered %T", sid, res)
	}
	var a answer
	if err := msgpack.Unmarshal(bv.Value, &a); err != nil {
		return answer{}, fmt.Errorf("session: grain %s answer: %w", sid, err)
	}
	return a, a.err()
}

// clusterWake hands w to sid's grain on a forwarder goroutine; a wake no
// grain took is given back to JetStream for redelivery.
func (h *Host) clusterWake(sid string, w Wake) error {
	if w.Reply == "" {
		return fmt.Errorf("session: a clustered wake needs the step's reply subject")
	}
	h.fwg.Add(1)
	go func() {
		defer h.fwg.Done()
		h.forwarders <- struct{}{}
		defer func() { <-h.forwarders }()
		ctx, cancel := context.WithTimeout(context.Background(), h.opts.cluster.RequestTimeout)
		defer cancel()
		if _, err := h.clusterRequest(ctx, sid, envelope{Op: opWake, Step: w.Step, Reply: w.Reply}); err != nil {
			h.opts.logger.Debug("wake not delivered; redelivered later", "session_id", sid, "error", err)
			if w.Nak != nil {
				_ = w.Nak(time.Second)
			}
		}
	}()
	return nil
}

// remoteWake is a wake whose acks go to the step's reply subject.
func (h *Host) remoteWake(step uint64, reply string) Wake {
	return ReplyWake(step, reply, h.opts.cluster.Publish)
}

// ReplyWake is the wake of a step message that another process consumed:
// its acknowledgements are published to the step's reply subject, where
// JetStream takes them from any connection.
func ReplyWake(step uint64, reply string, publish func(subject string, body []byte) error) Wake {
	return Wake{
		Step:       step,
		Reply:      reply,
		Ack:        func() error { return publish(reply, []byte("+ACK")) },
		InProgress: func() error { return publish(reply, []byte("+WPI")) },
		Nak: func(d time.Duration) error {
			if d <= 0 {
				return publish(reply, []byte("-NAK"))
			}
			return publish(reply, fmt.Appendf(nil, "-NAK {\"delay\": %d}", d.Nanoseconds()))
		},
	}
}

// onEnvelope serves a grain request that came through the cluster.
func (g *grain) onEnvelope(ctx actor.Context, bv *wrapperspb.BytesValue) {
	var env envelope
	if err := msgpack.Unmarshal(bv.Value, &env); err != nil {
		ctx.Respond(pack(answer{Error: "session: bad grain request: " + err.Error()}))
		return
	}
	switch env.Op {
	case opWake:
		if g.draining {
			// Handed off: let the caller retry (it finds the next owner).
			ctx.Respond(pack(answer{Error: "session: grain is draining"}))
			return
		}
		ctx.Respond(pack(answer{Accepted: true}))
		g.onWake(g.host.remoteWake(env.Step, env.Reply), nil, 0, 0)
	case opAbort:
		g.abortRequest(ctx, env.Reason)
	default:
		ctx.Respond(pack(answer{Error: fmt.Sprintf("session: unknown grain request %q", env.Op)}))
	}
}

// reply is res as the sender expects it: a clustered request gets an
// encoded answer.
func (g *grain) reply(res any) any {
	if g.host.cluster == nil {
		return res
	}
	switch r := res.(type) {
	case AbortResult:
		return pack(answer{Aborted: r.Aborted, State: r.State})
	case error:
		return pack(answer{Error: r.Error(), Corrupt: errors.Is(r, ErrCorruptRecord)})
	}
	return pack(answer{Error: fmt.Sprintf("session: unexpected result %T", res)})
}
