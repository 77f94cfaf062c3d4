package orchestrator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// TestAfterHooksSeeTheCappedResult: the after-call hooks are asked with
// the result as the model will see it, capped. Before, they were asked
// with the whole result: one near the max payload, with its arguments,
// made a hook message too large to publish, the round was skipped, and
// a redacting hook's redaction with it (the result went to the model
// unredacted).
func TestAfterHooksSeeTheCappedResult(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStackEnv(t, enginetest.NewEngine(t, ns), allowAll, nil, nil)
	w, err := s.e.Worker("big")
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.Repeat("secret ", 950<<10/7)
	if err := w.Register(engine.Function{ID: "big::result", Handler: engine.Typed(func(context.Context, map[string]any) (map[string]any, error) {
		return map[string]any{"text": secret}, nil
	})}); err != nil {
		t.Fatal(err)
	}
	nc := enginetest.Connect(t, ns)
	if _, err := nc.Subscribe("iii.hook.agent.after_function_call", func(m *nats.Msg) {
		b, _ := json.Marshal(map[string]any{"result": map[string]any{"content": []map[string]any{{"type": "text", "text": "[redacted by hook]"}}}})
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("p", 100<<10)
	startRun(t, s.e, "hbig", `/call big::result {"pad":"`+pad+`"}`)
	r := onlyResult(t, events(t, s.e, "hbig", 30*time.Second))
	if len(r.Result.Content) == 0 || r.Result.Content[0].Text != "[redacted by hook]" {
		text := ""
		if len(r.Result.Content) > 0 {
			text = r.Result.Content[0].Text
		}
		t.Fatalf("result %.80q..., want the hook's redaction", text)
	}
}
