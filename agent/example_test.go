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

// A provider worker keeps the transcripts it is sent; the next call of the
// same transcript carries only the new messages.
func ExampleTranscripts() {
	kept := agent.NewTranscripts(0, 0)
	first := agent.ProviderRequest{Model: "echo", Messages: []agent.Message{agent.UserText("hi", 1)}, Transcript: &agent.TranscriptRef{ID: "tr1"}}
	msgs, _ := kept.Resolve(first.Transcript, first.Messages)
	fmt.Println("kept:", kept.Keep(first.Transcript, msgs))

	next := agent.ProviderRequest{Model: "echo", Transcript: &agent.TranscriptRef{ID: "tr1", Base: 1, More: []agent.Message{
		{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("hello")}},
		agent.UserText("how are you?", 2),
	}}}
	msgs, err := kept.Resolve(next.Transcript, next.Messages)
	fmt.Println("messages:", len(msgs), err)

	lost := agent.ProviderRequest{Model: "echo", Transcript: &agent.TranscriptRef{ID: "tr2", Base: 3}}
	_, err = kept.Resolve(lost.Transcript, lost.Messages)
	fmt.Println(errors.Is(err, agent.ErrTranscriptNotKept))
	// Output:
	// kept: tr1
	// messages: 3 <nil>
	// true
}
