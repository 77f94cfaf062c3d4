package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// A function's skill is in the skills bucket when Register returns, and a
// handler sees the session its caller put in baggage.
func TestSkillPublishedAndSessionFromContext(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	w, err := e.Worker("tools")
	if err != nil {
		t.Fatal(err)
	}
	const doc = "---\ntitle: Who am I\n---\nAnswers the caller's session id.\n"
	err = w.Register(engine.Function{
		ID:    "tools::whoami",
		Skill: doc,
		Handler: func(ctx context.Context, _ *engine.Request) (any, error) {
			sid, mid := engine.SessionFromContext(ctx)
			return map[string]string{"session_id": sid, "message_id": mid}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := e.JetStream().KeyValue(ctx, subjects.SkillsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := subjects.SkillKey("tools", "tools::whoami")
	got, err := kv.Get(ctx, key)
	if err != nil || string(got.Value()) != doc {
		t.Fatalf("skill %q: %v %q", key, err, got)
	}
	var who map[string]string
	if err := e.Trigger(engine.WithSession(ctx, "s-1", "m-1"), "tools::whoami", map[string]any{}, &who); err != nil {
		t.Fatal(err)
	}
	if who["session_id"] != "s-1" || who["message_id"] != "m-1" {
		t.Fatalf("handler saw %v", who)
	}
	if err := e.Trigger(ctx, "tools::whoami", map[string]any{}, &who); err != nil || who["session_id"] != "" {
		t.Fatalf("no session: %v %v", who, err)
	}
	for _, tc := range []struct{ worker, fn, doc string }{
		{"bad.worker", "x::y", "doc"},
		{"tools", "", "doc"},
		{"tools", "x::y", ""},
		{"tools", "x::y", strings.Repeat("a", engine.MaxSkillSize+1)},
	} {
		if err := e.PublishSkill(ctx, tc.worker, tc.fn, tc.doc); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("PublishSkill(%q, %q, %d bytes) = %v", tc.worker, tc.fn, len(tc.doc), err)
		}
	}
}

// A function registered without a skill gets one made of its description
// and schemas, so the directory has a page for every function.
func TestGeneratedSkill(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	w, err := e.Worker("calc")
	if err != nil {
		t.Fatal(err)
	}
	fn := engine.Function{
		ID:            "calc::add",
		Description:   "Add two numbers: \"a\" and b.\nSecond line.",
		RequestSchema: `{"type":"object","properties":{"a":{"type":"number"}}}`,
		Idempotent:    true,
		Handler:       func(context.Context, *engine.Request) (any, error) { return nil, nil },
	}
	if err := w.Register(fn); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := e.JetStream().KeyValue(ctx, subjects.SkillsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := subjects.SkillKey("calc", "calc::add")
	got, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(got.Value())
	if doc != engine.GeneratedSkill(fn) {
		t.Fatalf("published %q, want the generated skill", doc)
	}
	for _, want := range []string{"---\ntitle: calc::add\nfunction_id: calc::add\ndescription: \"Add two numbers: \\\"a\\\" and b.\"\n---\n", "Second line.", "Idempotent", "## Arguments (JSON Schema)\n\n```json\n{\n  \"type\": \"object\""} {
		if !strings.Contains(doc, want) {
			t.Errorf("skill lacks %q:\n%s", want, doc)
		}
	}
}
