package agent_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/iii-on-nats/iii/agent"
)

// A run::start request is validated before anything is stored; a bad one
// wraps ErrInvalidRunStart (invalid_payload on the wire).
func ExampleRunStart_Validate() {
	rs := agent.RunStart{
		SessionID: "s1", Provider: "anthropic", Model: "claude-sonnet-4",
		Messages: []agent.Message{agent.UserText("list my files", 1_700_000_000_000)},
	}
	fmt.Println(rs.Validate())

	rs.SessionID = "s1.evil.more"
	err := rs.Validate()
	fmt.Println(errors.Is(err, agent.ErrInvalidRunStart), errors.Is(err, agent.ErrInvalidID))
	// Output:
	// <nil>
	// true true
}

// The calls of an assistant message, in the model's order, and the result
// message that answers one of them.
func ExampleMessage_FunctionCalls() {
	var m agent.Message
	_ = json.Unmarshal([]byte(`{"role":"assistant","stop_reason":"function_call","content":[
		{"type":"text","text":"Let me look."},
		{"type":"function_call","id":"toolu_1","function_id":"fs::read","arguments":{"path":"/tmp"}}]}`), &m)
	for _, c := range m.FunctionCalls() {
		fmt.Println(c.ID, c.FunctionID, c.Arguments["path"])
		res := agent.TextResult("a.txt").Message(c.ID, c.FunctionID, 0)
		b, _ := json.Marshal(res)
		fmt.Println(string(b))
	}
	// Output:
	// toolu_1 fs::read /tmp
	// {"role":"function_result","content":[{"type":"text","text":"a.txt"}],"function_call_id":"toolu_1","function_id":"fs::read"}
}
