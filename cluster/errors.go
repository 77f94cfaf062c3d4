package cluster

import "errors"

// Sentinel errors.
var (
	// ErrInvalidConfig wraps every configuration error.
	ErrInvalidConfig = errors.New("cluster: invalid config")
	// ErrNotReady is returned when the server does not accept connections in
	// time or stops at start (a port already in use is the usual cause), and
	// by Node.WaitJetStream when JetStream does not answer in time.
	ErrNotReady = errors.New("cluster: server not ready")
)
