package hook

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Option configures one [PublishCollect] call. An invalid option is an
// error wrapping engine.ErrInvalidOption (and [ErrPublishFailed]: nothing
// was published).
type Option func(*options) error

type options struct {
	header nats.Header
	inject func(context.Context, nats.Header)
}

// WithHeader adds h's headers to the hook message, e.g. trace context a
// caller injected itself. Keys must be non-empty printable ASCII without
// ':' or spaces, values must not hold CR, LF or NUL, and Content-Type and
// Iii-Timeout-Ms are set by [PublishCollect] and may not be given. The
// values are copied.
func WithHeader(h nats.Header) Option {
	return func(o *options) error {
		for k, vs := range h {
			if err := checkHeader(k, vs); err != nil {
				return err
			}
		}
		if o.header == nil {
			o.header = make(nats.Header, len(h))
		}
		for k, vs := range h {
			o.header[k] = append(o.header[k], vs...)
		}
		return nil
	}
}

// WithInjector has inject write ctx's trace context into the hook
// message's headers; pass (*engine.Engine).Inject so that subscribers'
// spans join the caller's trace.
func WithInjector(inject func(ctx context.Context, h nats.Header)) Option {
	return func(o *options) error {
		if inject == nil {
			return fmt.Errorf("%w: nil injector", engine.ErrInvalidOption)
		}
		o.inject = inject
		return nil
	}
}

func checkHeader(k string, vs []string) error {
	if k == "" {
		return fmt.Errorf("%w: empty header key", engine.ErrInvalidOption)
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return fmt.Errorf("%w: header key %q holds %q", engine.ErrInvalidOption, k, c)
		}
	}
	if strings.EqualFold(k, wire.HeaderContentType) || strings.EqualFold(k, engine.HeaderTimeoutMs) {
		return fmt.Errorf("%w: header %q is set by PublishCollect", engine.ErrInvalidOption, k)
	}
	for _, v := range vs {
		if strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf("%w: header %q value holds CR, LF or NUL", engine.ErrInvalidOption, k)
		}
	}
	return nil
}
