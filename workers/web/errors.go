package web

import (
	"errors"

	"github.com/iii-on-nats/iii/workers"
)

// Sentinel errors. A fetch answers with *wire.Error values; these are
// their local causes, for errors.Is.
var (
	// ErrStarted is returned by [Worker.Start] when called twice.
	ErrStarted = workers.ErrStarted
	// ErrRefusedAddress is the cause of a forbidden fetch: the host
	// resolved only to addresses the fetcher refuses (loopback, private,
	// link-local and the other internal ranges; see [Fetcher]).
	ErrRefusedAddress = errors.New("web: address refused")
)
