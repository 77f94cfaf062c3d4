package orchestrator

import (
	"github.com/iii-on-nats/iii/engine/wire"
)

// transientCall says whether a failed trigger may succeed when repeated
// (engine.Retry): nobody answered in time or the callee was unavailable.
// Everything else (bad input, not found, a handler's own error) is final.
func transientCall(err error) bool {
	switch wire.From(err).Code {
	case wire.CodeTimeout, wire.CodeUnavailable:
		return true
	}
	return false
}

// always retries whatever failed (until ctx ends).
func always(error) bool { return true }
