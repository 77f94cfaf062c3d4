package cluster

import "errors"

// Sentinel errors.
var (
	// ErrInvalidConfig wraps every configuration error.
	ErrInvalidConfig = errors.New("cluster: invalid config")
	// ErrNotReady is returned when the server does not accept connections in
	// time (a port already in use is the usual cause).
	ErrNotReady = errors.New("cluster: server not ready")
)
