package scripted_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/scripted"
)

// The worker keeps what it is sent and answers a continuation as the
// whole transcript; the new messages of a continuation are validated, a
// miss is conflict.
func TestTranscriptContinuation(t *testing.T) {
	t.Parallel()
	e, _, _ := setup(t)
	first := scripted.StreamRequest{Model: scripted.EchoModel, Messages: []agent.Message{agent.UserText("one", 1)}, Transcript: &agent.TranscriptRef{ID: "tr1"}}
	res := stream(t, e, first)
	if res.err != nil || res.resp.TranscriptKept != "tr1" {
		t.Fatalf("first call: %+v, %v", res.resp, res.err)
	}
	next := scripted.StreamRequest{Model: scripted.EchoModel, Transcript: &agent.TranscriptRef{ID: "tr1", Base: 1, More: []agent.Message{
		{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("one")}},
		agent.UserText("two", 2),
	}}}
	res = stream(t, e, next)
	if res.err != nil || res.resp.TranscriptKept != "tr1" {
		t.Fatalf("continuation: %+v, %v", res.resp, res.err)
	}
	var text strings.Builder
	for _, ev := range res.events {
		text.WriteString(ev.Delta)
	}
	if !strings.Contains(text.String(), "two") {
		t.Fatalf("continuation answered %q, not the latest user message", text.String())
	}
	// A continuation counts the input as the whole transcript would
	// (it sums only the new messages on top of the kept ones' count).
	whole := scripted.StreamRequest{Model: scripted.EchoModel, Messages: append([]agent.Message{agent.UserText("one", 1)}, next.Transcript.More...)}
	if got, want := inputTokens(t, res), inputTokens(t, stream(t, e, whole)); got != want {
		t.Fatalf("continuation's input tokens %d, the whole transcript's %d", got, want)
	}
	call := func(req scripted.StreamRequest) error {
		req.Channel = "nobody"
		_, err := engine.Call[scripted.StreamResponse](t.Context(), e, scripted.StreamFunction, req)
		return err
	}
	bad := scripted.StreamRequest{Model: scripted.EchoModel, Transcript: &agent.TranscriptRef{ID: "tr1", Base: 3, More: []agent.Message{{Role: "bogus"}}}}
	if err := call(bad); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("an invalid new message: %v", err)
	}
	lost := scripted.StreamRequest{Model: scripted.EchoModel, Transcript: &agent.TranscriptRef{ID: "tr2", Base: 1, More: []agent.Message{agent.UserText("x", 3)}}}
	if err := call(lost); !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("a continuation of nothing kept: %v", err)
	}
}

// inputTokens is the usage a stream's done event reports.
func inputTokens(t *testing.T, r result) int64 {
	t.Helper()
	for i := len(r.events) - 1; i >= 0; i-- {
		if m := r.events[i].Message; m != nil && m.Usage != nil {
			return m.Usage.InputTokens
		}
	}
	t.Fatalf("no usage in %d events", len(r.events))
	return 0
}
