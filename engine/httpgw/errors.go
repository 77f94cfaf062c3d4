package httpgw

import (
	"errors"

	"github.com/iii-on-nats/iii/engine/wire"
)

// Sentinel errors. Errors that travel on the wire are *wire.Error values
// (invalid_payload, conflict, unavailable) wrapping these, so both
// errors.Is checks work on the Go side.
var (
	// ErrInvalidRoute is returned for a route with a bad method, path
	// pattern or function id.
	ErrInvalidRoute = errors.New("httpgw: invalid route")
	// ErrRouteConflict is returned when a route matches exactly the same
	// requests as an existing route of another function (or with other
	// parameter names); remove that one first.
	ErrRouteConflict = errors.New("httpgw: route conflicts with an existing route")
	// ErrClosed is returned by calls on a closed [Gateway], wrapped in
	// unavailable.
	ErrClosed = errors.New("httpgw: gateway closed")
)

// closedErr is the error of a route call on a closed gateway. The http worker
// serves until its engine closes, after the gateway; another replica's
// gateway can take the call, so it is unavailable (retryable), not
// internal.
func closedErr() *wire.Error { return wire.Wrap(wire.CodeUnavailable, ErrClosed, "") }
