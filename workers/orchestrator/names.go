package orchestrator

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/subjects"
)

func stepStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        subjects.StepStream,
		Description: "iii turn steps: wakes for session grains",
		Subjects:    []string{subjects.StepSubjectPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		Duplicates:  2 * time.Minute,
	}
}

// eventDuplicateWindow is the event stream's duplicate window (2 minutes
// before stop 28, 10 before stop 23). It must stay well above
// replayMargin: a replay trusts the window only for a record written less
// than eventDuplicateWindow - replayMargin ago.
const eventDuplicateWindow = 30 * time.Second

func eventStreamConfig(replicas int, maxAge time.Duration, maxConsumers int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:         subjects.EventStream,
		Description:  "iii session events (SPEC §6)",
		Subjects:     []string{subjects.EventSubjectPrefix + ">"},
		Retention:    jetstream.LimitsPolicy,
		Storage:      jetstream.FileStorage,
		Replicas:     replicas,
		MaxAge:       maxAge,
		MaxConsumers: maxConsumers,
		// A replay past the window skips the events it finds stored
		// since the record's write (publisher.StoredEvents), so the window
		// need only cover a replay soon after a crash (a node restarted
		// at once) and a record just written (every run start on a grain
		// cluster, which loads the record from KV); each id costs the
		// server ~120 B for as long as it is kept, 16 ids a turn
		// (docs/PERFORMANCE.md, "The event stream's duplicate window").
		Duplicates: eventDuplicateWindow,
	}
}
