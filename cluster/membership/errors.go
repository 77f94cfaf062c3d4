package membership

import "errors"

// Sentinel errors.
var (
	// ErrInvalidOption wraps every error an [Option] returns.
	ErrInvalidOption = errors.New("membership: invalid option")
	// ErrInvalidClusterName is returned when the proto.actor cluster name
	// (cluster.Config.Name) cannot be one KV key token: 1 to 128 characters
	// of [A-Za-z0-9_-].
	ErrInvalidClusterName = errors.New("membership: invalid cluster name")
	// ErrInvalidEntry is returned when a membership entry does not decode
	// or is not valid.
	ErrInvalidEntry = errors.New("membership: invalid entry")
	// ErrAlreadyStarted is returned by a second StartMember/StartClient: a
	// Provider serves one cluster member once.
	ErrAlreadyStarted = errors.New("membership: provider already started")
	// ErrNotRunning is returned by [Provider.Drain] on a provider that is
	// not running as a member (not started, started as a client, or shut
	// down).
	ErrNotRunning = errors.New("membership: provider is not running as a member")
	// ErrExpelled is returned by [Provider.Drain] after the member's own
	// entry disappeared while it was running ([Provider.Expelled]).
	ErrExpelled = errors.New("membership: member was expelled from the cluster")
)
