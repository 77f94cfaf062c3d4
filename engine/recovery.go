package engine

import "time"

// RecoveryPace paces the re-creation of something a running worker lost
// under it (a JetStream consumer deleted, its stream re-created): never at
// once, Base before the first attempt of a loss, doubling after each failed
// attempt and for a loss that follows the last recovery within Max (a
// consumer deleted again and again), up to Max. The zero value is not
// usable; set Base and Max. Not safe for concurrent use: one supervisor
// owns it.
type RecoveryPace struct {
	Base, Max time.Duration

	delay    time.Duration
	restored time.Time
}

// Lost is the wait before the first attempt to recover from a new loss.
func (p *RecoveryPace) Lost() time.Duration {
	if time.Since(p.restored) < p.Max {
		p.delay = min(max(2*p.delay, p.Base), p.Max)
	} else {
		p.delay = min(p.Base, p.Max)
	}
	return p.delay
}

// Failed is the wait before the next attempt after one that failed.
func (p *RecoveryPace) Failed() time.Duration {
	p.delay = min(max(2*p.delay, p.Base), p.Max)
	return p.delay
}

// LostConsumerPace is the pacing of a JetStream consumer re-created
// after it was lost (deleted, or with its stream): half a second before
// the first attempt, up to 30 s. Never at once: the server tells the pull
// requests of a deleted consumer before it removes the consumer's files,
// and a consumer created again under the same name meanwhile loses its
// files to that removal.
func LostConsumerPace() RecoveryPace {
	return RecoveryPace{Base: 500 * time.Millisecond, Max: 30 * time.Second}
}

// ConsumerCheckEvery is how often a supervised consumer asks for its
// state, to notice a deletion its consume did not report.
const ConsumerCheckEvery = 30 * time.Second

// Recovered records a recovery: a loss soon after waits longer.
func (p *RecoveryPace) Recovered() { p.restored = time.Now() }
