package membership

import (
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/iii-on-nats/iii/subjects"
)

// Defaults.
const (
	// DefaultTTL is the lifetime of a member's entry without a heartbeat:
	// the time it takes the cluster to notice a crashed member.
	DefaultTTL = 5 * time.Second
	// DefaultHeartbeat is how often a member rewrites its entry.
	DefaultHeartbeat = time.Second
	// MinTTL is the shortest entry lifetime: the server's minimum for the
	// limit markers that announce an expired entry.
	MinTTL = time.Second
	// maxMetaBytes bounds the keys and values of WithMeta together.
	maxMetaBytes = 16 << 10
	// maxReplicas is JetStream's largest replica count.
	maxReplicas = 5
	// setupTimeout bounds the NATS calls of Shutdown and of undoing a
	// failed start, which take no context.
	setupTimeout = 10 * time.Second
	// startTimeout bounds those of StartMember/StartClient: a member that
	// joins a cluster still forming (every node started at once, a loaded
	// machine) waits for the cluster's JetStream to elect its meta leader
	// and the bucket's replicas; 32 s was seen on a loaded 2-core
	// machine. It matches the bound `iii up` gives a worker's start.
	startTimeout = 2 * time.Minute
	// bucketAttempt bounds one try to open or create the bucket: a
	// JetStream without a meta leader does not answer at all.
	bucketAttempt = 5 * time.Second
)

// Option configures a [Provider] (and [List], which only uses
// [WithBucket]).
type Option func(*options) error

type options struct {
	bucket    string
	ttl       time.Duration
	heartbeat time.Duration
	replicas  int
	logger    *slog.Logger
	meta      map[string]string
}

func defaultOptions() options {
	return options{
		bucket:    subjects.MembersBucket,
		ttl:       DefaultTTL,
		heartbeat: DefaultHeartbeat,
		replicas:  1,
		logger:    slog.New(slog.DiscardHandler),
	}
}

func buildOptions(opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	// Checked once all options are in, so their order does not matter.
	if o.ttl < 3*o.heartbeat {
		return options{}, fmt.Errorf("%w: ttl %v is less than 3 heartbeats of %v", ErrInvalidOption, o.ttl, o.heartbeat)
	}
	return o, nil
}

// WithBucket sets the KV bucket of the membership entries (default
// subjects.MembersBucket, "iii-members").
func WithBucket(name string) Option {
	return func(o *options) error {
		if err := subjects.ValidateID("bucket", name); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		o.bucket = name
		return nil
	}
}

// WithTTL sets the lifetime of an entry that is not refreshed, which is the
// time the cluster takes to detect a crashed member (default 5 s, at least
// [MinTTL] and 3 heartbeats). It only applies when this provider creates
// the bucket, which stores it ([MetaMemberTTL]): the first creator's TTL
// wins, for every member and client.
func WithTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < MinTTL {
			return fmt.Errorf("%w: ttl %v is below the minimum %v", ErrInvalidOption, d, MinTTL)
		}
		o.ttl = d
		return nil
	}
}

// WithHeartbeat sets how often a member rewrites its entry (default 1 s).
func WithHeartbeat(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: heartbeat %v", ErrInvalidOption, d)
		}
		o.heartbeat = d
		return nil
	}
}

// WithReplicas sets the replica count of the bucket when this provider
// creates it (default 1; 3 in a clustered NATS deployment).
func WithReplicas(n int) Option {
	return func(o *options) error {
		if n < 1 || n > maxReplicas {
			return fmt.Errorf("%w: replicas %d not in 1..%d", ErrInvalidOption, n, maxReplicas)
		}
		o.replicas = n
		return nil
	}
}

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// WithMeta sets free-form facts stored in the member's entry (node name,
// region, NATS URL) for operators (`iii cluster members`), at most 16 KiB
// of keys and values. The map is copied.
func WithMeta(meta map[string]string) Option {
	return func(o *options) error {
		size := 0
		for k, v := range meta {
			if k == "" {
				return fmt.Errorf("%w: empty meta key", ErrInvalidOption)
			}
			size += len(k) + len(v)
		}
		if size > maxMetaBytes {
			return fmt.Errorf("%w: meta holds %d bytes, more than %d", ErrInvalidOption, size, maxMetaBytes)
		}
		o.meta = maps.Clone(meta)
		return nil
	}
}
