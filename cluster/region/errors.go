package region

import "errors"

// Sentinel errors. Every error this package returns wraps one of them (or
// [engine.ErrInvalidOption]) so callers can branch with errors.Is.
var (
	// ErrInvalidRegion is returned for a region name that is empty, not a
	// valid cluster name, or (for [Takeover]) equal to the lost region.
	ErrInvalidRegion = errors.New("region: invalid region")
	// ErrUnknownRegion is returned when the server has no JetStream cluster
	// of that name to place a stream in.
	ErrUnknownRegion = errors.New("region: unknown region")
	// ErrNoMirrors is returned by [Lag] and [Takeover] when the region holds
	// no mirror to read from or to promote.
	ErrNoMirrors = errors.New("region: no mirrors")
	// ErrOffline is returned by [Home] when every peer of the stream is
	// offline: its region is down (or cut off).
	ErrOffline = errors.New("region: stream offline")
	// ErrUnreachable is returned when no server answers for a stream in
	// time: its region crashed or is cut off (nats-server reports a silent
	// server offline only after about 150 s).
	ErrUnreachable = errors.New("region: stream unreachable")
	// ErrOriginAlive is returned (per stream, inside [Takeover]'s joined
	// error) when an origin still has a leader: a live home is never taken
	// over, since its writes after the takeover would be lost.
	ErrOriginAlive = errors.New("region: origin still online")
	// ErrNoQuorum is returned when the JetStream meta group has no leader,
	// so no stream can be created, updated or deleted. With two data
	// regions, a third (witness) cluster keeps the meta quorum when one
	// region is lost.
	ErrNoQuorum = errors.New("region: JetStream meta group has no quorum")
	// ErrNotClustered is returned for an origin on a server without a
	// cluster name: regions need JetStream clusters joined by gateways.
	ErrNotClustered = errors.New("region: not a JetStream cluster")
	// ErrConflict is returned when a stream already uses a mirror's name but
	// is not that mirror.
	ErrConflict = errors.New("region: name conflict")
)
