package orchestrator_test

import (
	"context"
	"testing"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/orchestrator"
)

// The event stream sets its own consumer limit (every client following
// events holds a consumer; nats-server 2.15 would allow 1,000), from
// orchestrator.event_max_consumers; a bad value is refused at Provision.
func TestEventStreamConsumerLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, value string
		want        int
		bad         bool
	}{
		{name: "default", want: orchestrator.DefaultEventMaxConsumers},
		{name: "set", value: "5", want: 5},
		{name: "zero", value: "0", bad: true},
		{name: "not a number", value: "many", bad: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			o := orchestrator.New()
			env := workers.Env{Settings: map[string]map[string]string{}}
			if c.value != "" {
				env.Settings["orchestrator"] = map[string]string{orchestrator.SettingEventMaxConsumers: c.value}
			}
			err := o.Provision(ctx, env)
			if c.bad {
				if err == nil {
					t.Fatalf("event_max_consumers=%q accepted", c.value)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			e := enginetest.NewEngine(t, enginetest.RunServer(t))
			if err := o.Start(ctx, e); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = o.Close(context.Background()) })
			s, err := e.JetStream().Stream(ctx, subjects.EventStream)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.CachedInfo().Config.MaxConsumers; got != c.want {
				t.Fatalf("max consumers %d, want %d", got, c.want)
			}
		})
	}
}

// orchestrator.max_result_bytes takes a positive number of bytes.
func TestSettingMaxResultBytes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		value string
		bad   bool
	}{
		{value: "200000"},
		{value: "1"},
		{value: "0", bad: true},
		{value: "-5", bad: true},
		{value: "1MiB", bad: true},
	} {
		o := orchestrator.New()
		err := o.Provision(context.Background(), workers.Env{Settings: map[string]map[string]string{
			"orchestrator": {orchestrator.SettingMaxResultBytes: c.value},
		}})
		if (err != nil) != c.bad {
			t.Errorf("max_result_bytes=%q: %v", c.value, err)
		}
	}
}
