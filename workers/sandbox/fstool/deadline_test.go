package fstool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// callBy runs fn on a JSON payload with a deadline d away and waits up to
// wait for its answer: a handler that outlives its caller by far fails.
func callBy(t *testing.T, fn engine.Function, req any, d, wait time.Duration) error {
	t.Helper()
	data, err := wire.JSON.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := fn.Handler(ctx, &engine.Request{FunctionID: fn.ID, Data: data, Codec: wire.JSON})
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(wait):
		t.Fatalf("%s still runs %v after its %v deadline", fn.ID, wait, d)
		return nil
	}
}

// The calls stop when their caller's time runs out, even in the middle of
// one endless line or of one huge directory.
func TestDeadlines(t *testing.T) {
	t.Parallel()
	f := newFixture(t)

	// 1 TiB of one line: 9000 bytes of text (the head looks like text),
	// then a hole, which reads as NUL bytes and holds no newline.
	sparse, err := os.Create(filepath.Join(f.root, "sparse.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sparse.WriteString(strings.Repeat("x", 9000)); err != nil {
		t.Fatal(err)
	}
	if err := sparse.Truncate(1 << 40); err != nil {
		t.Fatalf("a sparse file of 1 TiB: %v", err)
	}
	if err := sparse.Close(); err != nil {
		t.Fatal(err)
	}

	// One directory deep down, whose files each cost a glob step over a
	// pattern of 64 alternatives of 127 names (~100µs): seconds in all.
	deep := filepath.Join(f.root, strings.Repeat("d/", 20))
	mustMkdir(t, deep)
	for i := range 20_000 {
		if err := os.WriteFile(filepath.Join(deep, fmt.Sprint("f", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var alts []string
	for i := range 64 {
		alts = append(alts, fmt.Sprint("z", i))
	}
	costly := strings.Repeat("**/*/", 63) + "{" + strings.Join(alts, ",") + "}"

	for _, tc := range []struct {
		name string
		id   string
		req  any
		wait time.Duration // how long past the deadline the answer may come
	}{
		{"read an endless line", ReadFunction, ReadRequest{Path: "sparse.txt"}, 5 * time.Second},
		{"glob a huge directory", GlobFunction, GlobRequest{Pattern: costly}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := callBy(t, f.fns[tc.id], tc.req, 30*time.Millisecond, tc.wait)
			wantCode(t, err, wire.CodeTimeout)
		})
	}
}

// A directory is read in batches with a look at the caller's clock before
// each, and not sorted once the caller is gone: 20 000 entries take
// hundreds of milliseconds to read and sort under -race, far past the
// caller's deadline on a loaded machine (CI hit it in TestDeadlines).
func TestReadDirStopsWithItsCaller(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 2 * readDirBatch
	mustMkdir(t, filepath.Join(f.root, "big"))
	for i := range n {
		if err := os.WriteFile(filepath.Join(f.root, "big", fmt.Sprint("f", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := open(context.Background(), FixedRoot(f.root))
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	k := newWalker(w, &options{maxWalk: DefaultMaxWalk})
	if entries, err := k.readDir(gone, "big"); !errors.Is(err, context.Canceled) || len(entries) != 0 || k.budget != DefaultMaxWalk {
		t.Fatalf("readDir after the caller left = %d entries, %v, %d of the budget used; want none, canceled, 0",
			len(entries), err, DefaultMaxWalk-k.budget)
	}
	if entries, err := k.readDir(context.Background(), "big"); err != nil || len(entries) != n {
		t.Fatalf("readDir = %d entries, %v; want %d", len(entries), err, n)
	}
}

// fs::grep bounds the work of an expression that costs its program size
// per byte ("(?:\w+\s?){1000}z": about a minute per MiB of one line), since a match
// cannot be stopped: it looks at its caller's clock between lines, and a
// line too long for one bounded match leaves its file unsearched and
// named. It matched whole files and lines, minutes past the deadline.
func TestGrepCostBound(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const costly = `(?:\w+\s?){1000}z`
	// A line of 2000 bytes takes it some 40 ms (half a second under
	// -race), 200 of them at once 11 s, and one of 64 KiB 4 s.
	if n := progSize(costly, false); int64(2001*n) > maxMatchCost || int64(64<<10*n) <= maxMatchCost {
		t.Fatalf("the expression's %d instructions no longer make 2000-byte lines cheap enough and 64 KiB ones too costly", n)
	}
	mustWrite(t, filepath.Join(f.root, "lines.txt"), strings.Repeat(strings.Repeat("a", 2000)+"\n", 200))
	mustWrite(t, filepath.Join(f.root, "long.txt"), "z\n"+strings.Repeat("a", 64<<10)+"\nlast\n")

	t.Run("deadline between lines", func(t *testing.T) {
		err := callBy(t, f.fns[GrepFunction], GrepRequest{Pattern: costly, Path: "lines.txt"}, 200*time.Millisecond, 5*time.Second)
		wantCode(t, err, wire.CodeTimeout)
	})
	t.Run("long line", func(t *testing.T) {
		began := time.Now()
		var res GrepResult
		if err := f.call(t, GrepFunction, GrepRequest{Pattern: costly, Path: "long.txt"}, &res); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took > 5*time.Second || !res.Truncated || res.SkippedFiles != 1 || len(res.Skipped) != 1 || res.Skipped[0] != "long.txt" {
			t.Fatalf("after %v: %+v; want long.txt skipped", took, res)
		}
	})
	t.Run("cheap expressions search it", func(t *testing.T) {
		for _, p := range []string{"last", `^a+$`, `l[a-z]st`} {
			var res GrepResult
			if err := f.call(t, GrepFunction, GrepRequest{Pattern: p, Path: "long.txt"}, &res); err != nil {
				t.Fatal(err)
			}
			if res.Truncated || res.SkippedFiles != 0 || len(res.Matches) != 1 {
				t.Fatalf("%s: %+v; want one match, nothing skipped", p, res)
			}
		}
	})
}
