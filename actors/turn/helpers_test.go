package turn

import (
	"encoding/json"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

const (
	testSession = "s1"
	testRun     = "r1"
	t0          = int64(1000) // the test clock starts here and ticks 10 ms per input
)

func runStart(maxTurns int) agent.RunStart {
	return agent.RunStart{
		SessionID: testSession,
		Provider:  "scripted",
		Model:     "echo-1",
		MaxTurns:  maxTurns,
		Messages:  []agent.Message{agent.UserText("list /tmp", 1)},
	}
}

func call(id, fn string, args map[string]any) agent.Content {
	return agent.Content{Type: agent.ContentFunctionCall, ID: id, FunctionID: fn, Arguments: args}
}

// answer is an assistant message with text (if any) followed by calls.
func answer(text string, calls ...agent.Content) agent.Message {
	m := agent.Message{Role: agent.RoleAssistant, Usage: &agent.Usage{InputTokens: 10, OutputTokens: 5}}
	if text != "" {
		m.Content = append(m.Content, agent.Text(text))
	}
	m.Content = append(m.Content, calls...)
	return m
}

func user(text string) agent.Message { return agent.UserText(text, 0) }

// machine drives a record through inputs on the test clock, delivering the
// outbox after every input as a grain would.
type machine struct {
	t   testing.TB
	rec Record
	now int64
}

func start(t testing.TB, maxTurns int) *machine {
	t.Helper()
	rec, _, err := New(runStart(maxTurns), testRun, t0)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &machine{t: t, rec: Delivered(rec), now: t0}
}

func (m *machine) apply(in Input) []Effect {
	m.t.Helper()
	m.now += 10
	rec, effects, err := Apply(m.rec, in, m.now)
	if err != nil {
		m.t.Fatalf("Apply(%s) in %s: %v", InputName(in), m.rec.State, err)
	}
	m.rec = Delivered(rec)
	return effects
}

func (m *machine) applyAll(ins ...Input) *machine {
	m.t.Helper()
	for _, in := range ins {
		m.apply(in)
	}
	return m
}

// events returns the events of effects.
// events are the events effects publish, in order (an end_calls effect's
// as the grain builds them).
func events(effects []Effect) []agent.Event {
	var evs []agent.Event
	for _, e := range effects {
		if e.Kind == EffectEmit {
			evs = append(evs, *e.Event)
		}
		for _, ev := range e.EndEvents() {
			evs = append(evs, ev)
		}
	}
	return evs
}

func eventTypes(effects []Effect) []agent.EventType {
	var ts []agent.EventType
	for _, e := range events(effects) {
		ts = append(ts, e.Type)
	}
	return ts
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
