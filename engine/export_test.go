package engine

import (
	"slices"
	"time"
)

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

// SetDiscoverPendingBytes sets the bound of the replies a discovery holds
// unread, for a test that runs alone, and returns what puts it back.
func SetDiscoverPendingBytes(n int) (restore func()) {
	old := discoverPendingBytes
	discoverPendingBytes = n
	return func() { discoverPendingBytes = old }
}

// LocalIDs is the ids of the functions w is listed with for local calls,
// sorted.
func LocalIDs(w *Worker) []string {
	locals.mu.RLock()
	defer locals.mu.RUnlock()
	var ids []string
	for _, lfs := range locals.m {
		for _, lf := range lfs {
			if lf.w == w {
				ids = append(ids, lf.f.ID)
			}
		}
	}
	slices.Sort(ids)
	return ids
}
