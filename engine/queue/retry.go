package queue

import (
	"math/rand/v2"
	"time"

	"github.com/iii-on-nats/iii/engine/wire"
)

func defaultNonRetryable() map[wire.Code]bool {
	return map[wire.Code]bool{
		wire.CodeInvalidPayload: true,
		wire.CodeForbidden:      true,
	}
}

// Retryable reports whether a failed delivery that ended in err is tried
// again under the default policy.
//
// The catalog's Retryable flag is a hint for a synchronous caller, who can
// give up; a queue holds its message and will try again later, so the
// policy is wider than the flag:
//
//   - invalid_payload and forbidden are final: the same message fails the
//     same way on every delivery, so it goes straight to the dead-letter
//     subject (after one delivery);
//   - everything else is retried with backoff until max deliver, including
//     function_not_found (the function may simply not be registered yet),
//     internal (a bug or a failing dependency may be fixed or recover) and
//     the codes the catalog marks retryable (timeout, unavailable,
//     conflict).
//
// [WithNonRetryable] replaces the set of final codes.
func Retryable(err error) bool {
	return !defaultNonRetryable()[wire.From(err).Code]
}

// backoff is the delay before the delivery after failed delivery n
// (1-based): base·2^(n-1), capped at max; with jitter, drawn from [d/2, d].
func backoff(n uint64, base, max time.Duration, jitter bool) time.Duration {
	d := max
	if n >= 1 && n <= 62 {
		if b := base << (n - 1); b > 0 && b < max && b>>(n-1) == base {
			d = b
		}
	}
	if jitter && d > 1 {
		half := d / 2
		d = half + rand.N(d-half+1)
	}
	return d
}
