package placement

import "errors"

// Sentinel errors.
var (
	// ErrInvalidKey is returned by [ParseKey] for a string [Key] cannot
	// produce.
	ErrInvalidKey = errors.New("placement: invalid key")
	// ErrKeyNotReversible is returned by [ParseKey] when the kind or identity
	// was too long and only its hash is in the key.
	ErrKeyNotReversible = errors.New("placement: key holds a hash")
	// ErrNoOwner is returned by [Owner] when no member owns the grain (it is
	// not activated, or it passivated).
	ErrNoOwner = errors.New("placement: grain has no owner")
	// ErrInvalidRecord is returned for an ownership value that is not a
	// JSON owner record.
	ErrInvalidRecord = errors.New("placement: invalid owner record")
	// ErrNotMember is returned by [Lookup.Drain] on a lookup that does not
	// host grains: not set up yet, or set up for a cluster client.
	ErrNotMember = errors.New("placement: not a cluster member")
)
