package hooks

import "github.com/iii-on-nats/iii/workers"

// ErrStarted is returned by [Worker.Start] when called twice.
var ErrStarted = workers.ErrStarted
