package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

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
	for _, want := range []string{"---\ntitle: \"calc::add\"\nfunction_id: \"calc::add\"\ndescription: \"Add two numbers: \\\"a\\\" and b.\"\n---\n", "Second line.", "Idempotent", "## Arguments (JSON Schema)\n\n```json\n{\n  \"type\": \"object\""} {
		if !strings.Contains(doc, want) {
			t.Errorf("skill lacks %q:\n%s", want, doc)
		}
	}
}

// A generated skill's frontmatter reads back as the function's id whatever
// characters the id holds, so the directory shows its title and
// description instead of serving the frontmatter as body.
func TestGeneratedSkillOddIDs(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"calc::add", "x::y:", "'x::y", "\"x", "@x::y", "%x", "!x", "&x", "*x", "[x]", "{x}", "|x", ">x", "true", "null", "~", "x::#y"} {
		doc := engine.GeneratedSkill(engine.Function{ID: id, Description: "Do it. Then more."})
		rest, ok := strings.CutPrefix(doc, "---\n")
		fm, _, closed := strings.Cut(rest, "\n---\n")
		if !ok || !closed {
			t.Fatalf("%q: no frontmatter in %q", id, doc)
		}
		var got struct {
			Title       string `yaml:"title"`
			FunctionID  string `yaml:"function_id"`
			Description string `yaml:"description"`
		}
		if err := yaml.Unmarshal([]byte(fm), &got); err != nil {
			t.Errorf("%q: frontmatter does not parse: %v\n%s", id, err, fm)
			continue
		}
		if got.Title != id || got.FunctionID != id || got.Description != "Do it. Then more." {
			t.Errorf("%q: frontmatter reads %+v", id, got)
		}
	}
}

// A generated skill never exceeds MaxSkillSize: schemas too large indented
// are shown compact, then left out, and a huge description is cut; the
// function's page is published either way.
func TestGeneratedSkillBounded(t *testing.T) {
	t.Parallel()
	// A schema of ~40 KB compact, well over 64 KB indented.
	var props []string
	for i := range 600 {
		props = append(props, fmt.Sprintf(`"field_%03d":{"type":"object","properties":{"a":{"type":"string"}}}`, i))
	}
	big := `{"type":"object","properties":{` + strings.Join(props, ",") + `}}`
	huge := strings.Repeat("é", engine.MaxSkillSize) // 2 bytes a character
	for _, c := range []struct {
		name     string
		fn       engine.Function
		contains []string
		lacks    []string
	}{
		{"compact schema", engine.Function{ID: "big::schema", Description: "Big.", RequestSchema: big},
			[]string{"## Arguments (JSON Schema)", `"field_599":{"type":"object"`}, nil},
		{"no schema", engine.Function{ID: "big::both", Description: "Big.", RequestSchema: big, ResponseSchema: big},
			[]string{"description: \"Big.\""}, []string{"JSON Schema"}},
		{"cut description", engine.Function{ID: "big::desc", Description: huge, RequestSchema: big},
			[]string{"ééé…"}, []string{"JSON Schema"}},
	} {
		doc := engine.GeneratedSkill(c.fn)
		if len(doc) > engine.MaxSkillSize || !utf8.ValidString(doc) {
			t.Errorf("%s: %d bytes (max %d), valid UTF-8 %v", c.name, len(doc), engine.MaxSkillSize, utf8.ValidString(doc))
		}
		for _, want := range c.contains {
			if !strings.Contains(doc, want) {
				t.Errorf("%s: lacks %q", c.name, want)
			}
		}
		for _, not := range c.lacks {
			if strings.Contains(doc, not) {
				t.Errorf("%s: has %q", c.name, not)
			}
		}
	}

	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	w, err := e.Worker("big")
	if err != nil {
		t.Fatal(err)
	}
	fn := engine.Function{ID: "big::schema", Description: "Big.", RequestSchema: big,
		Handler: func(context.Context, *engine.Request) (any, error) { return nil, nil }}
	if err := w.Register(fn); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := e.JetStream().KeyValue(ctx, subjects.SkillsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := subjects.SkillKey("big", "big::schema")
	if got, err := kv.Get(ctx, key); err != nil || string(got.Value()) != engine.GeneratedSkill(fn) {
		t.Fatalf("skill %s not published: %v", key, err)
	}
}

// The skills bucket deleted under a running engine (`nats kv rm
// iii-skills`) is created again by the next publication: the engine kept
// the bucket's handle, and every registration after the delete failed to
// publish its skill until the process restarted.
func TestPublishSkillAfterBucketDeleted(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	if err := e.PublishSkill(ctx, "tools", "tools::a", "first\n"); err != nil {
		t.Fatal(err)
	}
	if err := e.JetStream().DeleteKeyValue(ctx, subjects.SkillsBucket); err != nil {
		t.Fatal(err)
	}
	if err := e.PublishSkill(ctx, "tools", "tools::b", "second\n"); err != nil {
		t.Fatalf("publish after the bucket was deleted: %v", err)
	}
	kv, err := e.JetStream().KeyValue(ctx, subjects.SkillsBucket)
	if err != nil {
		t.Fatalf("bucket not created again: %v", err)
	}
	key, _ := subjects.SkillKey("tools", "tools::b")
	if got, err := kv.Get(ctx, key); err != nil || string(got.Value()) != "second\n" {
		t.Fatalf("skill %q: %v %v", key, got, err)
	}
}
