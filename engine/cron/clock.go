package cron

import "time"

// Clock is the scheduler's source of time. Tests inject a fake one so that
// a daily job fires without waiting a day; see [WithClock].
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// After sends the time on the returned channel once d has passed.
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the real clock.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
