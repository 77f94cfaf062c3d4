package openai

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
)

// Defaults of the options.
const (
	// DefaultName is the provider name: the <name> of provider::<name>::…
	// and the provider of the assistant messages.
	DefaultName = "openai"
	// DefaultBaseURL is the OpenAI API.
	DefaultBaseURL = "https://api.openai.com/v1"
	// DefaultAPIKeyEnv is the environment variable read when
	// auth::get_token has no credential.
	DefaultAPIKeyEnv = "OPENAI_API_KEY"
	// DefaultMaxRetries is how many times a failed request is retried
	// (so three attempts in all), only while nothing has been streamed.
	DefaultMaxRetries = 2
	// MaxRetries bounds [WithMaxRetries].
	MaxRetries = 10
	// DefaultBackoff is the first retry's wait; it doubles per attempt.
	DefaultBackoff = 500 * time.Millisecond
	// DefaultMaxRetryWait is the longest wait a retry accepts (a longer
	// Retry-After ends the call with the hint instead).
	DefaultMaxRetryWait = time.Minute
	// DefaultCredentialTTL is how long a credential from auth::get_token
	// is reused.
	DefaultCredentialTTL = 30 * time.Second
	// DefaultIdleTimeout is how long the server may stay silent (no
	// response headers, no byte of the stream or of the models list; a
	// keep-alive comment is a byte) while the provider waits for it before
	// the request counts as dropped.
	DefaultIdleTimeout = 3 * time.Minute
	// DefaultCoalesce is the largest delta in bytes that one model event
	// carries when several deltas of a block were read while the previous
	// event went out.
	DefaultCoalesce = 16 << 10
	// MaxCoalesce bounds [WithCoalesce].
	MaxCoalesce = 256 << 10
)

// Values of [WithMaxTokensField].
const (
	// MaxCompletionTokens sends max_tokens as "max_completion_tokens", the
	// field OpenAI wants (its reasoning models refuse "max_tokens").
	MaxCompletionTokens = "max_completion_tokens"
	// MaxTokens sends max_tokens as "max_tokens", for older
	// OpenAI-compatible servers.
	MaxTokens = "max_tokens"
)

// Values of [WithReasoningEffort].
const (
	// ReasoningAuto sends reasoning_effort to the reasoning model families
	// that accept it (o1, o3, o4, gpt-5, gpt-oss) when the request has a
	// thinking level.
	ReasoningAuto = "auto"
	// ReasoningAlways sends it for every model when the request has a
	// thinking level.
	ReasoningAlways = "always"
	// ReasoningNever never sends it.
	ReasoningNever = "never"
)

// Option configures a [Provider].
type Option func(*options) error

type options struct {
	name           string
	baseURL        string
	client         *http.Client
	headers        [][2]string
	apiKeyEnv      string
	requireKey     bool
	maxRetries     int
	backoff        time.Duration
	maxRetryWait   time.Duration
	credentialTTL  time.Duration
	idleTimeout    time.Duration
	maxTokensField string
	reasoning      string
	coalesce       int
	logger         *slog.Logger
	now            func() time.Time
	lookupEnv      func(string) (string, bool)
	// sleep waits between attempts; tests replace it (export_test.go).
	sleep func(ctx context.Context, d time.Duration) error
	// channel configures the stream's channel writer (tests shorten its
	// idle timeout: export_test.go).
	channel []channel.Option
}

func buildOptions(opts []Option) (options, error) {
	o := options{
		name:           DefaultName,
		baseURL:        DefaultBaseURL,
		apiKeyEnv:      DefaultAPIKeyEnv,
		requireKey:     true,
		maxRetries:     DefaultMaxRetries,
		backoff:        DefaultBackoff,
		maxRetryWait:   DefaultMaxRetryWait,
		credentialTTL:  DefaultCredentialTTL,
		idleTimeout:    DefaultIdleTimeout,
		maxTokensField: MaxCompletionTokens,
		reasoning:      ReasoningAuto,
		coalesce:       DefaultCoalesce,
		now:            time.Now,
		lookupEnv:      os.LookupEnv,
		sleep:          sleepCtx,
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	if o.client == nil {
		o.client = defaultHTTPClient()
	}
	return o, nil
}

// defaultHTTPClient has no overall timeout (a stream lasts as long as the
// model writes) but bounds the wait for the response headers.
func defaultHTTPClient() *http.Client {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return &http.Client{}
	}
	t = t.Clone()
	t.ResponseHeaderTimeout = 5 * time.Minute
	return &http.Client{Transport: t}
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// WithName sets the provider name (default [DefaultName]): the functions
// become provider::<name>::stream, ::complete and ::models, credentials
// are asked for with auth::get_token {provider: <name>}, and messages carry
// provider <name>. One to 64 characters of [A-Za-z0-9_-].
func WithName(name string) Option {
	return func(o *options) error {
		if !nameRE.MatchString(name) {
			return fmt.Errorf("%w: provider name %q must be 1..64 characters of [A-Za-z0-9_-]", engine.ErrInvalidOption, name)
		}
		o.name = name
		return nil
	}
}

// WithBaseURL sets the API's base URL (default [DefaultBaseURL]); requests
// go to <base>/chat/completions and <base>/models. An http or https URL
// with a host: "http://localhost:11434/v1" for ollama.
func WithBaseURL(base string) Option {
	return func(o *options) error {
		u, err := url.Parse(base)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: base URL %q must be an http(s) URL with a host", engine.ErrInvalidOption, redactURL(base))
		}
		o.baseURL = base
		return nil
	}
}

// redactURL drops the user info and query of a URL for an error text: they
// may hold a secret.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// WithHTTPClient sets the HTTP client (default: one without an overall
// timeout whose transport waits at most 5 minutes for response headers).
func WithHTTPClient(c *http.Client) Option {
	return func(o *options) error {
		if c == nil {
			return fmt.Errorf("%w: nil HTTP client", engine.ErrInvalidOption)
		}
		o.client = c
		return nil
	}
}

// WithHeader adds a header to every request (OpenAI-Organization,
// OpenAI-Project, a gateway's key...). Its value is treated as a secret:
// it is never logged.
func WithHeader(name, value string) Option {
	return func(o *options) error {
		if !validHeaderName(name) {
			return fmt.Errorf("%w: invalid header name %q", engine.ErrInvalidOption, name)
		}
		if strings.ContainsAny(value, "\r\n\x00") {
			return fmt.Errorf("%w: header %s: value contains a line break or NUL", engine.ErrInvalidOption, name)
		}
		o.headers = append(o.headers, [2]string{name, value})
		return nil
	}
}

// validHeaderName reports whether s is an HTTP token (RFC 9110).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// WithAPIKeyEnv sets the environment variable holding the API key when
// auth::get_token has none (default [DefaultAPIKeyEnv]).
func WithAPIKeyEnv(name string) Option {
	return func(o *options) error {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return fmt.Errorf("%w: invalid environment variable name %q", engine.ErrInvalidOption, name)
		}
		o.apiKeyEnv = name
		return nil
	}
}

// WithRequireKey says whether a call without any credential fails with
// auth_expired (true, the default) or goes out without an Authorization
// header (false: local servers such as ollama, vLLM and LM Studio).
func WithRequireKey(require bool) Option {
	return func(o *options) error {
		o.requireKey = require
		return nil
	}
}

// WithMaxRetries sets how many times a failed request is retried, 0 to
// [MaxRetries] (default [DefaultMaxRetries]). Only rate limits and
// transient failures are retried, and only before anything was streamed.
func WithMaxRetries(n int) Option {
	return func(o *options) error {
		if n < 0 || n > MaxRetries {
			return fmt.Errorf("%w: max retries %d must be 0..%d", engine.ErrInvalidOption, n, MaxRetries)
		}
		o.maxRetries = n
		return nil
	}
}

// WithBackoff sets the wait before the first retry (doubling per attempt
// up to the max wait; default [DefaultBackoff]) and the longest wait a
// retry accepts (default [DefaultMaxRetryWait]): a server's Retry-After
// beyond it ends the call at once with the hint. Tests shrink both.
func WithBackoff(base, maxWait time.Duration) Option {
	return func(o *options) error {
		if base <= 0 || maxWait < base {
			return fmt.Errorf("%w: backoff %v must be positive and at most the max wait %v", engine.ErrInvalidOption, base, maxWait)
		}
		o.backoff, o.maxRetryWait = base, maxWait
		return nil
	}
}

// WithCredentialTTL sets how long a credential from auth::get_token is
// reused (default [DefaultCredentialTTL]; 0 asks every time). A 401
// answer drops it at once.
func WithCredentialTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("%w: negative credential TTL %v", engine.ErrInvalidOption, d)
		}
		o.credentialTTL = d
		return nil
	}
}

// WithIdleTimeout sets how long the server may stay silent while the
// provider waits for it (the response headers, then each read of the
// stream or of the models list) before the attempt counts as a dropped
// connection: transient, retried while nothing was streamed (default
// [DefaultIdleTimeout]). Time the provider spends writing to a slow
// channel reader does not count. It, not the channel's idle timeout,
// bounds the server's silence: the stream's channel writer is busy
// meanwhile and keeps its reader waiting (engine/channel, "Keep-alive").
// Raise it for a local server that takes minutes before its first byte
// (a large prompt on a CPU).
func WithIdleTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: idle timeout %v must be positive", engine.ErrInvalidOption, d)
		}
		o.idleTimeout = d
		return nil
	}
}

// WithMaxTokensField sets the request field max_tokens is sent as:
// [MaxCompletionTokens] (the default) or [MaxTokens].
func WithMaxTokensField(field string) Option {
	return func(o *options) error {
		if field != MaxCompletionTokens && field != MaxTokens {
			return fmt.Errorf("%w: max tokens field %q must be %s or %s", engine.ErrInvalidOption, field, MaxCompletionTokens, MaxTokens)
		}
		o.maxTokensField = field
		return nil
	}
}

// WithReasoningEffort sets when a request's thinking level is sent as
// reasoning_effort: [ReasoningAuto] (the default), [ReasoningAlways] or
// [ReasoningNever].
func WithReasoningEffort(mode string) Option {
	return func(o *options) error {
		if mode != ReasoningAuto && mode != ReasoningAlways && mode != ReasoningNever {
			return fmt.Errorf("%w: reasoning effort mode %q must be %s, %s or %s", engine.ErrInvalidOption, mode, ReasoningAuto, ReasoningAlways, ReasoningNever)
		}
		o.reasoning = mode
		return nil
	}
}

// WithCoalesce sets the largest delta in bytes that one model event may
// carry when deltas of a block were already read while the previous event
// went out (default [DefaultCoalesce], at most [MaxCoalesce]; 0 sends one
// event per delta of the server). Coalescing never delays a delta: it only
// merges what is waiting, so a reader that keeps up sees the server's
// deltas one by one and a slow one gets fewer, larger frames. A single
// delta larger than n is sent as it is.
func WithCoalesce(n int) Option {
	return func(o *options) error {
		if n < 0 || n > MaxCoalesce {
			return fmt.Errorf("%w: coalesce size %d must be 0..%d", engine.ErrInvalidOption, n, MaxCoalesce)
		}
		o.coalesce = n
		return nil
	}
}

// WithLogger sets the logger (default: the engine's). Log lines never
// carry a credential.
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
// credentials (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", engine.ErrInvalidOption)
		}
		o.now = now
		return nil
	}
}

// WithLookupEnv sets how the API key's environment variable is read
// (default os.LookupEnv), for tests and embedders.
func WithLookupEnv(lookup func(string) (string, bool)) Option {
	return func(o *options) error {
		if lookup == nil {
			return fmt.Errorf("%w: nil environment lookup", engine.ErrInvalidOption)
		}
		o.lookupEnv = lookup
		return nil
	}
}
