package orchestrator

import (
	"errors"
	"slices"
	"testing"

	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/wire"
)

// How a failed provider call is classified: retried (transient) or not.
// No responders is transient: run::start refuses a provider nobody
// serves, so mid-run it means the provider's workers went away (a node
// died) and the model call is tried again.
func TestProviderCallFailed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		want agent.ErrorKind
	}{
		{"no responders", wire.Wrap(wire.CodeFunctionNotFound, nil, "no worker"), agent.ErrorTransient},
		{"unavailable", wire.Errorf(wire.CodeUnavailable, "down"), agent.ErrorTransient},
		{"invalid payload", wire.Errorf(wire.CodeInvalidPayload, "bad"), agent.ErrorPermanent},
		{"not a wire error", errors.New("boom"), agent.ErrorPermanent},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, ok := providerCallFailed("scripted", c.err).(turn.ModelFailed)
			if !ok || f.Kind != c.want {
				t.Fatalf("%v → %+v, want kind %s", c.err, f, c.want)
			}
		})
	}
}

// A provider's frame is one model event or an array of them, in either
// codec.
func TestDecodeModelEvents(t *testing.T) {
	one := agent.ModelEvent{Type: agent.ModelTextDelta, Delta: "hi"}
	two := []agent.ModelEvent{one, {Type: agent.ModelStop, StopReason: agent.StopEnd}}
	for _, codec := range []wire.Codec{wire.Msgpack, wire.JSON} {
		for _, tc := range []struct {
			name string
			body any
			want []agent.ModelEvent
		}{
			{"single", one, []agent.ModelEvent{one}},
			{"batch", two, two},
		} {
			data, err := codec.Marshal(tc.body)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeModelEvents(channel.Frame{Seq: 1, Data: data, Codec: codec})
			if err != nil || !slices.EqualFunc(got, tc.want, func(a, b agent.ModelEvent) bool {
				return a.Type == b.Type && a.Delta == b.Delta && a.StopReason == b.StopReason
			}) {
				t.Errorf("%s %s: %+v, %v", codec.ContentType(), tc.name, got, err)
			}
		}
	}
	if _, err := decodeModelEvents(channel.Frame{Seq: 1, Data: []byte(" [1]"), Codec: wire.JSON}); err == nil {
		t.Error("an array of numbers decoded as events")
	}
}
