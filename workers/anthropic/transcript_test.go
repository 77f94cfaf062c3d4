package anthropic_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// The worker keeps the transcript it is sent; a continuation reaches the
// Messages API as the whole transcript; a continuation of a transcript the
// worker does not keep is refused with conflict and calls nothing.
func TestTranscriptContinuation(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, ok(sse(t, "text")))
	en := setup(t, api, config{})

	first := userReq("one")
	first.Transcript = &agent.TranscriptRef{ID: "tr1"}
	res := en.stream(t, first, nil)
	if res.err != nil || res.Reply.TranscriptKept != "tr1" {
		t.Fatalf("first call: reply %+v, err %v", res.Reply, res.err)
	}

	next := userReq("")
	next.Messages = nil
	next.Transcript = &agent.TranscriptRef{ID: "tr1", Base: 1, More: []agent.Message{
		{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("hello")}},
		agent.UserText("two", 2),
	}}
	res = en.stream(t, next, nil)
	if res.err != nil || res.Reply.TranscriptKept != "tr1" {
		t.Fatalf("continuation: reply %+v, err %v", res.Reply, res.err)
	}
	got := api.received()
	if len(got) != 2 {
		t.Fatalf("%d API calls, want 2", len(got))
	}
	var body struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(got[1].body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Messages) != 3 {
		t.Fatalf("the continuation sent %d messages to the API, want the whole 3: %s", len(body.Messages), got[1].body)
	}

	lost := userReq("")
	lost.Messages = nil
	lost.Transcript = &agent.TranscriptRef{ID: "tr9", Base: 4}
	res = en.stream(t, lost, nil)
	if !errors.Is(res.err, wire.ErrConflict) {
		t.Fatalf("continuation of an unknown transcript: %v", res.err)
	}
	bad := userReq("x")
	bad.Transcript = &agent.TranscriptRef{ID: "tr1", Base: 1}
	if res = en.stream(t, bad, nil); !errors.Is(res.err, wire.ErrInvalidPayload) {
		t.Fatalf("continuation with messages: %v", res.err)
	}
	if n := len(api.received()); n != 2 {
		t.Fatalf("refused calls reached the API: %d calls", n)
	}
}
