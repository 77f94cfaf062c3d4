package fstool_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/sandbox/fstool"
)

// Every fs answer fits the server's max payload in the caller's codec.
// The answer bound counts raw bytes, but a JSON caller gets a control
// character as a six-byte escape, and a server may allow less than the
// bound: an fs::read of a text file of ESC characters answered 1.5 MB to
// a JSON caller (internal: over the max payload), and on a server of
// 96 KiB any large read, listing or search failed for msgpack callers
// too. Now the answer is cut further — whole lines, entries, matches —
// and says truncated.
func TestAnswersFitMaxPayload(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	esc := strings.Repeat("\x1b", 1000)
	var text strings.Builder
	for range 300 {
		text.WriteString(esc + "\n")
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("esc.txt", text.String())
	// One line that takes 120 KB in JSON: no room for it whole on a small
	// server.
	write("long.txt", strings.Repeat("\x01", 20000)+"\n")
	for i := range 600 {
		write(fmt.Sprintf("grep/%03d.txt", i), "needle"+esc+"\n")
	}
	for i := range 1000 {
		write(fmt.Sprintf("names/%03d%s.c", i, strings.Repeat("\x01", 240)), "")
	}
	numbered := regexp.MustCompile(`^ *[0-9]+\t`)
	for _, server := range []struct {
		name       string
		maxPayload int32 // 0: the server's default, 1 MiB
	}{{"default", 0}, {"96KiB", 96 << 10}} {
		var opts []enginetest.ServerOption
		if server.maxPayload > 0 {
			opts = append(opts, enginetest.WithMaxPayload(server.maxPayload))
		}
		ns := enginetest.RunServer(t, opts...)
		e := enginetest.NewEngine(t, ns)
		w, err := e.Worker("sandbox")
		if err != nil {
			t.Fatal(err)
		}
		fns, err := fstool.Functions(fstool.FixedRoot(root), fstool.WithMaxPayload(e.Conn()), fstool.WithMaxLineBytes(20000))
		if err != nil {
			t.Fatal(err)
		}
		for _, fn := range fns {
			if err := w.Register(fn); err != nil {
				t.Fatal(err)
			}
		}
		max := int(e.Conn().MaxPayload())
		for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
			c := enginetest.NewEngine(t, ns, engine.WithCodec(codec))
			ctx := context.Background()
			fits := func(t *testing.T, v any) {
				t.Helper()
				if b, err := codec.Marshal(v); err != nil || len(b) > max {
					t.Fatalf("answer of %d bytes (%v), max payload %d", len(b), err, max)
				}
			}
			// 1000 names of 250 bytes are within the answer bound: only
			// escapes or a small server cut them.
			cutNames := codec == wire.JSON || server.maxPayload > 0
			t.Run(server.name+"/"+codec.ContentType(), func(t *testing.T) {
				rd, err := engine.Call[fstool.ReadResult](ctx, c, fstool.ReadFunction, fstool.ReadRequest{Path: "esc.txt"})
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				fits(t, rd)
				lines := strings.Split(rd.Content, "\n")
				if !rd.Truncated || rd.LinesRead == 0 || rd.LinesRead >= 300 || len(lines) != rd.LinesRead || rd.TotalLines != 300 {
					t.Fatalf("read: %d lines of %d, %d in content, truncated %v", rd.LinesRead, rd.TotalLines, len(lines), rd.Truncated)
				}
				for i, l := range lines {
					if l != fmt.Sprintf("%6d\t%s", i+1, esc) {
						t.Fatalf("read: line %d is not whole: %.20q…", i+1, l)
					}
				}
				// Paging on by offset reaches the end.
				next, err := engine.Call[fstool.ReadResult](ctx, c, fstool.ReadFunction, fstool.ReadRequest{Path: "esc.txt", Offset: rd.LinesRead + 1})
				if err != nil || next.LinesRead == 0 || !strings.HasPrefix(next.Content, fmt.Sprintf("%6d\t", rd.LinesRead+1)) {
					t.Fatalf("read on: %d lines, %v", next.LinesRead, err)
				}

				// A line that does not fit alone is cut, marked, and counts.
				long, err := engine.Call[fstool.ReadResult](ctx, c, fstool.ReadFunction, fstool.ReadRequest{Path: "long.txt"})
				cutLine := codec == wire.JSON && server.maxPayload > 0
				if err != nil || long.LinesRead != 1 || !numbered.MatchString(long.Content) || long.Truncated != cutLine ||
					strings.HasSuffix(long.Content, fstool.LineCutMarker) != cutLine {
					t.Fatalf("read of a long line: %d lines, truncated %v, %v", long.LinesRead, long.Truncated, err)
				}
				fits(t, long)

				gr, err := engine.Call[fstool.GrepResult](ctx, c, fstool.GrepFunction, fstool.GrepRequest{Pattern: "needle", Path: "grep", MaxResults: 1000})
				if err != nil || !gr.Truncated || len(gr.Matches) == 0 || len(gr.Matches) >= 600 {
					t.Fatalf("grep: %d matches, truncated %v, %v", len(gr.Matches), gr.Truncated, err)
				}
				fits(t, gr)

				ls, err := engine.Call[fstool.LsResult](ctx, c, fstool.LsFunction, fstool.LsRequest{Path: "names"})
				if err != nil || ls.Truncated != cutNames || len(ls.Entries) == 0 {
					t.Fatalf("ls: %d entries, truncated %v, %v", len(ls.Entries), ls.Truncated, err)
				}
				fits(t, ls)

				gl, err := engine.Call[fstool.GlobResult](ctx, c, fstool.GlobFunction, fstool.GlobRequest{Pattern: "names/*.c"})
				if err != nil || gl.Truncated != cutNames || len(gl.Matches) == 0 {
					t.Fatalf("glob: %d matches, truncated %v, %v", len(gl.Matches), gl.Truncated, err)
				}
				fits(t, gl)
			})
		}
	}
}
