package orchestrator

import (
	"errors"
	"slices"
	"strconv"
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

func TestStoredPrefix(t *testing.T) {
	ids := []string{"run1:3:1", "run1:3:2", "run1:4:0", "run1:4:1"}
	for _, tc := range []struct {
		name, last string
		want       int
	}{
		{"the last one", "run1:4:1", 4},
		{"one of them", "run1:3:2", 2},
		{"the first", "run1:3:1", 1},
		{"an update of the outbox's last step", "run1:4:Qx7:u3", 4},
		{"an update of an earlier step", "run1:3:Qx7:u1", 2},
		{"an update of a later step", "run1:9:Qx7:u1", 4},
		{"an earlier effect", "run1:2:5", 0},
		{"an effect of the step not in the outbox", "run1:3:0", 0},
		{"an effect past the outbox in its step", "run1:4:7", 4},
		{"a later step", "run1:5:0", 4},
		{"an earlier run", "run0:9:0", 0},
		{"no id", "", 0},
		{"garbage", "a:b:c", 0},
		{"not an update", "run1:4:Qx7:x3", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := storedPrefix(ids, tc.last); got != tc.want {
				t.Fatalf("storedPrefix(%q) = %d, want %d", tc.last, got, tc.want)
			}
		})
	}
	if got := storedPrefix(nil, "run1:4:1"); got != 0 {
		t.Fatalf("no ids: %d", got)
	}
}

func FuzzEventPlace(f *testing.F) {
	for _, s := range []string{"run1:3:1", "run1:4:Qx7:u3", "", ":::", "a:1:2:u", "r:18446744073709551615:0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		run, step, idx, ok := eventPlace(id)
		if !ok {
			return
		}
		if run == "" {
			t.Fatalf("%q: parsed with an empty run", id)
		}
		if got := storedPrefix([]string{id}, id); got != 1 {
			t.Fatalf("%q: storedPrefix of itself = %d", id, got)
		}
		if run2, step2, idx2, ok2 := eventPlace(run + ":" + strconv.FormatUint(step, 10) + ":" + strconv.FormatUint(min(idx, 1<<30), 10)); !ok2 || run2 != run || step2 != step || idx2 != min(idx, 1<<30) {
			t.Fatalf("%q: an effect id of the same place does not parse back", id)
		}
	})
}
