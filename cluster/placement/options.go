package placement

import (
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/subjects"
)

// DefaultActivationTimeout bounds one [Lookup.Get]: the requests to
// placement actors and the KV operations of a claim.
const DefaultActivationTimeout = 5 * time.Second

// markerTTL is how long the purge marker of a released key stays in the
// bucket; without it every grain that ever lived would leave a marker.
const markerTTL = time.Minute

// Option configures a [Lookup].
type Option func(*options) error

type options struct {
	bucket            string
	replicas          int
	logger            *slog.Logger
	accepting         func(memberID, kind string) bool
	preferred         func(memberID, kind, identity string) bool
	activationTimeout time.Duration
	drainMessage      func() any
}

func defaultOptions() options {
	return options{
		bucket:            subjects.GrainsBucket,
		replicas:          1,
		logger:            slog.New(slog.DiscardHandler),
		activationTimeout: DefaultActivationTimeout,
	}
}

var bucketRe = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// WithBucket sets the KV bucket of ownership keys; the default is
// [subjects.GrainsBucket]. All members of a cluster must use the same one.
func WithBucket(name string) Option {
	return func(o *options) error {
		if !bucketRe.MatchString(name) {
			return fmt.Errorf("%w: bucket name %q", engine.ErrInvalidOption, name)
		}
		o.bucket = name
		return nil
	}
}

// WithReplicas sets the replica count of the bucket when New creates it
// (1 to 5, default 1). An existing bucket is used as it is.
func WithReplicas(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("%w: replicas %d not in 1..5", engine.ErrInvalidOption, n)
		}
		o.replicas = n
		return nil
	}
}

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", engine.ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// WithAccepting narrows the members a new activation may be placed on: only
// members of the current topology that list the kind and for which f
// returns true (the membership's Accepting: live, status up). By default
// every topology member that lists the kind accepts. f is called often and
// must be fast and safe for concurrent use. Grains already activated stay
// where they are whatever f says.
func WithAccepting(f func(memberID, kind string) bool) Option {
	return func(o *options) error {
		if f == nil {
			return fmt.Errorf("%w: nil accepting func", engine.ErrInvalidOption)
		}
		o.accepting = f
		return nil
	}
}

// WithPreferred places a new activation of grain kind/identity on a member
// for which f returns true, when any accepting member qualifies; otherwise
// on any accepting member (the orchestrator prefers the members of a
// session's home region). f is called often and must be fast and safe for
// concurrent use; members should agree on its answers, or concurrent first
// calls may aim at different members (the ownership claim still lets only
// one win).
func WithPreferred(f func(memberID, kind, identity string) bool) Option {
	return func(o *options) error {
		if f == nil {
			return fmt.Errorf("%w: nil preferred func", engine.ErrInvalidOption)
		}
		o.preferred = f
		return nil
	}
}

// WithActivationTimeout bounds one [Lookup.Get] (requests to placement
// actors, retries and the claim's KV operations); default
// [DefaultActivationTimeout].
func WithActivationTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: activation timeout %v must be positive", engine.ErrInvalidOption, d)
		}
		o.activationTimeout = d
		return nil
	}
}

// WithDrainMessage sets the message [Lookup.Drain] sends to every local
// grain, made fresh per grain by f. The grain is expected to finish its
// current work and stop itself. nil (the default) poisons the grains
// instead: they stop after the messages already in their mailbox.
func WithDrainMessage(f func() any) Option {
	return func(o *options) error {
		o.drainMessage = f
		return nil
	}
}
