package state

import "time"

// WithCheckEvery sets how often a running trigger looks at its consumer.
func WithCheckEvery(d time.Duration) TriggerOption {
	return func(o *triggerOptions) error {
		o.checkEvery = d
		return nil
	}
}
