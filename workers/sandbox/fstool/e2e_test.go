package fstool_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers/sandbox/fstool"
)

// The functions registered on a worker over a real server: every one
// called by a msgpack engine and by a JSON engine, the skills published,
// errors decoded into the catalog.
func TestOverNATS(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	w, err := e.Worker("sandbox")
	if err != nil {
		t.Fatal(err)
	}
	fns, err := fstool.Functions(fstool.FixedRoot(root))
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range fns {
		if err := w.Register(fn); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	kv, err := e.JetStream().KeyValue(ctx, subjects.SkillsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range fns {
		key, _ := subjects.SkillKey("sandbox", fn.ID)
		if got, err := kv.Get(ctx, key); err != nil || string(got.Value()) != fn.Skill {
			t.Fatalf("skill of %s not published: %v", fn.ID, err)
		}
	}

	for _, codec := range []wire.Codec{wire.Msgpack, wire.JSON} {
		t.Run(codec.ContentType(), func(t *testing.T) {
			c := enginetest.NewEngine(t, ns, engine.WithCodec(codec))
			dir := filepath.Base(codec.ContentType()) // "msgpack" or "json"
			file := dir + "/main.go"

			var wr fstool.WriteResult
			if err := c.Trigger(ctx, fstool.WriteFunction, fstool.WriteRequest{Path: file, Content: "package main\n\nfunc main() {}\n"}, &wr); err != nil {
				t.Fatal(err)
			}
			if wr != (fstool.WriteResult{Path: file, Bytes: 29, Created: true}) {
				t.Fatalf("write: %+v", wr)
			}
			var ed fstool.EditResult
			if err := c.Trigger(ctx, fstool.EditFunction, fstool.EditRequest{Path: file, OldText: "func main() {}", NewText: "func main() { run() }"}, &ed); err != nil || ed.Replacements != 1 {
				t.Fatalf("edit: %+v %v", ed, err)
			}
			rd, err := engine.Call[fstool.ReadResult](ctx, c, fstool.ReadFunction, fstool.ReadRequest{Path: filepath.Join(root, file), Offset: 3})
			if err != nil || rd.Content != "     3\tfunc main() { run() }" || rd.TotalLines != 3 || rd.Path != file {
				t.Fatalf("read: %+v %v", rd, err)
			}
			ls, err := engine.Call[fstool.LsResult](ctx, c, fstool.LsFunction, fstool.LsRequest{Path: dir})
			if err != nil || len(ls.Entries) != 1 || ls.Entries[0].Name != "main.go" || ls.Entries[0].Type != fstool.TypeFile {
				t.Fatalf("ls: %+v %v", ls, err)
			}
			gl, err := engine.Call[fstool.GlobResult](ctx, c, fstool.GlobFunction, fstool.GlobRequest{Pattern: "**/*.go", Path: dir})
			if err != nil || !reflect.DeepEqual(gl.Matches, []string{file}) {
				t.Fatalf("glob: %+v %v", gl, err)
			}
			gr, err := engine.Call[fstool.GrepResult](ctx, c, fstool.GrepFunction, fstool.GrepRequest{Pattern: `run\(\)`, Path: dir, Glob: "*.go"})
			if err != nil || !reflect.DeepEqual(gr.Matches, []fstool.GrepMatch{{Path: file, Line: 3, Text: "func main() { run() }"}}) {
				t.Fatalf("grep: %+v %v", gr, err)
			}
			for _, tc := range []struct {
				id   string
				req  any
				want error
			}{
				{fstool.ReadFunction, fstool.ReadRequest{Path: "../x"}, wire.ErrForbidden},
				{fstool.ReadFunction, fstool.ReadRequest{Path: "out/secret"}, wire.ErrForbidden},
				{fstool.WriteFunction, fstool.WriteRequest{Path: "/etc/x", Content: "x"}, wire.ErrForbidden},
				{fstool.ReadFunction, fstool.ReadRequest{Path: "nope"}, wire.ErrNotFound},
				{fstool.ReadFunction, map[string]any{"path": 5}, wire.ErrInvalidPayload},
				{fstool.EditFunction, fstool.EditRequest{Path: file, OldText: "absent", NewText: "x"}, wire.ErrInvalidPayload},
				{fstool.GrepFunction, fstool.GrepRequest{Pattern: "("}, wire.ErrInvalidPayload},
			} {
				if err := c.Trigger(ctx, tc.id, tc.req, nil); !errors.Is(err, tc.want) {
					t.Fatalf("%s %+v: %v, want %v", tc.id, tc.req, err, tc.want)
				}
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "secret\n" {
		t.Fatalf("outside changed: %q", b)
	}
}

// A resolver keyed by the caller's session: each session works in its
// own directory, and a call without a session is refused.
func TestSessionResolver(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	for _, s := range []string{"s1", "s2"} {
		if err := os.MkdirAll(filepath.Join(base, s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	resolve := func(ctx context.Context) (string, error) {
		sid, _ := engine.SessionFromContext(ctx)
		if sid == "" {
			return "", wire.Errorf(wire.CodeForbidden, "the file tools need a session")
		}
		return filepath.Join(base, sid), nil
	}
	e := enginetest.Engine(t)
	w, err := e.Worker("sandbox")
	if err != nil {
		t.Fatal(err)
	}
	fns, err := fstool.Functions(resolve)
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range fns {
		if err := w.Register(fn); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := e.Trigger(engine.WithSession(ctx, "s1", ""), fstool.WriteFunction, fstool.WriteRequest{Path: "f", Content: "one"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Trigger(engine.WithSession(ctx, "s2", ""), fstool.ReadFunction, fstool.ReadRequest{Path: "f"}, nil); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("session s2 sees s1's file: %v", err)
	}
	if err := e.Trigger(ctx, fstool.LsFunction, fstool.LsRequest{}, nil); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("no session: %v", err)
	}
}
