package orchestrator

import (
	"testing"

	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
)

// A decision written for a call that is recorded but not yet written
// parked is kept for the park to read; one nobody can use is not.
func TestMayPark(t *testing.T) {
	t.Parallel()
	batch := func(state agent.TurnState, c turn.Call, effects map[string]turn.CallEffect, parked ...string) turn.Record {
		rec := turn.Record{State: state, Work: &turn.Work{Prepared: []turn.Call{c}, Effects: effects}}
		for _, id := range parked {
			rec.AwaitingApproval = append(rec.AwaitingApproval, agent.PendingApproval{FunctionCallID: id})
		}
		return rec
	}
	call := turn.Call{ID: "c1", FunctionID: "math::add"}
	approved := call
	approved.Approved = true
	tests := []struct {
		name string
		rec  turn.Record
		want bool
	}{
		{"being gated", batch(agent.StateFunctionExecute, call, nil), true},
		{"parked already", batch(agent.StateFunctionExecute, call, nil, "c1"), false},
		{"approved", batch(agent.StateFunctionExecute, approved, nil), false},
		{"started", batch(agent.StateFunctionExecute, call, map[string]turn.CallEffect{"c1": {Status: turn.StatusStarted}}), false},
		{"other call", batch(agent.StateFunctionExecute, turn.Call{ID: "c2"}, nil), false},
		{"streaming", batch(agent.StateAssistantStreaming, call, nil), false},
		{"stopped", batch(agent.StateStopped, call, nil), false},
		{"no batch", turn.Record{State: agent.StateFunctionExecute}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mayPark(tt.rec, "c1"); got != tt.want {
				t.Fatalf("mayPark = %v, want %v", got, tt.want)
			}
		})
	}
}
