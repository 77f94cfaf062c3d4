package queue

import "time"

// WithCheckEvery sets how often a Consumer looks at its JetStream consumer.
func WithCheckEvery(d time.Duration) Option {
	return func(o *options) error {
		o.checkEvery = d
		return nil
	}
}
