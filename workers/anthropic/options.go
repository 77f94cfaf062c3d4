package anthropic

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
)

// Defaults and bounds of the options.
const (
	// DefaultBaseURL is the Messages API's origin.
	DefaultBaseURL = "https://api.anthropic.com"
	// DefaultMaxRetries is how many times a call is retried after the first
	// attempt (three attempts in all), and only before anything streamed.
	DefaultMaxRetries = 2
	// MaxRetries bounds [WithMaxRetries].
	MaxRetries = 10
	// DefaultBackoff is the wait before the first retry; it doubles with
	// every further one.
	DefaultBackoff = 500 * time.Millisecond
	// DefaultMaxRetryWait is the longest wait a retry accepts: a
	// Retry-After beyond it ends the call with the hint instead.
	DefaultMaxRetryWait = 20 * time.Second
	// DefaultCredentialTTL is how long a credential from auth::get_token
	// (or the environment) is reused before it is asked for again.
	DefaultCredentialTTL = 30 * time.Second
	// DefaultIdleTimeout is how long the API may stay silent (no response
	// headers, or no byte of the stream or of a models page while the
	// provider waits for one: SSE comments and pings count) before the
	// request counts as dropped.
	DefaultIdleTimeout = 3 * time.Minute
	// DefaultAPIKeyEnv is the environment variable read when the auth
	// worker is not running.
	DefaultAPIKeyEnv = "ANTHROPIC_API_KEY"
	// AuthFunction is the function that hands out credentials.
	AuthFunction = "auth::get_token"
	// DefaultCoalesce is the largest delta a model event carries when
	// several deltas of a block were read before the first went out.
	DefaultCoalesce = 16 << 10
	// MaxCoalesce bounds [WithCoalesce].
	MaxCoalesce = 256 << 10
)

// Option configures a [Provider].
type Option func(*options) error

type options struct {
	httpClient    *http.Client
	baseURL       string
	maxRetries    int
	backoff       time.Duration
	maxRetryWait  time.Duration
	credentialTTL time.Duration
	idleTimeout   time.Duration
	apiKeyEnv     string
	coalesce      int
	lookupEnv     func(string) (string, bool)
	logger        *slog.Logger
	now           func() time.Time
	// channel configures the stream's channel writer before the caller's
	// options (tests shorten its idle timeout).
	channel []channel.Option
}

func buildOptions(opts []Option) (options, error) {
	o := options{
		baseURL:       DefaultBaseURL,
		maxRetries:    DefaultMaxRetries,
		backoff:       DefaultBackoff,
		maxRetryWait:  DefaultMaxRetryWait,
		credentialTTL: DefaultCredentialTTL,
		idleTimeout:   DefaultIdleTimeout,
		apiKeyEnv:     DefaultAPIKeyEnv,
		coalesce:      DefaultCoalesce,
		lookupEnv:     os.LookupEnv,
		now:           time.Now,
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	if o.httpClient == nil {
		o.httpClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	return o, nil
}

// WithHTTPClient sets the HTTP client of the API calls (default: a client
// of its own with http.DefaultTransport's settings and no overall timeout,
// since a stream lasts as long as the answer).
func WithHTTPClient(c *http.Client) Option {
	return func(o *options) error {
		if c == nil {
			return fmt.Errorf("%w: nil HTTP client", engine.ErrInvalidOption)
		}
		o.httpClient = c
		return nil
	}
}

// WithBaseURL sets the API's base URL (default [DefaultBaseURL]); requests
// go to <base>/v1/messages and <base>/v1/models. It must be an absolute
// http or https URL without query or fragment.
func WithBaseURL(base string) Option {
	return func(o *options) error {
		u, err := url.Parse(base)
		if err == nil && u.User != nil {
			return fmt.Errorf("%w: base URL must not carry credentials", engine.ErrInvalidOption)
		}
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			// The text leaves out what may be a secret (a gateway's
			// ?key=…): an error of start-up reaches the log and stderr.
			return fmt.Errorf("%w: base URL %q must be an absolute http(s) URL without query", engine.ErrInvalidOption, redactURL(base))
		}
		o.baseURL = base
		return nil
	}
}

// redactURL drops the user info, query and fragment of a URL for an error
// text: they may hold a secret.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// WithMaxRetries sets how many times a failed call is retried (0 to
// [MaxRetries]; default [DefaultMaxRetries]). Only rate limits and
// transient failures are retried, and only before the first event was
// streamed.
func WithMaxRetries(n int) Option {
	return func(o *options) error {
		if n < 0 || n > MaxRetries {
			return fmt.Errorf("%w: max retries %d must be 0..%d", engine.ErrInvalidOption, n, MaxRetries)
		}
		o.maxRetries = n
		return nil
	}
}

// WithBackoff sets the wait before the first retry (default
// [DefaultBackoff]); each further retry waits twice as long. A Retry-After
// (or retry-after-ms) hint of the API replaces it.
func WithBackoff(base time.Duration) Option {
	return func(o *options) error {
		if base <= 0 || base > time.Minute {
			return fmt.Errorf("%w: backoff %v must be in (0, 1m]", engine.ErrInvalidOption, base)
		}
		o.backoff = base
		return nil
	}
}

// WithMaxRetryWait sets the longest wait before a retry (default
// [DefaultMaxRetryWait]). A rate limit whose Retry-After is longer is not
// retried: the caller gets rate_limited with the hint. The stream's
// channel waits as long (its writer is busy meanwhile: engine/channel,
// "Keep-alive").
func WithMaxRetryWait(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 || d > 10*time.Minute {
			return fmt.Errorf("%w: max retry wait %v must be in (0, 10m]", engine.ErrInvalidOption, d)
		}
		o.maxRetryWait = d
		return nil
	}
}

// WithCredentialTTL sets how long a credential is reused before
// auth::get_token is asked again (default [DefaultCredentialTTL]; a 401
// drops it at once).
func WithCredentialTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 || d > time.Hour {
			return fmt.Errorf("%w: credential TTL %v must be 0..1h", engine.ErrInvalidOption, d)
		}
		o.credentialTTL = d
		return nil
	}
}

// WithIdleTimeout sets how long the API may stay silent before the stream
// (or a request of the models call) counts as a dropped connection
// (default [DefaultIdleTimeout]). Only the waits for the API count: time
// the provider spends on a slow channel reader does not. It, not the
// channel's idle timeout, bounds the API's silence: the stream's channel
// writer is busy meanwhile and keeps its reader waiting (engine/channel,
// "Keep-alive").
func WithIdleTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: idle timeout %v must be positive", engine.ErrInvalidOption, d)
		}
		o.idleTimeout = d
		return nil
	}
}

// WithCoalesce sets the largest delta in bytes that one model event may
// carry when deltas of a block were already read while the previous event
// went out (default [DefaultCoalesce], at most [MaxCoalesce]; 0 sends one
// event per delta of the API). Coalescing never delays a delta: it only
// merges what is waiting, so a reader that keeps up sees the API's deltas
// one by one and a slow one gets fewer, larger frames.
func WithCoalesce(n int) Option {
	return func(o *options) error {
		if n < 0 || n > MaxCoalesce {
			return fmt.Errorf("%w: coalesce size %d must be 0..%d", engine.ErrInvalidOption, n, MaxCoalesce)
		}
		o.coalesce = n
		return nil
	}
}

// WithAPIKeyEnv names the environment variable holding the API key used
// when auth::get_token is not served or has no credential (default
// [DefaultAPIKeyEnv]).
func WithAPIKeyEnv(name string) Option {
	return func(o *options) error {
		if name == "" {
			return fmt.Errorf("%w: empty API key variable name", engine.ErrInvalidOption)
		}
		o.apiKeyEnv = name
		return nil
	}
}

// WithEnvLookup sets how environment variables are read (default
// os.LookupEnv), so tests and embedders need not touch the process
// environment.
func WithEnvLookup(fn func(string) (string, bool)) Option {
	return func(o *options) error {
		if fn == nil {
			return fmt.Errorf("%w: nil environment lookup", engine.ErrInvalidOption)
		}
		o.lookupEnv = fn
		return nil
	}
}

// WithLogger sets the logger (default: the engine's, e.Logger()).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", engine.ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// WithClock sets the clock that stamps assistant messages and ages cached
// credentials (default time.Now), for deterministic tests.
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", engine.ErrInvalidOption)
		}
		o.now = now
		return nil
	}
}
