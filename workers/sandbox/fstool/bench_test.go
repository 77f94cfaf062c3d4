package fstool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// benchTree writes dirs×files Go files of lines lines each under a new
// root and returns the functions on it.
func benchTree(b *testing.B, dirs, files, lines int) (string, map[string]engine.Function) {
	b.Helper()
	root := b.TempDir()
	var body strings.Builder
	for i := range lines {
		fmt.Fprintf(&body, "\tx%d := compute(%d) // some ordinary line of code\n", i, i)
	}
	for d := range dirs {
		for f := range files {
			name := filepath.Join(root, fmt.Sprintf("pkg%03d/sub/file%03d.go", d, f))
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(name, []byte("package sub\n"+body.String()), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	fns, err := Functions(FixedRoot(root))
	if err != nil {
		b.Fatal(err)
	}
	m := map[string]engine.Function{}
	for _, fn := range fns {
		m[fn.ID] = fn
	}
	return root, m
}

func benchCall(b *testing.B, fn engine.Function, req any) {
	b.Helper()
	data, err := wire.Msgpack.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	r := &engine.Request{FunctionID: fn.ID, Data: data, Codec: wire.Msgpack}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := fn.Handler(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRead reads a whole 2000-line file (about 100 KiB) per call.
func BenchmarkRead(b *testing.B) {
	_, fns := benchTree(b, 1, 1, 2000)
	b.Run("lines=2000", func(b *testing.B) {
		benchCall(b, fns[ReadFunction], ReadRequest{Path: "pkg000/sub/file000.go"})
	})
	b.Run("lines=50,offset=1000", func(b *testing.B) {
		benchCall(b, fns[ReadFunction], ReadRequest{Path: "pkg000/sub/file000.go", Offset: 1000, Limit: 50})
	})
}

// BenchmarkWrite replaces a 4 KiB file (temporary file, fsync, rename).
func BenchmarkWrite(b *testing.B) {
	_, fns := benchTree(b, 1, 1, 1)
	content := strings.Repeat("0123456789abcdef\n", 240)
	i := 0
	fn := fns[WriteFunction]
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		i++
		data, _ := wire.Msgpack.Marshal(WriteRequest{Path: "w.txt", Content: content + fmt.Sprint(i)})
		if _, err := fn.Handler(ctx, &engine.Request{Data: data, Codec: wire.Msgpack}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGlob walks 1000 files in 100 directories.
func BenchmarkGlob(b *testing.B) {
	_, fns := benchTree(b, 100, 10, 1)
	b.Run("files=1000,pattern=**/*.go", func(b *testing.B) {
		benchCall(b, fns[GlobFunction], GlobRequest{Pattern: "**/*.go"})
	})
	b.Run("files=1000,pattern=pkg05*/**/file00[0-4].go", func(b *testing.B) {
		benchCall(b, fns[GlobFunction], GlobRequest{Pattern: "pkg05*/**/file00[0-4].go"})
	})
}

// BenchmarkGrep searches 200 files of 200 lines (about 2 MiB).
func BenchmarkGrep(b *testing.B) {
	_, fns := benchTree(b, 20, 10, 200)
	b.Run("files=200,hits=0", func(b *testing.B) {
		benchCall(b, fns[GrepFunction], GrepRequest{Pattern: `nothing\s+here`})
	})
	b.Run("files=200,hits=100", func(b *testing.B) {
		benchCall(b, fns[GrepFunction], GrepRequest{Pattern: `x199 :=`, Glob: "*.go", MaxResults: 100})
	})
}

// BenchmarkReadOverNATS is fs::read of a 50-line window through an
// embedded server: what a caller of the sandbox pays.
func BenchmarkReadOverNATS(b *testing.B) {
	_, fns := benchTree(b, 1, 1, 2000)
	e := enginetest.Engine(b)
	w, err := e.Worker("sandbox")
	if err != nil {
		b.Fatal(err)
	}
	for _, fn := range fns {
		if err := w.Register(fn); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	req := ReadRequest{Path: "pkg000/sub/file000.go", Offset: 1000, Limit: 50}
	var res ReadResult
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Trigger(ctx, ReadFunction, req, &res); err != nil {
			b.Fatal(err)
		}
	}
}
