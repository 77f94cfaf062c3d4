package redact

import (
	"errors"
	"fmt"
)

// Defaults and bounds of the options.
const (
	// DefaultMaxString is how many bytes of a string (or a map key) an
	// excerpt keeps before it clips the rest to "…(+K bytes)".
	DefaultMaxString = 200
	// DefaultMaxDepth is how deeply lists and objects nest before a deeper
	// one is replaced by [Elided]. It also stops a self-referencing Go map.
	DefaultMaxDepth = 32
	// MaxDepthLimit bounds [WithMaxDepth]: the walk is recursive.
	MaxDepthLimit = 1024
	// DefaultMaxItems is how many items of a list, or keys of an object, an
	// excerpt keeps before it summarizes the rest.
	DefaultMaxItems = 64
)

// Option configures a [Redactor], or one call of [Value] or [Excerpt].
//
// [New] reports an invalid option as an error wrapping [ErrInvalidOption].
// [Value] and [Excerpt] cannot fail: they ignore an invalid option and keep
// the default, except that [WithExtraKeys] still adds its valid keys
// (redacting more is the safe side).
type Option func(*options) error

type options struct {
	extraKeys [][]byte // normalized
	maxString int
	maxDepth  int
	maxItems  int
}

func defaultOptions() options {
	return options{maxString: DefaultMaxString, maxDepth: DefaultMaxDepth, maxItems: DefaultMaxItems}
}

// WithExtraKeys adds key names that mark a secret, matched like the built-in
// substring markers: compared in lower case with every character but ASCII
// letters and digits removed, anywhere inside the key (WithExtraKeys("x-tenant")
// redacts "X-Tenant-ID" and "xtenant"). A name that normalizes to nothing is
// an error; the valid names of the same call are added all the same.
func WithExtraKeys(keys ...string) Option {
	return func(o *options) error {
		var errs []error
		for _, k := range keys {
			n := normalize(nil, k)
			if len(n) == 0 {
				errs = append(errs, fmt.Errorf("%w: extra key %q has no letter or digit", ErrInvalidOption, k))
				continue
			}
			o.extraKeys = append(o.extraKeys, n)
		}
		return errors.Join(errs...)
	}
}

// WithMaxString sets how many bytes of a string or key an excerpt keeps
// (default [DefaultMaxString]); n must be at least 1. The cut falls on a
// rune boundary. [Value] never clips.
func WithMaxString(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: max string %d must be at least 1", ErrInvalidOption, n)
		}
		o.maxString = n
		return nil
	}
}

// WithMaxDepth sets how many levels of lists and objects are kept (default
// [DefaultMaxDepth], at most [MaxDepthLimit]); a deeper list or object is
// replaced by [Elided]. With 1, {"a":{"b":1}} becomes {"a":"[…]"}. It bounds
// both [Value] and [Excerpt].
func WithMaxDepth(n int) Option {
	return func(o *options) error {
		if n < 1 || n > MaxDepthLimit {
			return fmt.Errorf("%w: max depth %d must be within [1, %d]", ErrInvalidOption, n, MaxDepthLimit)
		}
		o.maxDepth = n
		return nil
	}
}

// WithMaxItems sets how many items of a list, and keys of an object (in key
// order), an excerpt keeps (default [DefaultMaxItems]); n must be at least 1.
// The rest is summarized as a last item "…(+K items)" or a last key "…" whose
// value is "+K keys". [Value] keeps every item.
func WithMaxItems(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: max items %d must be at least 1", ErrInvalidOption, n)
		}
		o.maxItems = n
		return nil
	}
}
