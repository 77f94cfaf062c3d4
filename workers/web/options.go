package web

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Limits of a fetch.
const (
	// DefaultMaxBytes is the body size a call reads when it names none.
	DefaultMaxBytes = 1 << 20
	// DefaultMaxBytesLimit is the largest max_bytes a call may ask for
	// unless [WithMaxBytes] (setting "max_bytes") says otherwise.
	DefaultMaxBytesLimit = 8 << 20
	// MaxBytesLimit bounds [WithMaxBytes].
	MaxBytesLimit = 1 << 30
	// DefaultTimeout bounds a call that names no timeout_ms.
	DefaultTimeout = 15 * time.Second
	// MaxTimeout bounds timeout_ms.
	MaxTimeout = 60 * time.Second
	// MaxRedirects is how many redirects a fetch follows.
	MaxRedirects = 5
	// MaxURLLength bounds the URL of a call and of every redirect.
	MaxURLLength = 4096
	// UserAgent is the User-Agent header of every request.
	UserAgent = "iii-web-fetch/1"
)

// Option configures a [Fetcher] (and the [Worker] that builds one).
type Option func(*options) error

// lookupFunc resolves a host name to addresses.
type lookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

type options struct {
	allowPrivate bool
	maxBytes     int64
	logger       *slog.Logger // nil: discard (the worker sets the engine's)

	// Test seams: a resolver in place of DNS, and addresses allowed
	// despite the address check (so a loopback test server can play a
	// public one).
	lookup lookupFunc
	exempt map[netip.AddrPort]bool
}

func buildOptions(opts []Option) (options, error) {
	o := options{
		maxBytes: DefaultMaxBytesLimit,
		lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		},
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// WithAllowPrivate lifts the address check when allow is true: loopback,
// private, link-local and the other internal ranges become reachable
// (setting "allow_private"). Meant for a node that fetches from its own
// network on purpose, and for tests against a loopback server.
func WithAllowPrivate(allow bool) Option {
	return func(o *options) error {
		o.allowPrivate = allow
		return nil
	}
}

// WithMaxBytes sets the largest max_bytes a call may ask for (setting
// "max_bytes", default [DefaultMaxBytesLimit], at most [MaxBytesLimit]). A
// call asking for more gets this many; a call asking for none reads
// min([DefaultMaxBytes], n).
func WithMaxBytes(n int64) Option {
	return func(o *options) error {
		if n <= 0 || n > MaxBytesLimit {
			return fmt.Errorf("%w: max bytes %d outside 1..%d", engine.ErrInvalidOption, n, MaxBytesLimit)
		}
		o.maxBytes = n
		return nil
	}
}

// WithLogger sets the logger (default: discard; the worker uses the
// engine's, with worker=web). Refused fetches are logged at Info.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", engine.ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// withLookup replaces DNS resolution (tests).
func withLookup(fn lookupFunc) Option {
	return func(o *options) error {
		if fn == nil {
			return fmt.Errorf("%w: nil lookup", engine.ErrInvalidOption)
		}
		o.lookup = fn
		return nil
	}
}

// withExempt lets the fetcher dial these exact address:port pairs despite
// the address check (tests: a loopback server that stands for a public
// one).
func withExempt(addrs ...netip.AddrPort) Option {
	return func(o *options) error {
		if o.exempt == nil {
			o.exempt = map[netip.AddrPort]bool{}
		}
		for _, a := range addrs {
			if !a.IsValid() {
				return fmt.Errorf("%w: invalid exempt address %v", engine.ErrInvalidOption, a)
			}
			o.exempt[a] = true
		}
		return nil
	}
}
