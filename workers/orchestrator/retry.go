package orchestrator

import (
	"context"
	"errors"
	"time"

	"github.com/iii-on-nats/iii/engine/wire"
)

// retry runs op until it succeeds, fails for good (permanent says so), or
// ctx ends, backing off from 50 ms to 1 s. A clustered JetStream asset
// whose leader was on a node that died answers nothing for the few seconds
// of the election; a grain that halted on that would turn every call it
// had just run into "interrupted: outcome unknown".
func retry(ctx context.Context, op func() error, permanent func(error) bool) error {
	backoff := 50 * time.Millisecond
	for {
		err := op()
		if err == nil || permanent(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// transientCall says whether a failed trigger may succeed when repeated:
// nobody answered in time or the callee was unavailable. Everything else
// (bad input, not found, a handler's own error) is final.
func transientCall(err error) bool {
	switch wire.From(err).Code {
	case wire.CodeTimeout, wire.CodeUnavailable:
		return true
	}
	return false
}
