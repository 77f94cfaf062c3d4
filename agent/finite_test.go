package agent_test

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

func TestFiniteNumbers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		in      any
		want    string
		changed bool
	}{
		{"nil", nil, `null`, false},
		{"finite", map[string]any{"a": 1.5, "b": []any{int64(2), "x"}}, `{"a":1.5,"b":[2,"x"]}`, false},
		{"nan", math.NaN(), `"NaN"`, true},
		{"float32 inf", float32(math.Inf(-1)), `"-Infinity"`, true},
		{"nested", map[string]any{"a": []any{math.Inf(1), map[string]any{"b": math.NaN()}}}, `{"a":["Infinity",{"b":"NaN"}]}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changed := agent.FiniteNumbers(tc.in)
			b, err := json.Marshal(got)
			if err != nil || string(b) != tc.want || changed != tc.changed {
				t.Errorf("FiniteNumbers = %s (%v), changed %v; want %s, %v", b, err, changed, tc.want, tc.changed)
			}
		})
	}
}

func TestMessageValidateNonFinite(t *testing.T) {
	t.Parallel()
	for name, m := range map[string]agent.Message{
		"details":   {Role: agent.RoleUser, Content: []agent.Content{agent.Text("a")}, Details: map[string]any{"x": math.NaN()}},
		"arguments": {Role: agent.RoleAssistant, Content: []agent.Content{{Type: agent.ContentFunctionCall, ID: "c1", FunctionID: "f::g", Arguments: map[string]any{"n": []any{math.Inf(1)}}}}},
		"cost":      {Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("a")}, Usage: &agent.Usage{CostUSD: math.NaN()}},
	} {
		if err := m.Validate(); !errors.Is(err, agent.ErrInvalidMessage) {
			t.Errorf("%s: Validate = %v, want ErrInvalidMessage", name, err)
		}
	}
}
