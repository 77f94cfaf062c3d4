package orchestrator_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/enginetest"
)

// Every function of the orchestrator lists a request schema (what
// discovery shows a client or a model), and each schema requires the
// fields its request's Validate requires.
func TestFunctionsListSchemas(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	fns, err := s.e.FunctionsList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"run::start":           {"session_id", "provider", "model", "messages"},
		"run::abort":           {"session_id"},
		"turn::get_state":      {"session_id"},
		"harness::trigger":     {"payload"},
		"agent::trigger":       {"session_id", "function"},
		"session::inbox_push":  {"session_id", "name", "item"},
		"session::inbox_drain": {"session_id", "name"},
	}
	seen := map[string]bool{}
	for _, fn := range fns {
		if fn.Worker != "orchestrator" {
			continue
		}
		seen[fn.ID] = true
		req, ok := want[fn.ID]
		if !ok {
			t.Errorf("%s: a function of the orchestrator this test does not know", fn.ID)
			continue
		}
		var sch struct {
			Type       string                     `json:"type"`
			Required   []string                   `json:"required"`
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if len(fn.RequestSchema) == 0 {
			t.Errorf("%s lists no request schema", fn.ID)
			continue
		}
		if err := json.Unmarshal(fn.RequestSchema, &sch); err != nil || sch.Type != "object" {
			t.Errorf("%s: request schema %s: %v", fn.ID, fn.RequestSchema, err)
			continue
		}
		if !slices.Equal(sch.Required, req) {
			t.Errorf("%s requires %v, want %v", fn.ID, sch.Required, req)
		}
		for _, f := range sch.Required {
			if _, ok := sch.Properties[f]; !ok {
				t.Errorf("%s requires %s, which its properties do not describe", fn.ID, f)
			}
		}
		if strings.Contains(string(fn.RequestSchema), `"session_id"`) && !strings.Contains(string(fn.RequestSchema), `"pattern"`) {
			t.Errorf("%s: session_id without the session id pattern", fn.ID)
		}
	}
	for id := range want {
		if !seen[id] {
			t.Errorf("%s is not listed", id)
		}
	}
}
