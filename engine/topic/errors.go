package topic

import "github.com/iii-on-nats/iii/engine/queue"

// ErrNotDrained is returned by Close when its context ended before the
// subscription finished its work; it is queue's sentinel, so one
// errors.Is check covers queues and topics.
var ErrNotDrained = queue.ErrNotDrained
