package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
)

func TestRetry(t *testing.T) {
	t.Parallel()
	errFlaky, errFinal := errors.New("flaky"), errors.New("final")
	retryable := func(err error) bool { return errors.Is(err, errFlaky) }
	for _, tc := range []struct {
		name    string
		fails   []error // what the attempts return, in order; then nil
		ctx     time.Duration
		want    error
		attempt int // attempts made
	}{
		{"first try", nil, time.Second, nil, 1},
		{"after two flaky", []error{errFlaky, errFlaky}, 5 * time.Second, nil, 3},
		{"final stops", []error{errFlaky, errFinal, errFlaky}, 5 * time.Second, errFinal, 2},
		{"ctx ends", []error{errFlaky, errFlaky, errFlaky, errFlaky, errFlaky, errFlaky}, 120 * time.Millisecond, context.DeadlineExceeded, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), tc.ctx)
			defer cancel()
			n := 0
			err := engine.Retry(ctx, 50*time.Millisecond, func(actx context.Context) error {
				if dl, ok := actx.Deadline(); !ok || time.Until(dl) > 50*time.Millisecond {
					t.Errorf("attempt %d: deadline %v, want one attempt's", n, dl)
				}
				n++
				if n <= len(tc.fails) {
					return tc.fails[n-1]
				}
				return nil
			}, retryable)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if tc.attempt > 0 && n != tc.attempt {
				t.Fatalf("%d attempts, want %d", n, tc.attempt)
			}
			if tc.want == context.DeadlineExceeded && !errors.Is(err, errFlaky) {
				t.Fatalf("the last attempt's error is lost: %v", err)
			}
		})
	}
}

// TestRetryRead: a read unanswered in its attempt is sent again; an
// answer, even an error, is not.
func TestRetryRead(t *testing.T) {
	defer engine.SetReadAttempt(50 * time.Millisecond)()
	errNotFound := errors.New("not found")
	for _, tc := range []struct {
		name       string
		unanswered int   // attempts that get no answer
		answer     error // then
		want       error
		attempts   int
	}{
		{"answered", 0, nil, nil, 1},
		{"unanswered twice", 2, nil, nil, 3},
		{"an error answer is final", 1, errNotFound, errNotFound, 2},
		{"timeout error", 0, nats.ErrTimeout, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			n := 0
			err := engine.RetryRead(ctx, func(actx context.Context) error {
				n++
				switch {
				case n <= tc.unanswered:
					<-actx.Done()
					return actx.Err()
				case n == tc.unanswered+1 && tc.answer == nats.ErrTimeout:
					return nats.ErrTimeout
				case n == tc.unanswered+1:
					return tc.answer
				}
				return nil
			})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) || n != tc.attempts {
				t.Fatalf("err %v after %d attempts; want %v after %d", err, n, tc.want, tc.attempts)
			}
		})
	}
}
