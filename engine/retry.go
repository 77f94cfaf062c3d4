package engine

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
)

// Retry runs op until it succeeds, fails for good (retryable says no), or
// ctx ends. Each attempt gets its own ctx bounded by attempt: a request
// sent to a server or worker that died (a JetStream stream leader lost in
// an election, a worker's node killed) is never answered, and only the
// next attempt reaches the one that took over. Attempts back off from
// 50 ms to 1 s. Use it only for operations that are safe to repeat (a
// message id, a compare-and-set revision or idempotency makes a repeat
// that did land harmless). On ctx's end it returns the last error joined
// with ctx's.
func Retry(ctx context.Context, attempt time.Duration, op func(ctx context.Context) error, retryable func(error) bool) error {
	backoff := 50 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		err := op(actx)
		cancel()
		if err == nil || !retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// readAttempt bounds one attempt of a read that [RetryRead] or
// [Engine.LeaderGet] sends again.
var readAttempt = 5 * time.Second

// RetryRead runs read in attempts of 5 s until it is answered or
// ctx ends: a direct get or a KV get sent to a replica that died, or to a
// stream electing a leader, is never answered, and a caller with a long
// deadline would wait it out whole. Only a read unanswered in its attempt
// (a timeout) is sent again; any answer, an error included, is returned.
func RetryRead(ctx context.Context, read func(ctx context.Context) error) error {
	return Retry(ctx, readAttempt, read, Unanswered)
}

// Unanswered reports whether err is a request that got no answer in time.
func Unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}
