package session

import (
	"context"
	"slices"
	"testing"

	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
)

func TestAppendedPrefix(t *testing.T) {
	msg := func(role agent.Role, text string, ts int64) agent.Message {
		return agent.Message{Role: role, Content: []agent.Content{agent.Text(text)}, Timestamp: ts}
	}
	user, answer := msg(agent.RoleUser, "hi", 1), msg(agent.RoleAssistant, "hello", 2)
	call := msg(agent.RoleAssistant, "calling", 3)
	result := agent.Message{Role: agent.RoleFunctionResult, FunctionCallID: "c1", FunctionID: "f::g", Content: []agent.Content{agent.Text("ok")}, Timestamp: 4}
	older := msg(agent.RoleUser, "before", 0)
	appends := []turn.Effect{
		{Kind: turn.EffectAppendHistory, ID: "r:1:0", Messages: []agent.Message{user}},
		{Kind: turn.EffectAppendHistory, ID: "r:2:0", Messages: []agent.Message{call, result}},
		{Kind: turn.EffectAppendHistory, ID: "r:3:0", Messages: []agent.Message{answer}},
	}
	for _, tc := range []struct {
		name string
		hist []agent.Message
		want int
	}{
		{"nothing stored", []agent.Message{older}, 0},
		{"empty transcript", nil, 0},
		{"first stored", []agent.Message{older, user}, 1},
		{"two stored", []agent.Message{older, user, call, result}, 2},
		{"all stored", []agent.Message{older, user, call, result, answer}, 3},
		{"all stored, nothing before", []agent.Message{user, call, result, answer}, 3},
		{"half of an append is not an append", []agent.Message{older, user, call}, 0},
		{"same text, other time", []agent.Message{older, msg(agent.RoleUser, "hi", 9)}, 0},
		{"stored, then another writer appended", []agent.Message{user, call, result, older}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := appendedPrefix(tc.hist, appends); got != tc.want {
				t.Fatalf("appendedPrefix = %d, want %d", got, tc.want)
			}
		})
	}
	if got := appendedPrefix([]agent.Message{user}, nil); got != 0 {
		t.Fatalf("no appends: %d", got)
	}
}

// A run's start keeps the grain's own transcript when the load answered
// the same one (same id, same length), so the transcript is not copied at
// every run; anything else takes what was loaded.
func TestKeepHistory(t *testing.T) {
	own := make([]agent.Message, 2, 8)
	loaded := []agent.Message{{Role: agent.RoleUser}, {Role: agent.RoleAssistant}}
	for _, tc := range []struct {
		name   string
		histID string
		reread bool
		hist   []agent.Message
		hid    string
		keep   bool
	}{
		{"same id, same length", "h1", false, loaded, "h1", true},
		{"another id", "h1", false, loaded, "h2", false},
		{"no id", "", false, loaded, "", false},
		{"grown elsewhere", "h1", false, append(slices.Clip(loaded), agent.Message{}), "h1", false},
		{"appends not mirrored (reread)", "h1", true, loaded, "h1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &grain{history: own, histID: tc.histID, reread: tc.reread}
			got := g.keepHistory(tc.hist, tc.hid)
			if kept := &got[0] == &own[0]; kept != tc.keep {
				t.Fatalf("kept own = %v, want %v", kept, tc.keep)
			}
		})
	}
}

// storedEvents is an Events port that says which ids its stream holds.
type storedEvents struct {
	Events
	have  map[string]bool
	asked []string
}

func (s *storedEvents) StoredEvents(_ context.Context, _ string, ids []string, _ int64) ([]string, error) {
	s.asked = ids
	var out []string
	for _, id := range ids {
		if s.have[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

// TestStoredEffectsOfEndCalls: a replayed lean failure asks for the ids of
// the ends it builds at delivery, one per call, and skips the stored ones.
func TestStoredEffectsOfEndCalls(t *testing.T) {
	ev := &storedEvents{have: map[string]bool{"r:5:0": true, "r:5:1:0": true}}
	g := &grain{sid: "s", host: &Host{ports: Ports{Events: ev}}}
	rec := turn.Record{SessionID: "s", Outbox: []turn.Effect{
		{Kind: turn.EffectEmit, ID: "r:5:0", Event: &agent.Event{Type: agent.EventTurnStateChanged}},
		{Kind: turn.EffectEndCalls, ID: "r:5:1", Ends: &turn.CallEnds{SessionID: "s", Calls: []string{"c1", "c2"}, Text: "failed"}},
		{Kind: turn.EffectEmit, ID: "r:5:2", Event: &agent.Event{Type: agent.EventMessageComplete}},
	}}
	stored, err := g.storedEffects(context.Background(), rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"r:5:0", "r:5:1:0", "r:5:1:1", "r:5:2"}; !slices.Equal(ev.asked, want) {
		t.Fatalf("asked for %v, want %v", ev.asked, want)
	}
	if !stored["r:5:0"] || !stored["r:5:1:0"] || stored["r:5:1:1"] || stored["r:5:2"] {
		t.Fatalf("stored = %v", stored)
	}
}
