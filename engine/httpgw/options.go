package httpgw

import (
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Defaults of a [Gateway].
const (
	// DefaultMaxBodyBytes bounds a request body. The encoded request must
	// also fit the NATS server's max payload (1 MiB by default), which
	// base64 and the other fields eat into.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultTimeout bounds one request's function call.
	DefaultTimeout = 30 * time.Second
	// DefaultBodyTimeout bounds receiving one request's body.
	DefaultBodyTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds writing one response.
	DefaultWriteTimeout = 60 * time.Second
)

// Option configures a [Gateway].
type Option func(*options) error

type options struct {
	maxBody      int64
	timeout      time.Duration
	bodyTimeout  time.Duration
	writeTimeout time.Duration
	// bucketCheck is how often the gateway asks whether the routes bucket
	// its watch follows is still the same bucket.
	bucketCheck time.Duration
}

func defaultOptions() options {
	return options{maxBody: DefaultMaxBodyBytes, timeout: DefaultTimeout, bodyTimeout: DefaultBodyTimeout,
		writeTimeout: DefaultWriteTimeout, bucketCheck: defaultBucketCheck}
}

// WithMaxBodyBytes bounds a request body; a larger one is answered 413 and
// nothing is sent to the function.
func WithMaxBodyBytes(n int64) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("%w: max body bytes %d must not be negative", engine.ErrInvalidOption, n)
		}
		o.maxBody = n
		return nil
	}
}

// WithTimeout bounds one request's function call; when it passes the
// gateway answers 504.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: timeout %v must be positive", engine.ErrInvalidOption, d)
		}
		o.timeout = d
		return nil
	}
}

// WithBodyTimeout bounds receiving a request body, from the moment the
// gateway takes the request: a client that sends it slower is answered 408
// and nothing is sent to the function. It also bounds the body of a
// request answered before its body is read (404, 405, 413, 503), which
// net/http reads on (up to 256 KiB) before it sends the answer: a client
// that never sends that body gets the answer when it passes, and its
// connection is closed. It sets the connection's read deadline (through
// [http.ResponseController]) for the body, in place of the server's
// ReadTimeout; the server's ReadHeaderTimeout still has to bound the
// headers.
func WithBodyTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: body timeout %v must be positive", engine.ErrInvalidOption, d)
		}
		o.bodyTimeout = d
		return nil
	}
}

// WithWriteTimeout bounds writing a response, from the moment the gateway
// starts writing it (the function's time does not count): a client that
// reads it slower, or stops reading, has its connection closed when it
// passes, and holds no handler. It sets the connection's write deadline
// (through [http.ResponseController]) in place of the server's
// WriteTimeout, which would also count the function's time. Every
// response is whole (the gateway streams nothing), so this only cuts
// clients that do not read.
func WithWriteTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: write timeout %v must be positive", engine.ErrInvalidOption, d)
		}
		o.writeTimeout = d
		return nil
	}
}
