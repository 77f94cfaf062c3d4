package engine

import "time"

// SetReadAttempt sets the bound of one RetryRead (and LeaderGet) attempt
// for a test and returns what puts it back.
func SetReadAttempt(d time.Duration) (restore func()) {
	old := readAttempt
	readAttempt = d
	return func() { readAttempt = old }
}

// CallerBudget is callerBudget for the tests.
var CallerBudget = callerBudget

// SetTimeoutHeader is setTimeoutHeader for the tests.
var SetTimeoutHeader = setTimeoutHeader
