package fstool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

func TestRead(t *testing.T) {
	t.Parallel()
	f := newFixture(t, WithMaxLineBytes(10))
	var lines []string
	for i := 1; i <= 30; i++ {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	mustWrite(t, filepath.Join(f.root, "n.txt"), strings.Join(lines, "\n")) // no final newline
	mustWrite(t, filepath.Join(f.root, "long.txt"), "short\n"+strings.Repeat("é", 8)+"\nend\n")
	mustWrite(t, filepath.Join(f.root, "nul.bin"), "abc\x00def")
	mustWrite(t, filepath.Join(f.root, "latin1.txt"), "caf\xe9\n")
	mustWrite(t, filepath.Join(f.root, "empty.txt"), "")
	mustWrite(t, filepath.Join(f.root, "crlf.txt"), "a\r\nb\r\n")

	for _, tc := range []struct {
		name string
		req  ReadRequest
		want ReadResult
	}{
		{"whole", ReadRequest{Path: "a.txt"}, ReadResult{Path: "a.txt", Content: "     1\thello\n     2\tworld", LinesRead: 2, TotalLines: 2, Size: 12}},
		{"offset and limit", ReadRequest{Path: "n.txt", Offset: 10, Limit: 3}, ReadResult{Path: "n.txt", Content: "    10\tline 10\n    11\tline 11\n    12\tline 12", LinesRead: 3, TotalLines: 30, Truncated: true, Size: 230}},
		{"last line without newline", ReadRequest{Path: "n.txt", Offset: 29}, ReadResult{Path: "n.txt", Content: "    29\tline 29\n    30\tline 30", LinesRead: 2, TotalLines: 30, Size: 230}},
		{"offset past the end", ReadRequest{Path: "n.txt", Offset: 31}, ReadResult{Path: "n.txt", LinesRead: 0, TotalLines: 30, Size: 230}},
		{"offset 1 is 0", ReadRequest{Path: "a.txt", Offset: 1, Limit: 1}, ReadResult{Path: "a.txt", Content: "     1\thello", LinesRead: 1, TotalLines: 2, Truncated: true, Size: 12}},
		{"long line cut at a rune", ReadRequest{Path: "long.txt"}, ReadResult{Path: "long.txt", Content: "     1\tshort\n     2\tééééé" + LineCutMarker + "\n     3\tend", LinesRead: 3, TotalLines: 3, Truncated: true, Size: 27}},
		{"NUL is binary", ReadRequest{Path: "nul.bin"}, ReadResult{Path: "nul.bin", Binary: true, Size: 7}},
		{"invalid UTF-8 is binary", ReadRequest{Path: "latin1.txt"}, ReadResult{Path: "latin1.txt", Binary: true, Size: 5}},
		{"empty", ReadRequest{Path: "empty.txt"}, ReadResult{Path: "empty.txt"}},
		{"CRLF kept", ReadRequest{Path: "crlf.txt"}, ReadResult{Path: "crlf.txt", Content: "     1\ta\r\n     2\tb\r", LinesRead: 2, TotalLines: 2, Size: 6}},
		{"dot segments", ReadRequest{Path: "./sub/../a.txt", Limit: 1}, ReadResult{Path: "a.txt", Content: "     1\thello", LinesRead: 1, TotalLines: 2, Truncated: true, Size: 12}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got ReadResult
			if err := f.call(t, ReadFunction, tc.req, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		req  ReadRequest
		code wire.Code
	}{
		{"directory", ReadRequest{Path: "sub"}, wire.CodeInvalidPayload},
		{"root", ReadRequest{Path: "."}, wire.CodeInvalidPayload},
		{"missing", ReadRequest{Path: "nope.txt"}, wire.CodeNotFound},
		{"missing dir", ReadRequest{Path: "nope/x.txt"}, wire.CodeNotFound},
		{"through a file", ReadRequest{Path: "a.txt/x"}, wire.CodeInvalidPayload},
		{"negative offset", ReadRequest{Path: "a.txt", Offset: -1}, wire.CodeInvalidPayload},
		{"negative limit", ReadRequest{Path: "a.txt", Limit: -1}, wire.CodeInvalidPayload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, f.call(t, ReadFunction, tc.req, nil), tc.code)
		})
	}
}

// The answer stops at its byte cap and says truncated; a binary sniff
// does not misjudge a rune cut by the 8 KiB boundary.
func TestReadCaps(t *testing.T) {
	t.Parallel()
	f := newFixture(t, WithMaxAnswerBytes(100))
	mustWrite(t, filepath.Join(f.root, "many.txt"), strings.Repeat("0123456789\n", 50))
	var got ReadResult
	if err := f.call(t, ReadFunction, ReadRequest{Path: "many.txt"}, &got); err != nil {
		t.Fatal(err)
	}
	// Each line is 6+1+10 bytes plus a newline between lines: 5 lines fit.
	if got.LinesRead != 5 || len(got.Content) > 100 || !got.Truncated || got.TotalLines != 50 {
		t.Fatalf("got %+v", got)
	}
	// 8191 ASCII bytes then a two-byte rune across the boundary.
	mustWrite(t, filepath.Join(f.root, "edge.txt"), strings.Repeat("a", sniffBytes-1)+"é\n")
	if err := f.call(t, ReadFunction, ReadRequest{Path: "edge.txt", Limit: 1}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Binary {
		t.Fatal("a rune cut by the sniff window made the file binary")
	}
}

func TestWrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t, WithMaxWriteBytes(64))
	var got WriteResult
	if err := f.call(t, WriteFunction, WriteRequest{Path: "new/deep/x.txt", Content: "one\n"}, &got); err != nil {
		t.Fatal(err)
	}
	if got != (WriteResult{Path: "new/deep/x.txt", Bytes: 4, Created: true}) || f.read(t, "new/deep/x.txt") != "one\n" {
		t.Fatalf("got %+v", got)
	}
	// Replacing keeps the mode; the same bytes again is a no-op.
	if err := os.Chmod(filepath.Join(f.root, "a.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.call(t, WriteFunction, WriteRequest{Path: "a.txt", Content: "two\n"}, &got); err != nil {
		t.Fatal(err)
	}
	if got != (WriteResult{Path: "a.txt", Bytes: 4}) || f.read(t, "a.txt") != "two\n" {
		t.Fatalf("got %+v", got)
	}
	st, _ := os.Stat(filepath.Join(f.root, "a.txt"))
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	if err := f.call(t, WriteFunction, WriteRequest{Path: "a.txt", Content: "two\n"}, &got); err != nil || got.Created {
		t.Fatalf("rewrite: %+v %v", got, err)
	}
	st2, _ := os.Stat(filepath.Join(f.root, "a.txt"))
	if !os.SameFile(st, st2) {
		t.Fatal("the same content was written again")
	}
	// An empty file is a file.
	if err := f.call(t, WriteFunction, WriteRequest{Path: "empty", Content: ""}, &got); err != nil || !got.Created {
		t.Fatalf("empty: %+v %v", got, err)
	}
	for _, tc := range []struct {
		name string
		req  WriteRequest
		code wire.Code
	}{
		{"too big", WriteRequest{Path: "big", Content: strings.Repeat("x", 65)}, wire.CodeInvalidPayload},
		{"directory", WriteRequest{Path: "sub", Content: "x"}, wire.CodeInvalidPayload},
		{"root", WriteRequest{Path: ".", Content: "x"}, wire.CodeInvalidPayload},
		{"parent is a file", WriteRequest{Path: "a.txt/x", Content: "x"}, wire.CodeInvalidPayload},
		{"trailing slash", WriteRequest{Path: f.root + "/", Content: "x"}, wire.CodeInvalidPayload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, f.call(t, WriteFunction, tc.req, nil), tc.code)
		})
	}
	// No temporary file stays behind.
	ents, _ := os.ReadDir(f.root)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".fstool-") {
			t.Fatalf("temporary file left: %s", e.Name())
		}
	}
}

// A write replaces a hard link instead of writing through it, so a file
// linked in from elsewhere is never changed.
func TestWriteBreaksHardLink(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if err := os.Link(filepath.Join(f.outside, "secret"), filepath.Join(f.root, "hard")); err != nil {
		t.Fatal(err)
	}
	if err := f.call(t, WriteFunction, WriteRequest{Path: "hard", Content: "pwned\n"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.call(t, EditFunction, EditRequest{Path: "hard", OldText: "pwned", NewText: "again"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := f.readOutside(t); got != "secret\n" {
		t.Fatalf("outside file changed through a hard link: %q", got)
	}
}

func TestEdit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	mustWrite(t, filepath.Join(f.root, "e.go"), "a := 1\nb := 1\nc := 2\n")
	var got EditResult
	if err := f.call(t, EditFunction, EditRequest{Path: "e.go", OldText: "c := 2", NewText: "c := 3"}, &got); err != nil {
		t.Fatal(err)
	}
	if got != (EditResult{Path: "e.go", Replacements: 1}) || f.read(t, "e.go") != "a := 1\nb := 1\nc := 3\n" {
		t.Fatalf("got %+v %q", got, f.read(t, "e.go"))
	}
	err := f.call(t, EditFunction, EditRequest{Path: "e.go", OldText: ":= 1", NewText: ":= 9"}, nil)
	wantCode(t, err, wire.CodeInvalidPayload)
	if !strings.Contains(err.Error(), "occurs 2 times") || err.(*wire.Error).Details["matches"] != 2 {
		t.Fatalf("ambiguous: %v %v", err, err.(*wire.Error).Details)
	}
	err = f.call(t, EditFunction, EditRequest{Path: "e.go", OldText: "d := 4", NewText: "d := 5"}, nil)
	wantCode(t, err, wire.CodeInvalidPayload)
	if !strings.Contains(err.Error(), "old_text not found") {
		t.Fatalf("not found: %v", err)
	}
	if f.read(t, "e.go") != "a := 1\nb := 1\nc := 3\n" {
		t.Fatal("a failed edit changed the file")
	}
	if err := f.call(t, EditFunction, EditRequest{Path: "e.go", OldText: ":= 1", NewText: ":= 9", ReplaceAll: true}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Replacements != 2 || f.read(t, "e.go") != "a := 9\nb := 9\nc := 3\n" {
		t.Fatalf("replace_all: %+v %q", got, f.read(t, "e.go"))
	}
	// Deleting text is an edit to "".
	if err := f.call(t, EditFunction, EditRequest{Path: "e.go", OldText: "b := 9\n", NewText: ""}, &got); err != nil {
		t.Fatal(err)
	}
	if f.read(t, "e.go") != "a := 9\nc := 3\n" {
		t.Fatalf("delete: %q", f.read(t, "e.go"))
	}
	mustWrite(t, filepath.Join(f.root, "bin"), "x\x00y")
	for _, tc := range []struct {
		name string
		req  EditRequest
		code wire.Code
	}{
		{"equal texts", EditRequest{Path: "e.go", OldText: "a", NewText: "a"}, wire.CodeInvalidPayload},
		{"empty old_text", EditRequest{Path: "e.go", OldText: "", NewText: "a"}, wire.CodeInvalidPayload},
		{"missing file", EditRequest{Path: "nope.go", OldText: "a", NewText: "b"}, wire.CodeNotFound},
		{"directory", EditRequest{Path: "sub", OldText: "a", NewText: "b"}, wire.CodeInvalidPayload},
		{"binary", EditRequest{Path: "bin", OldText: "x", NewText: "z"}, wire.CodeInvalidPayload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, f.call(t, EditFunction, tc.req, nil), tc.code)
		})
	}
}

func TestEditSizeCap(t *testing.T) {
	t.Parallel()
	f := newFixture(t, WithMaxWriteBytes(16))
	mustWrite(t, filepath.Join(f.root, "s.txt"), "0123456789\n")
	wantCode(t, f.call(t, EditFunction, EditRequest{Path: "s.txt", OldText: "0", NewText: "0000000"}, nil), wire.CodeInvalidPayload)
	mustWrite(t, filepath.Join(f.root, "big.txt"), strings.Repeat("x", 17))
	wantCode(t, f.call(t, EditFunction, EditRequest{Path: "big.txt", OldText: "x", NewText: "y", ReplaceAll: true}, nil), wire.CodeInvalidPayload)
	if f.read(t, "s.txt") != "0123456789\n" {
		t.Fatal("a refused edit changed the file")
	}
}

func TestLs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var got LsResult
	if err := f.call(t, LsFunction, LsRequest{}, &got); err != nil {
		t.Fatal(err)
	}
	var names, types []string
	for _, e := range got.Entries {
		names = append(names, e.Name)
		types = append(types, e.Type)
		if e.ModTime == "" || !strings.HasSuffix(e.ModTime, "Z") {
			t.Fatalf("mod_time %q", e.ModTime)
		}
	}
	wantNames := []string{"a.txt", "dirlink", "inlink", "link_out", "loop", "sub"}
	wantTypes := []string{"file", "symlink", "symlink", "symlink", "symlink", "dir"}
	if !reflect.DeepEqual(names, wantNames) || !reflect.DeepEqual(types, wantTypes) || got.Path != "." || got.Truncated {
		t.Fatalf("got %v %v %+v", names, types, got)
	}
	if got.Entries[0].Size != 12 {
		t.Fatalf("size %d", got.Entries[0].Size)
	}
	if err := f.call(t, LsFunction, LsRequest{Path: "sub"}, &got); err != nil || len(got.Entries) != 1 || got.Entries[0].Name != "b.go" || got.Path != "sub" {
		t.Fatalf("sub: %+v %v", got, err)
	}
	wantCode(t, f.call(t, LsFunction, LsRequest{Path: "a.txt"}, nil), wire.CodeInvalidPayload)
	wantCode(t, f.call(t, LsFunction, LsRequest{Path: "nope"}, nil), wire.CodeNotFound)

	capped := newFixture(t, WithMaxEntries(2))
	if err := capped.call(t, LsFunction, LsRequest{}, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Entries) != 2 || !got.Truncated || got.Entries[1].Name != "dirlink" {
		t.Fatalf("capped: %+v", got)
	}
}

// tree writes files (content = path) under root.
func tree(t *testing.T, root string, files ...string) {
	t.Helper()
	for _, p := range files {
		mustWrite(t, filepath.Join(root, p), p+"\n")
	}
}

func TestGlob(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tree(t, f.root, "main.go", "cmd/tool/main.go", "cmd/tool/main_test.go", "internal/x/y/z.go",
		"internal/x/readme.md", "web/app.ts", "web/app.tsx", ".git/hooks/pre.go", "a.go.txt", "docs/a b.md")
	for _, tc := range []struct {
		pattern, path string
		want          []string
	}{
		{"**/*.go", "", []string{"cmd/tool/main.go", "cmd/tool/main_test.go", "internal/x/y/z.go", "main.go", "sub/b.go"}},
		{"*.go", "", []string{"main.go"}},
		{"**/*_test.go", "cmd", []string{"cmd/tool/main_test.go"}},
		{"*/*.go", "internal/x", []string{"internal/x/y/z.go"}},
		{"internal/**", "", []string{"internal/x/readme.md", "internal/x/y/z.go"}},
		{"internal/**/*.md", "", []string{"internal/x/readme.md"}},
		{"**/x/**/*.go", "", []string{"internal/x/y/z.go"}},
		{"web/*.{ts,tsx}", "", []string{"web/app.ts", "web/app.tsx"}},
		{"{cmd,web}/**/app.*", "", []string{"web/app.ts", "web/app.tsx"}},
		{"**/[mz]*.go", "", []string{"cmd/tool/main.go", "cmd/tool/main_test.go", "internal/x/y/z.go", "main.go"}},
		{"?.go*", "", []string{"a.go.txt"}},
		{"docs/a b.md", "", []string{"docs/a b.md"}},
		{".git/**/*.go", "", []string{".git/hooks/pre.go"}},
		{f.root + "/cmd/**/main.go", "", []string{"cmd/tool/main.go"}},
		{"nope/**/*.go", "", []string{}},
		{"a.txt/*", "", []string{}},
		{"sub", "", []string{}}, // a directory is not a match
		{"**/b.go", "sub", []string{"sub/b.go"}},
	} {
		t.Run(tc.pattern+"@"+tc.path, func(t *testing.T) {
			var got GlobResult
			if err := f.call(t, GlobFunction, GlobRequest{Pattern: tc.pattern, Path: tc.path}, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Matches, tc.want) || got.Truncated {
				t.Fatalf("got %q (truncated %v), want %q", got.Matches, got.Truncated, tc.want)
			}
		})
	}
	for _, p := range []string{"", "[", "a/[b", "{a,b", "a}", `a\`, "."} {
		wantCode(t, f.call(t, GlobFunction, GlobRequest{Pattern: p}, nil), wire.CodeInvalidPayload)
	}
	wantCode(t, f.call(t, GlobFunction, GlobRequest{Pattern: "*", Path: "nope"}, nil), wire.CodeNotFound)
	wantCode(t, f.call(t, GlobFunction, GlobRequest{Pattern: "*", Path: "a.txt"}, nil), wire.CodeInvalidPayload)

	capped := newFixture(t, WithMaxEntries(2))
	tree(t, capped.root, "1.go", "2.go", "3.go")
	var got GlobResult
	if err := capped.call(t, GlobFunction, GlobRequest{Pattern: "**/*.go"}, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Matches, []string{"1.go", "2.go"}) || !got.Truncated {
		t.Fatalf("capped: %+v", got)
	}
	walked := newFixture(t, WithMaxWalk(3))
	if err := walked.call(t, GlobFunction, GlobRequest{Pattern: "**"}, &got); err != nil {
		t.Fatal(err)
	}
	if !got.Truncated {
		t.Fatalf("walk bound: %+v", got)
	}
	all := newFixture(t, WithSkipDirs())
	tree(t, all.root, ".git/x.go")
	if err := all.call(t, GlobFunction, GlobRequest{Pattern: "**/*.go"}, &got); err != nil || !reflect.DeepEqual(got.Matches, []string{".git/x.go", "sub/b.go"}) {
		t.Fatalf("no skip dirs: %+v %v", got, err)
	}
}

func TestGrep(t *testing.T) {
	t.Parallel()
	f := newFixture(t, WithMaxGrepFileBytes(1000))
	mustWrite(t, filepath.Join(f.root, "cmd/main.go"), "package main\n\nfunc main() {\n\tOpen()\n}\n")
	mustWrite(t, filepath.Join(f.root, "lib/open.go"), "package lib\n\n// Open opens.\nfunc Open() {}\n")
	mustWrite(t, filepath.Join(f.root, "lib/open_test.go"), "package lib\n\nfunc TestOpen() { Open() }\n")
	mustWrite(t, filepath.Join(f.root, "README.md"), "call open() first\n")
	mustWrite(t, filepath.Join(f.root, "big.go"), strings.Repeat("// Open\n", 200))
	mustWrite(t, filepath.Join(f.root, "bin.go"), "Open\x00")
	mustWrite(t, filepath.Join(f.root, ".git/x.go"), "Open\n")
	mustWrite(t, filepath.Join(f.root, "long.go"), "Open"+strings.Repeat("x", 600)+"\n")
	m := func(p string, line int, text string) GrepMatch { return GrepMatch{Path: p, Line: line, Text: text} }
	// big.go is over the size bound: an answer whose walk meets it names
	// it and says truncated, as a match may be in it.
	big := []string{"big.go"}
	for _, tc := range []struct {
		name      string
		req       GrepRequest
		want      []GrepMatch
		truncated bool
		skipped   []string
	}{
		{"go files", GrepRequest{Pattern: `\bOpen\(`, Glob: "*.go"}, []GrepMatch{
			m("cmd/main.go", 4, "\tOpen()"), m("lib/open.go", 4, "func Open() {}"), m("lib/open_test.go", 3, "func TestOpen() { Open() }"),
		}, true, big},
		{"path glob", GrepRequest{Pattern: `Open`, Glob: "lib/*_test.go"}, []GrepMatch{m("lib/open_test.go", 3, "func TestOpen() { Open() }")}, false, nil},
		{"brace glob", GrepRequest{Pattern: `open`, Glob: "*.{md,txt}", IgnoreCase: true}, []GrepMatch{m("README.md", 1, "call open() first")}, false, nil},
		{"ignore case in a dir", GrepRequest{Pattern: `^func open`, Path: "lib", IgnoreCase: true}, []GrepMatch{m("lib/open.go", 4, "func Open() {}")}, false, nil},
		{"one file", GrepRequest{Pattern: `package`, Path: "lib/open.go"}, []GrepMatch{m("lib/open.go", 1, "package lib")}, false, nil},
		{"max results", GrepRequest{Pattern: `Open`, Glob: "*.go", MaxResults: 2}, []GrepMatch{
			m("cmd/main.go", 4, "\tOpen()"), m("lib/open.go", 3, "// Open opens."),
		}, true, big},
		{"long line cut", GrepRequest{Pattern: `Openx`, Glob: "long.go"}, []GrepMatch{m("long.go", 1, "Open"+strings.Repeat("x", DefaultGrepLineBytes-4)+LineCutMarker)}, false, nil},
		{"no match", GrepRequest{Pattern: `nothing here`}, []GrepMatch{}, true, big},
		{"no match, big file filtered out", GrepRequest{Pattern: `nothing here`, Glob: "*.md"}, []GrepMatch{}, false, nil},
		{"begin of text is begin of line", GrepRequest{Pattern: `\Afunc O`, Path: "lib"}, []GrepMatch{m("lib/open.go", 4, "func Open() {}")}, false, nil},
		{"own flags", GrepRequest{Pattern: `(?i)^FUNC OPEN`, Path: "lib"}, []GrepMatch{m("lib/open.go", 4, "func Open() {}")}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got GrepResult
			if err := f.call(t, GrepFunction, tc.req, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Matches, tc.want) || got.Truncated != tc.truncated ||
				!reflect.DeepEqual(got.Skipped, tc.skipped) || got.SkippedFiles != len(tc.skipped) {
				t.Fatalf("got %+v (truncated %v, skipped %q of %d)\nwant %+v (truncated %v, skipped %q)",
					got.Matches, got.Truncated, got.Skipped, got.SkippedFiles, tc.want, tc.truncated, tc.skipped)
			}
		})
	}
	for _, tc := range []struct {
		name string
		req  GrepRequest
		code wire.Code
	}{
		{"empty pattern", GrepRequest{}, wire.CodeInvalidPayload},
		{"bad regexp", GrepRequest{Pattern: "a(b"}, wire.CodeInvalidPayload},
		{"backreference", GrepRequest{Pattern: `(a)\1`}, wire.CodeInvalidPayload},
		{"bad glob", GrepRequest{Pattern: "a", Glob: "[x"}, wire.CodeInvalidPayload},
		{"negative max", GrepRequest{Pattern: "a", MaxResults: -1}, wire.CodeInvalidPayload},
		{"big file named", GrepRequest{Pattern: "a", Path: "big.go"}, wire.CodeInvalidPayload},
		{"missing", GrepRequest{Pattern: "a", Path: "nope"}, wire.CodeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, f.call(t, GrepFunction, tc.req, nil), tc.code)
		})
	}
}

// The grep answer stops at its byte cap and at the configured max.
func TestGrepCaps(t *testing.T) {
	t.Parallel()
	f := newFixture(t, WithMaxAnswerBytes(200), WithMaxGrepResults(3))
	mustWrite(t, filepath.Join(f.root, "x.txt"), strings.Repeat("match "+strings.Repeat("y", 60)+"\n", 10))
	var got GrepResult
	if err := f.call(t, GrepFunction, GrepRequest{Pattern: "match", MaxResults: 1000}, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Matches) != 1 || !got.Truncated {
		t.Fatalf("byte cap: %d matches, truncated %v", len(got.Matches), got.Truncated)
	}
	g := newFixture(t, WithMaxGrepResults(3))
	mustWrite(t, filepath.Join(g.root, "x.txt"), strings.Repeat("match\n", 10))
	if err := g.call(t, GrepFunction, GrepRequest{Pattern: "match", MaxResults: 1000}, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Matches) != 3 || !got.Truncated {
		t.Fatalf("max results: %d matches, truncated %v", len(got.Matches), got.Truncated)
	}
}

// Files over the size bound are not searched, but a text one is named
// (a bounded list, and a count of all) and the answer says truncated: the
// caller must not take a missing match for a missing string. A binary
// one is skipped quietly, as every binary file.
func TestGrepSkipped(t *testing.T) {
	t.Parallel()
	const bound = 100
	needle := strings.Repeat("needle here\n", 20) // 240 bytes of text
	for _, tc := range []struct {
		name      string
		files     map[string]string
		want      []string // the names in skipped
		count     int      // skipped_files
		truncated bool
		matches   int
	}{
		{"small text is searched", map[string]string{"a.txt": "needle\n"}, nil, 0, false, 1},
		{"large text is named", map[string]string{"a.txt": "needle\n", "big.log": needle}, []string{"big.log"}, 1, true, 1},
		{"large binary is not", map[string]string{"big.bin": "needle\x00" + needle}, nil, 0, false, 0},
		{"a NUL past the sniff window is text", map[string]string{"big.bin": needle + strings.Repeat("x", sniffBytes) + "\x00"}, []string{"big.bin"}, 1, true, 0},
		{"nested", map[string]string{"d/e/big.txt": needle, "d/small.txt": "needle"}, []string{"d/e/big.txt"}, 1, true, 1},
		{"names are bounded", bigFiles(MaxGrepSkipped+5, needle), bigNames(MaxGrepSkipped), MaxGrepSkipped + 5, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, WithMaxGrepFileBytes(bound))
			for name, content := range tc.files {
				mustWrite(t, filepath.Join(f.root, "s", name), content)
			}
			var got GrepResult
			if err := f.call(t, GrepFunction, GrepRequest{Pattern: "needle", Path: "s"}, &got); err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, n := range tc.want {
				want = append(want, "s/"+n)
			}
			if !reflect.DeepEqual(got.Skipped, want) || got.SkippedFiles != tc.count || got.Truncated != tc.truncated || len(got.Matches) != tc.matches {
				t.Fatalf("got %d matches, truncated %v, skipped %q of %d\nwant %d, %v, %q of %d",
					len(got.Matches), got.Truncated, got.Skipped, got.SkippedFiles, tc.matches, tc.truncated, want, tc.count)
			}
		})
	}
	// The names count toward the answer's byte bound.
	f := newFixture(t, WithMaxGrepFileBytes(bound), WithMaxAnswerBytes(30))
	for name, content := range bigFiles(3, needle) {
		mustWrite(t, filepath.Join(f.root, name), content)
	}
	var got GrepResult
	if err := f.call(t, GrepFunction, GrepRequest{Pattern: "needle", Glob: "big*"}, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Skipped) != 2 || got.SkippedFiles != 3 || !got.Truncated {
		t.Fatalf("byte bound: skipped %q of %d, truncated %v", got.Skipped, got.SkippedFiles, got.Truncated)
	}
}

func bigFiles(n int, content string) map[string]string {
	m := map[string]string{}
	for _, name := range bigNames(n) {
		m[name] = content
	}
	return m
}

func bigNames(n int) []string {
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("big%02d.txt", i))
	}
	return names
}

func TestFunctionsOptions(t *testing.T) {
	t.Parallel()
	if _, err := Functions(nil); err != ErrNilResolver {
		t.Fatalf("nil resolver: %v", err)
	}
	for _, opt := range []Option{
		WithMaxLineBytes(0), WithMaxAnswerBytes(-1), WithMaxWriteBytes(0), WithMaxEntries(0),
		WithMaxGrepResults(0), WithMaxGrepFileBytes(0), WithMaxWalk(0), WithSkipDirs("a/b"), WithSkipDirs(""),
		WithTimeout(0), WithQuota(nil), WithOwner(-2, 0), WithOwner(0, -2),
	} {
		if _, err := Functions(FixedRoot("."), opt); err == nil {
			t.Fatal("a bad option was accepted")
		}
	}
	fns, err := Functions(FixedRoot("."), nil)
	if err != nil {
		t.Fatal(err)
	}
	idem := map[string]bool{ReadFunction: true, WriteFunction: true, EditFunction: false, LsFunction: true, GlobFunction: true, GrepFunction: true}
	for _, fn := range fns {
		if fn.Idempotent != idem[fn.ID] {
			t.Fatalf("%s idempotent %v", fn.ID, fn.Idempotent)
		}
		if !strings.HasPrefix(fn.Skill, "---\ntitle: "+fn.ID) || !strings.Contains(fn.Skill, "## Errors") {
			t.Fatalf("%s has no proper skill: %.80q", fn.ID, fn.Skill)
		}
		if fn.RequestSchema == "" || fn.ResponseSchema == "" || fn.Description == "" {
			t.Fatalf("%s lacks a schema or description", fn.ID)
		}
	}
	if len(fns) != len(idem) {
		t.Fatalf("%d functions", len(fns))
	}
}

// A resolver's wire error passes through; any other is not_found; a
// relative root is a bug of the resolver (internal).
func TestResolverErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		resolve Resolver
		code    wire.Code
	}{
		{"wire error", func(context.Context) (string, error) { return "", wire.Errorf(wire.CodeForbidden, "no session") }, wire.CodeForbidden},
		{"plain error", func(context.Context) (string, error) { return "", fmt.Errorf("no workdir") }, wire.CodeNotFound},
		{"relative", func(context.Context) (string, error) { return "rel", nil }, wire.CodeInternal},
		{"missing", func(context.Context) (string, error) { return "/nonexistent/fstool", nil }, wire.CodeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fns, err := Functions(tc.resolve)
			if err != nil {
				t.Fatal(err)
			}
			wantCode(t, callFn(t, fns[0], ReadRequest{Path: "a"}, nil), tc.code)
		})
	}
}

// Concurrent edits of one file each land: the writers of a file are
// serialised, so none overwrites another's change.
func TestConcurrentEdits(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 16
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "slot%02d=old\n", i)
	}
	mustWrite(t, filepath.Join(f.root, "c.txt"), b.String())
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- f.call(t, EditFunction, EditRequest{Path: "c.txt", OldText: fmt.Sprintf("slot%02d=old", i), NewText: fmt.Sprintf("slot%02d=new", i)}, nil)
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := f.read(t, "c.txt"); strings.Contains(got, "=old") {
		t.Fatalf("an edit was lost:\n%s", got)
	}
}
