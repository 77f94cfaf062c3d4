package compaction

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/subjects"
)

// Names of the worker on the bus.
const (
	// WorkerName is the name of the module and of its engine worker.
	WorkerName = "compaction"
	// CompactFunction is the function the worker serves.
	CompactFunction = "compaction::compact"
	// LeaseBucket holds one lease per session being compacted (key = the
	// session id), created with a per-key TTL so that a crashed holder's
	// lease expires.
	LeaseBucket = subjects.CompactionLeasesBucket
	// ConsumerName is the durable consumer on each copy of the events
	// stream (subjects.EventStream and its regional copies) that every
	// replica of the worker shares for the threshold trigger.
	ConsumerName = subjects.CompactionConsumer
)

// leaseMarkerTTL is how long the bucket keeps the marker of a lease that
// expired or was released, so that waiters watching the key see it go.
const leaseMarkerTTL = time.Minute

// LeaseBucketConfig is the configuration of [LeaseBucket]: history 1,
// per-key TTLs allowed (LimitMarkerTTL), file storage.
func LeaseBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         LeaseBucket,
		Description:    "iii compaction leases: one compaction per session at a time",
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       replicas,
		LimitMarkerTTL: leaseMarkerTTL,
	}
}
