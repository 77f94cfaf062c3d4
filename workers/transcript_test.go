package workers_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

func TestStreamRequestSchema(t *testing.T) {
	t.Parallel()
	s := workers.StreamRequestSchema(`"model":{"type":"string"},"messages":{"type":"array","minItems":1,"items":{"type":"object"}}`, `{"type":"object"}`)
	var doc struct {
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal([]byte(s), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	for _, p := range []string{"channel", "model", "messages", "transcript"} {
		if doc.Properties[p] == nil {
			t.Errorf("no property %s", p)
		}
	}
	if strings.Contains(string(doc.Properties["messages"]), "minItems") {
		t.Errorf("messages may be empty in a stream request: %s", doc.Properties["messages"])
	}
	if !json.Valid([]byte("{" + workers.TranscriptKeptProperty + "}")) {
		t.Error("TranscriptKeptProperty is not a JSON member")
	}
}

func TestTranscriptError(t *testing.T) {
	t.Parallel()
	kept := agent.NewTranscripts(0, 0)
	_, err := kept.Resolve(&agent.TranscriptRef{ID: "gone", Base: 2}, nil)
	if !errors.Is(workers.TranscriptError(err), wire.ErrConflict) {
		t.Errorf("not kept → %v", workers.TranscriptError(err))
	}
	_, err = kept.Resolve(&agent.TranscriptRef{ID: "bad id"}, nil)
	if !errors.Is(workers.TranscriptError(err), wire.ErrInvalidPayload) {
		t.Errorf("malformed → %v", workers.TranscriptError(err))
	}
}
