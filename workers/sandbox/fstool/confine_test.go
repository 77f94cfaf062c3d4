package fstool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

// Every function refuses every way out of the root, and nothing outside
// changes.
func TestEscapes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	type pathCase struct {
		name, path string
		code       wire.Code // "" is success
	}
	paths := []pathCase{
		{"dotdot", "../x", wire.CodeForbidden},
		{"dotdot outside file", "../outside/secret", wire.CodeForbidden},
		{"absolute outside", "/etc/passwd", wire.CodeForbidden},
		{"absolute sibling", f.outside + "/secret", wire.CodeForbidden},
		{"absolute prefix sibling", f.root + "x/y", wire.CodeForbidden},
		{"proc self root", "/proc/self/root" + f.root + "/a.txt", wire.CodeForbidden},
		{"proc self root relative", "/proc/self/root/etc/passwd", wire.CodeForbidden},
		{"symlink to outside file", "link_out", wire.CodeForbidden},
		{"symlink to outside dir mid-path", "dirlink/secret", wire.CodeForbidden},
		{"symlink to outside dir", "dirlink", wire.CodeForbidden},
		{"symlink inside root", "inlink", wire.CodeForbidden},
		{"symlink loop", "loop", wire.CodeForbidden},
		{"symlink loop mid-path", "loop/x", wire.CodeForbidden},
		{"climb back out", "sub/../../x", wire.CodeForbidden},
		{"a/../../x", "a/../../x", wire.CodeForbidden},
		{"NUL", "a\x00b", wire.CodeInvalidPayload},
		{"too long", strings.Repeat("a/", MaxPathBytes), wire.CodeInvalidPayload},
	}
	// What each function does with a path, and what a good path answers.
	type fnCase struct {
		id       string
		req      func(p string) any
		okPath   string // an absolute path inside the root that succeeds
		required bool
	}
	fns := []fnCase{
		{ReadFunction, func(p string) any { return ReadRequest{Path: p} }, f.root + "/a.txt", true},
		{WriteFunction, func(p string) any { return WriteRequest{Path: p, Content: "pwned\n"} }, f.root + "/new.txt", true},
		{EditFunction, func(p string) any { return EditRequest{Path: p, OldText: "secret", NewText: "pwned"} }, "", true},
		{LsFunction, func(p string) any { return LsRequest{Path: p} }, f.root + "/sub", false},
		{GlobFunction, func(p string) any { return GlobRequest{Pattern: "*", Path: p} }, f.root + "/sub", false},
		{GrepFunction, func(p string) any { return GrepRequest{Pattern: "secret", Path: p} }, f.root + "/sub", false},
	}
	for _, fc := range fns {
		for _, pc := range paths {
			t.Run(fc.id+"/"+pc.name, func(t *testing.T) {
				err := f.call(t, fc.id, fc.req(pc.path), nil)
				if pc.code == wire.CodeForbidden && err != nil && strings.Contains(err.Error(), "no such file") {
					t.Fatalf("%s %q: %v; want forbidden", fc.id, pc.path, err)
				}
				wantCode(t, err, pc.code)
			})
		}
		t.Run(fc.id+"/empty path", func(t *testing.T) {
			err := f.call(t, fc.id, fc.req(""), nil)
			if fc.required {
				wantCode(t, err, wire.CodeInvalidPayload)
			} else if err != nil {
				t.Fatalf("empty path is the root: %v", err)
			}
		})
		if fc.okPath != "" {
			t.Run(fc.id+"/absolute inside", func(t *testing.T) {
				if err := f.call(t, fc.id, fc.req(fc.okPath), nil); err != nil {
					t.Fatalf("%s %q: %v", fc.id, fc.okPath, err)
				}
			})
		}
	}
	// Glob patterns that leave the root.
	for _, p := range []string{"../*", "../outside/*", "/etc/*", "dirlink/*", "sub/../../*", "{sub,..}/*"} {
		err := f.call(t, GlobFunction, GlobRequest{Pattern: p}, nil)
		wantCode(t, err, wire.CodeForbidden)
	}
	if got := f.readOutside(t); got != "secret\n" {
		t.Fatalf("outside secret is %q", got)
	}
	ents, _ := os.ReadDir(f.outside)
	if len(ents) != 1 {
		t.Fatalf("outside holds %v", ents)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(f.root), "x")); err == nil {
		t.Fatal("a file was created beside the root")
	}
}

func (f *fixture) readOutside(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.outside, "secret"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Nothing leaks through a planted symlink, in any function's answer.
func TestNoSecretInAnswers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var g GrepResult
	if err := f.call(t, GrepFunction, GrepRequest{Pattern: "secret"}, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Matches) != 0 {
		t.Fatalf("grep followed a symlink: %+v", g.Matches)
	}
	var gl GlobResult
	if err := f.call(t, GlobFunction, GlobRequest{Pattern: "**/secret"}, &gl); err != nil {
		t.Fatal(err)
	}
	if len(gl.Matches) != 0 {
		t.Fatalf("glob entered a symlinked dir: %v", gl.Matches)
	}
	var ls LsResult
	if err := f.call(t, LsFunction, LsRequest{}, &ls); err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, e := range ls.Entries {
		types[e.Name] = e.Type
	}
	for _, n := range []string{"link_out", "dirlink", "inlink", "loop"} {
		if types[n] != TypeSymlink {
			t.Fatalf("ls shows %s as %q", n, types[n])
		}
	}
}

// The root given through a symlink still recognises absolute paths in
// either spelling.
func TestRootThroughSymlink(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	alias := filepath.Join(t.TempDir(), "alias")
	mustSymlink(t, f.root, alias)
	fns, err := Functions(FixedRoot(alias))
	if err != nil {
		t.Fatal(err)
	}
	read := fns[0]
	for _, p := range []string{alias + "/a.txt", f.root + "/a.txt", "a.txt"} {
		var r ReadResult
		if err := callFn(t, read, ReadRequest{Path: p}, &r); err != nil || r.Path != "a.txt" {
			t.Fatalf("read %q: %+v %v", p, r, err)
		}
	}
}
