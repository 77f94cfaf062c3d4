package engine

import "time"

// SetLeaderAttempt sets the bound of one LeaderGet request for a test and
// returns what puts it back.
func SetLeaderAttempt(d time.Duration) (restore func()) {
	old := leaderAttempt
	leaderAttempt = d
	return func() { leaderAttempt = old }
}

// SetReadAttempt sets the bound of one RetryRead attempt for a test and
// returns what puts it back.
func SetReadAttempt(d time.Duration) (restore func()) {
	old := readAttempt
	readAttempt = d
	return func() { readAttempt = old }
}
