package directory_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/directory"
)

const waitFor = 5 * time.Second

func startWorker(t *testing.T, e *engine.Engine, w *directory.Worker) {
	t.Helper()
	if err := w.Start(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
}

// End to end: a real engine worker registers a function with a skill, and
// the directory worker serves it on the bus, to msgpack and JSON callers.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	dirEngine := enginetest.NewEngine(t, ns)
	startWorker(t, dirEngine, directory.NewWorker())

	// Another process: the sandbox worker.
	sb := enginetest.NewEngine(t, ns)
	w, err := sb.Worker("sandbox")
	if err != nil {
		t.Fatal(err)
	}
	err = w.Register(engine.Function{
		ID:    "fs::read",
		Skill: "---\ntitle: Read a file\ndescription: Read a file of the session's sandbox.\n---\n# fs::read\n\nArgs: {path}.\n",
		Handler: engine.Typed(func(context.Context, struct{}) (struct{}, error) {
			return struct{}{}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}

	caller := enginetest.NewEngine(t, ns)
	ctx := t.Context()
	var s directory.Skill
	enginetest.Eventually(t, waitFor, func() (err error) {
		s, err = engine.Call[directory.Skill](ctx, caller, directory.GetFunction, directory.GetRequest{ID: "iii://sandbox/fs::read"})
		return err
	})
	if s.ID != "sandbox/fs::read" || s.Title != "Read a file" || s.FunctionID != "fs::read" || s.Type != directory.TypeFunction ||
		s.Description != "Read a file of the session's sandbox." || s.Body != "# fs::read\n\nArgs: {path}.\n" || s.Source != directory.SourcePublished {
		t.Fatalf("get: %+v", s)
	}

	// JSON, as the nats CLI sends it.
	body, codec, err := caller.TriggerRaw(ctx, directory.GetFunction, []byte(`{"id":"sandbox/fs::read"}`), wire.JSON)
	if err != nil || codec.ContentType() != wire.ContentJSON {
		t.Fatalf("json get: %v %v", codec, err)
	}
	var js map[string]any
	if err := json.Unmarshal(body, &js); err != nil || js["link"] != "iii://sandbox/fs::read" || js["source"] != "published" {
		t.Fatalf("json get: %s %v", body, err)
	}

	// list and index include the sandbox skill and the directory's own.
	enginetest.Eventually(t, waitFor, func() error {
		l, err := engine.Call[directory.ListResponse](ctx, caller, directory.ListFunction, directory.ListRequest{})
		if err != nil {
			return err
		}
		var ids []string
		for _, s := range l.Skills {
			ids = append(ids, s.ID)
		}
		want := "directory/directory::skills::get directory/directory::skills::index directory/directory::skills::list directory/overview sandbox/fs::read"
		if got := strings.Join(ids, " "); got != want {
			return fmt.Errorf("list: %s", got)
		}
		return nil
	})
	l, err := engine.Call[directory.ListResponse](ctx, caller, directory.ListFunction, directory.ListRequest{Worker: "sandbox", Type: "function"})
	if err != nil || len(l.Skills) != 1 || l.Skills[0].ID != "sandbox/fs::read" {
		t.Fatalf("filtered list: %+v %v", l, err)
	}
	idx, err := engine.Call[directory.Index](ctx, caller, directory.IndexFunction, directory.IndexRequest{})
	if err != nil || len(idx.Workers) != 2 {
		t.Fatalf("index: %+v %v", idx, err)
	}
	for _, line := range []string{
		"## directory\nFind how to use any function; read its skill with directory::skills::get before you first call it. ([overview](iii://directory/overview))\n",
		"- [Get a skill](iii://directory/directory::skills::get): Read one skill document",
		"## sandbox\n- [Read a file](iii://sandbox/fs::read): Read a file of the session's sandbox.\n",
	} {
		if !strings.Contains(idx.Markdown, line) {
			t.Errorf("index markdown lacks %q:\n%s", line, idx.Markdown)
		}
	}
	if d := idx.Workers[0]; d.Worker != "directory" || !strings.HasPrefix(d.Overview, "Every function on the bus has a skill document") || len(d.Skills) != 3 {
		t.Errorf("directory entry: %+v", d)
	}
	if sb := idx.Workers[1]; sb.Overview != "- [Read a file](iii://sandbox/fs::read): Read a file of the session's sandbox." {
		t.Errorf("generated overview: %q", sb.Overview)
	}
	// An empty body is the empty request.
	if _, _, err := caller.TriggerRaw(ctx, directory.IndexFunction, nil, wire.JSON); err != nil {
		t.Fatalf("index with an empty body: %v", err)
	}

	// The worker unregistering does not remove its skill; deleting the
	// key does (here, through the engine's bucket).
	kv, err := caller.EnsureKV(ctx, engine.SkillsBucketConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "sandbox.fs=3A=3Aread"); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, waitFor, func() error {
		_, err := engine.Call[directory.Skill](ctx, caller, directory.GetFunction, directory.GetRequest{ID: "sandbox/fs::read"})
		if !errors.Is(err, wire.ErrNotFound) {
			return fmt.Errorf("after delete: %v", err)
		}
		return nil
	})
}

// Bad input is answered with coded errors, in JSON and msgpack.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	startWorker(t, e, directory.NewWorker())
	ctx := t.Context()
	for _, tc := range []struct {
		fn   string
		body string
		want error
	}{
		{directory.GetFunction, `{}`, wire.ErrInvalidPayload},
		{directory.GetFunction, `{"id":""}`, wire.ErrInvalidPayload},
		{directory.GetFunction, `{"id":"nope"}`, wire.ErrInvalidPayload},
		{directory.GetFunction, `{"id":"iii://a.b/c"}`, wire.ErrInvalidPayload},
		{directory.GetFunction, `{"id":"w/a b"}`, wire.ErrInvalidPayload},
		{directory.GetFunction, `{"id":42}`, wire.ErrInvalidPayload},
		{directory.GetFunction, `not json`, wire.ErrInvalidPayload},
		{directory.GetFunction, `{"id":"nobody/nothing"}`, wire.ErrNotFound},
		{directory.ListFunction, `{"worker":"a.b"}`, wire.ErrInvalidPayload},
		{directory.ListFunction, `{"type":"a b"}`, wire.ErrInvalidPayload},
		{directory.ListFunction, `[1]`, wire.ErrInvalidPayload},
		{directory.IndexFunction, `"x"`, wire.ErrInvalidPayload},
	} {
		_, _, err := e.TriggerRaw(ctx, tc.fn, []byte(tc.body), wire.JSON)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s %s = %v; want %v", tc.fn, tc.body, err, tc.want)
		}
	}
	if _, _, err := e.TriggerRaw(ctx, directory.GetFunction, []byte{0xc1, 0xff}, wire.Msgpack); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Errorf("msgpack garbage: %v", err)
	}
	if _, err := engine.Call[directory.Skill](ctx, e, directory.GetFunction, directory.GetRequest{ID: "x"}); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Errorf("msgpack bad id: %v", err)
	}
}

// The three functions are idempotent and carry schemas that are JSON.
func TestFunctionMetadata(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	startWorker(t, e, directory.NewWorker())
	info, err := e.Conn().Request("$SRV.INFO."+directory.WorkerName, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var svc struct {
		Endpoints []struct {
			Metadata map[string]string `json:"metadata"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(info.Data, &svc); err != nil {
		t.Fatal(err)
	}
	if len(svc.Endpoints) != 3 {
		t.Fatalf("endpoints: %+v", svc.Endpoints)
	}
	for _, ep := range svc.Endpoints {
		id := ep.Metadata[engine.MetaFunctionID]
		if ep.Metadata[engine.MetaIdempotent] != "true" {
			t.Errorf("%s is not idempotent", id)
		}
		for _, k := range []string{engine.MetaRequestSchema, engine.MetaResponseSchema} {
			if !json.Valid([]byte(ep.Metadata[k])) {
				t.Errorf("%s %s is not JSON: %s", id, k, ep.Metadata[k])
			}
		}
	}
}

// The module reads its settings at Provision: the folder defaults to
// <home>/skills; "dir" is relative to the home; anything else is refused.
func TestProvision(t *testing.T) {
	t.Parallel()
	m, err := workers.Global().Module(directory.WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	e := enginetest.Engine(t)
	for _, tc := range []struct {
		settings map[string]string
		dir      string // "": an error
	}{
		{nil, filepath.Join(home, "skills")},
		{map[string]string{"dir": "custom"}, filepath.Join(home, "custom")},
		{map[string]string{"dir": "/abs/skills", "poll_interval": "10ms"}, "/abs/skills"},
		{map[string]string{"dir": ""}, ""},
		{map[string]string{"poll_interval": "soon"}, ""},
		{map[string]string{"poll_interval": "0s"}, ""},
		{map[string]string{"folder": "x"}, ""},
	} {
		w := m.New().(*directory.Worker)
		err := w.Provision(t.Context(), workers.Env{Home: home, Settings: map[string]map[string]string{directory.WorkerName: tc.settings}})
		if tc.dir == "" {
			if !errors.Is(err, engine.ErrInvalidOption) {
				t.Errorf("settings %v: %v", tc.settings, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("settings %v: %v", tc.settings, err)
			continue
		}
		if err := w.Start(t.Context(), e); err != nil {
			t.Fatal(err)
		}
		if got := w.Directory().Dir(); got != tc.dir {
			t.Errorf("settings %v: folder %q; want %q", tc.settings, got, tc.dir)
		}
		if err := w.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}

	// Started through a registry, with the default folder.
	if err := os.MkdirAll(filepath.Join(home, "skills", "ops"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "skills", "ops", "runbook.md"), []byte("Runbook."), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := workers.NewRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	run, err := reg.Start(t.Context(), e, workers.Env{Home: home, Settings: map[string]map[string]string{directory.WorkerName: {"poll_interval": "5ms"}}}, directory.WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.Close(context.Background()) })
	s, err := engine.Call[directory.Skill](t.Context(), e, directory.GetFunction, directory.GetRequest{ID: "ops/runbook"})
	if err != nil || s.Source != directory.SourceFolder || s.Body != "Runbook." {
		t.Fatalf("folder skill through the module: %+v %v", s, err)
	}
}

// Start twice is ErrStarted; Start after Close is engine.ErrClosed; Close
// is idempotent.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	w := directory.NewWorker(directory.WithPollInterval(time.Second))
	if w.Directory() != nil {
		t.Fatal("directory before Start")
	}
	startWorker(t, e, w)
	if w.Directory() == nil {
		t.Fatal("no directory after Start")
	}
	if err := w.Start(t.Context(), e); !errors.Is(err, directory.ErrStarted) {
		t.Fatalf("second start: %v", err)
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	w2 := directory.NewWorker()
	_ = w2.Close(t.Context())
	if err := w2.Start(t.Context(), e); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("start after close: %v", err)
	}
	if err := directory.NewWorker(directory.WithPollInterval(0)).Start(t.Context(), e); !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("bad option: %v", err)
	}
}
