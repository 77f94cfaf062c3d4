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
		Duplicates:   10 * time.Minute,
	}
}
