package sandbox

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/sandbox/fstool"
)

// An exec's answer fits the server's max payload in the caller's codec:
// the output cap counts raw bytes, but a JSON caller gets a control
// character or a byte that is not UTF-8 as a six-byte escape, and a
// server may allow less than two caps. Such an answer used to fail
// (internal: over the max payload) after the command had run; now the
// outputs are cut further, never inside a rune, and the answer says
// truncated.
func TestExecAnswerFitsMaxPayload(t *testing.T) {
	t.Parallel()
	const maxPayload = 96 << 10
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(maxPayload))
	f := startOn(t, ns, enginetest.NewEngine(t, ns), reachableHome(t))
	f.create(t, CreateRequest{SessionID: "fit"})
	const runes = "for i in $(seq 1 %d); do printf '\\303\\251\\001'; done"
	cases := []struct {
		name, command string
		stdout        int64
		// whether the answer is cut, for a JSON and a msgpack caller
		cutJSON, cutMsgpack bool
	}{
		// 64 KiB each way: two caps are more than the server allows.
		{"text", "head -c 70000 /dev/zero | tr '\\0' x; head -c 70000 /dev/zero | tr '\\0' y >&2", 70000, true, true},
		// Control characters and bytes that are not UTF-8: six bytes
		// each in JSON.
		{"control characters", "head -c 30000 /dev/zero | tr '\\0' '\\1'", 30000, true, false},
		{"not UTF-8", "head -c 30000 /dev/zero | tr '\\0' '\\377'", 30000, true, false},
		// Two-byte runes and control characters: the fit never splits a
		// rune, and neither does the output cap (65536 is not a multiple
		// of 3).
		{"runes", strings.Replace(runes, "%d", "20000", 1), 60000, true, false},
		{"runes over the cap", strings.Replace(runes, "%d", "30000", 1), 90000, true, true},
	}
	for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
		e := enginetest.NewEngine(t, ns, engine.WithCodec(codec))
		for _, c := range cases {
			t.Run(codec.ContentType()+"/"+c.name, func(t *testing.T) {
				r, err := engine.Call[Result](engine.WithSession(context.Background(), "fit", "m1"), e, ShellExecFunction, Command{Command: c.command})
				if err != nil {
					t.Fatalf("exec: %v", err)
				}
				cut := c.cutMsgpack
				if codec == wire.JSON {
					cut = c.cutJSON
				}
				if r.ExitCode != 0 || r.Truncated != cut || r.StdoutBytes != c.stdout || len(r.Stdout) == 0 {
					t.Fatalf("exit %d truncated %v (want %v) stdout %d of %d bytes", r.ExitCode, r.Truncated, cut, len(r.Stdout), r.StdoutBytes)
				}
				if strings.HasPrefix(c.name, "runes") && (!utf8.ValidString(r.Stdout) || strings.ContainsRune(r.Stdout, utf8.RuneError)) {
					t.Fatalf("a rune cut in two: stdout ends %q", r.Stdout[max(0, len(r.Stdout)-4):])
				}
				if body, err := codec.Marshal(r); err != nil || len(body) > maxPayload {
					t.Fatalf("answer of %d bytes (%v), max payload %d", len(body), err, maxPayload)
				}
			})
		}
		// The fs tools the worker serves fit it too (fstool.WithMaxPayload):
		// 200 KB of text is within their own answer bound.
		t.Run(codec.ContentType()+"/fs::read", func(t *testing.T) {
			ctx := engine.WithSession(context.Background(), "fit", "m1")
			if r, err := engine.Call[Result](ctx, e, ShellExecFunction, Command{Command: "yes " + strings.Repeat("x", 99) + " | head -n 2000 > big.txt"}); err != nil || r.ExitCode != 0 {
				t.Fatalf("write big.txt: %+v %v", r, err)
			}
			r, err := engine.Call[fstool.ReadResult](ctx, e, fstool.ReadFunction, fstool.ReadRequest{Path: "big.txt"})
			if err != nil || !r.Truncated || r.LinesRead == 0 || r.TotalLines != 2000 {
				t.Fatalf("read: %d lines of %d, truncated %v, %v", r.LinesRead, r.TotalLines, r.Truncated, err)
			}
		})
	}
}
