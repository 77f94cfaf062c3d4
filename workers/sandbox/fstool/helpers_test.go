package fstool

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// fixture is a root with a small tree and, beside it, an outside directory
// the tests try to reach.
type fixture struct {
	root, outside string
	fns           map[string]engine.Function
}

// newFixture builds:
//
//	root/a.txt            "hello\nworld\n"
//	root/sub/b.go         "package sub\n"
//	root/link_out  -> outside/secret
//	root/dirlink   -> outside
//	root/inlink    -> a.txt
//	root/loop      -> loop
//	outside/secret        "secret\n"
func newFixture(t *testing.T, opts ...Option) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	mustMkdir(t, filepath.Join(f.root, "sub"))
	mustMkdir(t, f.outside)
	mustWrite(t, filepath.Join(f.root, "a.txt"), "hello\nworld\n")
	mustWrite(t, filepath.Join(f.root, "sub", "b.go"), "package sub\n")
	mustWrite(t, filepath.Join(f.outside, "secret"), "secret\n")
	mustSymlink(t, filepath.Join(f.outside, "secret"), filepath.Join(f.root, "link_out"))
	mustSymlink(t, f.outside, filepath.Join(f.root, "dirlink"))
	mustSymlink(t, "a.txt", filepath.Join(f.root, "inlink"))
	mustSymlink(t, "loop", filepath.Join(f.root, "loop"))
	fns, err := Functions(FixedRoot(f.root), opts...)
	if err != nil {
		t.Fatal(err)
	}
	f.fns = map[string]engine.Function{}
	for _, fn := range fns {
		f.fns[fn.ID] = fn
	}
	return f
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, name, content string) {
	t.Helper()
	mustMkdir(t, filepath.Dir(name))
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// call runs the function id on a JSON payload, as a JSON caller on the bus
// would (decode, Validate, handler), and decodes the answer into out.
func (f *fixture) call(t *testing.T, id string, req, out any) error {
	t.Helper()
	return callFn(t, f.fns[id], req, out)
}

func callFn(t *testing.T, fn engine.Function, req, out any) error {
	t.Helper()
	data, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	res, err := fn.Handler(context.Background(), &engine.Request{FunctionID: fn.ID, Data: data, Codec: wire.JSON})
	if err != nil {
		var we *wire.Error
		if !errors.As(err, &we) {
			t.Fatalf("%s answered a non-wire error %T: %v", fn.ID, err, err)
		}
		return err
	}
	if out != nil {
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
	return nil
}

func (f *fixture) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wantCode(t *testing.T, err error, code wire.Code) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != code {
		t.Fatalf("error %v; want code %s", err, code)
	}
}
