package openai_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/openai"
)

// The worker keeps the transcript it is sent; a continuation reaches the
// API as the whole transcript; a continuation of a transcript the worker
// does not keep is refused with conflict and calls nothing.
func TestTranscriptContinuation(t *testing.T) {
	t.Parallel()
	ev := setup(t, sse(t, "text.sse"), config{})

	first := userReq("one")
	first.Transcript = &agent.TranscriptRef{ID: "tr1"}
	res := ev.stream(t, first)
	if res.err != nil || res.resp.TranscriptKept != "tr1" {
		t.Fatalf("first call: reply %+v, err %v", res.resp, res.err)
	}

	next := userReq("")
	next.Messages = nil
	next.Transcript = &agent.TranscriptRef{ID: "tr1", Base: 1, More: []agent.Message{
		{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("hello")}},
		agent.UserText("two", 2),
	}}
	res = ev.stream(t, next)
	if res.err != nil || res.resp.TranscriptKept != "tr1" {
		t.Fatalf("continuation: reply %+v, err %v", res.resp, res.err)
	}
	got := ev.api.requests()
	if len(got) != 2 {
		t.Fatalf("%d API calls, want 2", len(got))
	}
	var body struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(got[1].Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Messages) != 3 {
		t.Fatalf("the continuation sent %d messages to the API, want the whole 3: %s", len(body.Messages), got[1].Body)
	}

	// Refused before any channel is used: called without one.
	call := func(req agent.ProviderRequest) error {
		req.Channel = "nobody"
		_, err := engine.Call[openai.StreamResponse](t.Context(), ev.e, ev.p.StreamFunction(), req)
		return err
	}
	lost := userReq("")
	lost.Messages = nil
	lost.Transcript = &agent.TranscriptRef{ID: "tr9", Base: 4}
	if err := call(lost); !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("continuation of an unknown transcript: %v", err)
	}
	bad := userReq("x")
	bad.Transcript = &agent.TranscriptRef{ID: "tr1", Base: 1}
	if err := call(bad); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("continuation with messages: %v", err)
	}
	if n := len(ev.api.requests()); n != 2 {
		t.Fatalf("refused calls reached the API: %d calls", n)
	}
}
