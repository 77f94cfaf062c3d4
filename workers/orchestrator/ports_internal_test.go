package orchestrator

import (
	"errors"
	"testing"

	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
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
