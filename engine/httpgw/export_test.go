package httpgw

import "time"

// WithBucketCheck sets how often a gateway checks that the routes bucket
// its watch follows is still the same (default 5s), so tests need not
// wait for it.
func WithBucketCheck(d time.Duration) Option {
	return func(o *options) error {
		o.bucketCheck = d
		return nil
	}
}
